"""Built-in GAT against a dense formula; PyG-style models on the sampled subgraph; factory errors."""
import numpy as np
import pytest
import torch

from argosy.shared.config import TrainerConfig
from argosy.shared.models import GATConv, GNN, EdgeIndexModel, build_model
from argosy.shared.store import PartitionStore
from argosy.services.loader.core import LoaderCore
from argosy.services.sampler.core import SamplerCore
from argosy.services.trainer.core import TrainerCore


def _dense_adj(g):
    n = g.num_nodes
    A = torch.zeros(n, n)
    rows = np.repeat(np.arange(n), np.diff(g.indptr))
    A[torch.from_numpy(rows), torch.from_numpy(g.indices.astype(np.int64))] = 1.0
    return A


def _dense_gat(layer: GATConv, A: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """softmax over N(v)+v of LeakyReLU(s.Wh_u + t.Wh_v), heads concatenated or averaged."""
    H, C = layer.heads, layer.out_dim
    h = layer.lin(x).view(-1, H, C)
    s = (h * layer.att_src).sum(-1)                      # (n, H) source scores
    t = (h * layer.att_dst).sum(-1)
    e = torch.nn.functional.leaky_relu(t[:, None, :] + s[None, :, :], 0.2)     # (v, u, H)
    mask = (A + torch.eye(A.shape[0])) > 0
    e = e.masked_fill(~mask[..., None], float("-inf"))
    alpha = torch.softmax(e, dim=1)
    out = torch.einsum("vuh,uhc->vhc", alpha, h)
    out = out.reshape(-1, H * C) if layer.concat else out.mean(1)
    return out + layer.bias


def test_gat_minibatch_equals_dense_full_graph(small_store):
    """With every neighbour sampled, the seeds' GAT logits equal the dense full-graph formula."""
    g, path = small_store
    store = PartitionStore(path)
    core = TrainerCore(TrainerConfig(model="gat", hidden=4, heads=3, dropout=0.0), 16, 4, num_layers=2, seed=0)
    seeds = np.arange(0, 500, 7)
    fb = LoaderCore(store).load(SamplerCore(store).sample(seeds, (-1, -1), 0))
    x, blocks, _ = core.to_device(fb)
    model = core.model
    model.eval()
    A = _dense_adj(g)
    with torch.no_grad():
        mini = model(x, blocks)
        h = torch.nn.functional.elu(_dense_gat(model.layers[0], A, torch.from_numpy(g.features)))
        full = _dense_gat(model.layers[1], A, h)[torch.from_numpy(seeds)]
    assert mini.shape == (seeds.shape[0], 4)
    torch.testing.assert_close(mini, full, rtol=1e-4, atol=1e-5)


def test_edge_index_is_pyg_subgraph(small_store):
    """Each vertex's in-edges come once, from the hop that discovered it (PyG NeighborLoader layout)."""
    _, path = small_store
    store = PartitionStore(path)
    core = TrainerCore(TrainerConfig(model="sage", dropout=0.0), 16, 4, num_layers=2)
    fb = LoaderCore(store).load(SamplerCore(store).sample(np.arange(40), (-1, -1), 0))
    _, blocks, _ = core.to_device(fb)
    ei = blocks.edge_index()
    pairs = ei[0] * 10**6 + ei[1]
    assert pairs.unique().numel() == pairs.numel()                       # no edge twice
    assert int(ei.max()) < blocks.hop_nodes[2]
    assert bool((ei[1] < blocks.hop_nodes[1]).all())                      # outermost vertices have no in-edges
    deg = torch.bincount(ei[1], minlength=blocks.hop_nodes[1])
    torch.testing.assert_close(deg.float(), blocks.degrees[:blocks.hop_nodes[1]])   # full neighbourhoods


def test_pyg_graphsage_unmodified_equals_full_graph(small_store):
    """torch_geometric's own GraphSAGE runs unmodified; on full neighbourhoods it equals the full graph."""
    pytest.importorskip("torch_geometric")
    g, path = small_store
    store = PartitionStore(path)
    cfg = TrainerConfig(model="torch_geometric.nn.models:GraphSAGE", hidden=8, dropout=0.0)
    core = TrainerCore(cfg, 16, 4, num_layers=2, seed=0)
    assert isinstance(core.model, EdgeIndexModel)
    assert type(core.user_model()).__name__ == "GraphSAGE"
    seeds = np.arange(3, 400, 5)
    fb = LoaderCore(store).load(SamplerCore(store).sample(seeds, (-1, -1), 0))
    x, blocks, y = core.to_device(fb)
    core.model.eval()
    rows = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    edge_index = torch.from_numpy(np.stack([g.indices.astype(np.int64), rows]))
    with torch.no_grad():
        mini = core.model(x, blocks)
        full = core.user_model()(torch.from_numpy(g.features), edge_index)[torch.from_numpy(seeds)]
    torch.testing.assert_close(mini, full, rtol=1e-4, atol=1e-5)
    r = core.train_step(fb)                                              # and it trains through Argosy's step
    assert r["count"] == seeds.shape[0] and np.isfinite(r["loss"])


@pytest.mark.parametrize("spec, match", [("no_such_module_xyz:F", "cannot import no_such_module_xyz"),
                                         ("argosy.shared.models:Nope", "has no attribute 'Nope'"),
                                         ("gin", "sage, gcn, gat or MODULE:FACTORY")])
def test_bad_model_specs_are_clear_errors(spec, match):
    with pytest.raises(ValueError, match=match):
        TrainerCore(TrainerConfig(model=spec), 16, 4, num_layers=2)


def test_factory_gets_the_documented_keywords():
    seen = {}

    def factory(in_channels, hidden_channels, num_layers, out_channels, dropout=0.0):
        seen.update(in_channels=in_channels, hidden_channels=hidden_channels, num_layers=num_layers,
                    out_channels=out_channels, dropout=dropout)
        return torch.nn.Linear(in_channels, out_channels)

    import sys, types
    mod = types.ModuleType("argosy_test_factory_mod")
    mod.make = factory
    sys.modules["argosy_test_factory_mod"] = mod
    try:
        build_model("argosy_test_factory_mod:make", 12, 32, 5, 3, dropout=0.25)
    finally:
        del sys.modules["argosy_test_factory_mod"]
    assert seen == dict(in_channels=12, hidden_channels=32, num_layers=3, out_channels=5, dropout=0.25)


def test_per_model_defaults_live_in_the_config():
    from argosy.shared.config import MODEL_DEFAULTS
    for model in ("gcn", "sage", "gat"):
        t = TrainerConfig(model=model)
        assert (t.hidden, t.dropout, t.lr) == tuple(MODEL_DEFAULTS[model][k] for k in ("hidden", "dropout", "lr"))
    assert TrainerConfig(model="gat", lr=0.1).lr == 0.1                  # explicit values win
    assert isinstance(GNN("gat", 8, 4, 3, 2, heads=2).layers[0], GATConv)
