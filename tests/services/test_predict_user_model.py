"""A user's model after training: `predict` imports its module from the run directory's record,
gives exactly the logits training's evaluation gave (a PyG GCN counts degrees in the subgraph it
is handed: evaluation and prediction both add the in-edges of the outermost hop), and embeddings
follow the documented convention (the input of the last layer)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import torch

import argosy.inference as inference
from argosy.shared.config import JobConfig, SamplerConfig, TrainerConfig
from argosy.shared.errors import ConfigError
from argosy.shared.store import PartitionStore
from argosy.shared.usermodel import embedding_module, record_source, with_cwd_on_path
from argosy.services.loader.core import LoaderCore
from argosy.services.sampler.core import SamplerCore
from argosy.services.trainer.core import TrainerCore

pytest.importorskip("torch_geometric")

USER_MODULE = '''
import torch
from torch_geometric.nn import GCNConv


class TwoLayerGCN(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, num_layers, out_channels):
        super().__init__()
        self.conv1 = GCNConv(in_channels, hidden_channels)
        self.conv2 = GCNConv(hidden_channels, out_channels)

    def forward(self, x, edge_index):
        return self.conv2(torch.relu(self.conv1(x, edge_index)), edge_index)
'''


def _run(tmp_path, store_path, model: str):
    """A run directory as `argosy train` leaves it: best.pt and, for MODULE:FACTORY, model.json."""
    cfg = JobConfig(store=str(store_path), sampler=SamplerConfig(fanouts=(5, 5)),
                    trainer=TrainerConfig(model=model, hidden=8, dropout=0.0, normalize_features=False))
    with with_cwd_on_path():                              # as a service started by `python -m` imports it
        core = TrainerCore(cfg.trainer, 16, 4, num_layers=2, seed=3)
    run = tmp_path / "run"
    record_source(run, model)
    torch.save({"format": 1, "model": core.user_model().state_dict(), "epoch": 0, "val_accuracy": 0.0,
                "test_accuracy": 0.0, "spec": cfg.to_json(), "in_dim": 16, "num_classes": 4, "num_layers": 2,
                "store": str(store_path)}, run / "best.pt")
    return cfg, core, run


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    d = tmp_path / "project"
    d.mkdir()
    (d / "my_gcn.py").write_text(USER_MODULE)
    monkeypatch.chdir(d)                                  # `argosy train` is run next to the module
    sys.modules.pop("my_gcn", None)
    yield "my_gcn:TwoLayerGCN"
    sys.modules.pop("my_gcn", None)


def _eval_logits(core, store, seeds, fanouts):
    fb = LoaderCore(store).load(SamplerCore(store).sample(seeds, fanouts, 0))
    x, blocks, _ = core.to_device(fb)
    core.model.eval()
    with torch.no_grad():
        return core.model(x, blocks).numpy()


def test_predict_equals_training_evaluation_for_a_degree_normalising_user_model(small_store, tmp_path, user_module,
                                                                                 monkeypatch):
    g, path = small_store
    cfg, core, run = _run(tmp_path, path, user_module)
    store = PartitionStore(path)
    monkeypatch.chdir(tmp_path)                           # predict from elsewhere: model.json finds the module
    sys.modules.pop("my_gcn", None)
    res = inference.predict_store(run, tmp_path / "p.npz", embeddings=True)
    with np.load(tmp_path / "p.npz") as z:
        logits, emb = z["logits"], z["embeddings"]
    test = np.flatnonzero(g.test_mask)
    for chunk in (test[:40], test[40:200]):               # training evaluates test seeds in batches
        want = _eval_logits(core, store, chunk, cfg.fanouts_for("test"))
        np.testing.assert_allclose(logits[chunk], want, rtol=1e-4, atol=1e-5)
        # the cause of 0.850 vs 0.843: without the extra hop, the outer vertices' degrees are wrong
        # and each seed's logits depend on which seeds share its batch
        assert not np.allclose(_eval_logits(core, store, chunk, cfg.sampler.eval_fanouts), want, atol=1e-3)
    assert cfg.fanouts_for("test") == (-1, -1, -1) and cfg.fanouts_for("train") == (5, 5)
    assert res["test_accuracy"] == pytest.approx(float((logits.argmax(1)[test] == g.labels[test]).mean()))
    # embeddings: the input of the last layer (conv2), i.e. relu(conv1(x)) on the whole graph
    assert emb.shape == (g.num_nodes, 8)
    full = _eval_logits(core, store, np.arange(g.num_nodes), (-1, -1, -1))
    np.testing.assert_allclose(logits, full, rtol=1e-4, atol=1e-5)
    model = core.user_model().eval()
    seen = []
    h = embedding_module(model).register_forward_pre_hook(lambda m, a: seen.append(a[0]))
    _eval_logits(core, store, np.arange(g.num_nodes), (-1, -1, -1))
    h.remove()
    np.testing.assert_allclose(emb, seen[-1][:g.num_nodes].numpy(), rtol=1e-4, atol=1e-5)


def test_predict_says_when_the_recorded_module_is_gone(small_store, tmp_path, user_module):
    _, path = small_store
    _, _, run = _run(tmp_path, path, user_module)
    os.remove(tmp_path / "project" / "my_gcn.py")
    sys.modules.pop("my_gcn", None)
    with pytest.raises(ConfigError, match=r"the model's module 'my_gcn' was imported from .*my_gcn.py, which no "
                                          r"longer exists"):
        inference.predict_store(run, tmp_path / "p.npz")


def test_embedding_convention():
    from torch_geometric.nn.models import GraphSAGE
    m = GraphSAGE(4, 8, 2, 3)
    assert embedding_module(m) is m.convs[-1]
    m = GraphSAGE(4, 8, 2, 3, jk="cat")
    assert embedding_module(m) is m.lin
    m.argosy_embedding = "convs.0"
    assert embedding_module(m) is m.convs[0]
    m.argosy_embedding = "nope"
    with pytest.raises(ConfigError, match=r"GraphSAGE.argosy_embedding = 'nope' names no submodule"):
        embedding_module(m)
