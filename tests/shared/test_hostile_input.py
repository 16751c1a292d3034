"""The hostile-input corpus: every malformed graph file gets a clear error naming it (exit 2 from the
partitioner, no traceback, nothing at --out); every awkward-but-valid file loads as the right graph."""
import logging
from pathlib import Path

import numpy as np
import pytest

from argosy.shared.errors import GraphFormatError
from argosy.shared.graphio import load_graph

ROOT = Path(__file__).parents[1] / "corpus"
CORPUS = sorted((ROOT / "graphs").iterdir())
ACCEPTED = sorted((ROOT / "accepted").iterdir())
CRASHES = sorted((ROOT / "file" / "crashes").glob("*.bin")) if (ROOT / "file" / "crashes").is_dir() else []
REFERENCE = {(0, 1), (1, 2), (0, 2), (2, 3), (3, 4), (4, 5)}


def test_corpus_covers_every_class():
    names = [p.name for p in CORPUS]
    for prefix in ("text_", "npz_", "npy_", "fs_", "zip_", "num_"):
        assert sum(n.startswith(prefix) for n in names) >= 4, prefix
    assert len(CORPUS) >= 50  # twice the 25 files the corpus started with


@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_reader_rejects_clearly(path):
    with pytest.raises(GraphFormatError) as e:
        load_graph(path)
    msg = str(e.value)
    assert path.name in msg
    assert "allow_pickle" not in msg and "Traceback" not in msg


@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_partitioner_rejects_without_partial_store(path, tmp_path, capsys):
    from argosy.services.partitioner.__main__ import main
    out = tmp_path / "out" / "store"
    rc = main([str(path), "--parts", "2", "--method", "random", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "error" in err and path.name in err and "Traceback" not in err
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == []


def _edges(g):
    rows = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    return {(int(a), int(b)) for a, b in zip(rows, g.indices) if a < b}


@pytest.mark.parametrize("path", ACCEPTED, ids=[p.name for p in ACCEPTED])
def test_awkward_files_load_as_the_reference_graph(path, tmp_path):
    g = load_graph(path)
    assert g.num_nodes == 6 and _edges(g) == REFERENCE
    if g.features is not None:  # byte order and memory order converted, values kept
        assert g.features.dtype == np.float32 and g.features.flags.c_contiguous
        np.testing.assert_array_equal(g.features, np.arange(12, dtype=np.float32).reshape(6, 2))
    from argosy.services.partitioner.__main__ import main
    rc = main([str(path), "--parts", "2", "--method", "hash", "--out", str(tmp_path / "s")])
    assert rc == 0
    from argosy.shared.store.reader import PartitionStore
    assert PartitionStore(tmp_path / "s").manifest.num_edges == 6


def test_asymmetric_csr_is_symmetrised_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        g = load_graph(ROOT / "accepted" / "asymmetric.npz")
    assert "not symmetric" in caplog.text and g.num_edges == 6
    with pytest.raises(GraphFormatError, match="not symmetric"):
        load_graph(ROOT / "accepted" / "asymmetric.npz", symmetrize=False)


def test_asymmetric_csr_kept_directed_with_the_right_m(tmp_path):
    from argosy.services.partitioner.__main__ import main
    from argosy.shared.store.reader import PartitionStore
    rc = main([str(ROOT / "accepted" / "asymmetric.npz"), "--parts", "2", "--method", "hash", "--directed",
               "--out", str(tmp_path / "d")])
    assert rc == 0
    m = PartitionStore(tmp_path / "d").manifest
    assert m.directed and m.num_edges == 6            # six arcs, not 6 // 2
    rc = main([str(ROOT / "accepted" / "asymmetric.npz"), "--parts", "2", "--method", "hash",
               "--out", str(tmp_path / "u")])
    m = PartitionStore(tmp_path / "u").manifest
    assert rc == 0 and not m.directed and m.num_edges == 6
    assert sum(p.num_edges for p in m.parts) == 12   # both directions stored


@pytest.mark.parametrize("path", CRASHES, ids=[p.name for p in CRASHES])
def test_fuzz_crashes_stay_fixed(path):
    """Every input the file fuzzer once crashed on is now rejected cleanly or read consistently."""
    from tests.fuzz import file_target
    try:
        file_target.run_one(path.read_bytes())
    except GraphFormatError:
        pass


def test_messages_name_the_fault():
    cases = {"npz_pickled_indices.npz": "pickled member 'indices.npy' in",
             "npz_pickled_features.npz": "pickled member 'features.npy' in",
             "zip_short_stored_member.npz": "truncated", "zip_zero_byte.npz": "empty (0-byte)",
             "zip_truncated_central_dir.npz": "truncated", "npy_truncated.npy": "truncated",
             "text_overflow_u64.txt": "beyond int64", "text_beyond_int64.txt": "beyond int64",
             "num_int64_max_id.txt": "far beyond", "fs_directory.npz": "is a directory",
             "fs_unknown_format.graphml": "unsupported format", "npz_features_f64_overflow.npz": "float32 range",
             "npz_masks_overlap.npz": "overlap", "npz_mask_float.npz": "float", "npz_labels_negative.npz": "negative",
             "npz_labels_out_of_range.npz": "out of range", "npy_object.npy": "pickled array in",
             "zip_encrypted_flag.npz": "encrypted", "text_truncated.txt.gz": "truncated"}
    for name, want in cases.items():
        with pytest.raises(GraphFormatError) as e:
            load_graph(ROOT / "graphs" / name)
        assert want in str(e.value), (name, str(e.value))


def test_disk_full_names_the_output_not_the_input(tmp_path, cora_path, capsys, monkeypatch):
    """ENOSPC while writing the store: 'disk full at PATH', exit 2, nothing left at --out."""
    import errno

    import argosy.shared.store.writer as writer

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / "x"))

    monkeypatch.setattr(writer, "_scatter_column", full)
    from argosy.services.partitioner.__main__ import main
    rc = main([str(cora_path), "--parts", "2", "--method", "hash", "--out", str(tmp_path / "out" / "store")])
    err = capsys.readouterr().err
    assert rc == 2 and "disk full at" in err and str(tmp_path / "out" / "store") in err
    assert "cora" not in err.split("disk full")[0]
    assert not (tmp_path / "out").exists()


def test_file_fuzzer_short_run():
    """A few hundred mutated files through both readers: no crash, no disagreement."""
    from tests.fuzz import fuzz
    stats = fuzz("file", seconds=60, seed=7, max_executions=300, save_crashes=False, log_every=0)
    assert stats.executions == 300 and stats.rejected > 0
    assert stats.crashes == [], stats.crashes
