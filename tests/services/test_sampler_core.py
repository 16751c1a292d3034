"""Sampler invariants: sampled edges exist, fanouts respected, determinism, block layout."""
import numpy as np
import pytest
from numba import typed

from argosy.shared.plan import plan_phase
from argosy.shared.store import PartitionStore
from argosy.services.sampler.core import SamplerCore


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
    c._indices = typed.List([np.asarray(x).astype(idx_dtype) for x in c._indices])
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
