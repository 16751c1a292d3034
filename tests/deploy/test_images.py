"""Static checks of the one Dockerfile (``docker/Dockerfile``, ``ARG ROLE``) and of what each image must (not) contain."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml

from tests.deploy.tools import COMPOSE, COMPOSE_CPU, ROLES, ROOT

DOCKERFILE = ROOT / "docker" / "Dockerfile"


def test_one_dockerfile_for_every_role():
    stray = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("services/**/Dockerfile"))
    assert stray == [], f"per-role Dockerfiles came back: {stray}"
    text = DOCKERFILE.read_text()
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert lines[0].startswith("ARG BASE_IMAGE="), "the base image must be a build ARG before the first FROM"
    froms = [ln for ln in lines if ln.startswith("FROM ")]
    assert len(froms) >= 3 and all("${BASE_IMAGE}" in f or " AS " in f for f in froms)   # multi-stage
    assert re.search(r"^USER 10001", text, re.M), "images run as a non-root user"
    assert "pip install --no-deps /src" in text and '"/tmp/req/$ROLE.txt"' in text
    assert 'ENTRYPOINT ["/app/docker/entrypoint.sh"]' in text and "ARGOSY_ROLE=${ROLE}" in text
    # the runtime stage must not carry the build-only CA bundle or wheels
    runtime = text.split("AS runtime", 1)[1]
    assert "/tmp/certs" not in runtime and "/tmp/wheels" not in runtime
    # torch only when asked for: the default TORCH_SPEC is empty
    assert re.search(r'^ARG TORCH_SPEC=""$', text, re.M)


@pytest.mark.parametrize("role", ROLES)
def test_every_role_has_requirements_and_an_image_check(role):
    assert (ROOT / "docker" / "requirements" / f"{role}.txt").exists()
    sys.path.insert(0, str(ROOT / "docker"))
    try:
        import image_check
    finally:
        sys.path.pop(0)
    assert role in image_check.MODULES


@pytest.mark.parametrize("role", ["sampler", "loader", "partitioner"])
def test_cpu_images_have_no_torch(role):
    req = (ROOT / "docker" / "requirements" / f"{role}.txt").read_text()
    assert "torch" not in req
    out = subprocess.run([sys.executable, str(ROOT / "docker" / "image_check.py"), role, ""], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 0 and "without torch" in out.stdout, out.stderr[-2000:]


def _build(compose_file, service: str) -> dict:
    raw = COMPOSE.read_text() if compose_file is COMPOSE else compose_file.read_text().replace("!reset", "")
    return yaml.safe_load(raw)["services"][service]["build"]


def test_compose_builds_every_role_from_the_one_dockerfile():
    anchor = yaml.safe_load(COMPOSE.read_text())
    for svc in ("partitioner", "sampler", "loader", "trainer", "offload"):
        b = anchor["services"][svc]["build"]
        assert b["dockerfile"] == "docker/Dockerfile" and b["context"] == "."
        assert b["args"]["ROLE"] == ("offload" if svc == "offload" else svc)
    trainer = anchor["services"]["trainer"]["build"]["args"]
    assert trainer["BASE_IMAGE"].startswith("${ARGOSY_TRAINER_BASE_IMAGE:-nvidia/cuda:") and "torch" in trainer["TORCH_SPEC"]
    assert "torch" in anchor["services"]["offload"]["build"]["args"]["TORCH_SPEC"]
    cpu = _build(COMPOSE_CPU, "trainer")["args"]
    assert cpu["ROLE"] == "trainer" and "whl/cpu" in cpu["TORCH_INDEX_URL"]


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
