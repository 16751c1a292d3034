"""What every service process does the same way: logging, signals, Redis, spec, registration.

``python -m argosy.services.<role>`` builds a :class:`ServiceContext` and hands it to the role's ``run``.
SIGTERM/SIGINT set ``ctx.stop`` once; the busy loop drains and returns; the registry entry is
deleted on the way out so ``argosy status`` shows the service gone, not silently stale.
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from argosy.shared import envs
from argosy.shared.config import JobConfig
from argosy.shared.coord import Coordinator
from argosy.shared.errors import ConfigError, GraphFormatError, MemoryBudgetError, StoreFormatError
from argosy.shared.malloc import allocator, jemalloc_path, keep_heap
from argosy.shared.records import FINAL_STATES, JobState

if TYPE_CHECKING:
    from argosy.shared.metrics import ServiceMetrics

__all__ = ["ServiceContext", "common_args", "start_service", "run_service", "setup_logging", "EXIT_CANNOT_START", "JobOver"]

logger = logging.getLogger(__name__)

EXIT_CANNOT_START = 78
THROUGHPUT_ROLES = ("trainer", "sampler", "loader")
"""Roles whose processes keep their freed heap (:func:`argosy.shared.malloc.keep_heap`)."""
"""Exit code of a service that cannot run with this spec or store (sysexits ``EX_CONFIG``): the
launcher fails the job with the logged reason instead of restarting the service."""


def setup_logging(role: str, sid: str) -> None:
    logging.basicConfig(level=envs.get(envs.LOG_LEVEL).upper(),
                        format=f"%(asctime)s {role}[{sid}] %(levelname)s %(name)s: %(message)s")


def common_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--redis", default=envs.get(envs.REDIS_URL), help="Redis URL (default $ARGOSY_REDIS_URL)")
    parser.add_argument("--job", default=envs.get(envs.JOB), help="job id")
    parser.add_argument("--id", default=None, help="service id (default: role-<random>)")
    parser.add_argument("--port", type=int, default=envs.get(envs.PORT),
                        help="ZeroMQ port to bind (0 = a random free port)")
    parser.add_argument("--metrics-port", type=int, default=envs.get(envs.METRICS_PORT),
                        help="serve Prometheus metrics on this port (0 = off)")
    return parser


@dataclass
class ServiceContext:
    role: str
    service_id: str
    coord: Coordinator
    cfg: JobConfig
    port: int = 0
    metrics: "ServiceMetrics | None" = None
    stop: threading.Event = field(default_factory=threading.Event)


def start_service(role: str, args: argparse.Namespace, info: dict | None = None) -> ServiceContext:
    sid = args.id or f"{role}-{uuid.uuid4().hex[:6]}"
    setup_logging(role, sid)
    try:
        import setproctitle  # optional nicety
        setproctitle.setproctitle(f"argosy-{sid}")
    except ImportError:
        pass
    if role in THROUGHPUT_ROLES:
        _log_allocator()
    coord = Coordinator(args.redis, args.job)
    cfg = _job_to_run(coord, role, sid)
    ctx = ServiceContext(role=role, service_id=sid, coord=coord, cfg=cfg, port=args.port)
    from argosy.shared.metrics import ServiceMetrics
    ctx.metrics = ServiceMetrics(role, sid, args.job)
    ctx.metrics.start_http(getattr(args, "metrics_port", 0))

    def on_signal(signum, frame):
        if not ctx.stop.is_set():
            logger.info("signal %d: draining and stopping", signum)
        ctx.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return ctx


def _log_allocator() -> None:
    """Say which malloc this process runs with; warn when jemalloc was wanted (the default) but is missing."""
    name = allocator()
    if name == "jemalloc" or envs.get(envs.ALLOCATOR) == "glibc":
        logger.info("allocator: %s", "jemalloc" if name == "jemalloc" else "glibc (ARGOSY_ALLOCATOR=glibc)")
    elif jemalloc_path() is None:
        logger.warning("allocator: glibc, jemalloc is not installed (apt-get install libjemalloc2): a long job's "
                       "trainer heap can spread under faults (docs/reliability.md); ARGOSY_ALLOCATOR=glibc "
                       "silences this")
    else:
        logger.warning("allocator: glibc, although jemalloc is installed: this process was started without "
                       "argosy.shared.malloc.allocator_env (LD_PRELOAD)")


class JobOver(Exception):
    """The job this service was started for has already ended: nothing to do (exit 0)."""


def _job_to_run(coord: Coordinator, role: str, sid: str) -> JobConfig:
    """The spec of the job to run, once there is one that has not ended.

    A service restarted into a job that is already over (a crashed trainer pod restarted by compose
    after the job failed, a replica started after the job was done) must not run it again: under
    ``ARGOSY_AFTER_JOB=exit`` it raises :class:`JobOver` with one line; under ``wait`` it waits, up
    to ``ARGOSY_SPEC_WAIT``, for a new job submitted under the same name."""
    wait = envs.get(envs.SPEC_WAIT)
    deadline = time.monotonic() + wait
    cfg = coord.get_spec(wait=wait)
    state, said = coord.get_state(), False
    while state in {s.value for s in FINAL_STATES}:
        err = coord.job_result().error if state == JobState.FAILED else None
        line = f"job {coord.job!r} is already {state}{f' ({err})' if err else ''}; {sid} has nothing to run"
        if envs.get(envs.AFTER_JOB) != "wait" or time.monotonic() >= deadline:
            raise JobOver(line)
        if not said:
            logger.info("%s: waiting up to %.0f s for the next job named %r", line, deadline - time.monotonic(),
                        coord.job)
            said = True
        time.sleep(1.0)
        state = coord.get_state()
        if state not in {s.value for s in FINAL_STATES}:
            cfg = coord.get_spec(wait=max(0.0, deadline - time.monotonic()))
    return cfg


_CANNOT_START = (ConfigError, GraphFormatError, StoreFormatError, MemoryBudgetError, ValueError, FileNotFoundError)
"""Errors that a restart of the same process with the same spec and store would meet again."""


def run_service(role: str, args: argparse.Namespace, body) -> None:
    """Start the service and run ``body(ctx)``; exit with a code the launcher understands.

    Every error is logged once with its traceback (the log is where a user looks).  A
    deterministic error (bad spec, store or input) exits with :data:`EXIT_CANNOT_START`, so the
    launcher fails the job with that message instead of restarting the process; anything else
    exits with 1 and the launcher's restart policy decides.
    """
    ctx = None
    if role in THROUGHPUT_ROLES:
        keep_heap()  # before any thread or large allocation
    try:
        ctx = start_service(role, args)
        body(ctx)
    except KeyboardInterrupt:
        sys.exit(130)
    except JobOver as e:
        logging.getLogger(__name__).warning("%s", e)
        sys.exit(0)
    except _CANNOT_START as e:
        logger.exception("%s cannot run: %s: %s", role, type(e).__name__, e)
        print(f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)
        _record_exit(ctx, EXIT_CANNOT_START, f"{type(e).__name__}: {e}")
        sys.exit(EXIT_CANNOT_START)
    except Exception as e:
        logger.exception("%s failed: %s: %s", role, type(e).__name__, e)
        _record_exit(ctx, 1, f"{type(e).__name__}: {e}")
        sys.exit(1)


def _record_exit(ctx: ServiceContext | None, code: int, message: str) -> None:
    """Tell the job's driver why this process ends (under compose or Kubernetes it cannot see our
    exit code or log); best effort: Redis may be what failed."""
    if ctx is None:
        return
    try:
        ctx.coord.record_exit(ctx.role, ctx.service_id, code, message)
        if code == EXIT_CANNOT_START:     # a restart meets the same error: the job's end, recorded once
            ctx.coord.fail_job(f"{ctx.service_id} cannot start: {message}", terminal=True)
    except Exception as e:            # noqa: BLE001 - the original error is what matters
        logger.warning("could not record this exit in Redis: %s", e)
