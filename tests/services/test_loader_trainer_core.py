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
    cfg = TrainerConfig(model="gcn", hidden=8, dropout=0.0, lr=0.05, precision="fp32")   # the reference is float32
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


def test_precision_auto_follows_the_cpu_and_bad_names_are_refused(monkeypatch):
    from argosy.shared.errors import ConfigError
    from argosy.services.trainer.core import pick_precision
    cpu = torch.device("cpu")
    assert pick_precision("fp32", cpu) is None and pick_precision("bf16", cpu) is torch.bfloat16
    for native in (True, False):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda native=native: native)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
        assert pick_precision("auto", cpu) is (torch.bfloat16 if native else None)
    assert pick_precision("auto", torch.device("cuda", 0)) is None       # float32 on CUDA unless asked
    with pytest.raises(ConfigError, match="precision must be one of auto, fp32, bf16"):
        TrainerConfig(precision="fp16")


def test_bf16_step_computes_products_in_bf16_and_evaluates_in_float32(small_store):
    """--precision bf16: the layers' products run in bfloat16 (gradients differ from float32's by
    bfloat16's rounding, not more), the weights stay float32, it still learns, and evaluation is
    float32 (equal to an fp32 core's on the same weights)."""
    g, path = small_store
    store = PartitionStore(path)
    fb = LoaderCore(store).load(SamplerCore(store).sample(np.arange(64), (5, 5), 0))
    cores = {p: TrainerCore(TrainerConfig(model="sage", hidden=16, dropout=0.0, lr=0.05, precision=p), 16, 4,
                            num_layers=2, seed=5) for p in ("fp32", "bf16")}
    assert cores["bf16"].precision == "bf16" and cores["fp32"].precision == "fp32"
    grads = {}
    for p, core in cores.items():
        core.train_step(fb, step=False)
        grads[p] = torch.cat([q.grad.flatten() for q in core.model.parameters()])
        core._zero_grad()
        core._pending = 0
    rel = float((grads["bf16"] - grads["fp32"]).norm() / grads["fp32"].norm())
    assert 1e-5 < rel < 0.1, rel      # not float32's result, and within a few bfloat16 roundings (2**-8) of it
    assert all(q.dtype == torch.float32 for q in cores["bf16"].model.parameters())
    losses = [cores["bf16"].train_step(fb)["loss"] for _ in range(30)]
    assert losses[-1] < 0.5 * losses[0]
    cores["fp32"].model.load_state_dict(cores["bf16"].model.state_dict())
    assert cores["bf16"].eval_step(fb) == cores["fp32"].eval_step(fb)


def test_a_model_that_cannot_run_in_bf16_gets_a_clear_error(small_store, monkeypatch):
    from argosy.shared.errors import ConfigError
    g, path = small_store
    store = PartitionStore(path)
    fb = LoaderCore(store).load(SamplerCore(store).sample(np.arange(16), (3, 3), 0))
    core = TrainerCore(TrainerConfig(model="sage", hidden=8, precision="bf16"), 16, 4, num_layers=2)
    inner, w = core.model.forward, torch.eye(16)

    def numpy_inside(x, blocks):          # a product (bf16 under autocast) handed to numpy
        return inner(torch.from_numpy(torch.nn.functional.linear(x, w).detach().numpy()), blocks)
    monkeypatch.setattr(core.model, "forward", numpy_inside)
    with pytest.raises(ConfigError, match="--precision fp32"):
        core.train_step(fb)
