"""`python -m argosy.services.fullgraph train ... --json` in every mode ends with one JSON line of metrics."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from argosy.services.fullgraph.synthetic import planted_graph, save_npz

COMMON = {"test_accuracy", "val_accuracy", "epochs", "epoch_seconds", "peak_rss_bytes", "mode", "parts",
          "trainers"}


def _run(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-m", "argosy.services.fullgraph", "train", *args, "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, out.stdout
    return json.loads(lines[0])


@pytest.mark.integration
def test_fullgraph_and_sar_cli(tmp_path):
    data = tmp_path / "g.npz"
    save_npz(planted_graph(600, avg_degree=8, num_classes=3, feat_dim=16, noise=0.5, seed=1), str(data))
    base = ["--data", str(data), "--epochs", "30", "--hidden", "16", "--lr", "0.05", "--no-feature-norm"]
    fg = _run(base + ["--mode", "fullgraph", "--model", "gcn", "--parts", "4", "--cache-bytes", "20K",
                      "--spill-dir", str(tmp_path), "--eviction", "lru"])
    assert COMMON | {"cache_hit_rate", "bytes_read", "bytes_written"} <= fg.keys()
    assert fg["mode"] == "fullgraph" and fg["parts"] == 4 and fg["trainers"] == 1 and fg["epochs"] == 30
    assert fg["bytes_written"] > 0 and 0 <= fg["cache_hit_rate"] <= 1
    assert fg["test_accuracy"] > 0.8  # planted classes are easy
    sar = _run(base + ["--mode", "sar", "--model", "sage", "--trainers", "2"])
    assert COMMON <= sar.keys() and sar["trainers"] == 2 and len(sar["rank_peak_rss_bytes"]) == 2
    assert sar["test_accuracy"] > 0.8
