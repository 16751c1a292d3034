"""Fault injection with real processes: a killed loader or trainer, a restarted Redis.

Each run must end with every planned seed trained exactly once (``seeds_trained ==
seeds_planned``, ``duplicates == 0``).  ``bench/chaos.py`` repeats these 5x each.
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

from argosy.shared.coord import Coordinator
from argosy.shared.redis_server import EmbeddedRedis

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from tests.conftest import DATASETS
    out = tmp_path_factory.mktemp("faults") / "store"
    subprocess.run([sys.executable, "-m", "argosy.services.partitioner", str(DATASETS / "cora.npz"), "--parts", "4",
                    "--method", "random", "--out", str(out)], check=True, cwd=ROOT, capture_output=True)
    return out


def _start(store, url, job, run_dir, *extra):
    return subprocess.Popen([sys.executable, "-m", "argosy.services.launch", "train", "--store", str(store), "--epochs", "8",
                             "--batch-size", "16", "--redis", url, "--job", job, "--run-dir", str(run_dir),
                             "--claim-timeout", "3", "--peer-timeout", "90", "--json", *extra],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_epochs(coord, n, proc, timeout=180):
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        try:
            if len(coord.epochs()) >= n:
                return True
        except Exception:
            pass
        time.sleep(0.1)
    return False


def _finish(proc):
    out, err = proc.communicate(timeout=400)
    assert proc.returncode == 0, err[-3000:]
    res = json.loads(out.strip().splitlines()[-1])
    assert res["seeds_trained"] == res["seeds_planned"] == 8 * 140
    assert res["duplicates"] == 0 and res["seeds_dropped"] == 0
    return res


def test_killed_loader(store, redis_url, tmp_path):
    proc = _start(store, redis_url, "kill-loader", tmp_path, "--loaders", "2")
    coord = Coordinator(redis_url, "kill-loader")
    assert _wait_epochs(coord, 2, proc)
    victim = coord.services("loader")[0]
    os.kill(victim["pid"], signal.SIGKILL)
    res = _finish(proc)
    assert res["restarts"] >= 1


def test_killed_trainer_resumes_from_checkpoint(store, redis_url, tmp_path):
    proc = _start(store, redis_url, "kill-trainer", tmp_path)
    coord = Coordinator(redis_url, "kill-trainer")
    assert _wait_epochs(coord, 3, proc)
    os.kill(coord.services("trainer")[0]["pid"], signal.SIGKILL)
    res = _finish(proc)
    assert res["trainer_restarts"] == 1 and res["resumed_from_epoch"] >= 1
    assert res["epochs"] == 8
    if os.path.isdir("/dev/shm"):              # the loader's rows went through its ring, before and after
        assert res["ring_batches"] > 0          # the kill (the successor's ring is a new one)


def test_redis_restart(store, tmp_path):
    redis = EmbeddedRedis(data_dir=str(tmp_path / "redis")).start()
    try:
        proc = _start(store, redis.url, "redis-restart", tmp_path / "run")
        coord = Coordinator(redis.url, "redis-restart")
        assert _wait_epochs(coord, 2, proc)
        redis.kill()
        time.sleep(3.0)
        redis.start()
        res = _finish(proc)
        assert res["epochs"] == 8
    finally:
        redis.stop()
