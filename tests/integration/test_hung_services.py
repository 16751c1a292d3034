"""A hung process (SIGSTOP), with real processes: continued, or never continued.

* A trainer stopped longer than ``--peer-timeout`` and then continued goes on: its starvation
  clock counts only the time it ran, so it does not blame the samplers and loaders (it used to
  fail with a ``PeerDeadError`` "received no batch for N s ... A sampler or loader tier is down").
* A trainer stopped for good does not stall the job forever: once its heartbeat has been gone for
  ``--peer-timeout`` the launcher logs one line naming it and SIGKILLs it, and the trainers restart
  from the checkpoint.  A sampler or loader hung for good is killed and replaced the same way.

Each job must still train every planned seed exactly once.
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

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
PEER_TIMEOUT = 8
EPOCHS = 8


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from tests.conftest import DATASETS
    out = tmp_path_factory.mktemp("hung") / "store"
    subprocess.run([sys.executable, "-m", "argosy.services.partitioner", str(DATASETS / "cora.npz"), "--parts", "4",
                    "--method", "random", "--out", str(out)], check=True, cwd=ROOT, capture_output=True)
    return out


def _start(store, url, job, run_dir, *extra, epochs=EPOCHS):
    return subprocess.Popen([sys.executable, "-m", "argosy.services.launch", "train", "--store", str(store),
                             "--epochs", str(epochs), "--batch-size", "16", "--redis", url, "--job", job,
                             "--run-dir", str(run_dir), "--claim-timeout", "3", "--peer-timeout", str(PEER_TIMEOUT),
                             "--patience", "0", "--json", *extra],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_epochs(coord, n, proc, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        try:
            if len(coord.epochs()) >= n:
                return True
        except Exception:
            pass
        time.sleep(0.1)
    return False


def _finish(proc, epochs=EPOCHS):
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    res = json.loads(out.strip().splitlines()[-1])
    assert res["seeds_trained"] == res["seeds_planned"] == epochs * 140, res
    assert res["duplicates"] == 0 and res["seeds_dropped"] == 0
    return res, err


def _signal(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


@pytest.mark.timeout(120)
def test_trainer_stopped_past_peer_timeout_then_continued(store, redis_url, tmp_path):
    proc = _start(store, redis_url, "stop-trainer", tmp_path)
    coord = Coordinator(redis_url, "stop-trainer")
    assert _wait_epochs(coord, 2, proc)
    loaders = [s["pid"] for s in coord.services("loader")]
    trainer = coord.services("trainer")[0]["pid"]
    # the loaders first, so the trainer has drained what was staged and waits for a batch when it is
    # stopped: on SIGCONT its first poll comes back empty, long after the last batch it received
    _signal(loaders, signal.SIGSTOP)
    try:
        time.sleep(1.5)
        _signal([trainer], signal.SIGSTOP)
    finally:
        _signal(loaders, signal.SIGCONT)
    try:
        time.sleep(PEER_TIMEOUT + 2)           # longer than --peer-timeout, shorter than its heartbeat's absence + it
    finally:
        _signal([trainer], signal.SIGCONT)
    res, err = _finish(proc)
    assert "PeerDeadError" not in err and "received no batch" not in err, err[-3000:]
    assert res["trainer_restarts"] == 0 and " hung:" not in err
    assert res["epochs"] == EPOCHS


@pytest.mark.timeout(150)
def test_trainer_hung_for_good_is_named_killed_and_restarted(store, redis_url, tmp_path):
    proc = _start(store, redis_url, "hang-trainer", tmp_path)
    coord = Coordinator(redis_url, "hang-trainer")
    assert _wait_epochs(coord, 2, proc)
    trainer = coord.services("trainer")[0]
    os.kill(trainer["pid"], signal.SIGSTOP)          # never continued: the launcher has to end it
    res, err = _finish(proc)
    line = next((ln for ln in err.splitlines() if " hung: " in ln), None)
    assert line is not None, err[-3000:]
    assert f"{trainer['id']} (pid {trainer['pid']}) hung" in line and "stopped" in line, line
    assert res["trainer_restarts"] == 1 and res["resumed_from_epoch"] >= 1
    assert res["epochs"] == EPOCHS
    assert res["services_hung"] == 1
    assert [e["sid"] for e in coord.events() if e["event"] == "hung"] == [trainer["id"]]


@pytest.mark.timeout(150)
def test_loader_hung_for_good_is_named_killed_and_replaced(store, redis_url, tmp_path):
    """The other loader carries the work at once (the hung one's heartbeat is gone after 5 s); after
    ``--peer-timeout`` the launcher names the hung loader, kills it and starts a replacement.  A hung
    loader does not stall the job, so the job is long enough to outlast that."""
    epochs = 100
    proc = _start(store, redis_url, "hang-loader", tmp_path, "--loaders", "2", epochs=epochs)
    coord = Coordinator(redis_url, "hang-loader")
    assert _wait_epochs(coord, 2, proc)
    loader = coord.services("loader")[0]
    os.kill(loader["pid"], signal.SIGSTOP)
    try:
        res, err = _finish(proc, epochs)
    finally:
        _signal([loader["pid"]], signal.SIGCONT)      # only if the launcher did not kill it (the test fails then)
    line = next((ln for ln in err.splitlines() if " hung: " in ln), None)
    assert line is not None, ("the job ended before the hang timeout, or the loader was not named", err[-3000:])
    assert f"{loader['id']} (pid {loader['pid']}) hung" in line, line
    assert res["services_hung"] == 1 and res["restarts"] >= 1 and res["trainer_restarts"] == 0
