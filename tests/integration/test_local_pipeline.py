"""Integration: real sampler/loader/trainer processes, real ZeroMQ, a real Redis server.

These run the ``argosy`` CLI exactly as a user does and check the JSON it prints.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zmq

from argosy.shared.coord import Coordinator

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def argosy(*args, timeout=300, **kw):
    return subprocess.run([sys.executable, "-m", "argosy.services.launch", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, **kw)


def last_json(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def cora_store(tmp_path_factory):
    from tests.conftest import DATASETS
    path = DATASETS / "cora.npz"
    if not path.exists():
        pytest.skip("cora dataset not present")
    out = tmp_path_factory.mktemp("cora") / "store"
    proc = argosy("partition", str(path), "--parts", "4", "--method", "random", "--out", str(out), "--json")
    res = last_json(proc)
    assert res["parts"] == 4
    return out


def test_train_two_trainers_ddp(cora_store, redis_url, tmp_path):
    """2 samplers, 2 loaders, 2 DDP trainers: every planned seed trained exactly once per epoch."""
    res = last_json(argosy("train", "--store", str(cora_store), "--epochs", "3", "--samplers", "2", "--loaders", "2",
                           "--trainers", "2", "--batch-size", "32", "--redis", redis_url, "--run-dir", str(tmp_path),
                           "--json"))
    for key in ("test_accuracy", "val_accuracy", "epochs", "epoch_seconds", "batches_per_second",
                "sampled_edges_per_second", "trainer_idle_fraction", "remote_fraction", "seeds_planned", "seeds_trained"):
        assert key in res
    assert res["epochs"] == 3
    assert res["seeds_planned"] == res["seeds_trained"] == 3 * 140
    assert res["duplicates"] == 0
    assert 0 < res["remote_fraction"] < 1                  # random 4-way partition: most neighbours remote
    # one host: both samplers (loaders) map every part, so no replica asks a sibling for rows
    assert res["halo_bytes"] == 0 and res["ipc_bytes"] > 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert len(report["epochs"]) == 3
    assert (tmp_path / "training.png").exists() and (tmp_path / "checkpoint.pt").exists()
    import torch
    ckpt = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert "model" in ckpt


def test_killed_sampler_loses_nothing(cora_store, redis_url, tmp_path):
    """SIGKILL one sampler mid-epoch: its claimed work is re-claimed, nothing trained twice."""
    job = "kill-sampler"
    proc = subprocess.Popen([sys.executable, "-m", "argosy.services.launch", "train", "--store", str(cora_store), "--epochs", "6",
                             "--samplers", "2", "--batch-size", "16", "--redis", redis_url, "--job", job,
                             "--run-dir", str(tmp_path), "--claim-timeout", "3", "--json",
                             # a floor on the job's length (~10 s) so the launcher sees the death and
                             # restarts the sampler before the last epoch ends, however fast the machine
                             "--simulate-gpu-step", "0.02"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    coord = Coordinator(redis_url, job)
    deadline = time.time() + 120
    victim = None
    while time.time() < deadline and victim is None:
        if len(coord.epochs()) >= 1:
            for s in coord.services("sampler"):
                victim = s["pid"]
                break
        time.sleep(0.2)
    assert victim, "no sampler registered"
    os.kill(victim, signal.SIGKILL)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    res = json.loads(out.strip().splitlines()[-1])
    assert res["seeds_trained"] == res["seeds_planned"] == 6 * 140
    assert res["duplicates"] >= 0 and res["restarts"] >= 1


def test_malformed_message_does_not_kill_loader(cora_store, redis_url, tmp_path):
    """Garbage and wrong-version frames sent to a live loader are dropped; training still completes."""
    job = "garbage"
    proc = subprocess.Popen([sys.executable, "-m", "argosy.services.launch", "train", "--store", str(cora_store), "--epochs", "4",
                             "--batch-size", "16", "--redis", redis_url, "--job", job, "--run-dir", str(tmp_path), "--json"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    coord = Coordinator(redis_url, job)
    endpoint, deadline = None, time.time() + 120
    while endpoint is None and time.time() < deadline:
        for s in coord.services("loader"):
            endpoint = s.get("endpoint")
        time.sleep(0.2)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.connect(endpoint)
    import msgpack
    sock.send_multipart([b"\x00garbage"])
    sock.send_multipart([msgpack.packb([99, 2, {}, []])])
    sock.send_multipart([msgpack.packb([1, 2, {}, [["nodes", "int64", [1000]]]]), b"short"])
    time.sleep(1.0)
    sock.close(0)
    ctx.term()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    res = json.loads(out.strip().splitlines()[-1])
    assert res["seeds_trained"] == res["seeds_planned"]
    log = "".join(p.read_text() for p in (tmp_path / "logs").glob("loader-*.log"))
    assert "dropped a malformed message" in log and "protocol version mismatch" in log
    # the allocator the launcher gave it: jemalloc where installed (CI installs it), else a warning
    from argosy.shared.malloc import jemalloc_path
    assert ("allocator: jemalloc" if jemalloc_path() else "jemalloc is not installed") in log, log[-2000:]


def test_cli_errors_are_clear(tmp_path):
    p = argosy("train", "--data", str(tmp_path / "nope.npz"))
    assert p.returncode != 0 and "no such file" in p.stderr
    p = argosy("inspect", str(tmp_path))
    assert p.returncode == 2 and "not an Argosy store" in p.stderr
    bad = tmp_path / "bad.txt"
    bad.write_text("0 1\n1 two\n")
    p = argosy("partition", str(bad), "--parts", "2", "--out", str(tmp_path / "s"))
    assert p.returncode == 2 and "line 2" in p.stderr
    assert not (tmp_path / "s").exists()
    good = tmp_path / "good.txt"
    good.write_text("0 1\n1 2\n")
    for mode in ("minibatch", "fullgraph"):          # bad flags fail before anything is partitioned
        p = argosy("train", "--data", str(good), "--mode", mode, "--model", "gcn", "--aggregator", "gcn",
                   "--run-dir", str(tmp_path / f"run-{mode}"))
        assert p.returncode == 2 and "applies to --model sage only" in p.stderr, p.stderr
        assert "partitioned" not in p.stdout + p.stderr and not (tmp_path / f"run-{mode}" / "store").exists()


def test_inspect_json(cora_store):
    res = last_json(argosy("inspect", str(cora_store), "--json", "--verify"))
    assert res["n"] == 2708 and res["m"] == 5278 and res["parts"] == 4
    assert sum(res["part_sizes"]) == 2708 and res["balance"] <= 1.05


def test_train_with_curve_encryption(cora_store, redis_url, tmp_path):
    """With ARGOSY_CURVE_KEYS set every ZeroMQ hop is CURVE-encrypted; training is unchanged."""
    from argosy.shared.transport import create_keys
    create_keys(str(tmp_path / "keys"))
    env = {**os.environ, "ARGOSY_CURVE_KEYS": str(tmp_path / "keys")}
    res = last_json(argosy("train", "--store", str(cora_store), "--epochs", "2", "--batch-size", "64",
                           "--redis", redis_url, "--run-dir", str(tmp_path / "run"), "--json", env=env))
    assert res["seeds_trained"] == res["seeds_planned"] == 2 * 140


def test_parts_over_the_memory_budget_train_from_disk(cora_store, redis_url, tmp_path):
    """A budget far below the store: samplers and loaders serve their parts from disk (loader
    row cache), waiting batches are capped at a 16th of the budget (applied in arrival order
    past it), and every planned seed is still trained exactly once, at the in-memory accuracy."""
    common = ["train", "--store", str(cora_store), "--epochs", "20", "--patience", "0", "--samplers", "2",
              "--batch-size", "32", "--redis", redis_url, "--seed", "3", "--json"]
    # the in-memory run evaluates as the out-of-core one does by default (sampled with the training fanouts)
    mem = last_json(argosy(*common, "--eval-fanouts", "25,10", "--run-dir", str(tmp_path / "mem")))
    proc = argosy(*common, "--memory-budget", "2M", "--run-dir", str(tmp_path / "ooc"))
    res = last_json(proc)
    assert "validation and test are sampled with the training fanouts" in proc.stderr
    assert res["seeds_planned"] == res["seeds_trained"] == 20 * 140 and res["duplicates"] == 0
    logs = "".join(p.read_text() for p in (tmp_path / "ooc" / "logs").glob("*.log"))
    assert logs.count("out-of-core: held parts") == 3         # 2 samplers, 1 loader
    assert mem["row_cache_hit_rate"] is None and 0 < res["row_cache_hit_rate"] < 1
    assert len(res["row_cache_hit_rate_per_epoch"]) >= 3
    # same data and evaluation; updates may follow arrival order past the 128 KB waiting-batch bound
    assert abs(res["test_accuracy"] - mem["test_accuracy"]) <= 0.04, (res["test_accuracy"], mem["test_accuracy"])
