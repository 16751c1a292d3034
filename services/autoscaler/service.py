"""The autoscaler process: observe the job in Redis every tick, decide, scale, record why.

``Observer`` turns Redis (the metrics hash, per-epoch records, the registry, the work streams)
into a :class:`~services.autoscaler.policy.Observation`; ``decide`` is pure; a scaling backend
applies the decision.  Backends: ``services.scaling.scale(service, replicas, target, **opts)``
when that module exists (imported lazily), else, for ``--target local`` only, a small built-in
one that starts ``python -m services.<role>`` processes and stops them with SIGTERM.
Every change (and every ``--dry-run`` recommendation) is appended to
``argosy:{job}:autoscale:decisions`` with its reason, so reports and ``argosy status`` show it.
"""
from __future__ import annotations

import inspect
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from shared import envs
from shared.metrics import RateTracker, metrics_from_redis, record_autoscale, serve_registry, work_queue_depths
from services.autoscaler.policy import Decision, Observation, ScalerConfig, ScalerState, decide

__all__ = ["Observer", "AutoscalerProc", "LocalProcessScaler", "ScalingModuleBackend", "make_backend"]

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
class Observer:
    """Builds an :class:`Observation` from the job's Redis state.

    The trainers' idle fraction comes from the live counters ``trainer_idle_seconds`` /
    ``trainer_compute_seconds`` over the last ``window`` seconds when trainers publish them, and
    otherwise from the newest per-epoch record (its train phase began ``epoch + val + test``
    seconds before the record appeared).

    Args:
        coord: a :class:`~shared.coord.Coordinator` for the job.
        roles: roles whose live replicas are counted.
        window: seconds of counter history rates are computed over.
        replicas_fn: ``role -> int | None`` giving replica counts from the scaling backend
            (None = count live services in the registry).
    """

    def __init__(self, coord, roles=("sampler", "loader"), window: float = 10.0, replicas_fn=None):
        self.coord = coord
        self.roles = tuple(roles)
        self.tracker = RateTracker(window=window)
        self.replicas_fn = replicas_fn
        self._epochs_seen = 0
        self._epoch_idle: tuple[float, float, float] | None = None    # (idle, window start, batches/s)
        self._spec = None

    def capacity(self) -> int:
        """Sum of the pipeline's high-water marks (batches that fit in flight)."""
        if self._spec is None:
            try:
                self._spec = self.coord.get_spec()
            except Exception:  # noqa: BLE001
                return 0
        c = self._spec
        reps = {r: len(self.coord.services(r)) for r in ("sampler", "loader", "trainer")}
        return (reps["sampler"] * (c.sampler.send_hwm + 1) + reps["loader"] * (c.loader.recv_hwm + c.loader.send_hwm
                * max(reps["trainer"], 1)) + reps["trainer"] * c.trainer.recv_hwm)

    def observe(self, t: float | None = None) -> Observation:
        coord = self.coord
        t = time.time() if t is None else t
        counters = coord.metrics()
        self.tracker.add(t, counters)
        epochs = coord.epochs()
        if len(epochs) > self._epochs_seen:
            e = epochs[-1]
            span = e.get("epoch_seconds", 0.0) + e.get("val_seconds", 0.0) + e.get("test_seconds", 0.0)
            if self._epochs_seen or len(epochs) == 1:           # an epoch that ended while we watched
                self._epoch_idle = (float(e["trainer_idle_fraction"]), t - span, float(e.get("batches_per_second", 0)))
            else:                                              # already there when we started: its time is unknown
                self._epoch_idle = (float(e["trainer_idle_fraction"]), -math.inf, float(e.get("batches_per_second", 0)))
            self._epochs_seen = len(epochs)
        w = self.tracker.window
        di, secs = self.tracker.delta("trainer_idle_seconds", w)
        dc, _ = self.tracker.delta("trainer_compute_seconds", w)
        if secs >= min(3.0, w) and di + dc > 0:
            idle, start, source = di / (di + dc), t - secs, "live"
            trainer_rate = self.tracker.rate("trainer_batches", w) or self.tracker.rate("loader_batches", w)
        elif self._epoch_idle is not None:
            idle, start, trainer_rate = self._epoch_idle
            source = "epoch"
        else:
            idle, start, source, trainer_rate = None, None, "none", self.tracker.rate("loader_batches", w)
        replicas = {}
        for r in self.roles:
            n = self.replicas_fn(r) if self.replicas_fn else None
            replicas[r] = int(n) if n is not None else len(coord.services(r))
        rates = {"sampler": self.tracker.rate("sampler_batches", w), "loader": self.tracker.rate("loader_batches", w)}
        busy = {"sampler": self.tracker.rate("sample_seconds", w), "loader": self.tracker.rate("load_seconds", w)}
        _, pending = work_queue_depths(coord)
        cap = self.capacity()
        return Observation(t=t, trainer_idle=idle, idle_window_start=start, trainer_rate=trainer_rate,
                           replicas=replicas, rates=rates, busy=busy, queue_fill=pending / cap if cap else 0.0,
                           idle_source=source)


# ---------------------------------------------------------------------------------------------
class LocalProcessScaler:
    """``--target local`` without ``services.scaling``: start/stop role processes on this machine.

    Adds run ``python -m services.<role> --job J --id <role>-as<k>`` with ``$ARGOSY_REDIS_URL``
    set; removals SIGTERM the newest replicas this scaler started, then live replicas registered
    from this host (by the pid in their registry entry).
    """

    def __init__(self, coord, log_dir: str | Path | None = None):
        self.coord = coord
        self.procs: dict[str, tuple[str, subprocess.Popen]] = {}       # id -> (role, process)
        self.log_dir = Path(log_dir) if log_dir else None
        self._n = 0

    def _live_ids(self, role: str) -> list[str]:
        return [s["id"] for s in self.coord.services(role)]

    def replicas(self, role: str) -> int:
        live = set(self._live_ids(role))
        starting = [sid for sid, (r, p) in self.procs.items() if r == role and p.poll() is None and sid not in live]
        return len(live) + len(starting)

    def scale(self, role: str, replicas: int) -> None:
        cur = self.replicas(role)
        if replicas > cur:
            env = {**os.environ, envs.REDIS_URL: self.coord.url, "PYTHONUNBUFFERED": "1"}
            for _ in range(replicas - cur):
                self._n += 1
                sid = f"{role}-as{self._n}-{os.getpid() % 10000}"
                out = subprocess.DEVNULL
                if self.log_dir:
                    self.log_dir.mkdir(parents=True, exist_ok=True)
                    out = open(self.log_dir / f"{sid}.log", "ab")
                p = subprocess.Popen([sys.executable, "-m", f"services.{role}", "--job", self.coord.job, "--id", sid],
                                     env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
                self.procs[sid] = (role, p)
                logger.info("started %s (pid %d)", sid, p.pid)
        elif replicas < cur:
            victims = [sid for sid, (r, p) in reversed(list(self.procs.items())) if r == role and p.poll() is None]
            host = __import__("socket").gethostname()
            victims += [s["id"] for s in sorted(self.coord.services(role), key=lambda s: s.get("started", 0), reverse=True)
                        if s["id"] not in self.procs and s.get("host") == host and s.get("pid")]
            pids = {s["id"]: s.get("pid") for s in self.coord.services(role)}
            for sid in victims[: cur - replicas]:
                pid = self.procs[sid][1].pid if sid in self.procs else pids.get(sid)
                try:
                    os.kill(int(pid), signal.SIGTERM)
                    logger.info("stopped %s (pid %s)", sid, pid)
                except (ProcessLookupError, TypeError, ValueError):
                    pass

    def close(self, stop_children: bool = False) -> None:
        for sid, (_, p) in self.procs.items():
            if stop_children and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for _, p in self.procs.values():
            try:
                p.wait(10 if stop_children else 0.01)
            except subprocess.TimeoutExpired:
                if stop_children:
                    p.kill()


class ScalingModuleBackend:
    """Adapter for ``services.scaling`` (written separately): ``scale(service, replicas, target, **opts)``."""

    def __init__(self, module, target: str, opts: dict):
        self.mod, self.target = module, target
        self._scale = module.scale
        self._read = next((getattr(module, n) for n in ("replicas", "current_replicas", "get_replicas", "read_replicas")
                           if callable(getattr(module, n, None))), None)
        self.opts = opts

    def _kw(self, fn) -> dict:
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            return {}
        if any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return dict(self.opts)
        return {k: v for k, v in self.opts.items() if k in params}

    def scale(self, role: str, replicas: int) -> None:
        self._scale(role, replicas, self.target, **self._kw(self._scale))

    def replicas(self, role: str) -> int | None:
        if self._read is None:
            return None
        try:
            n = self._read(role, self.target, **self._kw(self._read))
            return int(n) if n is not None else None
        except Exception as e:  # noqa: BLE001 - fall back to the registry count
            logger.debug("reading %s replicas through services.scaling failed (%s)", role, e)
            return None

    def close(self, stop_children: bool = False) -> None:
        pass


def make_backend(target: str, coord, log_dir: str | None = None, opts: dict | None = None):
    """``services.scaling`` if importable, else :class:`LocalProcessScaler` for ``local``."""
    opts = {"job": coord.job, "redis": coord.url, "redis_url": coord.url, **(opts or {})}
    try:
        from services import scaling  # lazy: written by another issue
    except ImportError:
        scaling = None
    if scaling is not None and callable(getattr(scaling, "scale", None)) and os.environ.get("ARGOSY_AUTOSCALE_BUILTIN") != "1":
        return ScalingModuleBackend(scaling, target, opts)
    if target == "local":
        return LocalProcessScaler(coord, log_dir)
    raise RuntimeError(f"--target {target} needs services.scaling (not importable here); only --target local "
                       "has a built-in backend")


# ---------------------------------------------------------------------------------------------
class AutoscalerProc:
    """The control loop: observe -> decide -> scale -> record, once per ``interval`` seconds.

    Args:
        coord: Coordinator of the job.
        cfg: policy knobs.
        backend: object with ``scale(role, replicas)`` and ``replicas(role) -> int | None``
            (None with ``dry_run``: nothing is ever scaled).
        dry_run: only recommend (decisions are recorded with ``dry_run: true``).
        interval: seconds between ticks.
        window: seconds of history rates are computed over.
    """

    def __init__(self, coord, cfg: ScalerConfig, backend=None, dry_run: bool = False, interval: float = 1.0,
                 window: float = 10.0, clock=time.time):
        self.coord, self.cfg, self.backend, self.dry_run = coord, cfg, backend, dry_run
        self.interval = interval
        self.clock = clock
        replicas_fn = getattr(backend, "replicas", None) if backend is not None else None
        self.observer = Observer(coord, cfg.roles, window=window, replicas_fn=replicas_fn)
        self.state = ScalerState()
        self.stop = threading.Event()
        self.decisions: list[dict] = []
        self._last_hold_log = 0.0

    def tick(self) -> Decision:
        obs = self.observer.observe(self.clock())
        d = decide(obs, self.state, self.cfg)
        self.state = d.state
        rec = d.to_json(obs)
        record_autoscale(self.coord, observation=rec)
        if d.action == "hold":
            if obs.t - self._last_hold_log >= 10:
                logger.info("hold: %s", d.reason)
                self._last_hold_log = obs.t
            return d
        rec["dry_run"] = self.dry_run
        if self.dry_run:
            logger.info("recommend (dry run): %s", d.reason)
        else:
            logger.info("%s", d.reason)
            try:
                self.backend.scale(d.role, d.replicas)
            except Exception as e:  # noqa: BLE001 - a failed scale is logged and retried after the cooldown
                logger.error("scaling %s to %d failed: %s", d.role, d.replicas, e)
                rec["error"] = f"{type(e).__name__}: {e}"
        self.decisions.append(rec)
        record_autoscale(self.coord, decision=rec, replicas={d.role: d.replicas})
        return d

    def run(self, until_done: bool = True) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            if until_done and self.coord.get_state() in ("done", "failed", "stopping"):
                logger.info("job %s is %s; autoscaler exits", self.coord.job, self.coord.get_state())
                break
            try:
                self.tick()
            except Exception as e:  # noqa: BLE001 - Redis hiccups must not kill the control loop
                logger.warning("autoscaler tick failed: %s", e)
            self.stop.wait(max(0.0, self.interval - (time.monotonic() - t0)))


def serve_job_metrics(coord, port: int | None):
    """Serve job-wide metrics built from Redis on ``port`` (0/None = off); returns the server or None."""
    if not port:
        return None
    server, bound = serve_registry(metrics_from_redis(coord), port)
    logger.info("job-wide metrics on http://0.0.0.0:%d/metrics", bound)
    return server
