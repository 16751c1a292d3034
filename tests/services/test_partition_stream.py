"""Tests for the chunked edge readers and the ``partition_stream`` entry point's validation."""

import os
import zipfile

import numpy as np
import pytest

from argosy.services.partitioner.core import (MemoryBudgetError, PartitionResult, estimate_cost,
                                       partition_stream)
from argosy.services.partitioner.stream import (ArrayEdgeStream, open_edge_stream, write_edge_list_npy,
                                         write_edge_list_npy_chunked)

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
    from argosy.services.partitioner.stream import GroupedEdgeStream

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


def test_grouped_stream_matches_sorted_unique_pairs(tmp_path):
    """The numba regrouping (counting sort + per-list sort + dedup) equals a plain sort."""
    rng = np.random.default_rng(11)
    u = rng.integers(0, 5000, 60000)
    v = (u + rng.integers(-40, 40, 60000)) % 5000  # many duplicates and some long lists
    u[:3000] = 7  # one hub with a long adjacency list
    p = tmp_path / "e.npy"
    write_edge_list_npy(p, u, v)
    from argosy.services.partitioner.stream import GroupedEdgeStream

    with GroupedEdgeStream(open_edge_stream(p, chunk_edges=4000), str(tmp_path / "b"),
                           chunk_edges=9000) as g:
        got = [(s.astype(np.int64), d.astype(np.int64), st) for s, d, st in g.iter_groups()]
    src = np.concatenate([s for s, _, _ in got])
    dst = np.concatenate([d for _, d, _ in got])
    keep = u != v
    key = np.unique(np.r_[u[keep] * 5000 + v[keep], v[keep] * 5000 + u[keep]])
    assert np.array_equal(src * 5000 + dst, key)
    for s, _, st in got:  # group starts mark every change of source
        assert np.array_equal(np.flatnonzero(np.r_[True, s[1:] != s[:-1]]), st[:-1])
