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
                                         ("gin", "sage, gcn, gat, rgcn, rgat or MODULE:FACTORY")])
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


# ----------------------------------------------------------------------------- sparse aggregation
# The layers aggregate through shared.aggregate (CSR over destinations, numba on CPU, torch ops
# elsewhere); these pin them to the per-edge formulas they replaced, on both backends.
from argosy.shared import aggregate
from argosy.shared.models import GCNConv, SAGEConv
from argosy.shared.aggregate import csr_ptr, edge_softmax, segment_sum


def _per_edge(layer, x, src, dst, num_dst, degrees):
    """The per-edge formulas (one gathered row per edge + index_add_) the layers used before."""
    src, dst = src.long(), dst.long()
    zeros = lambda *shape: torch.zeros(*shape, dtype=x.dtype)
    if isinstance(layer, SAGEConv):
        cnt = torch.bincount(dst, minlength=num_dst).to(x.dtype)
        h = layer.lin_neigh(x)
        agg = zeros(num_dst, h.shape[1]).index_add_(0, dst, h[src])
        if layer.aggr == "gcn":
            return (agg + h[:num_dst]) / (cnt + 1)[:, None] + layer.bias
        return layer.lin_self(x[:num_dst]) + agg / cnt.clamp(min=1)[:, None]
    if isinstance(layer, GCNConv):
        x = layer.lin(x)
        d1 = degrees.to(x.dtype) + 1.0
        sampled = torch.bincount(dst, minlength=num_dst).to(x.dtype)
        scale = torch.where(sampled > 0, degrees[:num_dst].to(x.dtype) / sampled.clamp(min=1), torch.zeros_like(sampled))
        w = scale[dst] * torch.rsqrt(d1[src] * d1[dst])
        return zeros(num_dst, x.shape[1]).index_add_(0, dst, x[src] * w[:, None]) + x[:num_dst] / d1[:num_dst, None] \
            + layer.bias
    H, C = layer.heads, layer.out_dim
    h = layer.lin(x).view(-1, H, C)
    loops = torch.arange(num_dst)
    src, dst = torch.cat([src, loops]), torch.cat([dst, loops])
    a_src, a_dst = (h * layer.att_src).sum(-1), (h[:num_dst] * layer.att_dst).sum(-1)
    e = torch.nn.functional.leaky_relu(a_src[src] + a_dst[dst], 0.2)
    e_max = torch.full((num_dst, H), float("-inf"), dtype=e.dtype).scatter_reduce(
        0, dst[:, None].expand(-1, H), e, "amax", include_self=True)
    w = torch.exp(e - e_max[dst])
    alpha = w / zeros(num_dst, H).index_add_(0, dst, w)[dst]
    out = zeros(num_dst, H, C).index_add_(0, dst, h[src] * alpha[..., None])
    return (out.reshape(num_dst, H * C) if layer.concat else out.mean(1)) + layer.bias


def _block(num_src, num_dst, num_edges, isolated=(), seed=0, dtype=torch.int64):
    """A random block grouped by destination; destinations in ``isolated`` get no edge."""
    g = torch.Generator().manual_seed(seed)
    dst = torch.randint(0, max(num_dst, 1), (num_edges,), generator=g) if num_dst else torch.zeros(0, dtype=torch.int64)
    keep = ~torch.isin(dst, torch.tensor(list(isolated), dtype=torch.int64))
    dst = dst[keep].sort().values
    src = torch.randint(0, num_src, (dst.shape[0],), generator=g)
    degrees = torch.bincount(dst, minlength=num_src).float() + torch.randint(0, 3, (num_src,), generator=g)
    return src.to(dtype), dst.to(dtype), degrees


LAYERS = {"sage-mean": lambda a, b: SAGEConv(a, b, "mean"), "sage-gcn": lambda a, b: SAGEConv(a, b, "gcn"),
          "gcn": GCNConv, "gcn-project": GCNConv, "gat": lambda a, b: GATConv(a, b, heads=3), "gat-mean": lambda a, b: GATConv(a, b, 2, concat=False)}


def test_every_aggregator_is_listed():
    from argosy.shared.config import SAGE_AGGREGATORS
    assert {f"sage-{a}" for a in SAGE_AGGREGATORS} <= set(LAYERS)


@pytest.mark.parametrize("backend", ["numba", "torch"])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("kind", sorted(LAYERS))
@pytest.mark.parametrize("shape", [(30, 12, 90, ()), (30, 12, 90, (0, 5, 11)), (9, 4, 0, ()), (5, 0, 0, ())],
                         ids=["random", "isolated", "no-edges", "no-dst"])
def test_layers_equal_the_per_edge_formula(monkeypatch, backend, dtype, kind, shape):
    """Output and every gradient (input and parameters) as the per-edge formula, on int32/int64
    blocks, destinations without neighbours, blocks without edges or destinations."""
    monkeypatch.setattr(aggregate, "BACKEND", backend)
    torch.manual_seed(1)
    num_src, num_dst, num_edges, isolated = shape
    in_dim = 24 if kind in ("sage-mean", "gcn-project") else 7    # projects first when out < in, else aggregates first
    layer = LAYERS[kind](in_dim, 10).double()
    src, dst, degrees = _block(num_src, num_dst, num_edges, isolated, dtype=dtype)
    x = torch.randn(num_src, in_dim, dtype=torch.float64, requires_grad=True)
    got = layer(x, src, dst, num_dst, degrees)
    want = _per_edge(layer, x, src, dst, num_dst, degrees)
    torch.testing.assert_close(got, want)
    gout = torch.randn_like(want)
    grads = torch.autograd.grad(got, [x] + list(layer.parameters()), gout, allow_unused=True)
    wants = torch.autograd.grad(want, [x] + list(layer.parameters()), gout, allow_unused=True)
    for a, b in zip(grads, wants):
        torch.testing.assert_close(a if a is not None else torch.zeros_like(b), b if b is not None else torch.zeros_like(a))


@pytest.mark.parametrize("kind", sorted(LAYERS))
def test_carried_ptr_and_unsorted_edges_give_the_same_layer(kind):
    """The sampler's CSR offsets, none (built from edge_dst), or edges in any order: one result."""
    torch.manual_seed(2)
    layer = LAYERS[kind](8, 6)
    src, dst, degrees = _block(40, 15, 120, (3,))
    x = torch.randn(40, 8)
    ptr, _, _ = csr_ptr(src, dst, 15)
    perm = torch.randperm(src.shape[0])
    a = layer(x, src, dst, 15, degrees, ptr)
    torch.testing.assert_close(layer(x, src, dst, 15, degrees), a)
    torch.testing.assert_close(layer(x, src[perm], dst[perm], 15, degrees), a, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ["numba", "torch"])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_kernels_pass_gradcheck(monkeypatch, backend, dtype):
    """segment_sum (plain and weighted per head) and edge_softmax on tiny float64 blocks."""
    monkeypatch.setattr(aggregate, "BACKEND", backend)
    src, dst, _ = _block(7, 5, 14, (2,), seed=3, dtype=dtype)
    ptr, _, _ = csr_ptr(src, dst, 5)
    x = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: segment_sum(x, ptr, src, 5), (x,))
    xh = torch.randn(7, 2, 3, dtype=torch.float64, requires_grad=True)
    w = torch.rand(src.shape[0], 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: segment_sum(x, ptr, src, 5, w), (xh, w))
    s = torch.randn(src.shape[0], 2, dtype=torch.float64, requires_grad=True)
    s_self = torch.randn(5, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda s, t: edge_softmax(s, t, ptr), (s, s_self))
    a, a_self = edge_softmax(s, s_self, ptr)             # each destination's weights sum to one
    torch.testing.assert_close(a_self.index_add(0, dst.long(), a), torch.ones(5, 2, dtype=torch.float64))


def test_malformed_blocks_are_clear_errors():
    x = torch.randn(4, 3)
    src, ptr = torch.tensor([0, 1, 3]), torch.tensor([0, 2, 3])
    with pytest.raises(ValueError, match=r"src ids must lie in \[0, 3\)"):
        segment_sum(x[:3], ptr, src, 2)
    with pytest.raises(ValueError, match="num_dst \\+ 1 = 4 offsets"):
        segment_sum(x, ptr, src, 3)
    with pytest.raises(ValueError, match="rise from 0 to the 3 edges"):
        segment_sum(x, torch.tensor([0, 2, 5]), src, 2)
    with pytest.raises(ValueError, match="rise from 0"):
        segment_sum(x, torch.tensor([0, 3, 3]) - torch.tensor([0, 2, 0]) * 2, src, 2)


def test_dropout_keeps_the_expectation_and_drops_a_fraction_p():
    from argosy.shared.models import dropout
    torch.manual_seed(0)
    x = torch.ones(200_000, requires_grad=True)
    y = dropout(x, 0.6, True)
    kept = y > 0
    assert abs(kept.float().mean().item() - 0.4) < 0.005
    torch.testing.assert_close(y[kept], torch.full_like(y[kept], 1 / 0.4))
    y.sum().backward()
    torch.testing.assert_close(x.grad, y.detach())                      # gradient: the same mask and scale
    assert dropout(x, 0.6, False) is x and dropout(x, 0.0, True) is x
    assert not dropout(x, 1.0, True).any()


def _per_edge_weighted(layer, x, src, dst, num_dst, degrees, ew, wdeg):
    """The weighted layers written edge by edge: PyG's gcn_norm with edge_weight (self loop 1) and
    SAGE's weighted mean sum(w x) / sum(w)."""
    src, dst = src.long(), dst.long()
    zeros = lambda *s: torch.zeros(*s, dtype=x.dtype)
    if isinstance(layer, SAGEConv):
        h = layer.lin_neigh(x)
        wsum = zeros(num_dst).index_add_(0, dst, ew)
        agg = zeros(num_dst, h.shape[1]).index_add_(0, dst, h[src] * ew[:, None])
        if layer.aggr == "gcn":
            return (agg + h[:num_dst]) / (wsum + 1)[:, None] + layer.bias
        return layer.lin_self(x[:num_dst]) + agg / torch.where(wsum > 0, wsum, torch.ones_like(wsum))[:, None]
    x = layer.lin(x)
    d1 = wdeg.to(x.dtype) + 1.0
    sampled = torch.bincount(dst, minlength=num_dst).to(x.dtype)
    scale = torch.where(sampled > 0, degrees[:num_dst].to(x.dtype) / sampled.clamp(min=1), torch.zeros_like(sampled))
    w = scale[dst] * ew * torch.rsqrt(d1[src] * d1[dst])
    return zeros(num_dst, x.shape[1]).index_add_(0, dst, x[src] * w[:, None]) + x[:num_dst] / d1[:num_dst, None] \
        + layer.bias


@pytest.mark.parametrize("backend", ["numba", "torch"])
@pytest.mark.parametrize("kind", ["sage-mean", "sage-gcn", "gcn", "gcn-project"])
@pytest.mark.parametrize("shape", [(30, 12, 90, ()), (30, 12, 90, (0, 5, 11)), (9, 4, 0, ())],
                         ids=["random", "isolated", "no-edges"])
def test_weighted_layers_equal_the_per_edge_formula(monkeypatch, backend, kind, shape):
    """Edge weights through the CSR kernels: output and every gradient as the per-edge formula;
    a zero weight (an edge that carries nothing) included."""
    monkeypatch.setattr(aggregate, "BACKEND", backend)
    torch.manual_seed(3)
    num_src, num_dst, num_edges, isolated = shape
    in_dim = 24 if kind in ("sage-mean", "gcn-project") else 7
    layer = LAYERS[kind](in_dim, 10).double()
    src, dst, degrees = _block(num_src, num_dst, num_edges, isolated)
    ew = torch.rand(src.shape[0], dtype=torch.float64) * 3
    if ew.numel():
        ew[0] = 0.0
    wdeg = torch.rand(num_src, dtype=torch.float64) * 5 + torch.zeros(num_src, dtype=torch.float64).index_add_(0, dst, ew)
    x = torch.randn(num_src, in_dim, dtype=torch.float64, requires_grad=True)
    got = layer(x, src, dst, num_dst, degrees, None, ew, wdeg)
    want = _per_edge_weighted(layer, x, src, dst, num_dst, degrees, ew, wdeg)
    torch.testing.assert_close(got, want)
    gout = torch.randn_like(want)
    grads = torch.autograd.grad(got, [x] + list(layer.parameters()), gout, allow_unused=True)
    wants = torch.autograd.grad(want, [x] + list(layer.parameters()), gout, allow_unused=True)
    for a, b in zip(grads, wants):
        torch.testing.assert_close(a if a is not None else torch.zeros_like(b), b if b is not None else torch.zeros_like(a))
    perm = torch.randperm(src.shape[0])                  # weights follow their edges when the layer sorts them
    torch.testing.assert_close(layer(x, src[perm], dst[perm], num_dst, degrees, None, ew[perm], wdeg), got)
    if kind.startswith("sage") or not isolated:          # unit weights give the unweighted layer
        ones = torch.ones_like(ew)
        unit_deg = degrees.double() if kind.startswith("gcn") else wdeg
        torch.testing.assert_close(layer(x, src, dst, num_dst, degrees, None, ones, unit_deg),
                                   layer(x, src, dst, num_dst, degrees))


def test_weighted_gcn_on_the_whole_graph_is_pyg_gcn_norm():
    """Every neighbour, weighted: D_w^-1/2 (A_w + I) D_w^-1/2 X W + b with dense matrices."""
    from argosy.shared.graphio import csr_from_edges
    from argosy.shared.models import Blocks
    rng = np.random.default_rng(0)
    n = 25
    g = csr_from_edges(rng.integers(0, n, 80), rng.integers(0, n, 80), n, weights=rng.random(80) * 2)
    A = np.zeros((n, n))
    A[np.repeat(np.arange(n), np.diff(g.indptr)), g.indices] = g.edge_weight   # row v: in-edges of v
    A_hat = A + np.eye(n)
    d = A_hat.sum(1)
    norm = torch.from_numpy(A_hat / np.sqrt(np.outer(d, d)))
    torch.manual_seed(0)
    model = GNN("gcn", 6, 8, 3, 2, dropout=0.0).double().eval()
    x = torch.randn(n, 6, dtype=torch.float64)
    blocks = Blocks.full_graph(g.indptr, g.indices, 2, edge_weight=g.edge_weight)
    blocks.weighted_degrees = blocks.weighted_degrees.double()
    h = x
    for i, layer in enumerate(model.layers):
        h = norm @ layer.lin(h) + layer.bias
        h = torch.relu(h) if i == 0 else h
    torch.testing.assert_close(model(x, blocks), h)


def test_dropout_masks_repeat_under_a_seed_and_the_full_graph_mask_is_the_shared_one():
    from argosy.shared.models import dropout, dropout_scale
    from argosy.services.trainer.fullgraph.model import dropout_mask
    x = torch.ones(1000, 8)
    torch.manual_seed(3)
    a = dropout(x, 0.5, True)
    torch.manual_seed(3)
    assert torch.equal(a, dropout(x, 0.5, True))                           # torch.manual_seed repeats runs
    assert not torch.equal(a, dropout(x, 0.5, True))                       # and each call draws a new mask
    ref = dropout_scale(np.random.default_rng([1, 2, 3, 4]), (50, 8), 0.25)
    assert set(np.unique(ref).tolist()) == {0.0, np.float32(1 / 0.75)}
    assert torch.equal(dropout_mask((50, 8), 0.25, 1, 2, 3, 4), torch.from_numpy(ref))


def test_throughput_roles_keep_their_heap():
    from argosy.shared.lifecycle import THROUGHPUT_ROLES
    from argosy.shared.malloc import keep_heap
    assert set(THROUGHPUT_ROLES) == {"trainer", "sampler", "loader"}
    assert keep_heap() is True                                            # glibc (this machine and the images)


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_kernels_sum_bfloat16_inputs_in_float32(backend, monkeypatch):
    """Under bf16 autocast the layers hand the kernels bfloat16 rows: both paths sum them in float32
    (the float32 sum of the same rounded values) and pass gradients back in the input's dtype."""
    from argosy.shared import aggregate
    monkeypatch.setattr(aggregate, "BACKEND", backend)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(30, 4, 8, generator=g).to(torch.bfloat16).requires_grad_()
    ptr = torch.tensor([0, 3, 3, 7, 12])
    src = torch.randint(0, 30, (12,), generator=g)
    w = torch.rand(12, 4, generator=g).to(torch.bfloat16)
    for weights in (None, w):
        xin = x if weights is not None else x.reshape(30, 32)
        out = aggregate.segment_sum(xin, ptr, src, 4, w=weights)
        ref = aggregate.segment_sum(xin.detach().float(), ptr, src, 4, w=None if weights is None else weights.float())
        assert out.dtype == torch.float32
        torch.testing.assert_close(out, ref)
        out.sum().backward()
        assert x.grad.dtype == torch.bfloat16
        x.grad = None
    a, a_self = aggregate.edge_softmax(w, torch.zeros(4, 4, dtype=torch.bfloat16), ptr)
    assert a.dtype == torch.float32
    for v in range(4):                     # each destination's edge weights and self weight sum to 1
        torch.testing.assert_close(a[ptr[v]:ptr[v + 1]].sum(0) + a_self[v], torch.ones(4))


@pytest.mark.parametrize("kind,aggregator", [("gcn", "mean"), ("sage", "mean"), ("sage", "gcn")])
def test_full_graph_param_grads_equal_autograd(kind, aggregator):
    """The parameter gradients from a kept aggregate and the output's gradient equal autograd's through
    full_graph_conv (no projection recomputed); a layer that projects first is refused."""
    from argosy.services.trainer.fullgraph.layer_ops import full_graph_conv, full_graph_param_grads
    from argosy.shared.models import build_model

    torch.manual_seed(0)
    a = torch.rand(30, 30) * (torch.rand(30, 30) < 0.2)
    x = torch.randn(30, 8)
    ref, mine = (build_model(kind, 8, 16, 3, 2, 0.0, aggregator=aggregator) for _ in range(2))
    mine.load_state_dict(ref.state_dict())
    z = full_graph_conv(ref.layers[0], lambda t: a @ t, x, x)
    dz = torch.randn_like(z)
    z.backward(dz)
    full_graph_param_grads(mine.layers[0], dz, a @ x, x)
    for (name, p), q in zip(ref.layers[0].named_parameters(), mine.layers[0].parameters()):
        assert q.grad is not None and torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-6), name
    narrow = build_model(kind, 8, 4, 3, 2, 0.0, aggregator=aggregator)
    with pytest.raises(ValueError, match="does not aggregate before it projects"):
        full_graph_param_grads(narrow.layers[0], torch.zeros(30, 4), a @ x, x)
