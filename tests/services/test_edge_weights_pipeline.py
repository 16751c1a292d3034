"""Edge weights through the pipeline: store -> sampler -> loader -> trainer, and predict."""
import numpy as np
import pytest
import torch

import argosy.inference as inference
from argosy.shared.config import JobConfig, SamplerConfig, TrainerConfig
from argosy.shared.errors import InvalidMessageError
from argosy.shared.graphio import csr_from_edges
from argosy.shared.models import Blocks
from argosy.shared.store import PartitionStore, write_store
from argosy.shared.validate import check_weight_arrays
from argosy.services.loader.core import LoaderCore
from argosy.services.sampler.core import SamplerCore
from argosy.services.trainer.core import TrainerCore


@pytest.fixture
def weighted_store(tmp_path):
    rng = np.random.default_rng(0)
    n = 300
    g = csr_from_edges(rng.integers(0, n, 1500), rng.integers(0, n, 1500), n, weights=rng.random(1500) * 3)
    g.features = rng.standard_normal((n, 16)).astype(np.float32)
    g.labels = rng.integers(0, 4, n)
    g.train_mask, g.val_mask, g.test_mask = (rng.random(n) < 0.5), (rng.random(n) < 0.2), (rng.random(n) < 0.3)
    write_store(g, rng.integers(0, 3, n), tmp_path / "s", num_parts=3)
    return g, tmp_path / "s"


@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_weights_reach_the_layers_and_change_the_result(weighted_store, model):
    g, path = weighted_store
    store = PartitionStore(path)
    core = TrainerCore(TrainerConfig(model=model, hidden=8, dropout=0.0, normalize_features=False), 16, 4,
                       num_layers=2, seed=1)
    core.model.eval()
    seeds = np.arange(g.num_nodes)
    fb = LoaderCore(store).load(SamplerCore(store).sample(seeds, (-1, -1), 0))
    x, blocks, _ = core.to_device(fb)
    assert blocks.edge_weight is not None and blocks.weighted_degrees is not None
    full = Blocks.full_graph(g.indptr, g.indices, 2, edge_weight=g.edge_weight)
    with torch.no_grad():
        got = core.model(x, blocks)
        want = core.model(torch.from_numpy(g.features), full)
        torch.testing.assert_close(got, want[torch.from_numpy(fb.nodes[:g.num_nodes])], rtol=1e-4, atol=1e-5)
        fb0 = LoaderCore(store).load(SamplerCore(store, edge_weights=False).sample(seeds, (-1, -1), 0))
        x0, blocks0, _ = core.to_device(fb0)
        assert blocks0.edge_weight is None
        assert not torch.allclose(core.model(x0, blocks0), got, atol=1e-3)      # the weights matter


@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_predict_uses_the_weights_training_used(weighted_store, tmp_path, model):
    g, path = weighted_store
    cfg = JobConfig(store=str(path), sampler=SamplerConfig(fanouts=(5, 5)),
                    trainer=TrainerConfig(model=model, hidden=6, dropout=0.3, normalize_features=False))
    core = TrainerCore(cfg.trainer, 16, 4, num_layers=2, seed=3)
    run = tmp_path / "run"
    run.mkdir()
    torch.save({"format": 1, "model": core.user_model().state_dict(), "epoch": 0, "val_accuracy": 0.0,
                "test_accuracy": 0.0, "spec": cfg.to_json(), "in_dim": 16, "num_classes": 4, "num_layers": 2,
                "store": str(path)}, run / "best.pt")
    inference.predict_store(run, tmp_path / "p.npz")
    store = PartitionStore(path)
    fb = LoaderCore(store).load(SamplerCore(store).sample(np.arange(g.num_nodes), (-1, -1), 0))
    x, blocks, _ = core.to_device(fb)
    core.model.eval()
    with torch.no_grad():
        want = core.model(x, blocks).numpy()
    with np.load(tmp_path / "p.npz") as z:
        np.testing.assert_allclose(z["logits"], want, rtol=1e-4, atol=1e-5)
        assert np.array_equal(z["pred"], want.argmax(1))


def test_bad_weights_on_the_wire_are_refused(weighted_store):
    _, path = weighted_store
    b = SamplerCore(PartitionStore(path)).sample(np.arange(10), (3, 3), 0)
    check_weight_arrays(b)
    b.edge_weight = b.edge_weight.copy()
    b.edge_weight[0] = np.nan
    with pytest.raises(InvalidMessageError, match="edge_weight holds a value that is not finite"):
        check_weight_arrays(b)
    b.edge_weight = b.edge_weight[1:]
    with pytest.raises(InvalidMessageError, match=r"edge_weight must be float32\[\d+\] \(one per edge; got float32\["):
        check_weight_arrays(b)
