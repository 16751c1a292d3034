"""Every environment variable Argosy reads, declared once with its default and meaning.

A name is declared as a constant with its docstring, and once in :data:`TABLE` with its default
and type; code reads it only through :func:`get` (an undeclared name is an error, a malformed
value a :class:`ConfigError` naming the variable).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["REDIS_URL", "PARTITION_THREADS", "TORCH_THREADS", "LOG_LEVEL", "ADVERTISE_HOST", "BIND_HOST", "SPEC_WAIT", "PORT", "RANK",
           "DIST_URL", "CURVE_KEYS", "JOB", "HOST_LABEL", "LOCAL_STORE", "HOME", "LAUNCHER_PID", "METRICS_PORT",
           "REDIS_RETRIES", "AFTER_JOB", "NAMESPACE", "ROLE", "SERVICE_ID", "RELEASE", "DATASETS", "COMPOSE_PROJECT", "LOCAL_RANK", "HOSTNAME", "ALLOCATOR",
           "EnvVar", "TABLE", "get", "torch_threads", "host_cores", "datasets_dir"]

REDIS_URL = "ARGOSY_REDIS_URL"
"""Redis URL used when ``--redis`` is not given (``redis://[:password@]host:port/db``)."""
PARTITION_THREADS = "ARGOSY_THREADS"
"""Threads of the partitioner's streamed passes and store writer when ``--threads`` is not given
(default: the cores the process may use)."""
TORCH_THREADS = "ARGOSY_TORCH_THREADS"
"""Compute threads per trainer process, torch's intra-op pool and the numba aggregation kernels
(default 0 = the cores the process may use, or 1 when other work already keeps them busy;
``argosy train`` gives each of the N trainers it starts on one host a 1/N share).  See
docs/compute.md for the split between tiers on one host."""
ALLOCATOR = "ARGOSY_ALLOCATOR"
"""The malloc of trainers, samplers and loaders: ``auto`` (default: jemalloc where ``libjemalloc.so.2`` is
installed, else glibc's, with a warning in the service's log), ``jemalloc`` (an error where it is not
installed) or ``glibc``.  See :func:`argosy.shared.malloc.allocator_env`."""
LOG_LEVEL = "ARGOSY_LOG_LEVEL"
"""Python logging level of services (default INFO)."""
ADVERTISE_HOST = "ARGOSY_ADVERTISE_HOST"
"""Host name peers use to reach this service's ZeroMQ endpoint (default 127.0.0.1; a pod IP or
DNS name under compose/Kubernetes)."""
BIND_HOST = "ARGOSY_BIND_HOST"
"""Interface a service binds its ZeroMQ socket to (default 127.0.0.1; 0.0.0.0 in containers)."""

SPEC_WAIT = "ARGOSY_SPEC_WAIT"
"""Seconds a service waits for its job spec to appear in Redis (default 600: under compose or
Kubernetes, services may start before ``argosy submit`` runs)."""
AFTER_JOB = "ARGOSY_AFTER_JOB"
"""What a service does when it starts into a job that has already ended (done, or failed: a crashed
pod restarted by its orchestrator): ``exit`` (default: exit 0 at once with one line, so compose's
``restart: on-failure`` does not start it again and no replica re-runs a failed job) or ``wait``
(Kubernetes Deployments, which restart every exit: wait up to ``ARGOSY_SPEC_WAIT`` for the next job
submitted under this name, then exit 0)."""
PORT = "ARGOSY_PORT"
"""Fixed ZeroMQ port for loaders/trainers (default 0 = random; set it in containers)."""
RANK = "ARGOSY_RANK"
"""Trainer rank (default: the ordinal suffix of $HOSTNAME, as in a StatefulSet pod name)."""
DIST_URL = "ARGOSY_DIST_URL"
"""torch.distributed rendezvous URL used by trainer rank 0 (default tcp://ADVERTISE_HOST:free port)."""
CURVE_KEYS = "ARGOSY_CURVE_KEYS"
"""Directory of ZeroMQ CURVE keys (``argosy keys DIR``): encrypt and authenticate service traffic."""
JOB = "ARGOSY_JOB"
"""Job id when --job is not given (default ``default``)."""
HOST_LABEL = "ARGOSY_HOST"
"""Which host a sampler/loader runs on, for part ownership and wire accounting (default: the
machine's host name).  Parts are dealt to hosts first, then to the replicas on each host."""
LOCAL_STORE = "ARGOSY_LOCAL_STORE"
"""Host-local directory a sampler/loader reads its own parts from; a part missing there is staged
(copied) from the job's store first.  Unset: parts are read from the job's store path."""


HOME = "ARGOSY_HOME"
"""Directory of the launcher's per-machine state (default ``~/.argosy``; stack files under ``stacks/``)."""
LAUNCHER_PID = "ARGOSY_LAUNCHER_PID"
"""Set by the launcher for its children: the pid of the process that drives the job."""
METRICS_PORT = "ARGOSY_METRICS_PORT"
"""Port a service serves Prometheus metrics on (default 0 = off)."""
REDIS_RETRIES = "ARGOSY_REDIS_RETRIES"
"""Retries (exponential backoff, capped at 2 s) of a Redis command before it fails (default 35, ~60 s)."""
NAMESPACE = "ARGOSY_NAMESPACE"
"""Kubernetes namespace ``argosy scale --target k8s`` acts in (default: the pod's namespace, else ``default``)."""
RELEASE = "ARGOSY_RELEASE"
"""Helm release name ``argosy scale --target k8s`` prefixes deployments with (default ``argosy``)."""
DATASETS = "ARGOSY_DATASETS"
"""Directory of the benchmark datasets (cora.npz, ...) used by tests and bench scripts."""
COMPOSE_PROJECT = "COMPOSE_PROJECT_NAME"
"""docker compose project of ``argosy scale --target compose`` (default ``argosy``)."""
LOCAL_RANK = "LOCAL_RANK"
"""CUDA device index of a trainer on a multi-GPU host (set by torchrun-style launchers; default 0)."""
ROLE = "ARGOSY_ROLE"
"""Role of a container image (``sampler`` | ``loader`` | ``trainer`` | ...), set by the Dockerfile."""
SERVICE_ID = "ARGOSY_SERVICE_ID"
"""Service id of a container (default ``<role>-$HOSTNAME``, as docker/entrypoint.sh sets it)."""
HOSTNAME = "HOSTNAME"
"""Pod name; a StatefulSet trainer takes its rank from the ordinal suffix when ARGOSY_RANK is unset."""


@dataclass(frozen=True)
class EnvVar:
    """One variable: ``default`` (a string, as it would be set, or None) parsed with ``kind``."""
    name: str
    default: str | None = None
    kind: type = str


TABLE: dict[str, EnvVar] = {v.name: v for v in (
    EnvVar(REDIS_URL), EnvVar(TORCH_THREADS, "0", int), EnvVar(LOG_LEVEL, "INFO"),
    EnvVar(ADVERTISE_HOST, "127.0.0.1"), EnvVar(BIND_HOST, "127.0.0.1"), EnvVar(SPEC_WAIT, "600", float),
    EnvVar(PORT, "0", int), EnvVar(RANK, None, int), EnvVar(DIST_URL), EnvVar(CURVE_KEYS), EnvVar(JOB, "default"),
    EnvVar(HOST_LABEL), EnvVar(LOCAL_STORE), EnvVar(HOME), EnvVar(LAUNCHER_PID, None, int),
    EnvVar(METRICS_PORT, "0", int), EnvVar(REDIS_RETRIES, "35", int), EnvVar(AFTER_JOB, "exit"), EnvVar(NAMESPACE), EnvVar(RELEASE),
    EnvVar(DATASETS), EnvVar(COMPOSE_PROJECT), EnvVar(LOCAL_RANK, "0", int), EnvVar(HOSTNAME), EnvVar(ROLE),
    EnvVar(SERVICE_ID), EnvVar(PARTITION_THREADS, None, int), EnvVar(ALLOCATOR, "auto"),
)}
"""Every variable read anywhere; a new constant above needs its entry here (tests check it)."""


_UNSET = object()


def get(name: str, default=_UNSET):
    """The value of ``name`` parsed with its declared type; unset or empty gives ``default`` if
    passed, else the declared default (parsed)."""
    try:
        var = TABLE[name]
    except KeyError:
        raise KeyError(f"environment variable {name} is not declared in argosy.shared.envs.TABLE") from None
    raw = os.environ.get(name)
    if raw is None or raw == "":
        if default is not _UNSET:
            return default
        raw = var.default
        if raw is None:
            return None
    try:
        return var.kind(raw)
    except ValueError:
        from argosy.shared.errors import ConfigError
        raise ConfigError(f"${name}={raw!r} is not a valid {var.kind.__name__}") from None


def host_cores() -> int:
    """Cores this process may use: its CPU affinity, capped by a cgroup v2 CPU quota (a container's limit)."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:                              # macOS, Windows
        n = os.cpu_count() or 1
    try:
        quota, period = open("/sys/fs/cgroup/cpu.max").read().split()[:2]
        if quota != "max":
            n = min(n, max(1, int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    return n


def torch_threads() -> int:
    """``ARGOSY_TORCH_THREADS``; when 0 or unset, :func:`host_cores`, or 1 if the load average already
    fills them: there every intra-op barrier waits for a descheduled thread (a SAGE step measured
    4-5x slower with 2 threads than with 1 on 2 cores at load 25, docs/compute.md)."""
    n = get(TORCH_THREADS)
    if n >= 1:
        return n
    cores = host_cores()
    return 1 if os.getloadavg()[0] >= cores else cores


def datasets_dir() -> Path:
    """Where the benchmark datasets (``cora.npz``, ...) are, for every bench script and the tests:
    ``$ARGOSY_DATASETS`` when set, else ``shared/datasets`` next to the repository, else
    ``/work/shared/datasets`` (the checkout is a worktree elsewhere)."""
    env = get(DATASETS)
    if env:
        return Path(env)
    beside = Path(__file__).resolve().parents[2] / "shared" / "datasets"
    return beside if beside.exists() else Path("/work/shared/datasets")
