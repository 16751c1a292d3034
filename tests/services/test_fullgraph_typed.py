"""R-GCN in the full-graph modes on a typed store: the in-memory, offloaded and SAR runs compute the
mini-batch model's function and gradients, with the store's features and with the featureless (one-hot
input) first layer whose learned rows are parameters."""
from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np
import pytest
import torch

from argosy.services.offload.store import OffloadStore
from argosy.services.trainer.fullgraph.fullgraph import OffloadTrainer
from argosy.services.trainer.fullgraph.graph import build_plan, load_store_graph
from argosy.services.trainer.fullgraph.inmemory import InMemoryTrainer
from argosy.services.trainer.fullgraph.model import flat_grads, full_graph_model, full_graph_optimizer
from argosy.services.trainer.fullgraph.sar import SARJob, launch_sar_jobs
from argosy.services.trainer.fullgraph.source import StoreSource, make_units, plan_from_store
from argosy.shared.config import FullGraphConfig, JobConfig, LinkConfig, SamplerConfig, TrainerConfig
from argosy.shared.errors import ConfigError
from argosy.shared.graphio.typed import TypedGraph
from argosy.shared.models import Blocks
from argosy.shared.store.reader import PartitionStore
from argosy.shared.store.typed import write_typed_store

TOL = 1e-5


def typed_graph(featureless: bool, seed: int = 0) -> TypedGraph:
    """Two types, three relations (six with the reverse ones), a pair linked by two relations."""
    rng = np.random.default_rng(seed)
    n = {"a": 80, "b": 50}
    rels = [("a", "x", "b"), ("b", "y", "a"), ("a", "z", "a")]
    edges = {r: (rng.integers(0, n[r[0]], 260), rng.integers(0, n[r[2]], 260)) for r in rels}
    edges[("a", "x", "b")][0][0], edges[("a", "x", "b")][1][0] = 1, 5
    edges[("a", "z", "a")][0][0], edges[("a", "z", "a")][1][0] = 1, 55   # ids of b are 80.., so (1, 5) twice
    idx = np.arange(80)
    feats = {} if featureless else {"a": np.abs(rng.normal(size=(80, 10))).astype(np.float32),
                                    "b": np.abs(rng.normal(size=(50, 4))).astype(np.float32)}
    return TypedGraph(node_types=["a", "b"], num_nodes=n, relations=rels, edges=edges, target="a",
                      labels=rng.integers(0, 3, 80), train_mask=idx < 40, val_mask=(idx >= 40) & (idx < 60),
                      test_mask=idx >= 60, features=feats)


@pytest.fixture(scope="module", params=["features", "featureless"])
def store(request, tmp_path_factory):
    tg = typed_graph(request.param == "featureless")
    owner = (np.arange(tg.total_nodes) * 7 % 4).astype(np.int32)    # every part borders every other
    path = tmp_path_factory.mktemp("typed") / request.param
    write_typed_store(tg, owner, path, num_parts=4)
    return str(path)


def cfg(dropout: float = 0.0, bases: int = 2) -> TrainerConfig:
    return TrainerConfig(model="rgcn", hidden=8, dropout=dropout, num_bases=bases)


def rgcn(st: PartitionStore, layers: int = 2, dropout: float = 0.0, bases: int = 2, seed: int = 5):
    m = st.manifest
    return full_graph_model(cfg(dropout, bases), m.feature_dim, m.num_classes, layers, seed, "cpu", m.num_relations,
                            m.num_nodes)


def rel_err(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).norm() / b[k].norm().clamp_min(1e-30)) for k in b)


@pytest.mark.parametrize("layers", [2, 3])
@pytest.mark.parametrize("bases", [0, 2])
def test_rgcn_full_graph_logits_equal_mini_batch_logits(store, layers, bases):
    """The mini-batch R-GCN on blocks holding every neighbour (its own per-edge relation code path) and the
    whole-graph operator path give the same logits, features or featureless."""
    st = PartitionStore(store)
    g, _ = load_store_graph(st)
    m, spec = rgcn(st, layers, bases=bases)
    assert spec.aggr == "relation_mean" and spec.relations == 6 and spec.learned_input == (st.manifest.feature_dim == 0)
    m.eval()
    full = InMemoryTrainer(spec, g, m).forward(0, training=False)
    blocks = Blocks.full_graph(g.indptr, g.indices, layers, edge_type=g.extra["edge_type"])
    x = torch.from_numpy(g.features)
    with torch.no_grad():
        mini = m(x, blocks, torch.arange(g.num_nodes)) if spec.learned_input else m(x, blocks)
    assert mini.shape == full.shape == (g.num_nodes, 3)
    torch.testing.assert_close(full.detach(), mini, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("units", ["store", "pieces", "whole-graph plan"])
def test_rgcn_offload_gradients_match_in_memory(store, tmp_path, units, monkeypatch):
    """Offloaded R-GCN (the store's 4 parts, those parts cut into 8 pieces, or the plan of the graph held
    whole) under a cache far smaller than its activations: the in-memory loss and gradients, the
    featureless layer's learned table included."""
    st = PartitionStore(store)
    g, owner = load_store_graph(st)
    m0, spec = rgcn(st, 3)
    loss0 = InMemoryTrainer(spec, g, m0, 7).step(0)
    g0 = flat_grads(m0)
    monkeypatch.setattr("argosy.services.trainer.fullgraph.source.MAX_CUT_HALO", 10.0)  # a random graph's cut
    unit_list = make_units(st, 20) if units == "pieces" else None
    if unit_list is not None:
        assert len(unit_list) == 8 and all(rows is not None for _, rows in unit_list)
    plan = build_plan(g, owner, spec.aggr) if units == "whole-graph plan" else plan_from_store(st, spec.aggr, unit_list)
    assert plan.relations == 6 and plan.matrix[0].shape[0] == 6 * plan.part_sizes()[0]
    m1, _ = rgcn(st, 3)
    with OffloadStore(cache_bytes=4 << 10, spill_dir=str(tmp_path), policy="belady") as os_:
        off = OffloadTrainer(spec, plan, StoreSource(st, units=unit_list), os_, m1, seed=7)
        loss1 = off.step(0)
        stats = os_.stats()
    assert abs(loss1 - loss0) <= 1e-5 * abs(loss0)
    assert rel_err(flat_grads(m1), g0) <= TOL
    assert stats["bytes_written"] > 0 and stats["unplanned_accesses"] == 0


def test_rgcn_offload_dropout_training_matches_in_memory(store, tmp_path):
    """Dropout on, one part (the in-memory run's masks): two Adam steps give the same parameters,
    learned input rows included, and the same evaluation."""
    st = PartitionStore(store)
    g, _ = load_store_graph(st)
    (m0, spec), (m1, _) = rgcn(st, dropout=0.5), rgcn(st, dropout=0.5)
    ref = InMemoryTrainer(spec, g, m0, seed=3)
    one = build_plan(g, np.zeros(g.num_nodes, np.int32), spec.aggr)   # rows in global id order, as in memory
    with OffloadStore(cache_bytes=4 << 10, spill_dir=str(tmp_path), policy="lru") as os_:
        off = OffloadTrainer(spec, one, g, os_, m1, seed=3)
        o0, o1 = full_graph_optimizer(m0, cfg(0.5)), full_graph_optimizer(m1, cfg(0.5))
        for epoch in range(2):
            for o in (o0, o1):
                o.zero_grad()
            l0, l1 = ref.step(epoch), off.step(epoch)
            assert abs(l0 - l1) <= 1e-5 * abs(l0)
            assert rel_err(flat_grads(m1), flat_grads(m0)) <= TOL
            o0.step()
            o1.step()
        acc = off.evaluate()
    want = ref.evaluate()
    assert acc["test_accuracy"] == pytest.approx(want["test_accuracy"]) and acc["val_loss"] == pytest.approx(want["val_loss"], rel=1e-5)
    for a, b in zip(m0.parameters(), m1.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.integration
def test_rgcn_sar_gradients_match_in_memory(tmp_path, tmp_path_factory):
    """SAR over N = 1, 2, 4 workers (one spawn), each opening only its parts: the in-memory gradients on
    every rank, for the store's features and for the featureless layer (its table all-reduced)."""
    fg = json.dumps(asdict(FullGraphConfig(mode="sar")))
    jobs, refs, cases = [], [], []
    for kind in ("features", "featureless"):
        tg = typed_graph(kind == "featureless")
        path = tmp_path / kind
        write_typed_store(tg, (np.arange(tg.total_nodes) * 7 % 4).astype(np.int32), path, num_parts=4)
        st = PartitionStore(path)
        g, _ = load_store_graph(st)
        m, spec = rgcn(st, 3)
        loss = InMemoryTrainer(spec, g, m, 5).step(0)
        for workers in (1, 2, 4):
            job = JobConfig(store=str(path), seed=5, num_trainers=workers,
                            sampler=SamplerConfig(fanouts=(-1, -1, -1), eval_fanouts=(-1, -1, -1)), trainer=cfg())
            jobs.append(SARJob(job.to_json(), fg, workers, str(tmp_path / f"{kind}{workers}"), task="grads"))
            refs.append((loss, flat_grads(m)))
            cases.append((kind, workers))
    for case, job, res, (loss0, g0) in zip(cases, jobs, launch_sar_jobs(jobs), refs):
        assert abs(res["loss"] - loss0) <= 1e-5 * abs(loss0), case
        for rank in range(case[1]):
            z = np.load(f"{job.out_dir}/grads_{rank}.npz")
            assert set(z.files) == set(g0), case
            for k, ref in g0.items():
                err = float(np.linalg.norm(z[k] - ref.numpy()) / max(float(ref.norm()), 1e-30))
                assert err <= TOL, (case, k, rank, err)


def test_rgcn_refusals(store, tmp_path):
    """What the full-graph modes do not run is one ConfigError line each."""
    st = PartitionStore(store)
    m = st.manifest
    with pytest.raises(ConfigError, match="--node-embeddings 16: the full-graph modes do not learn input rows"):
        full_graph_model(cfg(), m.feature_dim, m.num_classes, 2, 0, "cpu", m.num_relations, m.num_nodes, 16)
    with pytest.raises(ConfigError, match="--model rgcn needs a typed store"):
        full_graph_model(cfg(), 8, 3, 2, 0, "cpu", 0, 100)
    with pytest.raises(ConfigError, match="--model gcn in the full-graph modes needs node features"):
        full_graph_model(TrainerConfig(model="gcn"), 0, 3, 2, 0, "cpu", m.num_relations, m.num_nodes)
    with pytest.raises(ConfigError, match="rgat cannot run in the full-graph modes"):
        full_graph_model(TrainerConfig(model="rgat"), 8, 3, 2, 0, "cpu", m.num_relations, m.num_nodes)
    assert LinkConfig().node_embeddings is None      # the default: no learned rows asked for


def test_relation_kernels_equal_the_relation_major_operator():
    """``spmm_relation`` (messages into destinations, reading the row layout in place) and its transpose
    equal the relation-major matrix (what ``torch.sparse`` multiplies off the CPU) and its transpose."""
    from argosy.services.trainer.fullgraph.kernels import (csr_from_coo, relation_columns, spmm, spmm_relation,
                                                           spmm_relation_t)
    rng = np.random.default_rng(0)
    m, k, R, O, e = 7, 11, 3, 4, 60
    a = csr_from_coo(rng.integers(0, m * R, e), rng.integers(0, k, e), rng.random(e).astype(np.float32), (m * R, k))
    c = relation_columns(a, R)
    assert c.shape == (m, k * R) and c.nnz == a.nnz
    y, g = torch.randn(k, R * O), torch.randn(m, O)
    want = spmm(c, y.reshape(k * R, O))
    torch.testing.assert_close(spmm_relation(a, y, R), want)
    torch.testing.assert_close(spmm_relation(a, y, R, out=torch.ones(m, O)), want + 1)
    torch.testing.assert_close(spmm_relation_t(a.transpose(), g, R), spmm(c.transpose(), g).reshape(k, R * O))


@pytest.mark.integration
def test_rgcn_fullgraph_and_sar_through_the_cli(tmp_path):
    """``argosy train --mode fullgraph`` partitions a typed directory (mag-like: features on papers, three
    featureless types) and trains R-GCN; SAR on the same store follows the same trajectory; ``argosy
    predict`` reproduces the run's test accuracy from ``best.pt``; RGAT is one line, exit 2."""
    import subprocess
    import sys

    from argosy.shared.graphio.typed_dir import save_typed_dir
    from argosy.shared.synthetic_hetero import mag_like

    save_typed_dir(mag_like(num_papers=400, seed=0), tmp_path / "mag")

    def launch(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "argosy.services.launch", *args], capture_output=True,
                              text=True, timeout=600)

    def train(*args: str) -> dict:
        p = launch("train", *args, "--epochs", "12", "--json")
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads(p.stdout.strip().splitlines()[-1])

    fg = train("--data", str(tmp_path / "mag"), "--mode", "fullgraph", "--parts", "4", "--run-dir", str(tmp_path / "fg"))
    assert fg["model"] == "rgcn" and fg["parts"] >= 1 and fg["epochs"] >= 1
    store = str(tmp_path / "fg" / "store")
    sar = train("--store", store, "--mode", "sar", "--trainers", "2", "--run-dir", str(tmp_path / "sar"))
    assert sar["test_accuracy"] == pytest.approx(fg["test_accuracy"]) and sar["best_epoch"] == fg["best_epoch"]
    p = launch("predict", str(tmp_path / "fg"), "--out", str(tmp_path / "p.npz"), "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    pred = json.loads(p.stdout.strip().splitlines()[-1])
    assert pred["test_accuracy"] == pytest.approx(fg["test_accuracy"])
    p = launch("train", "--store", store, "--mode", "sar", "--model", "rgat", "--run-dir", str(tmp_path / "rgat"))
    errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert len(errors) == 1 and "rgat cannot run in the full-graph modes" in errors[0], p.stderr


def test_units_are_sized_by_rgcn_relation_wide_tensors():
    """A unit's rows times R-GCN's widest per-row tensor (its R-wide aggregate or messages) fit the share
    of the cache a unit may take, as a GCN unit's rows times its widest layer do."""
    from argosy.services.trainer.fullgraph.budget import UNIT_FRACTION, unit_rows
    from argosy.services.trainer.fullgraph.model import ModelSpec
    aifb = ModelSpec("rgcn", (496, 16, 4), relations=90, learned_input=True)   # featureless: 90 x 16 messages
    assert aifb.row_width == 90 * 16 and unit_rows(16 << 20, aifb) == int(UNIT_FRACTION * (16 << 20)) // (4 * 1440)
    assert ModelSpec("rgcn", (128, 16, 16), relations=8).row_width == 128
    assert ModelSpec("gcn", (128, 16, 4)).row_width == 128
