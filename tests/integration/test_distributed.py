"""Simulated hosts (network namespaces, shaped links) end to end through the CLI.

Skipped, with the reason, where network namespaces cannot be made (not root, no iproute2).
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

from argosy.services.netsim import available

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
WHY = available()
needs_netns = pytest.mark.skipif(WHY is not None, reason=f"simulated hosts unavailable: {WHY}")


def _train(tmp_path, name, *extra, timeout=500):
    from tests.conftest import DATASETS
    cmd = [sys.executable, "-m", "argosy.services.launch", "train", "--data", str(DATASETS / "cora.npz"), "--parts", "2",
           "--partition-method", "random", "--epochs", "2", "--patience", "0", "--json", "--run-dir",
           str(tmp_path / name), *extra]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _ours(pid: int) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [ln.split()[0] for ln in out.splitlines() if ln.startswith(f"ag{pid}-")]


@needs_netns
def test_two_hosts_same_accuracy_as_one_and_wire_bytes(tmp_path):
    one = _train(tmp_path, "one")
    two = _train(tmp_path, "two", "--hosts", "2", "--link-rate", "1gbit")
    assert two["test_accuracy"] == one["test_accuracy"] and two["val_loss"] == one["val_loss"]   # same batches
    assert one["wire_bytes"] == 0 and one["ipc_bytes"] > 0           # one host: nothing crosses hosts
    assert two["wire_bytes"] > 0 and two["halo_bytes"] > 0 and len(two["wire_bytes_per_epoch"]) == 2
    assert two["hosts"]["count"] == 2 and two["seeds_trained"] == two["seeds_planned"] and two["duplicates"] == 0
    assert not [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
                if n.startswith("ag") and "-h" in n and _launcher_dead(n)]


def _launcher_dead(ns: str) -> bool:
    try:
        os.kill(int(ns[2:].split("-")[0]), 0)
        return False
    except ProcessLookupError:
        return True


@needs_netns
def test_killed_launcher_leaves_no_namespace(tmp_path):
    from tests.conftest import DATASETS
    p = subprocess.Popen([sys.executable, "-m", "argosy.services.launch", "train", "--data", str(DATASETS / "cora.npz"),
                          "--parts", "2", "--epochs", "50", "--patience", "0", "--hosts", "2", "--json",
                          "--run-dir", str(tmp_path / "k")], cwd=ROOT, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and len(_ours(p.pid)) < 4:
        time.sleep(0.2)
    assert len(_ours(p.pid)) == 4                     # h0, h1, gpu, redis
    p.send_signal(signal.SIGKILL)
    p.wait()
    def links():
        return subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout

    deadline = time.time() + 30
    while time.time() < deadline and (_ours(p.pid) or f"ag{p.pid}" in links()):
        time.sleep(0.2)
    assert _ours(p.pid) == []
    assert f"ag{p.pid}" not in links()


@needs_netns
def test_killed_host_sampler_mid_epoch_parts_taken_over(tmp_path):
    from tests.conftest import DATASETS
    from argosy.services.stack import StackFile
    from argosy.shared.coord import Coordinator
    job = f"dist-kill-{os.getpid()}"
    p = subprocess.Popen([sys.executable, "-m", "argosy.services.launch", "train", "--data", str(DATASETS / "cora.npz"),
                          "--parts", "2", "--epochs", "6", "--patience", "0", "--batch-size", "16", "--hosts", "2",
                          "--claim-timeout", "3", "--json", "--job", job, "--run-dir", str(tmp_path / "kill")],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 180
        coord = None
        while time.time() < deadline and p.poll() is None:
            try:
                info = StackFile(job).read()
                coord = coord or Coordinator(info.redis, job, connect_timeout=5)
                if len(coord.epochs()) >= 1 and "sampler-1" in info.pids and "loader-1" in info.pids:
                    break
            except Exception:
                pass
            time.sleep(0.2)
        assert coord is not None and len(coord.epochs()) >= 1, "job did not reach epoch 1"
        info = StackFile(job).read()
        os.kill(info.pids["sampler-1"], signal.SIGKILL)
        os.kill(info.pids["loader-1"], signal.SIGKILL)
        out, err = p.communicate(timeout=400)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err[-3000:]
    res = json.loads(out.strip().splitlines()[-1])
    assert res["restarts"] >= 2
    assert res["seeds_trained"] == res["seeds_planned"] and res["duplicates"] == 0 and res["seeds_dropped"] == 0


def test_simulated_gpu_is_labelled_and_trains_every_seed_once(tmp_path):
    res = _train(tmp_path, "sim", "--simulate-gpu-step", "2ms", "--epochs", "1")
    assert res["simulated_gpu_step_seconds"] == pytest.approx(0.002)
    assert "SIMULATED GPU" in res["simulation"]
    assert res["seeds_trained"] == res["seeds_planned"] > 0 and res["duplicates"] == 0
    assert "SIMULATED GPU" in (tmp_path / "sim" / "report.md").read_text() or "simulat" in \
        (tmp_path / "sim" / "report.md").read_text().lower()
