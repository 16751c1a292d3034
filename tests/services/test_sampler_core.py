"""Sampler invariants: sampled edges exist, fanouts respected, determinism, block layout."""
import numpy as np
import pytest

from argosy.shared.plan import plan_phase
from argosy.shared.store import PartitionStore
from argosy.services.sampler.core import SamplerCore
from argosy.services.sampler.kernels import PartTable, init_state
from tests.graphs import random_graph


def _edge_set(g):
    rows = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    return set(zip(rows.tolist(), g.indices.tolist()))


@pytest.fixture
def core(small_store):
    g, path = small_store
    return g, SamplerCore(PartitionStore(path), seed=0)


@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("fanouts", [(3, 2), (5,), (-1, 4, 2)])
def test_invariants(core, fanouts, idx_dtype):
    g, c = core
    c._set_topology(list(c._indptr), [np.asarray(x).astype(idx_dtype) for x in c._indices])
    edges = _edge_set(g)
    deg = np.diff(g.indptr)
    seeds = np.random.default_rng(0).choice(g.num_nodes, 40, replace=False)
    b = c.sample(seeds, fanouts, rng_seed=7)
    assert len(np.unique(b.nodes)) == len(b.nodes)                       # every node once
    np.testing.assert_array_equal(b.nodes[:40], seeds)                   # seeds first
    np.testing.assert_array_equal(b.degrees, deg[b.nodes])
    assert b.hop_nodes[0] == 40 and b.hop_nodes[-1] == len(b.nodes) and np.all(np.diff(b.hop_nodes) >= 0)
    ptrs = np.split(b.dst_ptr, np.cumsum(b.hop_nodes[:-1] + 1)[:-1])
    for h in range(1, len(fanouts) + 1):
        e0, e1 = b.hop_edges[h - 1], b.hop_edges[h]
        src, dst = b.edge_src[e0:e1], b.edge_dst[e0:e1]
        assert dst.max(initial=0) < b.hop_nodes[h - 1] and src.max(initial=0) < b.hop_nodes[h]
        for s, d in zip(b.nodes[src], b.nodes[dst]):
            assert (int(d), int(s)) in edges                             # every sampled edge exists
        counts = np.bincount(dst, minlength=b.hop_nodes[h - 1])
        f = fanouts[h - 1]
        want = deg[b.nodes[:b.hop_nodes[h - 1]]]
        np.testing.assert_array_equal(counts, want if f < 0 else np.minimum(want, f))
        assert np.all(np.diff(dst) >= 0)                                 # grouped by destination: a CSR
        np.testing.assert_array_equal(ptrs[h - 1], np.concatenate([[0], np.cumsum(counts)]))
        pairs = set(zip(src.tolist(), dst.tolist()))
        assert len(pairs) == len(src)                                   # without replacement


def test_deterministic_by_seed(core):
    _, c = core
    seeds = np.arange(0, 100, 3)
    a, b, d = c.sample(seeds, (4, 3), 1), c.sample(seeds, (4, 3), 1), c.sample(seeds, (4, 3), 2)
    np.testing.assert_array_equal(a.nodes, b.nodes)
    np.testing.assert_array_equal(a.edge_src, b.edge_src)
    assert not np.array_equal(a.edge_src, d.edge_src)


def test_remote_counts(core):
    g, c = core
    assign = np.asarray(c.store.assignment)
    b = c.sample(np.arange(20), (-1,), 0, home_part=0)
    nbr = b.nodes[b.edge_src]
    assert b.remote_neighbors == int(np.count_nonzero(assign[nbr] != 0))


def test_work_items_cover_train_seeds_once(core):
    g, c = core
    plan = plan_phase(c.store, "train", epoch=0, batch_size=32, num_trainers=3)
    seeds = np.concatenate([c.seeds_for(it) for it in plan])
    assert sorted(seeds.tolist()) == np.flatnonzero(g.train_mask).tolist()
    assert {it.trainer_rank for it in plan} == {0, 1, 2}
    assert all(c.store.assignment[c.seeds_for(it)].tolist() == [it.part] * it.count for it in plan)
    other = np.concatenate([c.seeds_for(it) for it in plan_phase(c.store, "train", 1, 32, 3)])
    assert sorted(other.tolist()) == sorted(seeds.tolist()) and not np.array_equal(other, seeds)


def test_rejects_out_of_range_seeds(core):
    g, c = core
    with pytest.raises(ValueError, match="seed ids must lie"):
        c.sample(np.array([g.num_nodes + 5]), (2,))


def _reference_sample(g, assign, served, seeds, fanouts, rng_seed):
    """The sampler's contract in plain Python: seeds first; each hop draws min(degree, f) distinct
    neighbours of every node so far (Floyd's algorithm over an xorshift64* stream seeded by
    ``init_state``), appending unseen neighbours in draw order; a sampled edge's weight is the
    stored weight of the entry drawn (None for an unweighted graph)."""
    m64 = (1 << 64) - 1
    x = int(init_state(rng_seed)[0])

    def draw():
        nonlocal x
        x ^= x >> 12
        x ^= (x << 25) & m64
        x ^= x >> 27
        return ((x * 0x2545F4914F6CDD1D) & m64) >> 32

    nodes = [int(v) for v in seeds]
    pos = {v: i for i, v in enumerate(nodes)}
    src, dst, hop_nodes, hop_edges, remote, wts = [], [], [len(nodes)], [0], 0, []
    for f in fanouts:
        for j in range(len(nodes)):
            row = g.indices[g.indptr[nodes[j]]:g.indptr[nodes[j] + 1]]
            d = len(row)
            if f < 0 or d <= f:
                offs = list(range(d))
            else:
                offs = []
                for t in range(f):
                    m = d - f + t + 1
                    c = (draw() * m) >> 32
                    offs.append(m - 1 if c in offs else c)
            for o in offs:
                u = int(row[o])
                if u not in pos:
                    pos[u] = len(nodes)
                    nodes.append(u)
                remote += not served[assign[u]]
                src.append(pos[u])
                dst.append(j)
                if g.edge_weight is not None:
                    wts.append(g.edge_weight[g.indptr[nodes[j]] + o])
        hop_nodes.append(len(nodes))
        hop_edges.append(len(src))
    return nodes, src, dst, hop_nodes, hop_edges, remote, (wts if g.edge_weight is not None else None)


@pytest.fixture
def weighted_core(tmp_path):
    """The ``small_store`` graph with edge weights, four parts."""
    from argosy.shared.store import write_store
    g = random_graph(500, 3000, seed=1, features=16, classes=4, weighted=True)
    write_store(g, np.random.default_rng(0).integers(0, 4, g.num_nodes), tmp_path / "wstore")
    return g, SamplerCore(PartitionStore(tmp_path / "wstore"), seed=0)


@pytest.mark.parametrize("weights", ["none", "stored", "ignored"])
@pytest.mark.parametrize("home_part", [None, 2])
def test_matches_reference(core, weighted_core, home_part, weights):
    """Exactly the plain-Python sampler's batch, over four parts read through the address table,
    with the scratch buffers reused from batch to batch (a small batch after a large one); with a
    weighted store, exactly the stored weight of each entry drawn, and each node's row sum; a
    weighted store with the weights ignored gives the unweighted store's batch, byte for byte."""
    g, c = core if weights == "none" else weighted_core
    if weights == "ignored":
        c = SamplerCore(c.store, seed=0, edge_weights=False)
    assign = np.asarray(c.store.assignment)
    served = np.ones(4, bool) if home_part is None else np.arange(4) == home_part
    for t, (size, fanouts) in enumerate([(200, (6, 3, 2)), (7, (-1, 4)), (60, (2, 2, 2, 2))]):
        seeds = np.random.default_rng(t).choice(g.num_nodes, size, replace=False)
        b = c.sample(seeds, fanouts, rng_seed=11 + t, home_part=home_part)
        nodes, src, dst, hop_nodes, hop_edges, remote, wts = _reference_sample(g, assign, served, seeds, fanouts,
                                                                               11 + t)
        np.testing.assert_array_equal(b.nodes, nodes)
        np.testing.assert_array_equal(b.edge_src, src)
        np.testing.assert_array_equal(b.edge_dst, dst)
        np.testing.assert_array_equal(b.hop_nodes, hop_nodes)
        np.testing.assert_array_equal(b.hop_edges, hop_edges)
        assert b.remote_neighbors == remote
        if weights == "stored":
            assert b.edge_weight.dtype == np.float32 and len(set(wts)) > len(wts) // 2    # distinct values
            np.testing.assert_array_equal(b.edge_weight, np.asarray(wts, np.float32))
            wdeg = np.add.reduceat(g.edge_weight, g.indptr[:-1]) * (np.diff(g.indptr) > 0)
            np.testing.assert_allclose(b.weighted_degrees, wdeg[b.nodes], rtol=1e-5)
        else:
            assert b.edge_weight.shape == (0,) and b.weighted_degrees.shape == (0,)


def test_repeated_seeds_sampled_once_sorted(core):
    _, c = core
    seeds = np.array([40, 7, 40, 3, 7, 99])
    a, b = c.sample(seeds, (3, 2), rng_seed=5), c.sample(np.array([3, 7, 40, 99]), (3, 2), rng_seed=5)
    for f in ("nodes", "edge_src", "edge_dst", "hop_nodes", "hop_edges", "degrees"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)


def test_part_table_rejects_what_kernels_cannot_read():
    ptr = np.array([0, 2, 3], np.int64)
    held = np.ones(2, bool)
    with pytest.raises(ValueError, match="share one integer dtype"):
        PartTable([ptr, ptr], [np.arange(3, dtype=np.int32), np.arange(3, dtype=np.int64)], held)
    with pytest.raises(ValueError, match="C-contiguous int64 indptr"):
        PartTable([ptr, ptr.astype(np.int32)], [np.arange(3, dtype=np.int32)] * 2, held)
    with pytest.raises(ValueError, match="C-contiguous int64 indptr"):
        PartTable([ptr, ptr], [np.arange(3, dtype=np.int32), np.arange(6, dtype=np.int32)[::2]], held)
    with pytest.raises(ValueError, match="one indptr and one indices array per part"):
        PartTable([ptr], [np.arange(3, dtype=np.int32)] * 2, held)
    t = PartTable([ptr, np.zeros(1, np.int64)], [np.arange(3, dtype=np.int32), np.empty(0, np.int32)], np.array([True, False]))
    assert t.ptr_addr[0] == ptr.ctypes.data and t.ptr_addr[1] == 0 and t.ind_addr[1] == 0
