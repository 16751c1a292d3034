"""The compose/Helm partitioner job script, run for real with ``sh`` (no container needed): the
demo graph partitions with its own features, and a graph without features gets none invented
(training it is then a clear error) unless random ones are asked for. The script used to pass
``--synthetic-features 64`` to every graph, which the partitioner refuses for a graph that has
features: the demo's too, so the compose stack's partitioner always failed."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docker" / "partition-job.sh"


def _run(tmp_path, **env):
    e = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
             ARGOSY_STORE=str(tmp_path / "data" / "store"), ARGOSY_DEMO_NODES="1000", **env)
    (tmp_path / "data").mkdir(exist_ok=True)
    return subprocess.run(["sh", str(SCRIPT)], env=e, capture_output=True, text=True, timeout=300)


def test_demo_graph_partitions_with_an_edge_limit(tmp_path):
    p = _run(tmp_path, ARGOSY_MAX_EDGE_BALANCE="1.2")
    assert p.returncode == 0, p.stderr[-2000:]
    m = json.loads((tmp_path / "data" / "store" / "manifest.json").read_text())
    assert m["feature_dim"] > 0 and m["partition"]["random_features"] == 0   # the demo's own features
    assert m["partition"]["edge_balance"] <= 1.2 + 1e-9


def test_graph_without_features_gets_random_ones_only_when_asked(tmp_path):
    src = np.arange(200, dtype=np.int32)
    np.save(tmp_path / "g.npy", np.stack([src, (src + 1) % 200], axis=1))
    p = _run(tmp_path, ARGOSY_INPUT=str(tmp_path / "g.npy"))
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads((tmp_path / "data" / "store" / "manifest.json").read_text())["feature_dim"] == 0
    p = _run(tmp_path, ARGOSY_INPUT=str(tmp_path / "g.npy"), ARGOSY_RANDOM_FEATURES="8",
             ARGOSY_REPARTITION="1")
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads((tmp_path / "data" / "store" / "manifest.json").read_text())["feature_dim"] == 8
