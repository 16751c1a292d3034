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
from argosy.services.trainer.fullgraph.source import StoreSource, make_units, plan_from_store
from argosy.services.offload.store import OffloadStore
from argosy.services.trainer.fullgraph.train import MEMORY_PARTS, memory_breakdown
from argosy.shared.errors import StoreFormatError
from argosy.shared.store.reader import PartitionStore
from argosy.shared.store.writer import write_store

from tests.full_disk import run_on_full_disk

from .fullgraph_helpers import make_store, model


@pytest.mark.parametrize("aggr,in_files", [("gcn", False), ("mean", False), ("mean_self", False),
                                           ("gcn", True), ("mean", True)])
def test_plan_from_store_equals_the_whole_graph_plan(tmp_path, aggr, in_files):
    """Also with the matrices in files (``matrix_dir``): mapped read-only at each access, the same."""
    store = PartitionStore(make_store(tmp_path, parts=3)[2])
    g, owner = load_store_graph(store)
    ref = build_plan(g, owner, aggr)
    (tmp_path / "mats").mkdir()
    got = plan_from_store(store, aggr, matrix_dir=str(tmp_path / "mats") if in_files else None)
    if in_files:
        assert len(list((tmp_path / "mats").iterdir())) == 3 * 2 * 3  # parts x (matrix, transpose) x arrays
        assert isinstance(got.matrix[0].indices, np.memmap) and 0 < got.matrix_bytes() < sum(
            a.nbytes + b.nbytes for a, b in zip(ref.matrix, ref.matrix_t))
        assert [got.expanded_size(p) for p in range(3)] == [ref.expanded_size(p) for p in range(3)]
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
@pytest.mark.parametrize("max_rows", [60, 230])
def test_units_cut_large_parts_group_small_ones_and_the_plan_and_rows_follow(tmp_path, aggr, max_rows, monkeypatch):
    monkeypatch.setattr(source_mod, "READ_ROWS", 7)  # several reads per unit, some skipped
    monkeypatch.setattr(source_mod, "MAX_CUT_HALO", 10.0)  # cut whatever the halo (this graph is not road-like)
    store = PartitionStore(make_store(tmp_path, n=400, parts=5)[2])
    g, _ = load_store_graph(store)
    sizes = [pt.num_nodes for pt in store.manifest.parts]
    units = make_units(store, max_rows)
    covered = np.concatenate([np.asarray(store.part(p).nodes)[rows if rows is not None else slice(None)]
                              for parts, rows in units for p in parts])
    assert np.array_equal(np.sort(covered), np.arange(400))  # every vertex in exactly one unit
    for parts, rows in units:
        assert sum(sizes[p] for p in parts) <= max_rows if rows is None else len(parts) == 1 and len(rows) <= max_rows
    if max_rows == 60:  # every part (~80 rows) cut in two equal pieces, rows sorted
        assert [(parts, len(rows) - sizes[parts[0]] // 2 in (0, 1)) for parts, rows in units] == \
            [((p,), True) for p in range(5) for _ in range(2)]
        assert all(np.all(np.diff(rows) > 0) for _, rows in units)
    else:  # parts grouped, fewer units than parts
        assert all(rows is None for _, rows in units) and len(units) < 5 and max(len(p) for p, _ in units) > 1
    assert make_units(store, None) == [((p,), None) for p in range(5)] == make_units(store, 60, min_piece=100)
    got = plan_from_store(store, aggr, units)
    ref = build_plan(g, got.owner, aggr)
    assert got.num_parts == ref.num_parts == len(units)
    src = StoreSource(store, units=units)
    x0 = np.zeros(400, np.float32)
    for u in range(len(units)):  # same vertices and the same aggregation as the whole-graph plan
        assert np.array_equal(np.sort(got.own[u]), ref.own[u])
        dense = lambda plan, u: _dense(plan, u, x0)  # noqa: E731
        assert np.allclose(dense(got, u)[np.argsort(got.own[u])], dense(ref, u), atol=1e-6)
        out = np.empty((len(got.own[u]), src.feature_dim), np.float32)
        src.features_into(u, out)
        assert np.array_equal(out, g.features[got.own[u]])
        assert np.array_equal(src.labels[u], g.labels[got.own[u]])
        assert np.array_equal(src.masks["val_mask"][u], g.val_mask[got.own[u]])
    with pytest.raises(ValueError, match="max_rows must be >= 1"):
        make_units(store, 0)


def test_a_part_whose_pieces_would_read_each_other_heavily_is_not_cut(tmp_path, monkeypatch):
    store = PartitionStore(make_store(tmp_path, n=400, parts=2)[2])  # planted graph: random edges inside a part
    assert make_units(store, 60) == [((0,), None), ((1,), None)]
    monkeypatch.setattr(source_mod, "MAX_CUT_HALO", 10.0)
    assert len(make_units(store, 60)) > 2


def _dense(plan, u, x0):
    """Unit ``u``'s aggregation matrix over global columns, dense ``(n_u, n)``."""
    m = plan.matrix[u]
    cols = np.concatenate([plan.own[u]] + [plan.own[q][plan.boundary[u][q]] for q in plan.deps[u]])
    out = np.zeros((m.shape[0], len(x0)), np.float64)
    rows = np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))
    np.add.at(out, (rows, cols[m.indices]), m.data)
    return out


@pytest.mark.parametrize("max_rows", [50, 230])
def test_offload_gradients_over_cut_or_grouped_units_match_in_memory(tmp_path, max_rows, monkeypatch):
    monkeypatch.setattr(source_mod, "MAX_CUT_HALO", 10.0)
    store = PartitionStore(make_store(tmp_path, n=400, parts=4)[2])
    g, _ = load_store_graph(store)
    m0, spec = model("gcn", 20, 4)
    loss0 = InMemoryTrainer(spec, g, m0, 7).step(0)
    units = make_units(store, max_rows)
    assert len(units) > 4 if max_rows == 50 else len(units) < 4
    m1, _ = model("gcn", 20, 4)
    with OffloadStore(cache_bytes=8 << 10, spill_dir=str(tmp_path), policy="belady") as st:
        # the units' matrices in files, as `argosy train` keeps them on the CPU
        plan = plan_from_store(store, "gcn", units, matrix_dir=str(tmp_path))
        loss1 = OffloadTrainer(spec, plan, StoreSource(store, units=units), st, m1, seed=7).step(0)
    assert abs(loss1 - loss0) <= 1e-5 * abs(loss0)
    g0, g1 = flat_grads(m0), flat_grads(m1)
    assert max(float((g1[k] - g0[k]).norm() / g0[k].norm()) for k in g0) <= 1e-5


_FULL_DISK = """
import sys, numpy as np
from argosy.services.trainer.fullgraph.kernels import CSRFiles, csr_from_coo
from argosy.shared.errors import DiskBudgetError
rng = np.random.default_rng(0)
m = csr_from_coo(rng.integers(0, 100, 20000), rng.integers(0, 100, 20000), np.ones(20000, np.float32), (100, 100))
try:
    CSRFiles(sys.argv[1], "matrix").append(m)  # 240 KB of arrays into a 64 KiB disk
    print("written")
except DiskBudgetError as e:
    print("full", "disk full while writing the aggregation matrices" in str(e))
"""


def test_matrix_files_on_a_full_disk_say_so(tmp_path):
    """A real ENOSPC (a 64 KiB tmpfs in a user namespace) while the plan's matrices are written: a
    DiskBudgetError naming the directory (np.save's own write reports it without an errno)."""
    r = run_on_full_disk(tmp_path, "64k", _FULL_DISK)
    assert r.stdout.split() == ["full", "True"], r.stdout + r.stderr
