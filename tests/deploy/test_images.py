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
    assert "pip install --no-deps /src" in text and "role_requirements.py" in text and "image_check.py" in text
    assert 'ENTRYPOINT ["/app/docker/entrypoint.sh"]' in text and "ARGOSY_ROLE=${ROLE}" in text
    # the runtime stage must not carry the build-only CA bundle or wheels
    runtime = text.split("AS runtime", 1)[1]
    assert "/tmp/certs" not in runtime and "/tmp/wheels" not in runtime
    # torch only where the role declares it: TORCH_SPEC only overrides the line, and is empty by default
    assert re.search(r'^ARG TORCH_SPEC=""$', text, re.M)
    assert "/local" in runtime and "/spill" in runtime and "chown argosy:argosy /data /local /spill" in runtime


def _role_tools():
    sys.path.insert(0, str(ROOT / "docker"))
    try:
        import image_check
        import role_requirements
    finally:
        sys.path.pop(0)
    return role_requirements, image_check


@pytest.mark.parametrize("role", ROLES)
def test_every_role_is_declared_once_in_pyproject(role):
    rr, ic = _role_tools()
    meta = rr.load(ROOT / "pyproject.toml")
    assert set(rr.roles(meta)) == set(ROLES) and role in ic.ENTRY
    reqs = rr.requirements(meta, role)
    deps = set(meta["project"]["dependencies"])
    assert all(r in deps or any(r in g for g in meta["project"]["optional-dependencies"].values()) for r in reqs)
    assert rr.needs_torch(meta, role) == (role in ("trainer", "offload"))
    assert any(r.startswith("numba") for r in reqs)             # every role imports the numba kernels (halo)


def test_role_requirements_refuse_unknown_names_and_extras(tmp_path):
    rr, _ = _role_tools()
    meta = rr.load(ROOT / "pyproject.toml")
    assert any(r.startswith("torch_geometric") for r in rr.requirements(meta, "trainer", "pyg"))
    with pytest.raises(SystemExit, match="no optional-dependency group 'nope'"):
        rr.requirements(meta, "trainer", "nope")
    with pytest.raises(SystemExit, match="unknown ROLE"):
        rr.requirements(meta, "gpu")
    meta["tool"]["argosy"]["images"]["loader"] = ["leftpad"]
    with pytest.raises(SystemExit, match="'leftpad' is not a dependency of the package"):
        rr.requirements(meta, "loader")


@pytest.mark.parametrize("role", ["sampler", "loader", "partitioner"])
def test_cpu_images_have_no_torch(role):
    out = subprocess.run([sys.executable, str(ROOT / "docker" / "image_check.py"), str(ROOT / "pyproject.toml"), role],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and "without torch" in out.stdout, out.stderr[-2000:]


def test_image_check_fails_on_a_module_that_needs_a_missing_dependency(tmp_path):
    """The check imports every module, so a dependency missing from a role's image fails the build
    (the loader image once shipped without numba and crash-looped)."""
    code = ("import sys; sys.modules['numba'] = None; sys.path.insert(0, 'docker'); import image_check; "
            "sys.exit(image_check.main(['pyproject.toml', 'loader']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 1 and "FAILED" in out.stderr and "numba" in out.stderr, out.stderr[-2000:]


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
    assert trainer["BASE_IMAGE"].startswith("${ARGOSY_TRAINER_BASE_IMAGE:-nvidia/cuda:") and "EXTRAS" in trainer
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
