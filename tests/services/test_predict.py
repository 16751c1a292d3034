"""Layer-wise prediction over the parts, in small chunks, equals the model on full neighbourhoods."""
import numpy as np
import pytest
import torch

import argosy.fullnbr as fullnbr
import argosy.inference as inference
from argosy.shared.config import JobConfig, SamplerConfig, TrainerConfig
from argosy.shared.store import PartitionStore
from argosy.services.loader.core import LoaderCore
from argosy.services.sampler.core import SamplerCore
from argosy.services.trainer.core import TrainerCore


def _fake_run(tmp_path, store_path, model: str, normalize: bool):
    cfg = JobConfig(store=str(store_path), sampler=SamplerConfig(fanouts=(5, 5)),
                    trainer=TrainerConfig(model=model, hidden=6, heads=2, dropout=0.3, normalize_features=normalize))
    core = TrainerCore(cfg.trainer, 16, 4, num_layers=2, seed=3)
    run = tmp_path / f"run-{model}"
    run.mkdir()
    torch.save({"format": 1, "model": core.user_model().state_dict(), "epoch": 0, "val_accuracy": 0.0,
                "test_accuracy": 0.0, "spec": cfg.to_json(), "in_dim": 16, "num_classes": 4, "num_layers": 2,
                "store": str(store_path)}, run / "best.pt")
    return core, run


@pytest.mark.parametrize("model", ["gcn", "sage", "gat"])
def test_layerwise_predict_equals_full_neighbourhood_forward(small_store, tmp_path, monkeypatch, model):
    g, path = small_store
    monkeypatch.setattr(fullnbr, "_CHUNK_NODES", 37)           # many chunks per part
    monkeypatch.setattr(fullnbr, "_CHUNK_EDGES", 200)
    core, run = _fake_run(tmp_path, path, model, normalize=False)      # features are N(0,1): row sums near 0
    res = inference.predict_store(run, tmp_path / "p.npz", embeddings=True)
    store = PartitionStore(path)
    seeds = np.arange(g.num_nodes)
    fb = LoaderCore(store).load(SamplerCore(store).sample(seeds, (-1, -1), 0))
    x, blocks, _ = core.to_device(fb)
    core.model.eval()
    with torch.no_grad():
        want = core.model(x, blocks).numpy()
    with np.load(tmp_path / "p.npz") as z:
        np.testing.assert_allclose(z["logits"], want, rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(z["pred"], z["logits"].argmax(1))
        assert z["pred"].dtype == np.int64 and z["logits"].dtype == np.float32
        assert z["embeddings"].shape == (g.num_nodes, 12 if model == "gat" else 6)
    test = np.flatnonzero(g.test_mask)
    assert res["test_accuracy"] == pytest.approx(float((want.argmax(1)[test] == g.labels[test]).mean()))


def test_reloaded_model_has_the_saved_weights(small_store, tmp_path):
    _, path = small_store
    core, run = _fake_run(tmp_path, path, "sage", normalize=False)
    model = inference.load_model(run)
    for k, v in core.model.state_dict().items():
        torch.testing.assert_close(model.state_dict()[k], v)
    assert model.argosy_info["config"]["trainer"]["model"] == "sage" and not model.training
