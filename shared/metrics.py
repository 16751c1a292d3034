"""Metrics: one catalogue of names, a per-service Prometheus exporter, and job-wide figures from Redis.

Every counter has one *field* name (the key services already add to the job's Redis metrics hash
with ``coord.incr(**{field: value})``) and one Prometheus name that follows the conventions
(``argosy_`` prefix, ``_total`` on counters, base units ``_seconds`` / ``_bytes``).  The same
catalogue (:data:`COUNTERS`) serves two exporters:

* :class:`ServiceMetrics` lives inside one process and carries the labels
  ``job``, ``role``, ``service_id``; ``start_http(port)`` serves it (port 0/None = off)::

      m = ServiceMetrics("sampler", "sampler-0", "job-1")
      m.start_http(9400)
      m.inc("batches")                 # -> argosy_sampler_batches_total (role prefix added)
      m.inc_many(counters)             # a service's per-second counter dict, by field name

* :func:`metrics_from_redis` builds the same counters from the Redis hash (labels ``job``, ``role``,
  ``service_id="all"``) plus registry/queue gauges, so one endpoint (the autoscaler's) exports
  job-wide figures even when services run without ports.

Rates are derived, never stored: :class:`RateTracker` keeps timestamped snapshots of the hash and
answers "per second over the last N seconds".
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Iterable

__all__ = ["MetricSpec", "COUNTERS", "GAUGES", "ServiceMetrics", "RedisCollector", "metrics_from_redis",
           "serve_registry", "RateTracker", "work_queue_depths",
           "record_autoscale", "read_autoscale_decisions", "read_autoscale_replicas", "read_autoscale_observation"]

logger = logging.getLogger(__name__)

try:  # prometheus_client is a dependency, but a service must never die because an exporter is missing
    import prometheus_client as _prom
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
except ImportError:  # pragma: no cover - exercised only without the package
    _prom = None


@dataclass(frozen=True)
class MetricSpec:
    """One counter: its Redis hash field, its Prometheus name, the role that produces it."""

    field: str
    """Key in the Redis metrics hash (``argosy:{job}:metrics``), as passed to ``coord.incr``."""
    name: str
    """Prometheus metric name, ``_total`` included."""
    role: str
    """Role that increments it: ``sampler`` | ``loader`` | ``trainer`` | ``offload``."""
    help: str
    hop: str | None = None
    """Extra ``hop`` label (``sampler_loader`` | ``loader_trainer``) for per-hop series."""


_C = MetricSpec
COUNTERS: dict[str, MetricSpec] = {s.field: s for s in (
    # sampler tier ---------------------------------------------------------------------------------
    _C("sampler_batches", "argosy_sampler_batches_total", "sampler", "Batches sampled and sent to a loader."),
    _C("sampled_edges", "argosy_sampled_edges_total", "sampler", "Edges in the sampled blocks."),
    _C("sampled_seeds", "argosy_sampled_seeds_total", "sampler", "Seed vertices sampled."),
    _C("remote_neighbors", "argosy_sampler_remote_neighbors_total", "sampler",
       "Sampled neighbours owned by another partition (remote fraction = this / sampled edges)."),
    _C("sample_seconds", "argosy_sampler_busy_seconds_total", "sampler", "Seconds spent sampling (busy time)."),
    _C("reclaimed_batches", "argosy_reclaimed_batches_total", "sampler",
       "Work items re-claimed from a dead or stuck consumer."),
    _C("sampler_send_stall_seconds", "argosy_send_stall_seconds_total", "sampler",
       "Seconds a sender was blocked at the downstream high-water mark.", hop="sampler_loader"),
    # loader tier ----------------------------------------------------------------------------------
    _C("loader_batches", "argosy_loader_batches_total", "loader", "Batches with features sent to a trainer."),
    _C("feature_bytes", "argosy_loader_feature_bytes_total", "loader", "Feature bytes shipped to trainers."),
    _C("feature_rows", "argosy_loader_feature_rows_total", "loader", "Feature rows gathered."),
    _C("remote_feature_rows", "argosy_loader_remote_feature_rows_total", "loader",
       "Feature rows gathered from another partition (halo)."),
    _C("load_seconds", "argosy_loader_busy_seconds_total", "loader", "Seconds spent gathering features (busy time)."),
    _C("bad_messages", "argosy_bad_messages_total", "loader", "Malformed or unexpected messages dropped."),
    _C("loader_send_stall_seconds", "argosy_send_stall_seconds_total", "loader",
       "Seconds a sender was blocked at the downstream high-water mark.", hop="loader_trainer"),
    _C("loader_ring_batches", "argosy_loader_ring_batches_total", "loader",
       "Batches whose feature rows went to a trainer on the same host through a shared-memory ring."),
    _C("row_cache_hits", "argosy_loader_row_cache_hits_total", "loader",
       "Feature rows of held out-of-core parts served from the loader's resident hot-row cache."),
    _C("row_cache_misses", "argosy_loader_row_cache_misses_total", "loader",
       "Feature rows of held out-of-core parts read from the store's memory map (not in the hot-row cache)."),
    _C("disk_read_bytes", "argosy_disk_read_bytes_total", "store",
       "Bytes samplers and loaders read from block devices (/proc/self/io read_bytes: store pages faulted in)."),
    _C("major_faults", "argosy_major_page_faults_total", "store",
       "Major page faults of samplers and loaders (a page of a mapped store file read from disk)."),
    # halo exchange and traffic (samplers and loaders) ---------------------------------------------
    _C("wire_bytes_sent", "argosy_wire_sent_bytes_total", "halo",
       "Bytes sent to processes on other hosts (halo requests/replies and batches)."),
    _C("wire_bytes_received", "argosy_wire_received_bytes_total", "halo", "Bytes received from processes on other hosts."),
    _C("ipc_bytes_sent", "argosy_ipc_sent_bytes_total", "halo", "Bytes sent to other processes, any host."),
    _C("ipc_bytes_received", "argosy_ipc_received_bytes_total", "halo", "Bytes received from other processes, any host."),
    _C("halo_bytes_sent", "argosy_halo_sent_bytes_total", "halo", "Halo request and reply bytes sent."),
    _C("halo_bytes_received", "argosy_halo_received_bytes_total", "halo", "Halo request and reply bytes received."),
    _C("halo_requests", "argosy_halo_requests_total", "halo", "Halo requests sent (one per owner and hop)."),
    _C("halo_rows", "argosy_halo_rows_total", "halo", "Remote rows fetched from their owner."),
    _C("halo_cache_hits", "argosy_halo_cache_hits_total", "halo", "Remote rows served from the hot-row cache."),
    _C("halo_cache_misses", "argosy_halo_cache_misses_total", "halo", "Remote rows not in the hot-row cache."),
    _C("halo_fetch_failures", "argosy_halo_fetch_failures_total", "halo",
       "Batches given up because a halo fetch failed (their work items are re-claimed)."),
    _C("staging_failures", "argosy_staging_failures_total", "store",
       "Parts a sampler or loader could not stage into its host's directory (disk full); retried every 10 s."),
    # trainer tier ---------------------------------------------------------------------------------
    _C("trainer_batches", "argosy_trainer_batches_total", "trainer", "Batches applied by trainers."),
    _C("trainer_idle_seconds", "argosy_trainer_idle_seconds_total", "trainer",
       "Seconds trainers' compute threads waited for a batch during train phases (input starvation only)."),
    _C("trainer_ingest_seconds", "argosy_trainer_ingest_seconds_total", "trainer",
       "Seconds trainers' ingest threads spent receiving, decoding, validating and claiming batches (not polling)."),
    _C("trainer_copy_seconds", "argosy_trainer_copy_seconds_total", "trainer",
       "Seconds trainers' ingest threads spent staging batches on the device (pinned copy, host-to-device, device check)."),
    _C("trainer_compute_seconds", "argosy_trainer_compute_seconds_total", "trainer",
       "Seconds trainers' compute threads spent in forward/backward/step."),
    _C("trainer_received_bytes", "argosy_trainer_received_bytes_total", "trainer",
       "Bytes of the batches trainers applied during train phases, as received (bytes per batch = this / batches)."),
    _C("trainer_feature_rows", "argosy_trainer_feature_rows_total", "trainer",
       "Feature rows the batches trainers applied during train phases needed (one per node)."),
    _C("trainer_cached_rows", "argosy_trainer_cached_rows_total", "trainer",
       "Of those, rows served from the trainers' feature caches (hit rate = this / trainer_feature_rows)."),
    _C("trainer_train_seconds", "argosy_trainer_train_phase_seconds_total", "trainer",
       "Wall seconds trainers spent in train phases (idle fraction = idle seconds / this, as in epoch records)."),
    # full-graph offload store ---------------------------------------------------------------------
    _C("offload_hits", "argosy_offload_hits_total", "offload", "Offload-store block accesses served from host RAM."),
    _C("offload_misses", "argosy_offload_misses_total", "offload", "Offload-store block accesses read from disk."),
    _C("offload_hit_bytes", "argosy_offload_hit_bytes_total", "offload", "Bytes served from the host cache."),
    _C("offload_miss_bytes", "argosy_offload_miss_bytes_total", "offload", "Bytes that missed the host cache."),
    _C("offload_read_bytes", "argosy_offload_read_bytes_total", "offload", "Bytes read back from disk."),
    _C("offload_written_bytes", "argosy_offload_written_bytes_total", "offload", "Bytes spilled to disk."),
)}
"""Every counter, by Redis field.  ``ServiceMetrics.inc`` also accepts the field without the role
prefix (``inc("batches")`` in a sampler means ``sampler_batches``)."""

GAUGES: dict[str, tuple[str, str]] = {
    "queue_depth": ("argosy_queue_depth", "Messages waiting in a hop's queue (label hop)."),
    "heartbeat": ("argosy_heartbeat_timestamp_seconds", "Unix time of the service's last heartbeat."),
    "trainer_idle_fraction": ("argosy_trainer_idle_fraction", "Trainer idle fraction of the last epoch."),
    "work_backlog": ("argosy_work_backlog_items", "Work items in the Redis streams (claimed or not)."),
    "work_pending": ("argosy_work_pending_items", "Work items claimed and not yet acknowledged (in flight)."),
    "services_up": ("argosy_services_up", "Live (heartbeating) services per role."),
    "heartbeat_age": ("argosy_service_heartbeat_age_seconds", "Seconds since a service's last heartbeat."),
    "epochs": ("argosy_epochs_completed", "Epochs completed by the job."),
    "replicas": ("argosy_autoscale_replicas", "Replicas the autoscaler last asked for, per role."),
    "reclaim_deadline": ("argosy_reclaim_deadline_seconds", "Seconds a sampler lets a work item stay unacknowledged "
                         "before re-claiming it (claim timeout, or longer for a slow pipeline; before the backoff)."),
    "batch_age": ("argosy_trainer_batch_age_seconds", "Claim-to-apply seconds of a trainer's recent batches "
                  "(the high quantile it publishes for the samplers' re-claim deadline)."),
}
"""Gauges, by short name: (Prometheus name, help)."""

REMOTE_FRACTION = ("argosy_batch_remote_fraction", "Fraction of a batch's sampled neighbours that were remote.")
_BASE_LABELS = ("job", "role", "service_id")


# ---------------------------------------------------------------------------------------------
class ServiceMetrics:
    """The metrics of one process, kept as plain totals and (if available) Prometheus objects.

    Args:
        role: ``sampler`` | ``loader`` | ``trainer`` | ``offload`` | ``autoscaler``.
        service_id: e.g. ``sampler-0``; the ``service_id`` label.
        job: job id; the ``job`` label.
        registry: a ``prometheus_client.CollectorRegistry`` (default: a new private one, so several
            ServiceMetrics can live in one test process).

    Example:
        >>> m = ServiceMetrics("sampler", "sampler-0", "j")
        >>> m.inc("batches", 2); m.inc_many({"sampled_edges": 10.0})
        >>> m.totals["sampler_batches"], m.totals["sampled_edges"]
        (2.0, 10.0)
    """

    def __init__(self, role: str, service_id: str, job: str, registry=None):
        self.role, self.service_id, self.job = role, service_id, job
        self.totals: dict[str, float] = {}
        self.gauges: dict[str, float] = {}
        self.started = time.time()
        self._lock = threading.Lock()
        self._server = None
        self.port: int | None = None
        self.registry = None
        if _prom is None:
            return
        self.registry = registry if registry is not None else _prom.CollectorRegistry(auto_describe=True)
        self._counters: dict[str, object] = {}
        by_name: dict[str, list[MetricSpec]] = {}
        for spec in COUNTERS.values():
            by_name.setdefault(spec.name, []).append(spec)
        for name, specs in by_name.items():
            labels = _BASE_LABELS + (("hop",) if specs[0].hop else ())
            # prometheus_client appends _total itself; give it the base name
            self._counters[name] = _prom.Counter(name.removesuffix("_total"), specs[0].help, labels,
                                                 registry=self.registry)
        self._gauges = {k: _prom.Gauge(n, h, _BASE_LABELS + (("hop",) if k == "queue_depth" else ()),
                                       registry=self.registry)
                        for k, (n, h) in GAUGES.items()
                        if k in ("queue_depth", "heartbeat", "trainer_idle_fraction", "reclaim_deadline", "batch_age")}
        self._remote = _prom.Histogram(REMOTE_FRACTION[0], REMOTE_FRACTION[1], _BASE_LABELS, registry=self.registry,
                                       buckets=(0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0))
        self._labels = (job, role, service_id)
        self.heartbeat()

    # ---- recording --------------------------------------------------------------------------------
    def _field(self, name: str) -> str:
        if name in COUNTERS:
            return name
        prefixed = f"{self.role}_{name}"
        if prefixed in COUNTERS:
            return prefixed
        raise KeyError(f"unknown metric {name!r} for role {self.role!r}; known: {sorted(COUNTERS)}")

    def inc(self, name: str, value: float = 1.0) -> None:
        """Add ``value`` to the counter ``name`` (a field of :data:`COUNTERS`, role prefix optional)."""
        if value == 0:
            return
        field = self._field(name)
        with self._lock:
            self.totals[field] = self.totals.get(field, 0.0) + float(value)
        if self.registry is not None:
            spec = COUNTERS[field]
            labels = self._labels + ((spec.hop,) if spec.hop else ())
            self._counters[spec.name].labels(*labels).inc(float(value))

    def inc_many(self, counters: dict[str, float]) -> None:
        """Add a whole per-second counter dict (the one a service passes to ``coord.incr``).

        Unknown fields are ignored (with one debug line), so a service may carry private counters.
        """
        for k, v in counters.items():
            try:
                self.inc(k, v)
            except KeyError:
                logger.debug("metric %s not in the catalogue; not exported", k)

    def observe_idle(self, seconds: float) -> None:
        """Trainer: seconds spent waiting for input."""
        self.inc("trainer_idle_seconds", seconds)

    def observe_compute(self, seconds: float) -> None:
        """Trainer: seconds spent computing."""
        self.inc("trainer_compute_seconds", seconds)

    def observe_stall(self, seconds: float) -> None:
        """Sampler/loader: seconds a send blocked at the downstream high-water mark."""
        self.inc(f"{self.role}_send_stall_seconds", seconds)

    def observe_remote_fraction(self, fraction: float) -> None:
        """Sampler: the remote fraction of one batch (a histogram)."""
        if self.registry is not None:
            self._remote.labels(*self._labels).observe(float(fraction))

    def set_gauge(self, name: str, value: float, hop: str | None = None) -> None:
        """Set ``queue_depth`` (give ``hop``), ``heartbeat``, ``trainer_idle_fraction``, ``reclaim_deadline``
        (a sampler) or ``batch_age`` (a trainer)."""
        key = f"{name}:{hop}" if hop else name
        self.gauges[key] = float(value)
        if self.registry is not None and name in self._gauges:
            g = self._gauges[name]
            (g.labels(*self._labels, hop) if name == "queue_depth" else g.labels(*self._labels)).set(float(value))

    def set_queue_depth(self, hop: str, depth: float) -> None:
        self.set_gauge("queue_depth", depth, hop=hop)

    def heartbeat(self) -> None:
        self.set_gauge("heartbeat", time.time())

    # ---- export ------------------------------------------------------------------------------------
    def start_http(self, port: int | None, addr: str = "0.0.0.0") -> int | None:
        """Serve ``/metrics`` on ``port`` from a daemon thread.  0 or None = off.  Returns the port."""
        if not port:
            return None
        if self.registry is None:
            logger.warning("prometheus_client is not installed; --metrics-port %d ignored", port)
            return None
        try:
            self._server, _ = _prom.start_http_server(port, addr=addr, registry=self.registry)
        except OSError as e:             # a taken port must not stop training: say so and carry on
            logger.error("cannot serve metrics on port %d (%s); metrics stay in Redis only", port, e)
            return None
        self.port = self._server.server_port
        logger.info("metrics on http://%s:%d/metrics", addr, self.port)
        return self.port

    def stop_http(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def push_totals(self, coord, scope: object = None, every: float = 1.0, force: bool = False, **totals: float) -> bool:
        """Export running totals (e.g. a phase's ``idle_seconds``) as counter increments, at most
        every ``every`` seconds: the increase since the last push goes to Prometheus and, with one
        ``coord.incr``, to the Redis hash.  A new ``scope`` (e.g. ``(epoch, phase)``) restarts the
        totals from 0.  Returns True if it pushed.

        Example (trainer loop)::

            metrics.push_totals(coord, (epoch, phase), trainer_idle_seconds=st.idle_seconds,
                                trainer_compute_seconds=st.compute_seconds, trainer_batches=st.batches)
        """
        now = time.monotonic()
        last = getattr(self, "_push_state", None)
        if last is None or last[0] != scope:
            last = self._push_state = [scope, {}, 0.0]
        if not force and now - last[2] < every:
            return False
        deltas = {k: float(v) - last[1].get(k, 0.0) for k, v in totals.items()}
        deltas = {k: v for k, v in deltas.items() if v > 0}
        last[1].update({k: float(v) for k, v in totals.items()})
        last[2] = now
        if deltas:
            self.inc_many(deltas)
            if coord is not None:
                coord.incr(**deltas)
        if coord is not None:
            self.publish(coord)
        return True

    def snapshot(self) -> dict:
        """Totals, gauges and the time, as JSON-able numbers (what :meth:`publish` writes)."""
        with self._lock:
            return {"t": time.time(), "started": self.started, **self.totals,
                    **{f"gauge:{k}": v for k, v in self.gauges.items()}}

    def publish(self, coord) -> None:
        """Write this service's totals into its registry hash (field ``metrics``) for ``argosy status``."""
        self.heartbeat()
        coord.update_info(self.role, self.service_id, metrics=self.snapshot())

    def exposition(self) -> str:
        """The text ``/metrics`` would serve (tests, debugging)."""
        return _prom.generate_latest(self.registry).decode() if self.registry is not None else ""


# ---------------------------------------------------------------------------------------------
_NUM_PARTS: dict[tuple[str, str], int] = {}


def work_queue_depths(coord) -> tuple[int, int]:
    """(backlog, pending) over the job's work streams: items not yet acknowledged, and items claimed.

    ``pending`` counts items a sampler claimed whose trainer has not acknowledged them: the batches
    in flight in the sampler->loader->trainer queues, so ``pending / sum of high-water marks`` is how
    full the pipeline is.
    """
    n = _NUM_PARTS.get((coord.url, coord.job), 0)
    if not n:                                          # work streams are argosy:{job}:work:0..k-1
        n = coord.count_work_streams()
        if n:
            _NUM_PARTS[(coord.url, coord.job)] = n
    if not n:
        return 0, 0
    return int(coord.backlog(n)), int(coord.pending(n))


class RedisCollector:
    """A Prometheus collector that reads the job's Redis state on every scrape.

    Exports every :data:`COUNTERS` entry present in the hash (labels ``job``, ``role``,
    ``service_id="all"``), live services per role, heartbeat ages, work backlog/pending, epochs
    completed and the last epoch's trainer idle fraction.
    """

    def __init__(self, coord, roles: Iterable[str] = ("sampler", "loader", "trainer")):
        self.coord = coord
        self.roles = tuple(roles)

    def describe(self):
        return []                                           # unchecked collector: names vary with the hash

    def collect(self):
        coord, job = self.coord, self.coord.job
        now = time.time()
        try:
            hash_ = coord.metrics()
            services = {r: coord.services(r) for r in self.roles}
            n_epochs, last = coord.epochs_count(), coord.last_epoch()    # O(1): not the records
            backlog, pending = work_queue_depths(coord)
        except Exception as e:  # noqa: BLE001 - a scrape must answer even when Redis hiccups
            logger.warning("metrics scrape: Redis read failed (%s)", e)
            return
        fams: dict[str, CounterMetricFamily] = {}
        for field, value in hash_.items():
            spec = COUNTERS.get(field)
            if spec is None:
                continue
            base = spec.name.removesuffix("_total")
            if base not in fams:
                fams[base] = CounterMetricFamily(base, spec.help, labels=_BASE_LABELS + (("hop",) if spec.hop else ()))
            fams[base].add_metric([job, spec.role, "all"] + ([spec.hop] if spec.hop else []), value)
        yield from fams.values()
        up = GaugeMetricFamily(*GAUGES["services_up"], labels=("job", "role"))
        age = GaugeMetricFamily(*GAUGES["heartbeat_age"], labels=_BASE_LABELS)
        for role, lst in services.items():
            up.add_metric([job, role], len(lst))
            for s in lst:
                if "heartbeat" in s:
                    age.add_metric([job, role, str(s["id"])], max(0.0, now - float(s["heartbeat"])))
        yield up
        yield age
        for key, value in (("work_backlog", backlog), ("work_pending", pending), ("epochs", n_epochs)):
            g = GaugeMetricFamily(*GAUGES[key], labels=("job",))
            g.add_metric([job], value)
            yield g
        if last is not None:
            g = GaugeMetricFamily(*GAUGES["trainer_idle_fraction"], labels=_BASE_LABELS)
            g.add_metric([job, "trainer", "all"], float(last.trainer_idle_fraction))
            yield g
        from argosy.shared.fleet import event_counts
        counts, costs = event_counts(coord)
        if counts:
            n = CounterMetricFamily("argosy_fleet_events", "Fleet events of the job: services that joined, left "
                                    "(drained), were lost (killed) and re-claims of their batches",
                                    labels=("job", "role", "event"))
            c = CounterMetricFamily("argosy_fleet_event_cost_seconds", "Seconds of stall the fleet events cost "
                                    "(a leave or loss: until its batches were re-claimed)", labels=("job", "role", "event"))
            for (role, event), v in sorted(counts.items()):
                n.add_metric([job, role, event], v)
                c.add_metric([job, role, event], costs.get((role, event), 0.0))
            yield n
            yield c
        reps = read_autoscale_replicas(coord)
        if reps:
            g = GaugeMetricFamily(*GAUGES["replicas"], labels=("job", "role"))
            for role, n in reps.items():
                g.add_metric([job, role], n)
            yield g


def metrics_from_redis(coord, registry=None):
    """A registry (new unless given) holding a :class:`RedisCollector` for ``coord``'s job."""
    if _prom is None:
        raise RuntimeError("prometheus_client is not installed (pip install prometheus_client)")
    registry = registry if registry is not None else _prom.CollectorRegistry(auto_describe=False)
    registry.register(RedisCollector(coord))
    return registry


def serve_registry(registry, port: int, addr: str = "0.0.0.0"):
    """Serve ``registry`` on ``port`` (0 = a free port); returns ``(server, port)``."""
    server, _ = _prom.start_http_server(port, addr=addr, registry=registry)
    return server, server.server_port


# ---------------------------------------------------------------------------------------------
# Autoscaler records (keys in shared/keys.py, commands in shared/coord.py); the autoscaler, the
# status view and the report read them through these functions.
def record_autoscale(coord, decision: dict | None = None, replicas: dict[str, int] | None = None,
                     observation: dict | None = None, max_decisions: int = 1000) -> None:
    """Append a decision and/or overwrite the replica targets and last observation (one round trip)."""
    coord.record_autoscale(decision, replicas, observation, max_decisions)


def read_autoscale_decisions(coord, last: int = 0) -> list[dict]:
    """Decisions the autoscaler recorded (all, or the ``last`` N), oldest first."""
    return coord.autoscale_decisions(last)


def read_autoscale_replicas(coord) -> dict[str, int]:
    return coord.autoscale_replicas()


def read_autoscale_observation(coord) -> dict | None:
    return coord.autoscale_observation()


# ---------------------------------------------------------------------------------------------
class RateTracker:
    """Timestamped snapshots of counters -> per-second rates over a trailing window.

    Example:
        >>> rt = RateTracker(window=10)
        >>> rt.add(0.0, {"sampler_batches": 0}); rt.add(2.0, {"sampler_batches": 10})
        >>> rt.rate("sampler_batches")
        5.0
    """

    def __init__(self, window: float = 10.0, maxlen: int = 3600):
        self.window = window
        self.samples: deque[tuple[float, dict[str, float]]] = deque(maxlen=maxlen)

    def add(self, t: float, counters: dict[str, float]) -> None:
        self.samples.append((t, dict(counters)))

    def _pair(self, window: float | None) -> tuple[tuple[float, dict], tuple[float, dict]] | None:
        if len(self.samples) < 2:
            return None
        t1, c1 = self.samples[-1]
        w = self.window if window is None else window
        old = self.samples[0]
        for s in reversed(self.samples):
            if t1 - s[0] >= w:
                old = s
                break
        if old[0] >= t1:
            return None
        return old, (t1, c1)

    def delta(self, key: str, window: float | None = None) -> tuple[float, float]:
        """(counter increase, seconds) over the window; (0, 0) with fewer than two samples."""
        p = self._pair(window)
        if p is None:
            return 0.0, 0.0
        (t0, c0), (t1, c1) = p
        return max(0.0, c1.get(key, 0.0) - c0.get(key, 0.0)), t1 - t0

    def rate(self, key: str, window: float | None = None) -> float:
        d, secs = self.delta(key, window)
        return d / secs if secs > 0 else 0.0

    def span(self) -> float:
        return self.samples[-1][0] - self.samples[0][0] if len(self.samples) > 1 else 0.0

    def to_json(self) -> str:
        return json.dumps(list(self.samples))
