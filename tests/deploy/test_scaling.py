"""``services.scaling``: the ``argosy scale`` command on its three targets.

* local: for real. A tiny job is started with ``argosy up`` (real sampler/loader/trainer
  processes, ZeroMQ, a real Redis server), samplers are scaled 1 -> 3 -> 1 mid-run, the Redis
  registry must show the new replicas within seconds, and the job must still train every planned
  seed exactly once.
* k8s: against ``tests/deploy/fake_apiserver.py``, a ~100-line in-memory fake of the apps/v1
  API (Deployment/StatefulSet ``/scale`` subresource) on 127.0.0.1, driven through the official
  ``kubernetes`` Python client. There is no real Kubernetes API server in these tests (none can
  run on the development machines); what is checked is the exact REST calls, the replica count
  read back, and the error mapping.
* compose: the exact ``docker compose ... up -d --no-recreate --no-deps --scale`` command, run against a
  recording stand-in executable; ``test_docker_stack.py`` runs it against a real engine.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from argosy.services import scaling
from argosy.services.scaling import scale
from argosy.shared.errors import ArgosyError
from tests.deploy.fake_apiserver import FakeApiServer

ROOT = Path(__file__).resolve().parents[2]


# ---- argument checks (no target touched) -----------------------------------------------------
@pytest.mark.parametrize("target", scaling.TARGETS)
def test_trainers_are_refused_with_reason(target):
    with pytest.raises(ArgosyError, match="torch.distributed world size"):
        scale("trainer", 3, target)


@pytest.mark.parametrize("service,replicas,target,match", [
    ("partitioner", 2, "local", "only sampler, loader, offload"),
    ("redis", 2, "k8s", "only sampler, loader, offload"),
    ("sampler", -1, "local", r"between 0 and 1024 \(got -1\)"),
    ("sampler", 5000, "compose", r"got 5000"),
    ("sampler", True, "local", "must be an integer"),
    ("sampler", "3", "local", "must be an integer"),
    ("sampler", 2, "swarm", "unknown scale target 'swarm'"),
])
def test_bad_requests(service, replicas, target, match):
    with pytest.raises(ArgosyError, match=match):
        scale(service, replicas, target)


def test_local_offload_is_not_a_local_role(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGOSY_HOME", str(tmp_path))
    with pytest.raises(ArgosyError, match="not part of a local"):
        scale("offload", 2, "local", job="x")


def test_local_without_stack_is_clear(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGOSY_HOME", str(tmp_path))
    with pytest.raises(ArgosyError, match="no running stack"):
        scale("sampler", 2, "local")
    with pytest.raises(ArgosyError, match="no stack file"):
        scale("sampler", 2, "local", job="nope")


def test_cli_refuses_trainer(capsys):
    assert scaling.main(["trainer", "4"]) == 2
    assert "cannot be scaled" in capsys.readouterr().err


# ---- compose ---------------------------------------------------------------------------------
def test_compose_exact_command():
    res = scale("sampler", 3, "compose", project="argosy", dry_run=True)
    assert res.command == ["docker", "compose", "-p", "argosy", "up", "-d", "--no-recreate", "--no-deps",
                           "--scale", "sampler=3", "sampler"]
    res = scale("loader", 2, "compose", project="p", files=["docker-compose.yml", "docker-compose.cpu.yml"],
                compose="docker-compose", dry_run=True)
    assert res.command == ["docker-compose", "-p", "p", "-f", "docker-compose.yml", "-f", "docker-compose.cpu.yml",
                           "up", "-d", "--no-recreate", "--no-deps", "--scale", "loader=2", "loader"]


def _fake_compose(tmp_path, monkeypatch, job_now: str = "demo"):
    """A compose command and a docker CLI that log their calls; the running replicas were created
    with ARGOSY_JOB=demo, and compose would now create new ones with ``job_now``."""
    log = tmp_path / "calls.txt"
    fake = tmp_path / "fake-compose"
    config = json.dumps({"services": {"sampler": {"environment": {"ARGOSY_JOB": job_now, "ARGOSY_LOG_LEVEL": "INFO"}}}})
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\n"
                    "case \"$*\" in *' ps -q '*) printf 'c1\\nc2\\n';; esac\n"
                    f"case \"$*\" in *' config --format json') echo '{config}';; esac\n"
                    "case \"$*\" in *offload=9*) echo 'no such service' >&2; exit 3;; esac\n")
    fake.chmod(0o755)
    docker = tmp_path / "bin" / "docker"
    docker.parent.mkdir()
    docker.write_text("#!/bin/sh\necho '[\"ARGOSY_JOB=demo\", \"ARGOSY_LOG_LEVEL=INFO\", \"PATH=/usr/bin\"]'\n")
    docker.chmod(0o755)
    monkeypatch.setenv("PATH", f"{docker.parent}:{os.environ['PATH']}")
    return fake, log


def test_compose_runs_command_and_reports_failure(tmp_path, monkeypatch):
    fake, log = _fake_compose(tmp_path, monkeypatch)
    res = scale("sampler", 4, "compose", project="demo", compose=[str(fake)])
    assert res.previous == 2 and res.replicas == 4
    assert log.read_text().splitlines() == ["-p demo ps -q sampler", "-p demo config --format json",
                                            "-p demo up -d --no-recreate --no-deps --scale sampler=4 sampler"]
    with pytest.raises(ArgosyError, match="exit code 3:\nno such service"):
        scale("offload", 9, "compose", project="demo", compose=[str(fake)])


def test_compose_refuses_new_replicas_with_other_settings(tmp_path, monkeypatch):
    """Issue 34: new replicas took their settings from the caller's shell (another job, silently)."""
    fake, log = _fake_compose(tmp_path, monkeypatch, job_now="other")
    with pytest.raises(ArgosyError, match=r"ARGOSY_JOB='demo' \(now 'other'\).*\.env"):
        scale("sampler", 4, "compose", project="demo", compose=[str(fake)])
    assert not any(" up " in line for line in log.read_text().splitlines())
    scale("sampler", 1, "compose", project="demo", compose=[str(fake)])      # scaling down creates nothing: no check


def test_cli_compose_dry_run(capsys):
    assert scaling.main(["sampler", "5", "--target", "compose", "--project", "x", "--dry-run"]) == 0
    assert capsys.readouterr().out.strip() == "docker compose -p x up -d --no-recreate --no-deps --scale sampler=5 sampler"


# ---- kubernetes (fake apps/v1 API server; no real cluster) -----------------------------------
@pytest.fixture
def apiserver():
    pytest.importorskip("kubernetes", reason="the k8s target needs `pip install 'argosy[k8s]'`")
    with FakeApiServer({("gnn", "deployments", "argosy-sampler"): 2, ("gnn", "deployments", "argosy-loader"): 1,
                        ("gnn", "statefulsets", "argosy-trainer"): 2}) as srv:
        yield srv


def test_k8s_scale_patches_scale_subresource(apiserver):
    res = scale("sampler", 5, "k8s", namespace="gnn", release="argosy", host=apiserver.url)
    assert (res.previous, res.replicas) == (2, 5)
    assert apiserver.objects[("gnn", "deployments", "argosy-sampler")] == 5
    method, path, ctype, body = apiserver.requests[-1]
    assert (method, path) == ("PATCH", "/apis/apps/v1/namespaces/gnn/deployments/argosy-sampler/scale")
    assert ctype == "application/strategic-merge-patch+json" and body == {"spec": {"replicas": 5}}
    assert apiserver.requests[-2][:2] == ("GET", "/apis/apps/v1/namespaces/gnn/deployments/argosy-sampler/scale")
    res = scale("sampler", 0, "k8s", namespace="gnn", release="argosy", host=apiserver.url)
    assert (res.previous, res.replicas) == (5, 0)


def test_k8s_missing_deployment_names_release(apiserver):
    with pytest.raises(ArgosyError, match="deployment 'other-loader' not found in namespace 'gnn'.*--release"):
        scale("loader", 3, "k8s", namespace="gnn", release="other", host=apiserver.url)


def test_k8s_trainer_refused_before_any_request(apiserver):
    with pytest.raises(ArgosyError, match="cannot be scaled"):
        scale("trainer", 4, "k8s", namespace="gnn", host=apiserver.url)
    assert apiserver.requests == [] and apiserver.objects[("gnn", "statefulsets", "argosy-trainer")] == 2


def test_k8s_cli(apiserver, capsys):
    assert scaling.main(["loader", "3", "--target", "k8s", "--namespace", "gnn", "--server", apiserver.url, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["previous"] == 1 and out["replicas"] == 3 and out["target"] == "k8s"


# ---- local: a real job, scaled while it trains -----------------------------------------------
def _argosy(env, *args, timeout=300):
    return subprocess.run([sys.executable, "-m", "argosy.services.launch", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.mark.integration
@pytest.mark.slow
def test_local_scale_samplers_mid_run(tmp_path, monkeypatch, redis_url):
    from argosy.shared.coord import Coordinator
    from tests.conftest import DATASETS
    data = DATASETS / "cora.npz"
    if not data.exists():
        pytest.skip(f"dataset {data} not present")
    monkeypatch.setenv("ARGOSY_HOME", str(tmp_path / "home"))
    env = {**os.environ, "ARGOSY_HOME": str(tmp_path / "home")}
    job, epochs = f"scale-{os.getpid()}", 80
    up = _argosy(env, "up", "--data", str(data), "--epochs", str(epochs), "--patience", "0", "--partition-method", "random",
                 "--batch-size", "32", "--samplers", "1", "--claim-timeout", "3", "--redis", redis_url,
                 # a floor on the job's length whatever the machine's speed: the scaling under test is the CPU tier's
                 "--simulate-gpu-step", "0.03",
                 "--job", job, "--run-dir", str(tmp_path / "run"), "--json")
    assert up.returncode == 0, up.stderr[-3000:]
    stack = tmp_path / "home" / "stacks" / f"{job}.json"
    coord = Coordinator(redis_url, job)
    try:
        t0 = time.monotonic()
        res = scale("sampler", 3, "local", job=job, wait=60)
        assert res.previous == 1 and res.started == ["sampler-1", "sampler-2"]
        assert res.registered == 3, f"registry shows {res.registered} samplers after {time.monotonic() - t0:.1f} s"
        ids = {s["id"] for s in coord.services("sampler")}
        assert ids == {"sampler-0", "sampler-1", "sampler-2"}
        pids = json.loads(stack.read_text())["pids"]
        assert {"sampler-1", "sampler-2"} <= set(pids)
        assert coord.get_state() != "done", "job finished before the scale-down; make it longer"
        time.sleep(2.0)                                        # let the new samplers claim some work
        res = scale("sampler", 1, "local", job=job, wait=30, stop_timeout=20)
        assert res.previous == 3 and res.stopped == ["sampler-2", "sampler-1"]      # newest first
        assert res.registered == 1 or coord.get_state() == "done"
        assert set(json.loads(stack.read_text())["pids"]) == {"trainer-0", "loader-0", "sampler-0"}
        deadline = time.monotonic() + 600           # a hang detector, not a timing
        while coord.get_state() not in ("done", "failed") and time.monotonic() < deadline:
            time.sleep(0.5)
        assert coord.get_state() == "done", coord.get_result()
        result = coord.get_result()
        assert result["epochs"] == epochs
        assert result["seeds_trained"] == result["seeds_planned"] == epochs * 140
        assert result.get("duplicates", 0) == 0
    finally:
        down = _argosy(env, "down", "--job", job, "--redis", redis_url)
        assert down.returncode == 0, down.stderr
        for sid in ("sampler-1", "sampler-2"):
            log = tmp_path / "run" / "logs" / f"{sid}.log"
            assert log.exists(), f"{sid} never started"
