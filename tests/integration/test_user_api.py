"""The practitioner's path end to end: Python API with a YAML job file, early stopping, the best
checkpoint, predictions for every vertex (equal to the reported accuracy), the model reloaded,
and a PyG model run unmodified.  Real processes, real Redis, real files."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import argosy
from argosy.shared.graphio import save_graph_npz
from argosy.shared.models import GNN
from argosy.shared.synthetic import generate_dcsbm

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def graph_npz(tmp_path_factory):
    g = generate_dcsbm(num_nodes=1500, avg_degree=8, feature_dim=16, num_classes=4, seed=0)
    path = tmp_path_factory.mktemp("g") / "g.npz"
    save_graph_npz(g, path)
    return path


def test_api_yaml_early_stopping_predict_reload(graph_npz, redis_url, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("model: sage\nepochs: 40\npatience: 4\nparts: 2\nfanouts: [10, 5]\nbatch_size: 256\n")
    run_dir = tmp_path / "run"
    res = argosy.train(graph_npz, config=job, model="gcn", redis=redis_url, run_dir=run_dir, seed=1)
    spec = json.loads((run_dir / "report.json").read_text())["config"]
    assert spec["trainer"]["model"] == "gcn"                              # the keyword overrides the file
    assert spec["trainer"]["patience"] == 4 and spec["sampler"]["fanouts"] == [10, 5]   # the file's values
    assert spec["trainer"]["hidden"] == 16                                # gcn's default, from MODEL_DEFAULTS
    assert res["epochs"] <= 40
    if res["stopped_early"]:
        assert res["epochs"] - 1 - res["best_epoch"] == 4
    assert Path(res["best_checkpoint"]) == run_dir / "best.pt" and (run_dir / "checkpoint.pt").exists()
    assert res["test_accuracy"] > 0.5                                      # planted classes: clearly learnt

    out = argosy.predict(run_dir)
    assert out["pred"].shape == (1500,) and out["pred"].dtype == np.int64
    assert out["logits"].shape == (1500, 4) and out["logits"].dtype == np.float32
    assert out["test_accuracy"] == pytest.approx(res["test_accuracy"], abs=1e-12)   # same model, full neighbourhoods

    npz = tmp_path / "p.npz"
    proc = subprocess.run([sys.executable, "-m", "argosy.services.launch", "predict", str(run_dir), "--out", str(npz),
                           "--embeddings", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with np.load(npz) as z:
        assert set(z.files) == {"pred", "logits", "embeddings"}
        assert z["embeddings"].shape == (1500, 16)
        np.testing.assert_array_equal(z["pred"], out["pred"])

    model = argosy.load_model(run_dir)
    assert isinstance(model, GNN) and not model.training
    ck = torch.load(run_dir / "best.pt", weights_only=True)
    assert ck["epoch"] == res["best_epoch"]
    torch.testing.assert_close(model.state_dict()["layers.0.lin.weight"], ck["model"]["layers.0.lin.weight"])


def test_pyg_model_through_the_pipeline(graph_npz, redis_url, tmp_path):
    pytest.importorskip("torch_geometric")
    run_dir = tmp_path / "run"
    res = argosy.train(graph_npz, model="torch_geometric.nn.models:GraphSAGE", epochs=6, patience=0, parts=2,
                       redis=redis_url, run_dir=run_dir)
    assert res["epochs"] == 6 and not res["stopped_early"]
    out = argosy.predict(run_dir)
    assert out["test_accuracy"] == pytest.approx(res["test_accuracy"], abs=1e-12)
    assert type(argosy.load_model(run_dir)).__name__ == "GraphSAGE"


def test_api_rejects_unknown_options(graph_npz):
    with pytest.raises(ValueError, match="unknown option 'epoch'"):
        argosy.train(graph_npz, epoch=3)


def test_arrays_in_memory_with_a_generated_split(redis_url, tmp_path):
    """A raw graph as a new user has it: an edge array, features and labels in memory, no masks;
    `split=` makes a seeded Planetoid-style split, recorded in the manifest, and it trains first time."""
    g = generate_dcsbm(num_nodes=800, avg_degree=8, feature_dim=8, num_classes=3, seed=2)
    src = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    edges = np.stack([src, g.indices])                    # (2, m)
    run_dir = tmp_path / "run"
    res = argosy.train(edges, features=torch.from_numpy(g.features), labels=g.labels, split="per-class:10,100,200",
                       epochs=2, patience=0, parts=2, redis=redis_url, run_dir=run_dir, seed=4)
    from argosy.shared.store import PartitionStore
    m = PartitionStore(run_dir / "store").manifest
    assert m.partition["split"] == {"spec": {"kind": "per-class", "train": 10.0, "val": 100.0, "test": 200.0},
                                    "seed": 4, "train": 30, "val": 100, "test": 200}
    assert res["epochs"] == 2 and argosy.predict(run_dir)["test_accuracy"] == pytest.approx(res["test_accuracy"],
                                                                                            abs=1e-12)


def test_edge_weights_said_in_result_report_log_and_job_file(redis_url, tmp_path):
    """A weighted graph: the run's JSON result, report.md and the trainer's log say whether the edge
    weights were used; ``no_edge_weights: true`` in a YAML job file turns them off."""
    import scipy.sparse as sp
    g = generate_dcsbm(num_nodes=600, avg_degree=6, feature_dim=8, num_classes=3, seed=3)
    w = np.random.default_rng(0).random(g.indices.shape[0]).astype(np.float32) + 0.5
    adj = sp.csr_matrix((w, g.indices, g.indptr), shape=(g.num_nodes, g.num_nodes))
    job = tmp_path / "job.yaml"
    job.write_text("no_edge_weights: true\nepochs: 1\npatience: 0\nparts: 2\n")
    for name, kw, want in (("off", {"config": job}, "off (--no-edge-weights)"),
                           ("on", {"epochs": 1, "patience": 0, "parts": 2}, True)):
        run_dir = tmp_path / name
        res = argosy.train(adj, features=g.features, labels=g.labels, split="random:0.5,0.2,0.3", model="gcn",
                           redis=redis_url, run_dir=run_dir, seed=1, **kw)
        assert res["edge_weights"] == want
        report = json.loads((run_dir / "report.json").read_text())
        assert report["result"]["edge_weights"] == want and report["config"]["trainer"]["edge_weights"] is (want is True)
        assert f"| edge_weights | {json.dumps(want) if want is True else want} |" in (run_dir / "report.md").read_text()
        logs = "".join(p.read_text() for p in (run_dir / "logs").glob("trainer*.log"))
        assert f"edge weights: {json.dumps(want)}" in logs
        assert argosy.predict(run_dir)["test_accuracy"] == pytest.approx(res["test_accuracy"], abs=1e-12)
