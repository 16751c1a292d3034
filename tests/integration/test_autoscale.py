"""Integration: a real job (``argosy up``) and a real autoscaler process on the local target.

The autoscaler starts a replica through its backend, the replica registers in Redis and takes
work, the decision and its reason are recorded under ``argosy:{job}:autoscale``, , and the added replica
is part of the stack (``argosy down`` stops it).  ``services.scaling`` does the scaling.  The scale-up is forced with ``--min 2`` so the test
does not depend on how starved the trainer happens to be on a shared machine; the idle-driven
rule itself is covered by tests/services/test_autoscaler.py on recorded series.
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
from argosy.shared.metrics import read_autoscale_decisions, read_autoscale_observation, read_autoscale_replicas

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def argosy(*args, timeout=120, env=None):
    return subprocess.run([sys.executable, "-m", "argosy.services.launch", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


def wait_for(cond, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.mark.timeout(180)
def test_autoscaler_adds_a_sampler_to_a_running_job(redis_url, tmp_path):
    env = {**os.environ, "ARGOSY_HOME": str(tmp_path / "home")}
    p = argosy("generate", "--nodes", "6000", "--avg-degree", "8", "--feature-dim", "8", "--out", str(tmp_path / "g.npz"),
               env=env)
    assert p.returncode == 0, p.stderr
    job = "as-integration"
    p = argosy("up", "--data", str(tmp_path / "g.npz"), "--parts", "4", "--samplers", "1", "--epochs", "200", "--patience", "0",
               "--batch-size", "64", "--hidden", "16", "--eval-max-nodes", "200", "--job", job, "--redis", redis_url,
               "--run-dir", str(tmp_path / "run"), env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    coord = Coordinator(redis_url, job)
    scaler = None
    try:
        wait_for(lambda: len(coord.services("sampler")) == 1 and coord.get_state() == "running", 60, "the job to run")
        log = open(tmp_path / "autoscaler.log", "wb")
        scaler = subprocess.Popen([sys.executable, "-m", "argosy.services.autoscaler", "--redis", redis_url, "--job", job,
                                   "--target", "local", "--roles", "sampler", "--min", "2", "--max", "2",
                                   "--cooldown", "2", "--warmup", "0", "--interval", "0.5", "--window", "4"],
                                  cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
        wait_for(lambda: len(coord.services("sampler")) == 2, 60, "a second sampler to register")
        decisions = read_autoscale_decisions(coord)
        assert decisions[0]["action"] == "add" and decisions[0]["role"] == "sampler" and decisions[0]["replicas"] == 2
        assert "min 2" in decisions[0]["reason"]
        assert read_autoscale_replicas(coord) == {"sampler": 2}
        # the job keeps making progress with the new replica in the consumer group
        before = coord.metrics().get("sampler_batches", 0)
        wait_for(lambda: coord.metrics().get("sampler_batches", 0) > before, 30, "batches after scaling")
        obs = wait_for(lambda: read_autoscale_observation(coord), 10, "an observation")
        assert obs["observed_replicas"]["sampler"] == 2 and obs["reason"]
        # status view shows the decision
        from argosy.shared.status_view import render_status
        assert "replicas sampler 2" in render_status(coord)
        # the added replica belongs to the stack: it survives the autoscaler and `argosy down` stops it
        scaler.send_signal(signal.SIGTERM)
        assert scaler.wait(30) == 0
        info = json.loads((tmp_path / "home" / "stacks" / f"{job}.json").read_text())
        assert sorted(s for s in info["pids"] if s.startswith("sampler")) == ["sampler-0", "sampler-1"]
        assert argosy("down", "--job", job, env=env).returncode == 0
        wait_for(lambda: not coord.services("sampler"), 30, "the samplers to stop")
    finally:
        if scaler is not None and scaler.poll() is None:
            scaler.kill()
            scaler.wait()
        coord.set_state("failed")                    # any straggler exits on its own
        info_path = tmp_path / "home" / "stacks" / f"{job}.json"
        if info_path.exists():                       # the test failed before `argosy down`
            for pid in json.loads(info_path.read_text())["pids"].values():
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        time.sleep(2.0)
        coord.delete_job()
        coord.close()
