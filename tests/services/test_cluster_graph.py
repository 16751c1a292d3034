"""Tests for the cluster graph: the out-of-core (bucketed) build, contraction and coarsening."""

import os

import numpy as np
import pytest

from argosy.services.partitioner import cluster_graph as cg
from argosy.services.partitioner.nbutil import rng_state
from argosy.services.partitioner.coarsening import contract
from argosy.services.partitioner.file_streams import open_edge_stream
from argosy.services.partitioner.stream import ArrayEdgeStream
from argosy.shared.synthetic import write_skewed_sbm_edge_list


def dense(xadj, adj, ew, nc):
    out = np.zeros((nc, nc), np.int64)
    rows = np.repeat(np.arange(nc), np.diff(xadj))
    np.add.at(out, (rows, adj), ew)
    return out


@pytest.fixture(scope="module")
def random_graph():
    rng = np.random.default_rng(5)
    n = 3000
    src = rng.integers(0, n, 20000).astype(np.int32)
    dst = rng.integers(0, n, 20000).astype(np.int32)
    return ArrayEdgeStream(src, dst, n, chunk_edges=1500), n


@pytest.mark.parametrize("nb,spill", [(1, 1 << 30), (7, 500)])
def test_bucketed_build_equals_in_memory_build(random_graph, tmp_path, nb, spill):
    """Written to disk in buckets (spilling runs often, or never), the cluster graph is the one
    the in-memory builder gives, once the bucket renumbering is undone."""
    stream, n = random_graph
    cmap = np.random.default_rng(1).integers(0, 700, n).astype(np.int32)
    nc = 700
    ref = cg.build_cluster_graph(stream, cmap, nc, 1 << 20)
    g, cmap2 = cg._stream_to_buckets(stream, cmap, nc, nb, str(tmp_path), "t", spill)
    assert g.nb == nb and g.entries == ref[1].size
    new_id, bounds = cg._hash_ids(nc, nb)
    assert np.array_equal(cmap2, new_id[cmap]) and np.array_equal(g.bounds, bounds)
    assert np.array_equal(np.sort(new_id), np.arange(nc))  # a renumbering
    xadj, adj, ew = g.to_csr()
    got = dense(xadj, adj, ew, nc)[np.ix_(new_id, new_id)]
    np.testing.assert_array_equal(got, dense(ref[0], ref[1], ref[2], nc))
    g.remove()
    assert not any(f.suffix == ".bin" for f in tmp_path.iterdir())


@pytest.mark.parametrize("dtype,threads,exact", [(np.int32, 1, False), (np.int64, 1, True),
                                                  (np.int32, 2, False), (np.int32, 3, True)])
@pytest.mark.parametrize("nc", [700, 2500])
def test_scattered_build_equals_the_sorted_keys_build(random_graph, dtype, threads, exact, nc):
    """The in-memory build by rows (one scatter pass, on threads with atomic row slots; rows
    counted, short ones by sorting, long ones by cluster) is the reference build, entry for
    entry, also with clusters that have no entries; counted exactly, it gives up over its limit.
    700 clusters: every row is long; 2,500: most are short, a few long."""
    from argosy.services.partitioner.cluster_build import ROW_SORT_MAX
    from argosy.services.partitioner.threads import using_threads

    stream, n = random_graph
    assert stream.seekable and stream.num_chunks > 3
    cmap = np.random.default_rng(1).integers(0, nc, n).astype(np.int32)
    cmap[cmap == 5] = 6
    ref = cg.build_cluster_graph(stream, cmap, nc, 1 << 20)
    raw = sum(int(np.count_nonzero(cmap[s] != cmap[d])) for s, d in stream)
    rows = np.bincount(np.concatenate([cmap[s][cmap[s] != cmap[d]] for s, d in stream]),
                       minlength=nc)
    assert (rows > ROW_SORT_MAX).any() and ((rows <= ROW_SORT_MAX).mean() > 0.5) == (nc > 1000)
    with using_threads(threads):
        xadj, adj, ew = cg.scatter_cluster_graph(stream, cmap, nc, dtype, raw if exact else None)
        if exact:
            assert cg.scatter_cluster_graph(stream, cmap, nc, dtype, raw - 1) is None
    assert adj.dtype == ew.dtype == dtype and xadj[6] == xadj[5]
    for got, want in zip((xadj, adj, ew), ref[:3]):
        np.testing.assert_array_equal(got, want)


def _random_csr(n, m, seed):
    rng = np.random.default_rng(seed)
    u, v = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = u != v
    src, dst = np.r_[u[keep], v[keep]], np.r_[v[keep], u[keep]]
    o = np.lexsort((dst, src))
    xadj = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=xadj[1:])
    return xadj, dst[o].astype(np.int64), rng.integers(1, 5, o.size), rng.integers(1, 3, n)


@pytest.mark.parametrize("threads", [2, 3])
def test_contraction_on_threads_is_the_one_thread_contraction(threads):
    from argosy.services.partitioner.coarsening import PARALLEL_MIN_VERTICES

    n = PARALLEL_MIN_VERTICES + 5000  # below it, one thread whatever is asked
    xadj, adj, ew, vw = _random_csr(n, 4 * n, 7)
    label = np.random.default_rng(8).integers(0, n // 4, n) * 3
    one = contract(xadj, adj, ew, vw, label, 1)
    many = contract(xadj, adj, ew, vw, label, threads)
    for a, b in zip(one, many):
        np.testing.assert_array_equal(a, b)


def test_label_propagation_on_threads_keeps_its_limits():
    """On threads: every label is a vertex of the same block, no cluster passes the size limit
    (its weight moves atomically), and the clusters shrink the graph about as one thread does;
    one thread repeats itself for a seed."""
    from argosy.services.partitioner.coarsening import PARALLEL_MIN_VERTICES, lp_cluster

    n = PARALLEL_MIN_VERTICES + 5000
    xadj, adj, ew, vw = _random_csr(n, 3 * n, 9)
    part = np.random.default_rng(3).integers(0, 2, n)
    one = lp_cluster(xadj, adj, ew, vw, 20, 3, rng_state(1), part, 2, 1)
    assert np.array_equal(one, lp_cluster(xadj, adj, ew, vw, 20, 3, rng_state(1), part, 2, 1))
    two = lp_cluster(xadj, adj, ew, vw, 20, 3, rng_state(1), part, 2, 2)
    assert np.array_equal(part[two], part)
    assert np.bincount(two, weights=vw).max() <= 20
    assert 0.8 < np.unique(two).size / np.unique(one).size < 1.25


def test_bucketed_contraction_equals_in_memory_contraction(random_graph, tmp_path):
    stream, n = random_graph
    cmap = np.random.default_rng(2).integers(0, 900, n).astype(np.int32)
    g, _ = cg._stream_to_buckets(stream, cmap, 900, 5, str(tmp_path), "a", 800)
    xadj, adj, ew = g.to_csr()
    lab = np.random.default_rng(3).integers(0, 60, 900)
    first, lab = np.unique(lab, return_inverse=True)
    nl = first.size
    new_id, _ = cg._hash_ids(nl, 3)
    lab = new_id[lab].astype(np.int32)
    g2 = cg._contract_buckets(g, lab, nl, 3, "b", 100)
    _, rx, ra, re, _ = contract(xadj, adj, ew, np.ones(900, np.int64), lab, 1)
    # contract() numbers coarse vertices by first appearance; map them to lab's ids
    coarse_of = np.empty(nl, np.int64)
    coarse_of[lab] = contract(xadj, adj, ew, np.ones(900, np.int64), lab, 1)[0]
    ref = dense(rx, ra, re, nl)[np.ix_(coarse_of, coarse_of)]
    np.testing.assert_array_equal(dense(*g2.to_csr(), nl), ref)
    assert g2.entries == ra.size


@pytest.mark.parametrize("memory_entries", [None, 1 << 20])
def test_coarsening_fits_the_budget_and_matches_its_cmap(tmp_path, caplog, memory_entries):
    """Over the budget, the coarsened cluster graph fits it, respects the cluster-size limit,
    equals the cluster graph of the returned map, keeps communities together, and leaves no
    scratch files: out of core (the stream over the memory budget) and in memory."""
    import logging

    n, k = 20000, 4
    write_skewed_sbm_edge_list(tmp_path / "s.npy", n, 200000, communities=16, mixing=0.02,
                               seed=1)
    stream = open_edge_stream(tmp_path / "s.npy", chunk_edges=40000)
    cmap = np.arange(n, dtype=np.int32)  # singletons: the cluster graph is the graph
    budget, maxw = 20000, 300
    work = tmp_path / "work"
    work.mkdir()
    with caplog.at_level(logging.INFO, logger="argosy.partitioner"):
        cm, nc, mw, info, built = cg.coarsen_cluster_graph(stream, cmap, n, maxw, n // k,
                                                             budget, rng_state(0), str(work),
                                                             memory_entries=memory_entries)
    assert built is not None and info["levels"] >= 1 and "coarsening level" in caplog.text
    assert ("in memory" in caplog.text) == (memory_entries is not None)
    xadj, adj, ew, _ = built
    assert adj.size <= budget and xadj.size == nc + 1 and cm.max() == nc - 1
    assert np.bincount(cm).max() <= mw
    ref = cg.build_cluster_graph(stream, cm, nc, 1 << 20)
    np.testing.assert_array_equal(dense(xadj, adj, ew, nc), dense(ref[0], ref[1], ref[2], nc))
    assert os.listdir(work) == []
    # communities stay together: the generator's community of vertex perm[i] is comm[i]
    sizes = np.arange(1, 17, dtype=np.float64) ** -1.2
    sizes = np.maximum(1, (sizes / sizes.sum() * n).astype(np.int64))
    sizes[0] += n - sizes.sum()
    truth = np.empty(n, np.int64)
    truth[np.random.default_rng(1).permutation(n)] = np.repeat(np.arange(16), sizes)
    major = np.zeros((nc, 16), np.int64)
    np.add.at(major, (cm, truth), 1)
    assert major.max(axis=1).sum() / n > 0.9


def test_coarsening_gives_up_when_nothing_merges(random_graph, tmp_path):
    """When label propagation cannot shrink the clusters even at the largest size allowed,
    coarsening returns None (the caller decides) instead of a graph over the budget."""
    stream, n = random_graph
    cmap = np.arange(n, dtype=np.int32)
    cm, nc, mw, info, built = cg.coarsen_cluster_graph(stream, cmap, n, 1, 1, 100, rng_state(0),
                                                         str(tmp_path))
    assert built is None and mw == 1 and nc == n and info["levels"] == 0
    assert os.listdir(tmp_path) == []


def test_coarsening_inside_blocks_keeps_every_cluster_in_one_block(random_graph, tmp_path):
    stream, n = random_graph
    part = np.random.default_rng(4).integers(0, 3, n).astype(np.int32)
    cmap = np.arange(n, dtype=np.int32)
    cm, nc, mw, info, built = cg.coarsen_cluster_graph(stream, cmap, n, 40, 1000, 8000,
                                                         rng_state(0), str(tmp_path), part)
    assert built is not None and info["levels"] >= 1 and built[1].size <= 8000
    assert np.unique(cm.astype(np.int64) * 3 + part).size == nc  # one block per cluster


def test_full_disk_raises_and_leaves_no_scratch(random_graph, tmp_path, monkeypatch):
    """ENOSPC while writing a bucket: the OSError reaches the caller (the CLI reports 'disk full
    at PATH') and the scratch directory is gone."""
    import errno

    stream, n = random_graph
    real, calls = cg._save_arrays, []

    def full(path, *arrays):
        calls.append(path)
        if len(calls) > 2:
            raise OSError(errno.ENOSPC, "No space left on device", path)
        real(path, *arrays)

    monkeypatch.setattr(cg, "_save_arrays", full)
    with pytest.raises(OSError) as e:
        cg.coarsen_cluster_graph(stream, np.arange(n, dtype=np.int32), n, 40, 1000, 500,
                                 rng_state(0), str(tmp_path))
    assert e.value.errno == errno.ENOSPC and len(calls) == 3
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("use_part", [False, True])
def test_short_list_lp_chooses_what_the_rating_array_chooses(use_part):
    """``lp_cluster`` rates vertices of at most ``LP_SHORT_LIST`` entries in a short list and
    the others with the label-indexed rating array (``lp_best_label``); both ways give the
    labels one round of the rating array alone gives, random tie draws included (degrees from
    1 to well above the list's length, weighted entries, blocks or none)."""
    import numba

    from argosy.services.partitioner.coarsening import LP_SHORT_LIST, lp_best_label, lp_cluster
    from argosy.services.partitioner.nbutil import visit_order

    @numba.njit
    def rating_array_lp(xadj, adj, ew, vw, maxw, state, part):
        n = vw.size
        label = np.arange(n)
        cw = vw.copy()
        rating = np.zeros(n, np.int64)
        touched = np.empty(n + 1, np.int64)
        order = visit_order(n, state)
        for idx in range(n):
            v = order[idx]
            best = lp_best_label(adj, ew, xadj[v], xadj[v + 1], v, label, cw, vw[v], maxw,
                                 rating, touched, part, True, state)
            if best != label[v]:
                cw[label[v]] -= vw[v]
                cw[best] += vw[v]
                label[v] = best
        return label

    rng = np.random.default_rng(7)
    n = 4000
    deg = np.where(rng.random(n) < 0.05, rng.integers(LP_SHORT_LIST, 4 * LP_SHORT_LIST, n),
                   rng.integers(1, 6, n))
    src = np.repeat(np.arange(n), deg)
    dst = (src + rng.integers(1, 40, src.size)) % n  # local: labels repeat among neighbours
    pairs = np.unique(np.concatenate([np.stack([src, dst], 1), np.stack([dst, src], 1)]), axis=0)
    xadj = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(pairs[:, 0], minlength=n), out=xadj[1:])
    adj = pairs[:, 1].astype(np.int64)
    ew = rng.integers(1, 4, adj.size).astype(np.int64)
    ew = np.maximum(ew, ew[np.lexsort((pairs[:, 0], pairs[:, 1]))])  # symmetric weights
    vw = rng.integers(1, 3, n).astype(np.int64)
    part = (np.arange(n) * 4 // n).astype(np.int64) if use_part else np.zeros(n, np.int64)
    assert np.diff(xadj).max() > LP_SHORT_LIST >= np.diff(xadj).min()
    got = lp_cluster(xadj, adj, ew, vw, 12, 1, rng_state(3), part, 4 if use_part else 1, 1)
    want = rating_array_lp(xadj, adj, ew, vw, 12, rng_state(3), part)
    np.testing.assert_array_equal(got, want)


def test_dense_build_on_threads_is_the_one_thread_build(random_graph):
    """Few clusters: the dense build with chunks on two threads (atomic adds into one matrix)
    gives the one-thread graph exactly, weights included."""
    from argosy.services.partitioner.cluster_build import DENSE_CLUSTER_GRAPH_BYTES, build_cluster_graph
    from argosy.services.partitioner.threads import using_threads

    stream, n = random_graph
    nc = 60
    assert nc * nc * 8 <= DENSE_CLUSTER_GRAPH_BYTES and stream.num_chunks >= 2
    cmap = np.random.default_rng(2).integers(0, nc, n).astype(np.int32)
    with using_threads(1):
        one = build_cluster_graph(stream, cmap, nc, 1 << 20)
    with using_threads(2):
        two = build_cluster_graph(stream, cmap, nc, 1 << 20)
    assert one[3] == two[3] == sum(s.size for s, _ in stream)
    for a, b in zip(one[:3], two[:3]):
        assert np.array_equal(a, b)
    assert dense(*one[:3], nc).sum() == sum(np.count_nonzero(cmap[s] != cmap[d]) for s, d in stream)
