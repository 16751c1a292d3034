"""Every ``ARGOSY_*`` environment variable, declared once with its default and meaning."""
from __future__ import annotations

import os

__all__ = ["REDIS_URL", "TORCH_THREADS", "LOG_LEVEL", "ADVERTISE_HOST", "BIND_HOST", "torch_threads"]

REDIS_URL = "ARGOSY_REDIS_URL"
"""Redis URL used when ``--redis`` is not given (``redis://[:password@]host:port/db``)."""
TORCH_THREADS = "ARGOSY_TORCH_THREADS"
"""Intra-op threads per trainer process (default 1: one process per core; oversubscribed
OpenMP pools were measured 10-100x slower on shared cores)."""
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


def torch_threads() -> int:
    return max(1, int(os.environ.get(TORCH_THREADS, "1")))


def get(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name, default)
