"""Static checks of the per-service Dockerfiles and of what each image must (not) contain."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.deploy.tools import ROLES, ROOT


def _dockerfile(role: str) -> str:
    return (ROOT / "services" / ("fullgraph" if role == "offload" else role) / "Dockerfile").read_text()


@pytest.mark.parametrize("role", ROLES)
def test_dockerfile_shape(role):
    text = _dockerfile(role)
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert lines[0].startswith("ARG BASE_IMAGE="), "the base image must be a build ARG before the first FROM"
    froms = [ln for ln in lines if ln.startswith("FROM ")]
    assert len(froms) >= 3 and all("${BASE_IMAGE}" in f or " AS " in f for f in froms)   # multi-stage
    assert re.search(r"^USER 10001", text, re.M), "images run as a non-root user"
    assert "pip install --no-deps /src" in text
    assert f"/tmp/req/{role}.txt" in text
    assert 'ENTRYPOINT ["/app/docker/entrypoint.sh"]' in text
    # the runtime stage must not carry the build-only CA bundle or wheels
    runtime = text.split("AS runtime", 1)[1]
    assert "/tmp/certs" not in runtime and "/tmp/wheels" not in runtime


@pytest.mark.parametrize("role", ["sampler", "loader", "partitioner"])
def test_cpu_images_have_no_torch(role):
    req = (ROOT / "docker" / "requirements" / f"{role}.txt").read_text()
    assert "torch" not in req
    assert "TORCH" not in _dockerfile(role)


def test_trainer_image_is_cuda_by_default_with_cpu_variant():
    text = _dockerfile("trainer")
    assert re.search(r"^ARG BASE_IMAGE=nvidia/cuda:[\w.-]+-runtime", text, re.M)
    assert "ARG TORCH_INDEX_URL" in text and "ARG TORCH_SPEC" in text


@pytest.mark.parametrize("module", ["argosy.services.sampler.service", "argosy.services.loader.service",
                                    "argosy.services.partitioner.core", "argosy.services.launch"])
def test_cpu_tier_modules_do_not_import_torch(module):
    """What keeps torch out of the CPU images: importing these must work with torch blocked."""
    code = f"import sys; sys.modules['torch'] = None; import {module}; assert 'torch' not in sys.modules or sys.modules['torch'] is None"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]


def test_dockerignore_keeps_context_small():
    text = (ROOT / ".dockerignore").read_text().split()
    assert text[text.index("*")] == "*" and "!shared/" in text and "!services/" in text and "**/__pycache__" in text


def test_entrypoint_and_partition_job_are_valid_sh():
    for script in ("entrypoint.sh", "partition-job.sh"):
        out = subprocess.run(["sh", "-n", str(ROOT / "docker" / script)], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
