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


def _edge_list(tmp_path, n=300, name="edges.txt"):
    rng = np.random.default_rng(0)
    src = rng.integers(0, n, 3 * n)
    dst = rng.integers(0, n, 3 * n)
    (tmp_path / name).write_text("\n".join(f"{a} {b}" for a, b in zip(src, dst)) + "\n")
    return tmp_path / name


def test_side_files_reach_the_partitioner(tmp_path):
    """An edge list with its node data in side files, as a user brings it (issue 34, item 5)."""
    n = 300
    g = _edge_list(tmp_path, n)
    rng = np.random.default_rng(1)
    np.save(tmp_path / "x.npy", rng.normal(size=(n, 16)).astype(np.float32))
    np.save(tmp_path / "y.npy", rng.integers(0, 3, n))
    idx = rng.permutation(n)
    np.save(tmp_path / "train.npy", idx[:150])
    np.save(tmp_path / "val.npy", idx[150:200])
    np.save(tmp_path / "test.npy", idx[200:])
    p = _run(tmp_path, ARGOSY_INPUT=str(g), ARGOSY_FEATURES=str(tmp_path / "x.npy"), ARGOSY_LABELS=str(tmp_path / "y.npy"),
             ARGOSY_TRAIN_MASK=str(tmp_path / "train.npy"), ARGOSY_VAL_MASK=str(tmp_path / "val.npy"),
             ARGOSY_TEST_MASK=str(tmp_path / "test.npy"), ARGOSY_NUM_NODES=str(n),
             ARGOSY_PARTITION_ARGS=f"--num-nodes {n}")
    assert p.returncode == 0, p.stderr[-2000:]
    m = json.loads((tmp_path / "data" / "store" / "manifest.json").read_text())
    assert m["num_nodes"] == n and m["feature_dim"] == 16 and m["num_classes"] == 3
    assert m["splits"] == {"train": 150, "val": 50, "test": 100}


def test_missing_side_file_is_named(tmp_path):
    p = _run(tmp_path, ARGOSY_INPUT=str(_edge_list(tmp_path)), ARGOSY_FEATURES=str(tmp_path / "nope.npy"))
    assert p.returncode == 2 and "nope.npy: no such file" in p.stderr
    assert not (tmp_path / "data" / "store").exists()


def test_a_store_built_from_another_input_is_rebuilt(tmp_path):
    """Issue 34, finding 3: with a store on the volume, a new ARGOSY_INPUT used to be ignored and the
    old graph trained. Now the store is kept only for the same input and settings."""
    a, b = _edge_list(tmp_path, 200, "a.txt"), _edge_list(tmp_path, 400, "b.txt")
    common = dict(ARGOSY_RANDOM_FEATURES="4")
    p = _run(tmp_path, ARGOSY_INPUT=str(a), **common)
    assert p.returncode == 0, p.stderr[-2000:]
    manifest = tmp_path / "data" / "store" / "manifest.json"
    assert json.loads(manifest.read_text())["num_nodes"] == 200
    p = _run(tmp_path, ARGOSY_INPUT=str(a), **common)            # same input, same settings: kept
    assert p.returncode == 0 and "keeping it" in p.stdout, p.stdout + p.stderr
    p = _run(tmp_path, ARGOSY_INPUT=str(b), **common)            # another input: rebuilt, both named
    assert p.returncode == 0, p.stderr[-2000:]
    assert "rebuilding" in p.stdout and "a.txt" in p.stdout and "b.txt" in p.stdout, p.stdout
    assert json.loads(manifest.read_text())["num_nodes"] == 400
    p = _run(tmp_path, ARGOSY_INPUT=str(b), ARGOSY_PARTS="2", **common)    # other settings: rebuilt
    assert "rebuilding" in p.stdout and json.loads(manifest.read_text())["num_parts"] == 2
    b.write_text(b.read_text() + "0 399\n")                        # same name, new contents: rebuilt
    p = _run(tmp_path, ARGOSY_INPUT=str(b), ARGOSY_PARTS="2", **common)
    assert "rebuilding" in p.stdout, p.stdout
