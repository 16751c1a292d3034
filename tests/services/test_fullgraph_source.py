"""The offloaded schedule reads the store per part: same plan and rows as the whole graph, and a
memory breakdown that adds up to the peak."""

from __future__ import annotations

import numpy as np
import pytest

from argosy.services.trainer.fullgraph.graph import build_plan, load_store_graph
from argosy.services.trainer.fullgraph.fullgraph import OffloadTrainer
from argosy.services.trainer.fullgraph.inmemory import InMemoryTrainer
from argosy.services.trainer.fullgraph.model import flat_grads
from argosy.services.trainer.fullgraph import source as source_mod
from argosy.services.trainer.fullgraph.source import StoreSource, plan_from_store, split_units
from argosy.services.offload.store import OffloadStore
from argosy.services.trainer.fullgraph.train import MEMORY_PARTS, memory_breakdown
from argosy.shared.errors import StoreFormatError
from argosy.shared.store.reader import PartitionStore
from argosy.shared.store.writer import write_store

from .fullgraph_helpers import make_store, model


@pytest.mark.parametrize("aggr", ["gcn", "mean", "mean_self"])
def test_plan_from_store_equals_the_whole_graph_plan(tmp_path, aggr):
    store = PartitionStore(make_store(tmp_path, parts=3)[2])
    g, owner = load_store_graph(store)
    ref = build_plan(g, owner, aggr)
    got = plan_from_store(store, aggr)
    assert got.num_parts == ref.num_parts == 3
    assert np.array_equal(got.owner, ref.owner) and np.array_equal(got.local, ref.local)
    for p in range(3):
        assert np.array_equal(got.own[p], ref.own[p])
        assert got.deps[p] == ref.deps[p]
        assert all(np.array_equal(got.boundary[p][q], ref.boundary[p][q]) for q in ref.deps[p])
        for a, b in ((got.matrix[p], ref.matrix[p]), (got.matrix_t[p], ref.matrix_t[p])):
            assert a.shape == b.shape and np.array_equal(a.indptr, b.indptr)
            assert np.array_equal(a.indices, b.indices) and np.allclose(a.data, b.data, rtol=1e-6)


@pytest.mark.parametrize("normalize", [False, True])
def test_store_source_reads_the_rows_of_each_part(tmp_path, normalize):
    store = PartitionStore(make_store(tmp_path, parts=3)[2])
    g, owner = load_store_graph(store, normalize=normalize)
    plan = plan_from_store(store, "gcn")
    src = StoreSource(store, normalize)
    for p in range(3):
        out = np.empty((len(plan.own[p]), src.feature_dim), np.float32)
        src.features_into(p, out)
        assert np.allclose(out, g.features[plan.own[p]], rtol=1e-6)
        assert np.array_equal(src.labels[p], g.labels[plan.own[p]])
        assert np.array_equal(src.masks["train_mask"][p], g.train_mask[plan.own[p]])


def test_store_source_refuses_a_store_without_features(tmp_path):
    g, owner, _ = make_store(tmp_path, parts=2)
    g.features = None
    write_store(g, owner, tmp_path / "bare", num_parts=2)
    with pytest.raises(StoreFormatError, match="features and labels"):
        StoreSource(PartitionStore(tmp_path / "bare"))


def test_memory_breakdown_adds_up_to_the_peak():
    held = {"graph": 100, "features": 50, "model_optimizer": 10, "activation_cache": 40, "spill_buffers": 5}
    b = memory_breakdown(1000, 300, held)
    assert list(b) == ["peak", *MEMORY_PARTS]
    assert sum(b[k] for k in MEMORY_PARTS) == b["peak"] == 1000 and b["compute"] == 495
    assert memory_breakdown(200, 300, held)["compute"] == 0  # never negative


def test_store_source_reads_float16_stores_into_strided_rows_and_refuses_truncated_files(tmp_path):
    g, owner, _ = make_store(tmp_path, parts=2)
    write_store(g, owner, tmp_path / "half", num_parts=2, feature_dtype="float16")
    store = PartitionStore(tmp_path / "half")
    plan = plan_from_store(store, "gcn")
    src = StoreSource(store)
    n0 = len(plan.own[0])
    wide = np.zeros((n0, src.feature_dim + 3), np.float32)          # a strided destination
    src.features_into(0, wide[:, :src.feature_dim])
    assert np.array_equal(wide[:, :src.feature_dim], g.features[plan.own[0]].astype(np.float16).astype(np.float32))
    assert not wide[:, src.feature_dim:].any()
    path = tmp_path / "half" / store.manifest.parts[1].path / "features.npy"
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(StoreFormatError, match=r"truncated: [\d,]+ of [\d,]+ feature bytes"):
        src.features_into(1, np.empty((len(plan.own[1]), src.feature_dim), np.float32))


@pytest.mark.parametrize("aggr", ["gcn", "mean"])
def test_split_units_cut_large_parts_and_the_plan_and_rows_follow(tmp_path, aggr, monkeypatch):
    monkeypatch.setattr(source_mod, "READ_ROWS", 7)  # several reads per unit, some skipped
    store = PartitionStore(make_store(tmp_path, n=400, parts=3)[2])
    g, _ = load_store_graph(store)
    sizes = [pt.num_nodes for pt in store.manifest.parts]
    units = split_units(store, 60)
    assert [p for p, _ in units] == sorted(p for p in range(3) for _ in range(-(-sizes[p] // 60)))
    for p in range(3):  # each part's pieces cover its rows once, sorted, of equal size
        pieces = [r for q, r in units if q == p]
        assert np.array_equal(np.sort(np.concatenate(pieces)), np.arange(sizes[p]))
        assert all(np.all(np.diff(r) > 0) for r in pieces) and max(map(len, pieces)) - min(map(len, pieces)) <= 1
    assert split_units(store, None) == [(p, None) for p in range(3)] == split_units(store, max(sizes))
    got = plan_from_store(store, aggr, units)
    ref = build_plan(g, got.owner, aggr)
    assert got.num_parts == ref.num_parts == len(units)
    src = StoreSource(store, units=units)
    for u in range(len(units)):
        assert np.array_equal(got.own[u], ref.own[u]) and got.deps[u] == ref.deps[u]
        assert all(np.array_equal(got.boundary[u][q], ref.boundary[u][q]) for q in ref.deps[u])
        a, b = got.matrix[u], ref.matrix[u]
        assert a.shape == b.shape and np.array_equal(a.indices, b.indices) and np.allclose(a.data, b.data, rtol=1e-6)
        out = np.empty((len(got.own[u]), src.feature_dim), np.float32)
        src.features_into(u, out)
        assert np.array_equal(out, g.features[got.own[u]])
        assert np.array_equal(src.labels[u], g.labels[got.own[u]])
        assert np.array_equal(src.masks["val_mask"][u], g.val_mask[got.own[u]])
    with pytest.raises(ValueError, match="max_rows must be >= 1"):
        split_units(store, 0)


def test_offload_gradients_over_split_units_match_in_memory(tmp_path):
    store = PartitionStore(make_store(tmp_path, n=400, parts=2)[2])
    g, _ = load_store_graph(store)
    m0, spec = model("gcn", 20, 4)
    loss0 = InMemoryTrainer(spec, g, m0, 7).step(0)
    units = split_units(store, 50)
    m1, _ = model("gcn", 20, 4)
    with OffloadStore(cache_bytes=8 << 10, spill_dir=str(tmp_path), policy="belady") as st:
        loss1 = OffloadTrainer(spec, plan_from_store(store, "gcn", units), StoreSource(store, units=units), st, m1,
                               seed=7).step(0)
    assert abs(loss1 - loss0) <= 1e-5 * abs(loss0)
    g0, g1 = flat_grads(m0), flat_grads(m1)
    assert max(float((g1[k] - g0[k]).norm() / g0[k].norm()) for k in g0) <= 1e-5
