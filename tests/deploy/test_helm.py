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
          "cpu": ["-f", str(CHART / "ci" / "cpu-values.yaml")], "gke": ["-f", str(CHART / "ci" / "gke-values.yaml")],
          "eks": ["-f", str(CHART / "ci" / "eks-values.yaml")]}


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
              ("Service", "rel-trainer"), ("Deployment", "rel-store"), ("Service", "rel-store"), ("Job", "rel-submit-r1"),
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


def test_cpu_values_train_end_to_end():
    """The CPU-only example runs a whole job: the store pod partitions the demo graph, the submit Job
    drives it on a CPU trainer (it once had no submit Job, no samplers and no partitioner: it never trained)."""
    docs = _render(*VALUES["cpu"])
    store = _by(docs, "Deployment", "rel-store")
    assert [c["name"] for c in store["spec"]["template"]["spec"]["initContainers"]] == ["partition"]
    assert _by(docs, "Deployment", "rel-sampler")["spec"]["replicas"] == 2
    assert _by(docs, "Deployment", "rel-loader")["spec"]["replicas"] == 1
    sts = _by(docs, "StatefulSet", "rel-trainer")
    assert "nvidia.com/gpu" not in str(_container(sts)["resources"])
    assert "tolerations" not in sts["spec"]["template"]["spec"]
    assert _container(sts)["image"] == "argosy/trainer:0.1.0-cpu"
    cmd = _container(_by(docs, "Job", "rel-submit-r1"))["command"]
    assert cmd[cmd.index("--device") + 1] == "cpu" and cmd[cmd.index("--epochs") + 1] == "30"
    assert cmd[cmd.index("--samplers") + 1] == "2"


def _pods(docs: list[dict]) -> list[tuple[str, dict]]:
    return [(f"{d['kind']}/{d['metadata']['name']}", d["spec"]["template"]["spec"]) for d in docs
            if d["kind"] in ("Deployment", "StatefulSet", "Job")]


@pytest.mark.parametrize("values", VALUES)
def test_every_init_wait_has_a_deadline(values):
    """An init step either does work (partition-job) or waits for something (the store, the input,
    a ready file): every wait carries ``--timeout N`` (store_server.py exits non-zero at N seconds)."""
    waits = 0
    for name, pod in _pods(_render(*VALUES[values])):
        for c in pod.get("initContainers", []):
            cmd = [*c.get("command", []), *c.get("args", [])]
            if cmd == ["partition-job"]:
                continue
            assert cmd[:2] == ["python", "/app/docker/store_server.py"], (name, c["name"], cmd)
            assert "--timeout" in cmd and int(cmd[cmd.index("--timeout") + 1]) > 0, (name, c["name"], cmd)
            waits += 1
    assert waits >= 1


def test_defaults_need_no_read_write_many_storage():
    """Managed clusters' default classes (GKE standard-rwo, EKS gp3, AKS managed-csi) are ReadWriteOnce:
    with defaults, no claim asks for RWX, one pod mounts the store volume, everything else copies
    the store from it first, and the report goes back to it."""
    docs = _render()
    claims = [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    assert claims and all(set(c["spec"]["accessModes"]) <= {"ReadWriteOnce", "ReadWriteOncePod"} for c in claims)
    claim_users = [name for name, pod in _pods(docs)
                   if any("persistentVolumeClaim" in v and v["persistentVolumeClaim"]["claimName"] == "rel-store"
                          for v in pod.get("volumes", []))]
    assert claim_users == ["Deployment/rel-store"]
    for name in ("Deployment/rel-sampler", "Deployment/rel-loader", "StatefulSet/rel-trainer", "Job/rel-submit-r1"):
        pod = dict(_pods(docs))[name]
        assert [c["name"] for c in pod["initContainers"]] == ["fetch-store"], name
        store = next(v for v in pod["volumes"] if v["name"] == "store")
        assert "emptyDir" in store, name
    submit = " ".join(_container(_by(docs, "Job", "rel-submit-r1"))["command"])
    assert "store_server.py push --url http://rel-store:8700 --src /data/runs/demo" in submit and "exit $code" in submit
    assert not any(d["kind"] == "Job" and "partitioner" in d["metadata"]["name"] for d in docs)   # no race
    for name, pod in _pods(docs):
        env = {e["name"]: e.get("value") for c in pod["containers"] for e in c.get("env", [])}
        if "ARGOSY_REDIS_URL" in env:
            assert env["ARGOSY_AFTER_JOB"] == "wait", name        # restarted pods never re-run an ended job


def test_input_from_a_url_is_fetched_before_partitioning():
    docs = _render(*VALUES["gke"])
    init = _by(docs, "Deployment", "rel-store")["spec"]["template"]["spec"]["initContainers"]
    assert [c["name"] for c in init] == ["fetch-input", "partition"]
    assert init[0]["command"][-1] == "https://storage.googleapis.com/my-bucket/graphs/products.npz"
    assert {"name": "ARGOSY_INPUT", "value": "/data/input/products.npz"} in init[1]["env"]
    eks = _by(_render(*VALUES["eks"]), "Deployment", "rel-store")["spec"]["template"]["spec"]
    assert {"name": "input", "persistentVolumeClaim": {"claimName": "argosy-input", "readOnly": True}} in eks["volumes"]


@pytest.mark.parametrize("bad", ["sampler.replicas=-1", "loader.replicas=0", "trainer.replicas=-3", "bogus=1",
                                 "trainer.gpu=one", "sampler.replicas=two", "job.device=tpu",
                                 "redis.port=70000", "sampler.colour=blue", "store.mountPath=data", "store.mode=nfs",
                                 "store.fetchTimeoutSeconds=0", "partitioner.inputUrls={file:///etc/passwd}"])
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
