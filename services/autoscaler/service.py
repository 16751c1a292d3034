"""The autoscaler process: observe the job in Redis every tick, decide, scale, record why.

``Observer`` turns Redis (the metrics hash, per-epoch records, the registry, the work streams)
into a :class:`~services.autoscaler.policy.Observation`; ``decide`` is pure; a scaling backend
applies the decision through ``services.scaling.scale(service, replicas, target, **opts)``
(imported lazily; tests inject any object with ``scale(role, replicas)``).  Replica counts are the
live services in the Redis registry, except that a count the autoscaler asked for is assumed for
up to ``expect_seconds`` while the new replicas start and register (so it never adds twice).
Every change (and every ``--dry-run`` recommendation) is appended to
``argosy:{job}:autoscale:decisions`` with its reason, so reports and ``argosy status`` show it.
"""
from __future__ import annotations

import inspect
import logging
import math
import threading
import time
from dataclasses import replace

from argosy.shared.records import STOP_STATES
from argosy.shared.metrics import RateTracker, metrics_from_redis, record_autoscale, serve_registry, work_queue_depths
from argosy.services.autoscaler.policy import Decision, Observation, ScalerConfig, ScalerState, decide

__all__ = ["Observer", "AutoscalerProc", "ScalingModuleBackend", "make_backend", "serve_job_metrics"]

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
class Observer:
    """Builds an :class:`Observation` from the job's Redis state.

    The trainers' idle fraction comes from the live counters ``trainer_idle_seconds`` /
    ``trainer_train_seconds`` over the last ``window`` seconds when trainers publish them, and
    otherwise from the newest per-epoch record (its train phase began ``epoch + val + test``
    seconds before the record appeared; epoch 0, the start-up epoch, is not used).  Live idle is
    measured only from the first tick at which batches flow.

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
        self._flow_t: float | None = None                              # first tick with batches applied
        self._initial_epochs: int | None = None
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
        n_epochs = coord.epochs_count()                        # O(1): Redis keeps only the newest records
        if self._initial_epochs is None:
            self._initial_epochs = n_epochs                    # records already there: their time is unknown
        e = coord.last_epoch() if n_epochs > self._epochs_seen else None
        if e is not None and e.epoch != 0:                     # epoch 0: start-up (JIT), not capacity
            span = e.epoch_seconds + e.val_seconds + e.test_seconds
            start = t - span if n_epochs > self._initial_epochs else -math.inf
            self._epoch_idle = (float(e.trainer_idle_fraction), start, float(e.batches_per_second))
        self._epochs_seen = n_epochs
        w = self.tracker.window
        if self._flow_t is None and (counters.get("trainer_batches", 0) > 0 or counters.get("loader_batches", 0) > 0):
            self._flow_t = t
        # idle is measured only since batches began to flow: before that the trainer waits for
        # samplers that are still starting (compiling kernels), which more replicas would not fix
        wi = min(w, t - self._flow_t) if self._flow_t is not None else 0.0
        di, secs = self.tracker.delta("trainer_idle_seconds", wi) if wi > 0 else (0.0, 0.0)
        dc, _ = self.tracker.delta("trainer_compute_seconds", wi) if wi > 0 else (0.0, 0.0)
        dw, _ = self.tracker.delta("trainer_train_seconds", wi) if wi > 0 else (0.0, 0.0)
        dg = sum(self.tracker.delta(k, wi)[0] for k in ("trainer_ingest_seconds", "trainer_copy_seconds")) if wi > 0 else 0.0
        ingest_busy = min(1.0, dg / dw) if dw > 0 and dg > 0 else None
        if secs >= min(3.0, w) and (dw > 0 or di + dc > 0):
            # idle / train-phase wall time, as in the epoch records; idle / (idle + compute) if trainers
            # do not report wall time (that one ignores decode/ack time, so it reads higher)
            idle = min(1.0, di / dw) if dw > 0 else di / (di + dc)
            start, source = t - secs, "live"
            trainer_rate = self.tracker.rate("trainer_batches", wi) or self.tracker.rate("loader_batches", wi)
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
                           idle_source=source, job_state=coord.get_state() or "",
                           trainer_ingest_busy=ingest_busy if source == "live" else None)


# ---------------------------------------------------------------------------------------------
class ScalingModuleBackend:
    """Adapter for ``services.scaling``: ``scale(service, replicas, target, **opts)``.

    ``opts`` are passed only where the function accepts them (``**opts`` accepts all).
    """

    def __init__(self, module, target: str, opts: dict):
        self.mod, self.target, self.opts = module, target, opts
        self._scale = module.scale

    def _kw(self, fn) -> dict:
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            return {}
        if any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return dict(self.opts)
        return {k: v for k, v in self.opts.items() if k in params}

    def scale(self, role: str, replicas: int):
        res = self._scale(role, replicas, self.target, **self._kw(self._scale))
        summary = getattr(res, "summary", None)
        if callable(summary):
            logger.info("%s", summary())
        return res


def make_backend(target: str, coord, opts: dict | None = None) -> ScalingModuleBackend:
    """The ``services.scaling`` backend for ``target`` (``local`` | ``compose`` | ``k8s``).

    ``opts`` go to ``scale`` as keywords (``job`` is always set for the local target).
    """
    try:
        from argosy.services import scaling  # lazy: a separate module, and only the scaler needs it
    except ImportError as e:
        raise RuntimeError(f"--target {target} needs argosy.services.scaling, which is not importable ({e})") from None
    opts = {**({"job": coord.job} if target == "local" else {}), **(opts or {})}
    return ScalingModuleBackend(scaling, target, opts)


# ---------------------------------------------------------------------------------------------
class AutoscalerProc:
    """The control loop: observe -> decide -> scale -> record, once per ``interval`` seconds.

    Args:
        coord: Coordinator of the job.
        cfg: policy knobs.
        backend: object with ``scale(role, replicas)`` (None with ``dry_run``: nothing is scaled).
        dry_run: only recommend (decisions are recorded with ``dry_run: true``).
        interval: seconds between ticks.
        window: seconds of history rates are computed over.
        clock: wall clock (tests pass a fake one).
        expect_seconds: how long a requested replica count is believed before the registry shows it.
    """

    def __init__(self, coord, cfg: ScalerConfig, backend=None, dry_run: bool = False, interval: float = 1.0,
                 window: float = 10.0, clock=time.time, expect_seconds: float = 30.0):
        self.coord, self.cfg, self.backend, self.dry_run = coord, cfg, backend, dry_run
        self.interval = interval
        self.clock = clock
        self.observer = Observer(coord, cfg.roles, window=window)
        self.state = ScalerState()
        self.stop = threading.Event()
        self.decisions: list[dict] = []
        self._last_hold_log = 0.0
        self.expect_seconds = expect_seconds
        self._expect: dict[str, tuple[int, float]] = {}          # role -> (replicas asked for, when)
        self.observer.replicas_fn = self._replicas

    def _replicas(self, role: str) -> int:
        """Live replicas, or the count last asked for while the change is younger than ``expect_seconds``."""
        live = len(self.coord.services(role))
        want = self._expect.get(role)
        if want is None:
            return live
        n, since = want
        if live == n:
            del self._expect[role]
            return live
        if self.clock() - since < self.expect_seconds:
            return n
        logger.warning("%d %s replicas live %.0f s after asking for %d", live, role, self.clock() - since, n)
        del self._expect[role]
        return live

    def tick(self) -> Decision:
        obs = self.observer.observe(self.clock())
        before = self.state
        d = decide(obs, self.state, self.cfg)
        self.state = d.state
        rec = d.to_json(obs)
        record_autoscale(self.coord, observation=rec)
        if d.action == "hold" and d.state.paused_until != before.paused_until:
            logger.info("%s", d.reason)                 # a verdict on the last scale-up: keep it with the decisions
            rec["paused"] = True
            self.decisions.append(rec)
            record_autoscale(self.coord, decision=rec)
            return d
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
                res = self.backend.scale(d.role, d.replicas)
                if getattr(res, "previous", None) == d.replicas:
                    # the target already runs that many (they have not registered yet): not a change
                    logger.info("%s already has %d %s replicas (not all registered yet)", self.coord.job,
                                d.replicas, d.role)
                    self.state = replace(before, first_t=d.state.first_t)
                    self._expect[d.role] = (d.replicas, self.clock())
                    return d
                self._expect[d.role] = (d.replicas, self.clock())
            except Exception as e:  # noqa: BLE001 - a failed scale is logged and retried after the cooldown
                logger.error("scaling %s to %d failed: %s", d.role, d.replicas, e)
                rec["error"] = f"{type(e).__name__}: {e}"
        self.decisions.append(rec)
        record_autoscale(self.coord, decision=rec, replicas=None if self.dry_run else {d.role: d.replicas})
        return d

    def run(self, until_done: bool = True) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            if until_done and self.coord.get_state() in STOP_STATES:
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
