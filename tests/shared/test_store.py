"""Store write / read / verify round trips, atomicity and format errors."""
import json

import numpy as np
import pytest

from argosy.shared.errors import GraphFormatError, StoreFormatError
from argosy.shared.store import FORMAT_VERSION, PartitionStore, write_store, write_store_from_edges
from tests.graphs import random_graph


def test_round_trip(small_store):
    g, path = small_store
    s = PartitionStore(path)
    s.verify()
    indptr, indices = s.global_csr()
    np.testing.assert_array_equal(indptr, g.indptr)
    np.testing.assert_array_equal(indices, g.indices)
    for p in range(s.num_parts):
        pd = s.part(p)
        np.testing.assert_array_equal(np.asarray(pd.features), g.features[pd.nodes])
        np.testing.assert_array_equal(np.asarray(pd.labels), g.labels[pd.nodes])
        assert np.all(s.assignment[pd.nodes] == p)
        assert np.all(s.local_index[pd.nodes] == np.arange(len(pd.nodes)))
    m = s.manifest
    assert m.num_nodes == g.num_nodes and m.num_edges == g.num_edges and m.feature_dim == 16
    assert m.splits["train"] == int(g.train_mask.sum())
    cut = sum(p.cut_edges for p in m.parts) // 2
    assert m.partition["edge_cut"] == cut


@pytest.mark.parametrize("k", [1, 3, 8])
def test_any_part_count_and_float16(tmp_path, k):
    g = random_graph(200, 800, seed=2, features=4)
    assign = np.random.default_rng(1).integers(0, k, 200)
    write_store(g, assign, tmp_path / "s", num_parts=k, feature_dtype="float16")
    s = PartitionStore(tmp_path / "s")
    assert s.num_parts == k and s.part(0).features.dtype == np.float16


def test_write_is_atomic(tmp_path):
    """A failure while writing leaves neither the store nor temporary directories behind."""
    def chunks():
        yield np.array([0, 1]), np.array([1, 0])
        yield np.array([0]), np.array([99])          # out of range: fails mid-stream
    with pytest.raises(GraphFormatError, match="out of range"):
        write_store_from_edges(chunks(), 10, np.zeros(10, np.int32), tmp_path / "s")
    assert list(tmp_path.iterdir()) == []


def test_refuses_existing_without_overwrite(small_store):
    g, path = small_store
    with pytest.raises(StoreFormatError, match="already exists"):
        write_store(g, np.zeros(g.num_nodes, np.int32), path)
    write_store(g, np.zeros(g.num_nodes, np.int32), path, overwrite=True)
    assert PartitionStore(path).num_parts == 1


def test_bad_assignment(tmp_path):
    g = random_graph(50, 100)
    with pytest.raises(GraphFormatError, match="shape"):
        write_store(g, np.zeros(49, np.int32), tmp_path / "s")
    with pytest.raises(GraphFormatError, match="lie in"):
        write_store(g, np.full(50, -1), tmp_path / "s", num_parts=2)


def test_unknown_version_and_corruption(small_store):
    _, path = small_store
    man = json.loads((path / "manifest.json").read_text())
    man["format_version"] = FORMAT_VERSION + 1
    (path / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(StoreFormatError, match=f"version {FORMAT_VERSION + 1} is not supported"):
        PartitionStore(path)
    (path / "manifest.json").write_text("{not json")
    with pytest.raises(StoreFormatError, match="corrupt manifest"):
        PartitionStore(path)


def test_verify_detects_corrupt_array(small_store):
    _, path = small_store
    np.save(path / "part-00001" / "indptr.npy", np.array([0, 5, 3], np.int64))
    with pytest.raises(StoreFormatError):
        PartitionStore(path).verify()
    with pytest.raises(StoreFormatError, match="not an Argosy store"):
        PartitionStore(path / "nothing-here")


def test_verify_scans_neighbour_ids_in_windows_and_unmaps(small_store, monkeypatch):
    import argosy.shared.store.reader as reader
    _, path = small_store
    s = PartitionStore(path)
    s.verify()
    assert s._parts == {}            # verify unmapped the parts it opened (their pages count in RSS)
    f = path / "part-00001" / "indices.npy"
    idx = np.load(f)
    idx[-1] = s.manifest.num_nodes   # one id out of range, in the last window
    np.save(f, idx)
    real = reader._min_max
    monkeypatch.setattr(reader, "_min_max", lambda p: real(p, window=7))
    with pytest.raises(StoreFormatError, match="neighbour ids outside"):
        PartitionStore(path).verify()


def test_parts_larger_than_a_slab_are_built_in_slabs(tmp_path, monkeypatch):
    """A part with more entries than ``SLAB_ENTRIES`` is sorted in row-range slabs (bounded
    memory on skewed parts) and gives the same store, byte for byte, as one in-memory sort."""
    import argosy.shared.store.part_csr as part_csr

    g = random_graph(600, 3600, seed=3)
    rng = np.random.default_rng(0)
    assign = rng.integers(0, 3, g.num_nodes).astype(np.int32)
    assign[:400] = 0                                    # one part holds most of the edges
    write_store(g, assign, tmp_path / "whole", num_parts=3)
    monkeypatch.setattr(part_csr, "SLAB_ENTRIES", 257)   # ~5000 entries in part 0: ~20 slabs
    write_store(g, assign, tmp_path / "slabs", num_parts=3)
    a, b = PartitionStore(tmp_path / "whole"), PartitionStore(tmp_path / "slabs")
    assert a.manifest.num_edges == b.manifest.num_edges
    for p in range(3):
        for name in ("nodes", "indptr", "indices"):
            x = (tmp_path / "whole" / f"part-{p:05d}" / f"{name}.npy").read_bytes()
            y = (tmp_path / "slabs" / f"part-{p:05d}" / f"{name}.npy").read_bytes()
            assert x == y, (p, name)
        assert a.manifest.parts[p].cut_edges == b.manifest.parts[p].cut_edges
    assert not list((tmp_path / "slabs").rglob("*.raw")) and not list((tmp_path / "slabs").rglob("*.s*"))


def test_staging_leaves_other_processes_temporaries_and_clears_another_stores_parts(tmp_path):
    """Replacements on one host stage at once: one's in-flight temporary is never deleted by the
    other (that made its copy fail and the job end); parts staged from another store are cleared."""
    import json

    from argosy.shared.graphio import csr_from_edges
    from argosy.shared.store import write_store
    from argosy.shared.store.stage import stage_parts

    g = csr_from_edges(np.arange(50), (np.arange(50) + 1) % 50, num_nodes=50)
    write_store(g, np.arange(50) % 2, tmp_path / "s")
    write_store(g, np.arange(50) // 25, tmp_path / "t")
    dest = tmp_path / "local"
    dest.mkdir()
    (dest / ".manifest.json.staging-999").write_text("in flight")
    assert stage_parts(tmp_path / "s", dest, [0]) == [0]
    assert (dest / ".manifest.json.staging-999").exists()
    assert stage_parts(tmp_path / "t", dest, [1]) == [1]          # another store: its parts only
    assert sorted(p.name for p in dest.iterdir() if p.name.startswith("part-")) == ["part-00001"]
    assert json.loads((dest / "manifest.json").read_text()) == json.loads((tmp_path / "t" / "manifest.json").read_text())
    assert (dest / ".manifest.json.staging-999").exists()
