"""Loader gathers the right rows; mini-batch models equal full-graph models on the same seeds."""
import numpy as np
import pytest
import torch

from argosy.shared.config import TrainerConfig
from argosy.shared.store import PartitionStore
from argosy.services.loader.core import LoaderCore
from argosy.services.sampler.core import SamplerCore
from argosy.services.trainer.core import TrainerCore


def test_loader_gathers_features_and_labels(small_store):
    g, path = small_store
    store = PartitionStore(path)
    sb = SamplerCore(store).sample(np.arange(0, 60, 2), (5, 5), 3, home_part=0)
    fb = LoaderCore(store).load(sb)
    np.testing.assert_array_equal(fb.features, g.features[sb.nodes])
    np.testing.assert_array_equal(fb.labels, g.labels[sb.nodes[:sb.num_seeds]])
    assert fb.remote_feature_rows == int(np.count_nonzero(store.assignment[sb.nodes] != 0))


def _full_graph_forward(model, g, kind):
    """Reference: the same weights applied to the whole graph with dense matrices."""
    n = g.num_nodes
    A = torch.zeros(n, n)
    rows = np.repeat(np.arange(n), np.diff(g.indptr))
    A[torch.from_numpy(rows), torch.from_numpy(g.indices.astype(np.int64))] = 1.0
    h = torch.from_numpy(g.features)
    deg = A.sum(1)
    for i, layer in enumerate(model.layers):
        if kind == "gcn":
            dinv = (deg + 1).rsqrt()
            ahat = dinv[:, None] * (A + torch.eye(n)) * dinv[None, :]
            h = ahat @ layer.lin(h) + layer.bias
        else:
            mean = (A @ h) / deg.clamp(min=1)[:, None]
            h = layer.lin_self(h) + layer.lin_neigh(mean)
        if i < len(model.layers) - 1:
            h = torch.relu(h)
    return h


@pytest.mark.parametrize("kind", ["gcn", "sage"])
def test_minibatch_equals_full_graph(small_store, kind):
    """Equivalence test: with every neighbour sampled, seeds' outputs match full-graph outputs."""
    g, path = small_store
    store = PartitionStore(path)
    core = TrainerCore(TrainerConfig(model=kind, hidden=8, dropout=0.0), 16, 4, num_layers=2, seed=0)
    seeds = np.arange(0, 500, 7)
    fb = LoaderCore(store).load(SamplerCore(store).sample(seeds, (-1, -1), 0))
    x, blocks, _ = core.to_device(fb)
    core.model.eval()
    with torch.no_grad():
        mini = core.model(x, blocks)
        full = _full_graph_forward(core.model, g, kind)[torch.from_numpy(seeds)]
    torch.testing.assert_close(mini, full, rtol=1e-4, atol=1e-5)


def test_train_step_learns(small_store):
    g, path = small_store
    store = PartitionStore(path)
    core = TrainerCore(TrainerConfig(model="sage", hidden=16, dropout=0.0, lr=0.05), 16, 4, num_layers=2)
    fb = LoaderCore(store).load(SamplerCore(store).sample(np.arange(64), (5, 5), 0))
    losses = [core.train_step(fb)["loss"] for _ in range(30)]
    assert losses[-1] < 0.5 * losses[0]                                   # it can fit one batch


def test_gathered_small_batches_step_like_one_batch(small_store):
    """Two batches gathered into one step (step=False, then True) equal one step on their mean loss."""
    import torch.nn.functional as F
    g, path = small_store
    store = PartitionStore(path)
    cfg = TrainerConfig(model="gcn", hidden=8, dropout=0.0, lr=0.05)
    core = TrainerCore(cfg, 16, 4, num_layers=2, seed=3)
    ref = TrainerCore(cfg, 16, 4, num_layers=2, seed=3)
    fbs = [LoaderCore(store).load(SamplerCore(store).sample(s, (-1, -1), 0))
           for s in (np.arange(0, 40), np.arange(100, 110))]
    # the reference: one Adam step on the mean loss over all 50 seeds
    ref.opt.zero_grad()
    total, n = 0.0, 0
    for fb in fbs:
        x, blocks, y = ref.to_device(fb)
        total = total + F.cross_entropy(ref.model(x, blocks), y, reduction="sum")
        n += y.shape[0]
    (total / n).backward()
    ref.opt.step()
    assert core.train_step(fbs[0], step=False)["count"] == 40
    before = [p.detach().clone() for p in core.model.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(before, core.model.parameters()))   # no step yet
    core.train_step(fbs[1], step=True)
    for a, b in zip(core.model.parameters(), ref.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    core.finish_step()                                     # nothing pending: a no-op
    for a, b in zip(core.model.parameters(), ref.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
