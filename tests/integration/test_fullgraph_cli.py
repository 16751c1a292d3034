"""`argosy train --mode fullgraph|sar` from a graph file: partitioned store, early stopping, best.pt, report."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from argosy.services.trainer.fullgraph.graph import load_store_graph
from argosy.services.trainer.fullgraph.inmemory import InMemoryTrainer
from argosy.services.trainer.fullgraph.synthetic import planted_graph
from argosy.shared.graphio import save_graph_npz
from argosy.shared.store.reader import PartitionStore


def _train(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-m", "argosy.services.launch", "train", *args, "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.integration
def test_fullgraph_and_sar_from_a_graph_file(tmp_path):
    g = planted_graph(600, avg_degree=8, num_classes=3, feat_dim=16, noise=0.5, seed=1)
    data = tmp_path / "g.npz"
    save_graph_npz(g, data)
    common = ["--data", str(data), "--model", "gcn", "--epochs", "25", "--patience", "5", "--parts", "4",
              "--lr", "0.05", "--no-normalize-features"]
    fg = _train(common + ["--mode", "fullgraph", "--run-dir", str(tmp_path / "fg"), "--cache-bytes", "20K",
                          "--spill-dir", str(tmp_path), "--eviction", "lru"])
    assert fg["mode"] == "fullgraph" and fg["parts"] == 4 and fg["normalize_features"] is False
    assert fg["cache_bytes"] == 20 << 10 and fg["cache_reason"] == "--cache-bytes"
    assert fg["bytes_written"] > 0 and 0 <= fg["cache_hit_rate"] <= 1
    assert fg["test_accuracy"] > 0.8  # planted classes are easy
    assert fg["epochs"] == len(fg["epoch_seconds_all"]) <= 25
    assert fg["stopped_early"] == (fg["epochs"] < 25)
    report = json.loads((tmp_path / "fg" / "report.json").read_text())
    eps = report["epochs"]
    assert len(eps) == fg["epochs"] and (tmp_path / "fg" / "report.md").exists()
    assert max(e["val_accuracy"] for e in eps) == fg["val_accuracy"] == eps[fg["best_epoch"]]["val_accuracy"]
    if fg["stopped_early"]:  # the last `patience` epochs improved neither validation accuracy nor loss
        recent, earlier = eps[-5:], eps[:-5]
        assert max(e["val_accuracy"] for e in recent) <= max(e["val_accuracy"] for e in earlier)
        assert min(e["val_loss"] for e in recent) >= min(e["val_loss"] for e in earlier)

    # best.pt holds the best-validation weights: they reproduce the reported validation accuracy
    ck = torch.load(tmp_path / "fg" / "best.pt", weights_only=True)
    assert ck["format"] == 1 and ck["epoch"] == fg["best_epoch"] and ck["num_layers"] == 2
    from argosy.services.trainer.fullgraph.model import full_graph_model
    from argosy.shared.config import JobConfig
    job = JobConfig.from_json(ck["spec"])
    model, spec = full_graph_model(job.trainer, ck["in_dim"], ck["num_classes"], ck["num_layers"], 0)
    model.load_state_dict(ck["model"])
    store_graph, _ = load_store_graph(PartitionStore(job.store), normalize=False)
    acc = InMemoryTrainer(spec, store_graph, model).evaluate()
    assert abs(acc["val_accuracy"] - fg["val_accuracy"]) < 1e-6

    sar = _train(common + ["--mode", "sar", "--trainers", "2", "--run-dir", str(tmp_path / "sar")])
    assert sar["mode"] == "sar" and sar["trainers"] == 2 and sar["rank_parts"] == [[0, 2], [1, 3]]
    assert len(sar["rank_peak_rss_bytes"]) == 2 and sar["test_accuracy"] > 0.8
    assert (tmp_path / "sar" / "best.pt").exists() and (tmp_path / "sar" / "report.md").exists()
