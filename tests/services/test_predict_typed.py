"""`argosy predict` on typed (heterogeneous) runs: the R-GCN rebuilt exactly as trained (relations
from the store, a featureless first layer or learned input rows read from the checkpoint), run
layer by layer with each neighbour's relation, equals training's evaluation (fanouts -1); a real
run's test accuracy is reproduced; a knowledge-graph run is refused or written as its tables."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import argosy.fullnbr as fullnbr
import argosy.inference as inference
from argosy.shared.config import JobConfig, LinkConfig, SamplerConfig, TrainerConfig
from argosy.shared.errors import ArgosyError
from argosy.shared.models import EmbeddedInput, GNN
from argosy.shared.store import PartitionStore
from argosy.shared.store.typed import write_typed_store
from argosy.shared.synthetic_hetero import mag_like
from argosy.services.loader.core import LoaderCore
from argosy.services.sampler.core import SamplerCore
from argosy.services.trainer.core import TrainerCore

ROOT = Path(__file__).resolve().parents[2]


def _typed_store(path: Path, features: bool, num_papers: int = 300, parts: int = 3) -> PartitionStore:
    """A small ogbn-mag-shaped typed store (4 relations and their reverses); ``features=False``:
    no type has features (the R-GCN's inputs are learned)."""
    tg = mag_like(num_papers=num_papers, num_classes=4, feature_dim=12, seed=1)
    if not features:
        tg.features = {}
    assign = np.random.default_rng(0).integers(0, parts, tg.total_nodes)
    write_typed_store(tg, assign, path, num_parts=parts)
    return PartitionStore(path)


def _fake_run(tmp_path: Path, store: PartitionStore, node_embeddings: int | None, num_bases: int,
              model: str = "rgcn"):
    """A run directory as the trainer leaves it (best.pt of ``user_model()``) for a relational model
    (R-GCN, or RGAT with 2 heads) built by :class:`TrainerCore` on ``store``."""
    m = store.manifest
    cfg = JobConfig(store=str(store.root), sampler=SamplerConfig(fanouts=(4, 4)),
                    trainer=TrainerConfig(model=model, hidden=6, dropout=0.3, num_bases=num_bases, heads=2,
                                          normalize_features=False),
                    link=LinkConfig(node_embeddings=node_embeddings))
    core = TrainerCore(cfg.trainer, m.feature_dim, m.num_classes, num_layers=2, seed=3, link=cfg.link,
                       num_nodes=m.num_nodes, num_relations=m.num_relations, feature_layout=store.features)
    with torch.no_grad():                      # non-trivial learned rows and biases
        for p in core.model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    run = tmp_path / "run"
    run.mkdir()
    torch.save({"format": 1, "model": core.user_model().state_dict(), "epoch": 0, "val_accuracy": 0.0,
                "test_accuracy": 0.0, "spec": cfg.to_json(), "in_dim": m.feature_dim, "num_classes": m.num_classes,
                "num_layers": 2, "store": str(store.root)}, run / "best.pt")
    return core, run


def _full_neighbourhood_logits(core: TrainerCore, store: PartitionStore) -> np.ndarray:
    """Training's evaluation forward (sampler and loader, fanouts -1) on every vertex."""
    seeds = np.arange(store.manifest.num_nodes)
    b = core._device_batch(LoaderCore(store).load(SamplerCore(store).sample(seeds, (-1, -1), 0)))
    core.model.eval()
    with torch.no_grad():
        return (core.model(b.x, b.blocks, b.ids) if b.ids is not None else core.model(b.x, b.blocks)).numpy()


@pytest.mark.parametrize("model,features,node_embeddings,num_bases", [
    ("rgcn", True, 0, 3),            # features only, basis decomposition
    ("rgcn", True, 5, 0),            # features + learned rows, one matrix per relation
    ("rgcn", False, None, 3),        # featureless: the one-hot-equivalent first layer, decomposed
    ("rgcn", False, None, 0),        # featureless, one matrix per relation
    ("rgcn", False, 7, 3),           # no features, --node-embeddings 7: learned rows into an ordinary first layer
    ("rgat", True, 0, 3),            # relational attention, 2 heads, decomposed
    ("rgat", False, 7, 0),           # on learned rows, one matrix per relation
])
def test_layerwise_rgcn_equals_full_neighbourhood_forward(tmp_path, monkeypatch, model, features, node_embeddings,
                                                          num_bases):
    store = _typed_store(tmp_path / "store", features)
    monkeypatch.setattr(fullnbr, "_CHUNK_NODES", 37)            # many chunks per part
    monkeypatch.setattr(fullnbr, "_CHUNK_EDGES", 300)
    monkeypatch.setattr(fullnbr, "_RGCN_FLOATS", 2000)          # and the R-GCN's own, smaller ones
    core, run = _fake_run(tmp_path, store, node_embeddings, num_bases, model)
    featureless = not features and node_embeddings is None and model == "rgcn"
    inner = core.model.model if isinstance(core.model, EmbeddedInput) else core.model
    assert getattr(inner.layers[0], "featureless", False) == featureless
    res = inference.predict_store(run, tmp_path / "p.npz", embeddings=True)
    want = _full_neighbourhood_logits(core, store)
    with np.load(tmp_path / "p.npz") as z:
        np.testing.assert_allclose(z["logits"], want, rtol=1e-4, atol=1e-5)
        assert z["embeddings"].shape == (store.manifest.num_nodes, 6 * (2 if model == "rgat" else 1))
        offs, names = z["type_offsets"], list(z["node_types"])       # each row's type, for per-type slices
        assert names == store.manifest.typed["node_types"] and offs[-1] == store.manifest.num_nodes
        assert (z["node_type"][offs[1]:offs[2]] == 1).all() and (np.diff(z["node_type"]) >= 0).all()
    test = store.split_nodes("test")
    labels = np.full(store.manifest.num_nodes, -1)
    for p in range(store.num_parts):
        pd = store.part(p)
        labels[np.asarray(pd.nodes)] = np.asarray(pd.labels)
    assert res["test_accuracy"] == pytest.approx(float((want.argmax(1)[test] == labels[test]).mean()))

    model = inference.load_model(run)                 # the trained model, as the trainer held it
    assert type(model) is type(core.model) and not model.training
    for k, v in core.model.state_dict().items():
        torch.testing.assert_close(model.state_dict()[k], v)
    assert model.argosy_info["num_relations"] == store.manifest.num_relations == 8
    assert model.argosy_info["featureless"] == featureless


def test_relations_come_from_the_store_and_must_agree(tmp_path):
    store = _typed_store(tmp_path / "store", True)
    _, run = _fake_run(tmp_path, store, 0, 3)
    model, info = inference.load_checkpoint(run)
    assert isinstance(model, GNN) and info["num_relations"] == 8
    other = _typed_store(tmp_path / "other", True)
    m = json.loads((other.root / "manifest.json").read_text())
    m["typed"]["relations"] = m["typed"]["relations"][:3]       # a store whose relations differ
    (other.root / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ArgosyError, match=r"3 relations, the checkpoint's R-GCN has \[8\]"):
        inference.predict_store(run, tmp_path / "p.npz", store=other.root)


@pytest.mark.parametrize("features", [True, False])
def test_link_rgcn_encoder_embeddings_equal_full_neighbourhood_forward(tmp_path, monkeypatch, features):
    """A link run with an R-GCN encoder on a typed store: rebuilt with the store's relations, its
    embeddings (and scores of given pairs) are the encoder on full neighbourhoods with relations."""
    from argosy.linkpredict import predict_links
    store = _typed_store(tmp_path / "store", features)
    monkeypatch.setattr(fullnbr, "_CHUNK_NODES", 53)
    m = store.manifest
    cfg = JobConfig(store=str(store.root), sampler=SamplerConfig(fanouts=(4, 4)),
                    trainer=TrainerConfig(model="rgcn", hidden=6, dropout=0.3, num_bases=3, task="link",
                                          normalize_features=False),
                    link=LinkConfig(node_embeddings=None if features else 5))
    core = TrainerCore(cfg.trainer, m.feature_dim, m.num_classes, num_layers=2, seed=3, link=cfg.link,
                       num_nodes=m.num_nodes, num_relations=m.num_relations, feature_layout=store.features)
    run = tmp_path / "run"
    run.mkdir()
    torch.save({"format": 1, "model": core.user_model().state_dict(), "epoch": 0, "val_accuracy": 0.0,
                "test_accuracy": 0.0, "spec": cfg.to_json(), "in_dim": m.feature_dim, "num_classes": 6,
                "num_layers": 2, "store": str(store.root), "metrics": None}, run / "best.pt")
    pairs = np.random.default_rng(1).integers(0, m.num_nodes, (50, 2))
    np.save(tmp_path / "pairs.npy", pairs)
    predict_links(run, tmp_path / "s.npz", edges=tmp_path / "pairs.npy", embeddings=True)
    b = core._device_batch(LoaderCore(store).load(SamplerCore(store).sample(np.arange(m.num_nodes), (-1, -1), 0)))
    core.model.eval()
    with torch.no_grad():
        z = core.model.embed(b.x, b.blocks, b.ids)
        want = core.model.score(z, torch.from_numpy(pairs)).numpy()
    with np.load(tmp_path / "s.npz") as out:
        np.testing.assert_allclose(out["embeddings"], z.numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(out["scores"], want, rtol=1e-4, atol=1e-5)


def _cli(*args: str, timeout: int = 600) -> dict:
    p = subprocess.run([sys.executable, "-m", "argosy.services.launch", *args, "--json"], cwd=ROOT,
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("features", [False, True])
def test_predict_reproduces_a_typed_runs_test_accuracy(tmp_path, features):
    """Real processes: train an R-GCN for 3 epochs on a typed store (featureless: the one-hot input
    layer; with features: plus 8 learned columns per vertex), then `argosy predict` the run."""
    store = _typed_store(tmp_path / "store", features, num_papers=1000, parts=2)
    run = tmp_path / "run"
    extra = ["--node-embeddings", "8"] if features else []
    res = _cli("train", "--store", str(store.root), "--model", "rgcn", "--epochs", "3", "--patience", "10",
               "--fanouts", "8,8", "--batch-size", "256", "--run-dir", str(run), *extra)
    assert res["seeds_trained"] == res["seeds_planned"]
    out = _cli("predict", str(run), "--out", str(tmp_path / "p.npz"), "--embeddings")
    assert out["run_test_accuracy"] == res["test_accuracy"]
    assert out["test_accuracy"] == pytest.approx(res["test_accuracy"], abs=1e-12)
    with np.load(tmp_path / "p.npz") as z:
        n = store.manifest.num_nodes
        assert z["logits"].shape == (n, 4) and z["embeddings"].shape[0] == n
        assert len(np.unique(z["pred"][store.split_nodes("test")])) > 1     # not a constant answer
    model = inference.load_model(run)
    assert isinstance(model, EmbeddedInput)
    assert model.model.layers[0].featureless == (not features)


def test_knowledge_graph_run_predicts_its_test_triples_and_writes_its_tables(tmp_path):
    """A knowledge-graph link run (KGModel, no encoder): predict ranks the store's test triples by
    training's filtered protocol (the same MRR), ``--embeddings`` writes the entity and relation
    tables, ``--edges`` (pairs without relations) is one clear error."""
    rng = np.random.default_rng(0)
    n, R = 120, 3
    h = rng.integers(0, n, 1500)
    r = rng.integers(0, R, 1500)
    t = (h * (r + 2) + r) % n                                # a rule per relation, learnable
    tr = np.unique(np.stack([h, r, t], 1), axis=0)
    tr = tr[rng.permutation(len(tr))]
    d = tmp_path / "kg"
    d.mkdir()
    for split, part in (("train", tr[:-200]), ("valid", tr[-200:-100]), ("test", tr[-100:])):
        (d / f"{split}.txt").write_text("".join(f"e{a}\tr{b}\te{c}\n" for a, b, c in part))
    run = tmp_path / "run"
    res = _cli("train", "--data", str(d), "--parts", "2", "--epochs", "1", "--run-dir", str(run))
    assert res["task"] == "link" and "test_mrr" in res
    out = _cli("predict", str(run), "--out", str(tmp_path / "p.npz"), "--embeddings")
    assert out["kg"] and out["pairs"] == 100
    assert out["test_mrr"] == pytest.approx(res["test_mrr"], abs=1e-12) == out["run_test_mrr"]
    assert out["test_hits10"] == pytest.approx(res["test_hits10"], abs=1e-12)
    with np.load(tmp_path / "p.npz") as z:
        assert z["triples"].shape == (100, 3) and z["scores"].shape == (100,)
        dim = LinkConfig().kg_dim
        assert z["embeddings"].shape == (n, dim) and z["relations"].shape == (2 * R, dim)
    model = inference.load_model(run)
    torch.testing.assert_close(model.embedding.table.weight, torch.from_numpy(np.load(tmp_path / "p.npz")["embeddings"]))
    np.save(tmp_path / "pairs.npy", np.array([[0, 1]]))
    p = subprocess.run([sys.executable, "-m", "argosy.services.launch", "predict", str(run), "--out",
                        str(tmp_path / "q.npz"), "--edges", str(tmp_path / "pairs.npy")], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "triples, not pairs" in p.stderr


HETERO_MODULE = '''
import torch
from torch_geometric.nn import SAGEConv, to_hetero


class SAGE2(torch.nn.Module):
    def __init__(self, hidden, out):
        super().__init__()
        self.conv1 = SAGEConv((-1, -1), hidden)
        self.conv2 = SAGEConv((-1, -1), out)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def hetero_sage(in_channels, hidden_channels, num_layers, out_channels, metadata):
    return to_hetero(SAGE2(hidden_channels, out_channels), metadata, aggr="sum")
'''


def test_pyg_to_hetero_model_trains_and_predicts_through_module_factory(tmp_path, monkeypatch):
    """A user's PyG ``to_hetero`` model through ``--model MODULE:FACTORY``: the factory gets the typed
    store's metadata, each batch is split by node type and relation, a training step lowers the loss,
    and ``predict`` gives exactly training's full-neighbourhood evaluation for every vertex."""
    pytest.importorskip("torch_geometric")
    from argosy.shared.usermodel import record_source, with_cwd_on_path
    d = tmp_path / "project"
    d.mkdir()
    (d / "my_hetero.py").write_text(HETERO_MODULE)
    monkeypatch.chdir(d)
    sys.modules.pop("my_hetero", None)
    store = _typed_store(tmp_path / "store", features=True)
    m = store.manifest
    cfg = JobConfig(store=str(store.root), sampler=SamplerConfig(fanouts=(4, 4)),
                    trainer=TrainerConfig(model="my_hetero:hetero_sage", hidden=8, dropout=0.0, lr=0.01,
                                          normalize_features=False))
    with with_cwd_on_path():
        core = TrainerCore(cfg.trainer, m.feature_dim, m.num_classes, num_layers=2, seed=3, typed=m.typed,
                           feature_layout=store.features)
    assert core.model.metadata is not None and core.type_offsets is not None
    target = np.asarray(store.split_nodes("train"))
    fb = LoaderCore(store).load(SamplerCore(store).sample(target[:64], (4, 4), 1))
    losses = [core.train_step(fb)["loss"] for _ in range(15)]
    assert losses[-1] < losses[0]
    run = tmp_path / "run"
    record_source(run, cfg.trainer.model)
    torch.save({"format": 1, "model": core.user_model().state_dict(), "epoch": 0, "val_accuracy": 0.0,
                "test_accuracy": 0.0, "spec": cfg.to_json(), "in_dim": m.feature_dim, "num_classes": m.num_classes,
                "num_layers": 2, "store": str(store.root)}, run / "best.pt")
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("my_hetero", None)
    inference.predict_store(run, tmp_path / "p.npz")
    seeds = np.arange(m.num_nodes)
    sb = SamplerCore(store).sample(seeds, (-1, -1, -1), 0)        # fanouts_for(val): one more full hop
    b = core._device_batch(LoaderCore(store).load(sb))
    core.model.eval()
    with torch.no_grad():
        want = core.model(b.x, b.blocks).numpy()
    with np.load(tmp_path / "p.npz") as z:
        np.testing.assert_allclose(z["logits"], want, rtol=1e-4, atol=1e-5)
