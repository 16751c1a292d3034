"""Lifecycle of a local job with real processes: signals, orphans, ``down``/``status``, failing fast.

Every job here uses the embedded Redis (no ``$ARGOSY_REDIS_URL``) so the Redis server is one of
the processes that must not outlive the job.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from argosy.shared.coord import Coordinator

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def env(tmp_path):
    e = {k: v for k, v in os.environ.items() if k not in ("ARGOSY_REDIS_URL", "ARGOSY_LAUNCHER_PID")}
    return {**e, "ARGOSY_HOME": str(tmp_path / "home")}


def _store(path: Path, features: int = 8) -> Path:
    from argosy.shared.store import write_store
    from tests.graphs import random_graph
    g = random_graph(600, 4000, seed=3, features=features, classes=4)
    write_store(g, np.random.default_rng(0).integers(0, 2, g.num_nodes), path)
    return path


def _launch(env, *args, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "argosy.services.launch", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _argosy(env, *args, timeout=180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "argosy.services.launch", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _stack(env, job) -> dict | None:
    p = Path(env["ARGOSY_HOME"]) / "stacks" / f"{job}.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def _wait(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _job_pids(launcher: int, stack: dict) -> set[int]:
    """Every process that belongs to the job: children (by the launcher pid in their environment),
    the reaper, the embedded Redis and whatever the stack file lists."""
    out = set(stack["pids"].values()) | {stack["redis_pid"]}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            environ = (d / "environ").read_bytes().split(b"\0")
            cmdline = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"ARGOSY_LAUNCHER_PID={launcher}".encode() in environ or \
                (b"reap" in cmdline and str(launcher).encode() in cmdline):
            out.add(int(d.name))
    return out


def _running_job(env, store, job, run_dir) -> tuple[subprocess.Popen, dict, Coordinator]:
    proc = _launch(env, "train", "--store", str(store), "--epochs", "1000", "--patience", "0", "--batch-size", "32", "--job", job,
                   "--run-dir", str(run_dir), "--json")
    info = _wait(lambda: (s := _stack(env, job)) and len(s["pids"]) == 3 and s, 60, "the stack file")
    coord = Coordinator(info["redis"], job)
    _wait(lambda: len(coord.epochs()) >= 1 or proc.poll() is not None, 120, "the first epoch")
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    return proc, info, coord


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_launcher_drains_reports_and_leaves_nothing(sig, env, tmp_path):
    store = _store(tmp_path / "store")
    proc, info, coord = _running_job(env, store, "sig", tmp_path / "run")
    pids = _job_pids(proc.pid, info)
    assert len(pids) >= 5                          # trainer, loader, sampler, Redis, reaper
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 1 and out.strip(), err[-3000:]
    res = json.loads(out.strip().splitlines()[-1])
    assert res["error"] == "interrupted"
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["epochs"], "the report was written while Redis still held the epochs"
    assert [p["phase"] for p in report["phases"]][-1] == "failed"
    _wait(lambda: not any(_alive(p) for p in pids), 20, f"the job's processes to exit: {pids}")
    assert _stack(env, "sig") is None


def test_sigkilled_launcher_leaves_nothing_alive(env, tmp_path):
    store = _store(tmp_path / "store")
    proc, info, coord = _running_job(env, store, "kill9", tmp_path / "run")
    pids = _job_pids(proc.pid, info)
    assert info["redis_pid"] in pids and len(pids) >= 5
    proc.kill()
    proc.wait()
    _wait(lambda: not any(_alive(p) for p in pids), 20,
          f"the job's processes to exit: {[p for p in pids if _alive(p)]}")
    assert _stack(env, "kill9") is None


def test_status_and_down_find_train_and_up_jobs(env, tmp_path):
    store = _store(tmp_path / "store")
    train, info_a, coord_a = _running_job(env, store, "job-a", tmp_path / "run-a")
    up = _argosy(env, "up", "--store", str(store), "--epochs", "1000", "--patience", "0", "--batch-size", "32", "--job", "job-b",
                 "--run-dir", str(tmp_path / "run-b"))
    assert up.returncode == 0, up.stderr[-3000:]
    assert json.loads(up.stdout.strip().splitlines()[-1])["job"] == "job-b"
    info_b = _stack(env, "job-b")
    pids_b = _job_pids(info_b["launcher_pid"], info_b)
    try:
        def status(job):
            st = _argosy(env, "status", "--job", job, "--json")
            assert st.returncode == 0, st.stderr
            out = json.loads(st.stdout)
            assert out["job"] == job and out["state"] in ("starting", "running")
            return {s["role"] for s in out["services"] if s["alive"]} == {"trainer", "loader", "sampler"}

        for job in ("job-a", "job-b"):
            _wait(lambda: status(job), 90, f"{job}'s services in `argosy status`")
        several = _argosy(env, "status")
        assert several.returncode == 2 and "several jobs" in several.stderr and "job-a" in several.stderr, \
            (several.stdout, sorted(os.listdir(Path(env["ARGOSY_HOME"]) / "stacks")))
        # down on the job started with `train`: its launcher drains, reports and exits
        pids_a = _job_pids(train.pid, info_a)
        down = _argosy(env, "down", "--job", "job-a")
        assert down.returncode == 0 and "stopped job job-a" in down.stdout, down.stderr
        assert train.wait(5) == 1
        assert not any(_alive(p) for p in pids_a - {train.pid}) or _wait(
            lambda: not any(_alive(p) for p in pids_a), 20, "job-a's processes")
        assert json.loads((tmp_path / "run-a" / "report.json").read_text())["epochs"]
        # job-b is untouched, then found and stopped without --job (the only job left)
        assert all(_alive(p) for p in info_b["pids"].values())
        down = _argosy(env, "down")
        assert down.returncode == 0 and "stopped job job-b" in down.stdout, down.stderr
        assert json.loads((tmp_path / "run-b" / "report.json").read_text())["epochs"]
        _wait(lambda: not any(_alive(p) for p in pids_b), 20, "job-b's processes")
        assert _argosy(env, "status", "--job", "job-b").returncode == 2
    finally:
        for p in (train.pid, info_b["launcher_pid"]):
            if _alive(p):
                os.kill(p, signal.SIGKILL)


def test_device_cuda_without_cuda_is_refused_before_anything_starts(env, tmp_path):
    """`--device cuda` on a machine without CUDA: one error up front (the preflight), no service
    started, no run dir left behind."""
    import torch
    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    store = _store(tmp_path / "store")
    p = _argosy(env, "train", "--store", str(store), "--epochs", "3", "--device", "cuda",
                "--run-dir", str(tmp_path / "run"))
    assert p.returncode == 2
    assert p.stderr.count("--device cuda: no CUDA device is available on this machine") == 1, p.stderr
    assert not (tmp_path / "run").exists()


def test_role_that_cannot_start_exits_as_cannot_start(redis_url, tmp_path):
    """A deterministic start-up error inside a service (here: a spec asking for CUDA, put into Redis
    past the preflight, as by hand) exits with EXIT_CANNOT_START once, with the reason, so the driver
    fails the job instead of restarting the role (tests/services/test_driver.py replays that)."""
    import torch
    from argosy.shared.config import JobConfig, TrainerConfig
    from argosy.shared.lifecycle import EXIT_CANNOT_START
    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    store = _store(tmp_path / "store")
    job = f"cannot-start-{os.getpid()}"
    coord = Coordinator(redis_url, job)
    coord.delete_job()
    coord.put_spec(JobConfig(job=job, store=str(store), run_dir=str(tmp_path / "run"),
                             trainer=TrainerConfig(device="cuda", epochs=1)))
    env = {**os.environ, "ARGOSY_REDIS_URL": redis_url}
    p = subprocess.run([sys.executable, "-m", "argosy.services.trainer", "--job", job, "--id", "trainer-0",
                        "--rank", "0"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    coord.delete_job()
    assert p.returncode == EXIT_CANNOT_START, p.stderr[-2000:]
    assert "no CUDA device is available" in p.stderr and "Traceback" in p.stderr


def test_warmup_compiles_every_role_without_warnings(tmp_path):
    """``argosy warmup`` (after install) runs a tiny demo through every role; a user sees one line."""
    env = {**os.environ, "ARGOSY_HOME": str(tmp_path / "home")}
    out = _argosy(env, "warmup", timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "compiled and cached" in out.stdout + out.stderr
    assert "WARNING" not in out.stderr, out.stderr[-2000:]
