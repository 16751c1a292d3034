"""Tests for the chunked edge readers and the ``partition_stream`` entry point's validation."""

import json
import os
import zipfile

import numpy as np
import pytest

from argosy.services.partitioner.core import (MemoryBudgetError, PartitionResult, estimate_cost,
                                       partition_stream)
from argosy.services.partitioner.file_streams import open_edge_stream, write_edge_list_npy, write_edge_list_npy_chunked
from argosy.services.partitioner.stream import ArrayEdgeStream

CORA = "/work/shared/datasets/cora.npz"
needs_cora = pytest.mark.skipif(not os.path.exists(CORA), reason="shared datasets not present")


def _collect(stream):
    s, d = zip(*list(stream)) if stream.num_chunks else ((), ())
    if not s:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(s), np.concatenate(d)


def _edge_set(src, dst):
    return set(zip(src.tolist(), dst.tolist()))


def _write_csr_npz(path, indptr, indices, compressed):
    (np.savez_compressed if compressed else np.savez)(path, indptr=indptr, indices=indices)


@pytest.fixture
def small_csr():
    # path 0-1-2-3 plus triangle 3-4-5 and an isolated vertex 6
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (3, 5)]
    n = 7
    src = np.array([u for u, v in edges] + [v for u, v in edges])
    dst = np.array([v for u, v in edges] + [u for u, v in edges])
    o = np.lexsort((dst, src))
    src, dst = src[o], dst[o]
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    return indptr, dst.astype(np.int32), _edge_set(src, dst)


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("chunk", [1, 3, 100])
def test_npz_stream_roundtrip(tmp_path, small_csr, compressed, chunk):
    indptr, indices, expected = small_csr
    p = tmp_path / "g.npz"
    _write_csr_npz(p, indptr, indices, compressed)
    st = open_edge_stream(p, chunk_edges=chunk)
    assert st.num_nodes == 7 and st.num_edges == 12
    assert st.grouped and st.seekable == (not compressed)
    chunks = list(st)
    for s, d in chunks:
        assert s.dtype == np.int64 and d.dtype == np.int64
        # vertex-aligned: no vertex spans two chunks
    owners = [set(s.tolist()) for s, _ in chunks]
    for a in range(len(owners)):
        for b in range(a + 1, len(owners)):
            assert not owners[a] & owners[b]
    src, dst = _collect(st)
    assert _edge_set(src, dst) == expected and src.size == 12


def test_npz_out_of_range_and_missing_member(tmp_path, small_csr):
    indptr, indices, _ = small_csr
    bad = indices.copy()
    bad[3] = 99
    p = tmp_path / "bad.npz"
    np.savez(p, indptr=indptr, indices=bad)
    with pytest.raises(ValueError, match="out of range"):
        list(open_edge_stream(p))
    q = tmp_path / "nocsr.npz"
    np.savez(q, foo=np.arange(3))
    with pytest.raises(ValueError, match="missing member"):
        open_edge_stream(q)


def test_text_stream_symmetrize_dedup_selfloops(tmp_path):
    p = tmp_path / "g.txt"
    p.write_text("# a comment\n% another\n0 1\n1\t2\n\n2 2\n1 0\n0 1\n  3 4  \n")
    st = open_edge_stream(p, chunk_edges=100)
    assert st.num_nodes == 5
    src, dst = _collect(st)
    assert _edge_set(src, dst) == {(0, 1), (1, 0), (1, 2), (2, 1), (3, 4), (4, 3)}
    assert src.size == 6  # duplicates and the self loop are gone


@pytest.mark.parametrize("text,match", [
    ("0 1\n1 x\n", r"line 2: malformed"),
    ("0 1\n\n1\n", r"line 3: expected at least 2 fields"),
    ("0 1\n18446744073709551618 2\n", r"line 2: vertex id beyond int64"),
    ("0 1\n5 1.5\n", r"line 2: malformed"),
    ("# c\n0 -1\n", r"line 2: negative vertex id"),
])
def test_text_stream_errors(tmp_path, text, match):
    p = tmp_path / "bad.txt"
    p.write_text(text)
    with pytest.raises(ValueError, match=match):
        open_edge_stream(p)


def test_text_stream_id_out_of_range(tmp_path):
    p = tmp_path / "g.txt"
    p.write_text("0 1\n1 2\n2 7\n")
    with pytest.raises(ValueError, match=r"line 3: vertex id 7 is out of range: num_nodes=5"):
        open_edge_stream(p, num_nodes=5)


def test_text_stream_blocks(tmp_path):
    rng = np.random.default_rng(0)
    u = rng.integers(0, 500, 5000)
    v = rng.integers(0, 500, 5000)
    p = tmp_path / "big.txt"
    with open(p, "w") as f:
        f.write("# header\n")
        for a, b in zip(u, v):
            f.write(f"{a} {b}\n")
    st = open_edge_stream(p, chunk_edges=64)  # many small blocks
    assert st.num_chunks > 1 and st.num_edges == 5000
    src, dst = _collect(st)
    keep = u != v
    exp = _edge_set(np.r_[u[keep], v[keep]], np.r_[v[keep], u[keep]])
    assert _edge_set(src, dst) == exp


def test_npy_stream(tmp_path):
    p = tmp_path / "e.npy"
    write_edge_list_npy(p, [0, 1, 2, 2], [1, 2, 0, 2])
    st = open_edge_stream(p, chunk_edges=2)
    assert st.num_nodes == 3 and st.num_edges == 4 and st.num_chunks == 2
    src, dst = _collect(st)
    assert _edge_set(src, dst) == {(0, 1), (1, 0), (1, 2), (2, 1), (2, 0), (0, 2)}
    st1 = open_edge_stream(p, symmetrize=False)
    s1, d1 = _collect(st1)
    assert _edge_set(s1, d1) == {(0, 1), (1, 2), (2, 0)}


def test_npy_stream_errors(tmp_path):
    p = tmp_path / "neg.npy"
    np.save(p, np.array([[0, 1], [-3, 2]], dtype=np.int64))
    with pytest.raises(ValueError, match="negative vertex id -3"):
        open_edge_stream(p)
    q = tmp_path / "rng.npy"
    np.save(q, np.array([[0, 1], [5, 2]], dtype=np.int32))
    with pytest.raises(ValueError, match="out of range: num_nodes=4"):
        list(open_edge_stream(q, num_nodes=4))
    r = tmp_path / "shape.npy"
    np.save(r, np.zeros((4, 3), np.int32))
    with pytest.raises(ValueError, match=r"shape \(m, 2\)"):
        open_edge_stream(r)


def test_chunked_writer(tmp_path):
    p = tmp_path / "w.npy"

    def gen():
        for i in range(3):
            yield np.arange(i * 10, i * 10 + 10), np.arange(i * 10 + 1, i * 10 + 11)

    wrote = write_edge_list_npy_chunked(p, 40, gen())
    assert wrote == 30
    arr = np.load(p)
    assert arr.shape == (30, 2) and arr.dtype == np.int32 and arr[29, 1] == 30


def test_missing_file():
    with pytest.raises(FileNotFoundError):
        open_edge_stream("/nonexistent/graph.txt")


# ------------------------------------------------------------------ partition_stream checks
def test_partition_stream_rejects_bad_k(small_csr):
    indptr, indices, _ = small_csr
    st = ArrayEdgeStream.from_csr(indptr, indices)
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        partition_stream(st, 0)
    with pytest.raises(ValueError, match="exceeds the number of vertices n=7"):
        partition_stream(st, 8)
    with pytest.raises(ValueError, match="unknown method"):
        partition_stream(st, 2, method="nope")
    with pytest.raises(ValueError, match="unknown stream order"):
        partition_stream(st, 2, order="sideways")


def test_partition_stream_empty_graph(tmp_path):
    p = tmp_path / "empty.txt"
    p.write_text("# nothing here\n")
    st = open_edge_stream(p)
    assert st.num_nodes == 0
    with pytest.raises(ValueError, match="empty graph"):
        partition_stream(st, 2)


def test_memory_budget_refused(small_csr):
    indptr, indices, _ = small_csr
    st = ArrayEdgeStream.from_csr(indptr, indices)
    need, secs = estimate_cost(st.num_nodes, st.num_edges, 2, "grem")
    assert need > 0 and secs >= 0
    with pytest.raises(MemoryBudgetError, match=rf"needs an estimated {need} bytes.*budget is 10 "):
        partition_stream(st, 2, memory_budget=10)
    r = partition_stream(st, 2, memory_budget=need)
    assert isinstance(r, PartitionResult)


def test_estimate_cost_scales():
    a, _ = estimate_cost(10 ** 6, 10 ** 7, 16, "grem")
    b, _ = estimate_cost(10 ** 7, 10 ** 8, 16, "grem")
    m, _ = estimate_cost(10 ** 7, 10 ** 8, 16, "metis")
    assert b > a and m > b
    (pb, sb), (pl, sl) = (estimate_cost(10 ** 7, 10 ** 8, 16, "grem", edge_limited=e) for e in (False, True))
    assert pl == pb + 4 * 10 ** 7 and sl == pytest.approx(2 * sb)   # degrees; GREM's second run
    with pytest.raises(ValueError, match="unknown method"):
        estimate_cost(10, 10, 2, "bogus")


@needs_cora
def test_cora_stream_matches_file():
    z = np.load(CORA)
    st = open_edge_stream(CORA, chunk_edges=1000)
    assert st.num_nodes == z["indptr"].size - 1 and st.num_edges == z["indices"].size
    src, dst = _collect(st)
    assert np.array_equal(dst, z["indices"].astype(np.int64))
    with zipfile.ZipFile(CORA) as zf:  # cora.npz is compressed: sequential streaming only
        assert zf.getinfo("indices.npy").compress_type != zipfile.ZIP_STORED
    assert not st.seekable


def test_grouped_edge_stream_dedups_across_chunks(tmp_path):
    rng = np.random.default_rng(3)
    u = rng.integers(0, 300, 4000)
    v = rng.integers(0, 300, 4000)
    p = tmp_path / "e.npy"
    write_edge_list_npy(p, u, v)
    raw = open_edge_stream(p, chunk_edges=500)
    assert raw.num_chunks == 8 and not raw.grouped
    from argosy.services.partitioner.regroup import GroupedEdgeStream

    with GroupedEdgeStream(raw, str(tmp_path / "buckets"), chunk_edges=1000) as g:
        assert g.grouped and g.num_chunks > 1
        chunks = list(g)
        owners = [set(s.tolist()) for s, _ in chunks]
        assert sum(len(o) for o in owners) == len(set().union(*owners))  # vertex-aligned
        src, dst = _collect(g)
    keep = u != v
    exp = _edge_set(np.r_[u[keep], v[keep]], np.r_[v[keep], u[keep]])
    assert _edge_set(src, dst) == exp and src.size == len(exp)  # no duplicates left
    assert not (tmp_path / "buckets").exists()


def test_truncated_npy_edge_list_is_refused(tmp_path):
    p = tmp_path / "e.npy"
    write_edge_list_npy(p, np.arange(100), np.arange(1, 101))
    data = p.read_bytes()
    p.write_bytes(data[:-40])  # lose the last 5 rows
    with pytest.raises(ValueError, match="truncated"):
        open_edge_stream(p, num_nodes=200)


@pytest.mark.parametrize("n,m,bucket", [(5000, 60000, 9000), (300000, 400000, 1 << 21)])
def test_grouped_stream_matches_sorted_unique_pairs(tmp_path, n, m, bucket):
    """The numba regrouping (split by source range, radix sort, dedup) equals a plain sort; the
    large case's one bucket holds several of _sort_bucket's source ranges."""
    from argosy.services.partitioner.regroup import SORT_RANGE_ENTRIES, GroupedEdgeStream

    rng = np.random.default_rng(11)
    u = rng.integers(0, n, m)
    v = (u + rng.integers(-40, 40, m)) % n  # many duplicates and some long lists
    u[:3000] = 7  # one hub with a long adjacency list
    if bucket > 2 * m:
        assert 2 * m > 2 * SORT_RANGE_ENTRIES
    p = tmp_path / "e.npy"
    write_edge_list_npy(p, u, v)
    with GroupedEdgeStream(open_edge_stream(p, chunk_edges=4000), str(tmp_path / "b"),
                           chunk_edges=bucket) as g:
        got = [(s.astype(np.int64), d.astype(np.int64), st) for s, d, st in g.iter_groups()]
    src = np.concatenate([s for s, _, _ in got])
    dst = np.concatenate([d for _, d, _ in got])
    keep = u != v
    key = np.unique(np.r_[u[keep] * n + v[keep], v[keep] * n + u[keep]])
    assert np.array_equal(src * n + dst, key)
    for s, _, st in got:  # group starts mark every change of source
        assert np.array_equal(np.flatnonzero(np.r_[True, s[1:] != s[:-1]]), st[:-1])


# ------------------------------------------------------------------ one store from every format
def _graph_with_data(n=600, seed=1):
    from argosy.shared.synthetic import generate_dcsbm
    return generate_dcsbm(n, 4, seed=seed)


def _write_all_formats(g, d):
    """The same graph as .npz CSR (stored and deflated), .npy edge list, text, gzip CSV with a header
    and weights, and an OGB directory; node data in side files for the edge lists."""
    from argosy.shared.graphio import save_graph_npz, save_graph_ogb
    d.mkdir(exist_ok=True)
    save_graph_npz(g, d / "g.npz")
    np.savez_compressed(d / "gz.npz", indptr=g.indptr, indices=g.indices, x=g.features, y=g.labels,
                        train_mask=g.train_mask, val_mask=g.val_mask, test_mask=g.test_mask)
    rows = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    keep = rows < g.indices
    u, v = rows[keep], g.indices[keep].astype(np.int64)
    perm = np.random.default_rng(0).permutation(u.size)       # edge order must not matter
    u, v = u[perm], v[perm]
    write_edge_list_npy(d / "g.npy", u, v)
    (d / "g.txt").write_text("".join(f"{a} {b}\n" for a, b in zip(u, v)))
    import gzip
    (d / "g.csv.gz").write_bytes(gzip.compress(("src,dst,weight\n" + "".join(
        f"{b},{a},0.5\n" for a, b in zip(u, v))).encode()))
    np.save(d / "features.npy", np.asfortranarray(g.features.astype(">f8")))   # any byte/memory order
    np.save(d / "labels.npy", g.labels.astype(">i4"))
    for m in ("train_mask", "val_mask", "test_mask"):
        np.save(d / f"{m}.npy", getattr(g, m))
    np.save(d / "train_ids.npy", np.flatnonzero(g.train_mask))               # an id list works too
    save_graph_ogb(g, d / "ogb")
    side = ["--features", str(d / "features.npy"), "--labels", str(d / "labels.npy"),
            "--train-mask", str(d / "train_ids.npy"), "--val-mask", str(d / "val_mask.npy"),
            "--test-mask", str(d / "test_mask.npy")]
    return {"npz": (d / "g.npz", []), "npz-deflated": (d / "gz.npz", []), "npy": (d / "g.npy", side),
            "text": (d / "g.txt", side), "csv.gz": (d / "g.csv.gz", side), "ogb": (d / "ogb", [])}


def _store_arrays(root):
    from argosy.shared.store.reader import PartitionStore
    s = PartitionStore(root)
    s.verify()
    out = {"assignment": np.load(root / "assignment.npy"), "m": s.manifest.num_edges,
           "splits": s.manifest.splits, "classes": s.manifest.num_classes}
    for p in range(s.num_parts):
        pd = s.part(p)
        for name in ("nodes", "indptr", "indices", "features", "labels", "train_mask", "val_mask", "test_mask"):
            out[f"{p}/{name}"] = None if getattr(pd, name) is None else np.asarray(getattr(pd, name))
    return out


@pytest.mark.parametrize("method", ["hash", "random"])
def test_store_is_the_same_from_every_format(tmp_path, method):
    from argosy.services.partitioner.__main__ import main
    g = _graph_with_data()
    files = _write_all_formats(g, tmp_path / "in")
    stores = {}
    for fmt, (path, side) in files.items():
        out = tmp_path / f"store-{fmt}"
        assert main([str(path), "--parts", "3", "--method", method, "--seed", "5", "--out", str(out), *side]) == 0
        stores[fmt] = _store_arrays(out)
    ref = stores["npz"]
    assert ref["m"] == g.num_edges and ref["0/features"] is not None and ref["0/train_mask"] is not None
    for fmt, arrays in stores.items():
        assert arrays.keys() == ref.keys(), fmt
        for key, val in ref.items():
            other = arrays[key]
            if isinstance(val, np.ndarray):
                assert other.dtype == val.dtype and np.array_equal(other, val), (fmt, key)
            else:
                assert other == val, (fmt, key)


def test_store_from_regrouped_buckets_is_the_same(tmp_path, monkeypatch):
    """Edge lists read in several chunks are regrouped for partitioning; the CLI then writes the
    store from those sorted buckets straight into the parts' files (no spill, no sort, no
    deduplication in the writer) and deletes each bucket as it is read.  The store must equal the
    one written from the raw edges."""
    import functools

    from argosy.services.partitioner import file_streams as stream_mod
    from argosy.services.partitioner.__main__ import main
    from argosy.shared.store import part_csr
    g = _graph_with_data(n=3000)
    files = _write_all_formats(g, tmp_path / "in")
    ref_out = tmp_path / "store-ref"
    assert main([str(files["npz"][0]), "--parts", "4", "--method", "hash", "--out", str(ref_out)]) == 0
    ref = _store_arrays(ref_out)
    real_open = stream_mod.open_edge_stream
    monkeypatch.setattr(stream_mod, "open_edge_stream", functools.partial(real_open, chunk_edges=700))
    monkeypatch.setattr(part_csr, "SLAB_ENTRIES", 1000)
    sorts = []
    real_sort = part_csr._sorted_unique_slab
    monkeypatch.setattr(part_csr, "_sorted_unique_slab", lambda *a: sorts.append(1) or real_sort(*a))
    tmp = tmp_path / "buckets"
    tmp.mkdir()
    for fmt in ("npy", "text"):
        path, side = files[fmt]
        out = tmp_path / f"store-{fmt}"
        assert main([str(path), "--parts", "4", "--method", "hash", "--out", str(out), "--json",
                     "--tmpdir", str(tmp), *side]) == 0
        got = _store_arrays(out)
        assert json.loads((out / "manifest.json").read_text())["partition"]["regrouped"] is True
        for key, val in ref.items():
            if isinstance(val, np.ndarray):
                assert np.array_equal(got[key], val) and got[key].dtype == val.dtype, (fmt, key)
        assert got["m"] == ref["m"] == g.num_edges
        assert not any(tmp.rglob("bucket_*")), "regrouped buckets left on disk"
    assert sorts == [], "the writer sorted entries that arrived sorted"


def test_side_file_validation_at_partition_time(tmp_path, capsys):
    from argosy.services.partitioner.__main__ import main
    g = _graph_with_data(200)
    files = _write_all_formats(g, tmp_path / "in")
    npy, _ = files["npy"]
    d = tmp_path / "in"
    n = g.num_nodes
    bad = {
        "labels_range.npy": (np.full(n, 5000), "--labels", "out of range"),
        "labels_neg.npy": (np.full(n, -3), "--labels", "negative"),
        "mask_float.npy": (np.ones(n), "--train-mask", "float"),
        "feat_nan.npy": (np.full((n, 2), np.nan, np.float32), "--features", "NaN or inf"),
        "feat_big.npy": (np.full((n, 2), 1e39), "--features", "float32 range"),
        "feat_rows.npy": (np.ones((n + 1, 2), np.float32), "--features", "features must be"),
        "pickled.npy": (np.array([None] * n, object), "--labels", "pickled array in"),
    }
    for name, (arr, flag, want) in bad.items():
        np.save(d / name, arr, allow_pickle=True)
        out = tmp_path / "s"
        rc = main([str(npy), "--parts", "2", "--method", "hash", "--out", str(out), flag, str(d / name)])
        err = capsys.readouterr().err
        assert rc == 2 and want in err and name in err and not out.exists(), (name, err)
    # overlapping splits
    rc = main([str(npy), "--parts", "2", "--method", "hash", "--out", str(tmp_path / "s"), "--labels",
               str(d / "labels.npy"), "--train-mask", str(d / "train_mask.npy"), "--test-mask",
               str(d / "train_mask.npy")])
    assert rc == 2 and "overlap" in capsys.readouterr().err
    # features given twice (file has them, and a side file)
    rc = main([str(files["npz"][0]), "--parts", "2", "--out", str(tmp_path / "s"), "--features",
               str(d / "features.npy")])
    assert rc == 2 and "already holds features" in capsys.readouterr().err


def test_random_features_are_explicit(tmp_path, capsys, caplog):
    from argosy.services.partitioner.__main__ import main
    from argosy.shared.store.reader import PartitionStore
    g = _graph_with_data(200)
    npy, _ = _write_all_formats(g, tmp_path / "in")["npy"]
    assert main([str(npy), "--parts", "2", "--method", "hash", "--out", str(tmp_path / "a")]) == 0
    assert PartitionStore(tmp_path / "a").manifest.feature_dim == 0          # never added silently
    with caplog.at_level("WARNING"):
        assert main([str(npy), "--parts", "2", "--method", "hash", "--out", str(tmp_path / "b"),
                     "--random-features", "8"]) == 0
    assert "random features" in caplog.text
    m = PartitionStore(tmp_path / "b").manifest
    assert m.feature_dim == 8 and m.partition["random_features"] == 8
    with pytest.warns(DeprecationWarning, match="--random-features"):
        assert main([str(npy), "--parts", "2", "--method", "hash", "--out", str(tmp_path / "c"),
                     "--synthetic-features", "4"]) == 0
    assert PartitionStore(tmp_path / "c").manifest.feature_dim == 4
    rc = main([str(tmp_path / "in" / "g.npz"), "--parts", "2", "--out", str(tmp_path / "d"), "--random-features", "4"])
    assert rc == 2 and "has features" in capsys.readouterr().err


def test_unsupported_and_ogb_errors(tmp_path, capsys):
    from argosy.services.partitioner.__main__ import main
    p = tmp_path / "g.parquet"
    p.write_bytes(b"PAR1....")
    assert main([str(p), "--parts", "2", "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert "unsupported format '.parquet'" in err and ".npz" in err and "OGB" in err
    d = tmp_path / "ogbdir"
    (d / "raw").mkdir(parents=True)
    assert main([str(d), "--parts", "2", "--out", str(tmp_path / "s")]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_real_disk_full_on_out(tmp_path, cora_path):
    """A real ENOSPC (a 256 KiB tmpfs in a user namespace): 'disk full at PATH', exit 2, nothing left."""
    import shutil
    import subprocess
    import sys
    if shutil.which("unshare") is None:
        pytest.skip("unshare not available")
    mnt = tmp_path / "full"
    mnt.mkdir()
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=256k tmpfs {mnt}"],
                           capture_output=True)
    if probe.returncode != 0:
        pytest.skip("cannot mount a tmpfs in a user namespace here")
    script = (f"mount -t tmpfs -o size=256k tmpfs {mnt} && {sys.executable} -m argosy.services.partitioner "
              f"{cora_path} --parts 2 --method hash --out {mnt}/sub/store; echo rc=$?; ls -A {mnt}")
    r = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=300)
    lines = r.stdout.strip().splitlines()
    assert lines == ["rc=2"], r.stdout            # exit 2 and the tmpfs is empty again
    assert f"disk full at {mnt}/sub/store" in r.stderr and "Traceback" not in r.stderr


def test_deflated_npz_indices_inflated_once(tmp_path, small_csr, monkeypatch):
    """A big deflated indices member is inflated once into the temp dir: seekable afterwards,
    same chunks, and the file goes away with the stream."""
    import gc

    from argosy.services.partitioner.file_streams import CSRNpzStream
    indptr, indices, expected = small_csr
    p = tmp_path / "g.npz"
    _write_csr_npz(p, indptr, indices, compressed=True)
    monkeypatch.setattr(CSRNpzStream, "SPILL_MIN_BYTES", 1)
    spill = tmp_path / "spill"
    spill.mkdir()
    st = open_edge_stream(p, chunk_edges=3, tmpdir=str(spill))
    assert st.seekable and st.grouped and len(list(spill.iterdir())) == 1
    src, dst = _collect(st)
    assert _edge_set(src, dst) == expected and src.size == 12
    assert _edge_set(*st.read_chunk(st.num_chunks - 1)) <= expected
    del st
    gc.collect()
    assert list(spill.iterdir()) == []


@pytest.mark.parametrize("gz", [False, True])
def test_big_text_is_parsed_once(tmp_path, monkeypatch, gz):
    """A large text edge list gets a binary copy during the validation scan; later passes read it
    (seekable, same edges), and the copy goes away with the stream."""
    import gc
    import gzip

    from argosy.services.partitioner.file_streams import TextEdgeStream
    rng = np.random.default_rng(3)
    u, v = rng.integers(0, 300, 4000), rng.integers(0, 300, 4000)
    text = "# c\n" + "".join(f"{a} {b} 1.0\n" for a, b in zip(u, v))
    p = tmp_path / ("g.txt.gz" if gz else "g.txt")
    p.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    ref = _collect(open_edge_stream(p, chunk_edges=500))
    monkeypatch.setattr(TextEdgeStream, "SPILL_MIN_BYTES", 1)
    spill = tmp_path / "spill"
    spill.mkdir()
    st = open_edge_stream(p, chunk_edges=500, tmpdir=str(spill))
    assert st.seekable and st.num_chunks == 8 and st.num_edges == 4000 and len(list(spill.iterdir())) == 1
    got = _collect(st)
    assert _edge_set(*got) == _edge_set(*ref)
    raw = list(st.iter_raw())
    assert np.array_equal(np.concatenate([r[0] for r in raw]), u) and np.array_equal(np.concatenate([r[1] for r in raw]), v)
    assert _edge_set(*st.read_chunk(3)) <= _edge_set(*ref)
    del st, raw
    gc.collect()
    assert list(spill.iterdir()) == []


def test_heap_retention_is_limited_unless_the_user_chose():
    """The partitioner fixes glibc's malloc thresholds (freed chunk buffers go back to the OS);
    a user's own MALLOC_*_THRESHOLD_ setting wins."""
    import platform
    import subprocess
    import sys

    code = ("from argosy.services.partitioner.__main__ import limit_heap_retention as f; "
            "print(f())")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    glibc = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    assert out == str(glibc)
    env["MALLOC_TRIM_THRESHOLD_"] = "1048576"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"


def test_edge_balance_is_measured_and_stored(tmp_path):
    """Only vertex counts are balanced; the edges a part stores are measured (max / mean) by the
    partitioner's evaluation pass and by the store writer alike: a star whose hub's block holds
    every leaf's edge shows it."""
    from argosy.services.partitioner.core import evaluate_partition
    from argosy.shared.store import write_store_from_edges
    n, k = 8, 2
    hub_edges = [(0, v) for v in range(1, n)]
    src = np.array([u for u, v in hub_edges] + [v for u, v in hub_edges])
    dst = np.array([v for u, v in hub_edges] + [u for u, v in hub_edges])
    part = np.array([0, 0, 0, 0, 1, 1, 1, 1], np.int32)
    ev = evaluate_partition(ArrayEdgeStream(src, dst, n), part, k)
    # block 0: the hub (7 entries) + 3 leaves (1 each) = 10 of 14 entries; mean 7
    assert ev["balance"] == 1.0 and ev["edge_balance"] == pytest.approx(10 / 7)
    m = write_store_from_edges([(src, dst)], n, part, tmp_path / "s", num_parts=k)
    assert m.partition["edge_balance"] == pytest.approx(10 / 7)
    assert m.partition["balance"] == 1.0


def test_max_edge_balance_caps_the_edges_per_part(tmp_path):
    """A power-law graph partitioned for the cut alone packs its hubs (edge balance well above
    the mean); ``max_edge_balance`` brings every part to the limit without breaking the vertex
    capacity, and the reported cut and balances are those of the returned assignment."""
    from argosy.services.partitioner.core import evaluate_partition
    from argosy.services.partitioner.placement import capacity
    from argosy.shared.synthetic import write_rmat_edge_list
    path = tmp_path / "rmat.npy"
    write_rmat_edge_list(path, 13, 60_000, seed=3)
    free = partition_stream(open_edge_stream(path, chunk_edges=1 << 14), 8, seed=0)
    assert free.edge_balance > 2.0  # the packing this option exists for
    res = partition_stream(open_edge_stream(path, chunk_edges=1 << 14), 8, seed=0,
                           max_edge_balance=1.2)
    info = res.details["edge_balance_phase"]
    runs = res.details["edge_limited"]
    assert info["reached"]
    assert runs["vertex_balanced"]["edge_balance_before"] == pytest.approx(free.edge_balance)
    # GREM also partitioned by edges (vertex weight 1 + degree) and kept the lower cut of the
    # two runs; here that run wins, as on every heavy-tailed graph measured
    assert runs["kept"] == "edge_weighted" and res.edge_cut == runs["edge_weighted"]["cut"]
    assert runs["edge_weighted"]["cut"] < 0.95 * runs["vertex_balanced"]["cut"]
    entries = 2 * res.details["undirected_edges"]
    assert info["ecap"] == int(np.ceil(1.2 * entries / 8))  # rounded up, as the vertex capacity
    assert res.edge_balance * entries / 8 <= info["ecap"] + 1e-6
    assert res.part_sizes.max() <= capacity(res.assignment.size, 8, 0.03)
    # one chunk: the simple graph the regrouped stream partitioned (duplicates removed)
    ev = evaluate_partition(open_edge_stream(path, chunk_edges=1 << 20), res.assignment, 8)
    assert ev["edge_cut"] == res.edge_cut and ev["edge_balance"] == pytest.approx(res.edge_balance)


def test_edge_limit_already_met_keeps_the_vertex_balanced_partition(tmp_path):
    """A graph whose vertex-balanced partition is within the edge limit is not partitioned a
    second time: the result is the plain GREM partition (same cut)."""
    from argosy.shared.synthetic import write_planted_edge_list
    path = tmp_path / "planted.npy"
    write_planted_edge_list(path, 4000, 20_000, blocks=8, mixing=0.1, seed=1)
    plain = partition_stream(open_edge_stream(path), 8, seed=0)
    assert plain.edge_balance < 1.5
    res = partition_stream(open_edge_stream(path), 8, seed=0, max_edge_balance=1.5)
    assert "edge_weighted" not in res.details["edge_limited"]
    assert res.edge_cut <= plain.edge_cut and res.edge_balance <= 1.5 + 1e-9


def test_max_edge_balance_unreachable_warns_and_bad_value_is_refused(caplog):
    """A star's hub alone holds half the entries: 1.1x the mean over 4 parts cannot be met.
    The partition stays valid (vertex capacity) and a warning says what was reached."""
    import logging
    n, k = 400, 4
    src = np.concatenate([np.zeros(n - 1, np.int64), np.arange(1, n)])
    dst = np.concatenate([np.arange(1, n), np.zeros(n - 1, np.int64)])
    with caplog.at_level(logging.WARNING, logger="argosy.partitioner"):
        res = partition_stream(ArrayEdgeStream(src, dst, n), k, max_edge_balance=1.1)
    assert not res.details["edge_balance_phase"]["reached"]
    assert "reached" in caplog.text and res.balance <= 1.03 + 1e-9
    with pytest.raises(ValueError, match="max_edge_balance"):
        partition_stream(ArrayEdgeStream(src, dst, n), k, max_edge_balance=0.5)


def test_packed_part_is_warned_about_and_the_warning_reaches_train(tmp_path, caplog, capsys):
    """A partition with one part holding several times the mean edge count is a slow host for
    training: ``argosy partition`` warns (not with ``--max-edge-balance``), and ``argosy train``'s
    own partitioning step, which runs the partitioner as a subprocess, passes the warning on."""
    from argosy.services.driver import partition_to_store
    from argosy.services.partitioner.__main__ import main
    from argosy.shared.synthetic import write_rmat_edge_list
    path = tmp_path / "rmat.npy"
    write_rmat_edge_list(path, 13, 60_000, seed=3)
    with caplog.at_level("WARNING", logger="argosy.partitioner"):
        assert main([str(path), "--parts", "8", "--out", str(tmp_path / "a")]) == 0
    assert "mean edge count" in caplog.text and "--max-edge-balance" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="argosy.partitioner"):
        assert main([str(path), "--parts", "8", "--out", str(tmp_path / "b"),
                     "--max-edge-balance", "1.2"]) == 0
    assert "mean edge count" not in caplog.text
    capsys.readouterr()
    res = partition_to_store(str(path), tmp_path / "c", 8, "grem", quiet=True)
    err = capsys.readouterr().err
    assert res["edge_balance"] > 2.0 and "partitioner warning: one part holds" in err


@pytest.mark.parametrize("compressed", [False, True])
def test_npz_symmetry_check_and_grouped_chunks(tmp_path, small_csr, compressed):
    """The fused open-time check tells a symmetric CSR from an asymmetric one (which is then
    symmetrised), and the fused chunk kernel groups rows exactly as sorting would: int32 ids,
    one group per row with entries, self loops dropped."""
    from argosy.services.partitioner.stream import group_chunk

    indptr, indices, expected = small_csr
    p = tmp_path / "sym.npz"
    _write_csr_npz(p, indptr, indices, compressed)
    st = open_edge_stream(p, chunk_edges=3)
    assert not st.symmetrize
    for src, dst, starts in st.iter_groups():
        assert src.dtype == np.int32 and dst.dtype == np.int32
        s2, d2, st2 = group_chunk(src.astype(np.int64), dst.astype(np.int64))
        assert np.array_equal(starts, st2) and np.array_equal(d2, dst)
    # drop one direction of edge (0, 1) and add a self loop on vertex 6: asymmetric
    keep = np.ones(indices.size, bool)
    keep[indptr[1]] = False  # row 1's first entry is 0
    ind = indices[keep]
    deg = np.diff(indptr)
    deg[1] -= 1
    deg[6] += 1
    ind = np.insert(ind, indptr[6] - 1, 6)
    ip = np.zeros(indptr.size, np.int64)
    np.cumsum(deg, out=ip[1:])
    q = tmp_path / "asym.npz"
    _write_csr_npz(q, ip, ind.astype(np.int32), compressed)
    st = open_edge_stream(q, chunk_edges=3)
    assert st.symmetrize
    src, dst = _collect(st)
    assert _edge_set(src, dst) == expected  # symmetrised back, the self loop dropped


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_csr_slices_keep_their_entries_until_one_has_a_self_loop(dtype):
    """A CSR's slices hand out the stored entries uncopied while they are clean; a later slice
    with a self loop drops it (copied), and every slice after it too: same groups either way."""
    from argosy.services.partitioner.stream import CSRArrayStream
    from argosy.shared.errors import GraphFormatError

    rng = np.random.default_rng(3)
    n = 400
    deg = rng.integers(0, 9, n)
    indptr = np.concatenate([[0], np.cumsum(deg)])
    indices = np.concatenate([rng.choice(np.delete(np.arange(n), v), d, replace=False) for v, d in enumerate(deg)])
    loop_row = int(np.flatnonzero(deg)[-40])           # in a late slice
    indices[indptr[loop_row]] = loop_row
    indices = indices.astype(dtype)
    st = CSRArrayStream(indptr, indices, chunk_edges=64)
    got = [st.read_groups(i) for i in range(st.num_chunks)]
    if dtype == np.int32:                                # stored as the slices' dtype: kept, not copied
        assert not st._clean                             # the loop's slice was met, and copied
        assert any(np.shares_memory(d, indices) for _, d, _ in got)   # the clean ones before it were not
    src = np.concatenate([s for s, _, _ in got])
    dst = np.concatenate([d for _, d, _ in got])
    rows = np.repeat(np.arange(n), deg)
    keep = indices != rows
    np.testing.assert_array_equal(src, rows[keep])
    np.testing.assert_array_equal(dst, indices[keep])
    for s, _, starts in got:                             # one group per non-empty row, none empty
        assert np.all(np.diff(starts) > 0) and np.all(s[starts[:-1]][1:] > s[starts[:-1]][:-1])
    bad = indices.copy()
    bad[5] = n
    st = CSRArrayStream(indptr, bad, chunk_edges=64)
    with pytest.raises(GraphFormatError, match="indices"):
        for i in range(st.num_chunks):
            st.read_groups(i)
