"""All Redis access: job spec, service registry with heartbeats, work streams, metrics.

This is the only module that sends Redis commands.  Work items are entries of per-partition
Redis Streams read through one consumer group: a sampler *claims* an entry (XREADGROUP), the
trainer *acknowledges and deletes* it after applying the batch (XACK + XDEL), and entries that
stay claimed past the re-claim deadline (their sampler or loader died) are re-claimed by a live
sampler (XPENDING + XCLAIM).  The deadline is ``claim_timeout``, or :data:`RECLAIM_AGE_FACTOR`
times the claim-to-apply age the trainers publish (:meth:`Coordinator.publish_batch_age`) when
that is longer, and it doubles with every re-delivery of an item (:data:`RECLAIM_BACKOFF_CAP`).
A trainer applies a batch only if ``SADD applied:{epoch}:{phase} id`` returns 1, so a batch
delivered twice is applied once.
"""
from __future__ import annotations

import json
import logging
import os
import re
import socket
import threading
import time
from urllib.parse import urlparse

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from argosy.shared import envs, keys
from argosy.shared.config import JobConfig
from argosy.shared.errors import CoordinationError
from argosy.shared.records import FINAL_STATES, EpochRecord, JobResult, JobState, ServiceInfo

MAX_EVENTS = 10_000
"""Fleet events a job keeps in Redis (joins, leaves, losses, re-claims: they come with faults and scaling)."""
MAX_EPOCH_RECORDS = 512
"""Epoch records a job keeps in Redis (the newest; ~900 bytes each).  Older ones are dropped from the
head of the list and counted (:meth:`Coordinator.epochs_dropped`); the whole history is in the run
dir (``checkpoint.epochs.jsonl``, written by trainer rank 0), where the report reads it."""
EPOCH_COUNTER_WINDOW = 64
"""Epochs whose per-epoch counters (``wire_bytes_e{E}`` ...) stay in the metrics hash; older ones are
moved out by trainer rank 0 (:meth:`Coordinator.take_epoch_counters`) into the run dir."""
EPOCH_COUNTERS_MOVED = "epoch_counters_moved_before"
"""Metrics-hash field: per-epoch counters of epochs below it were moved out of Redis."""
RECLAIM_AGE_FACTOR = 2.5
"""A work item is re-claimed only once idle for this many times the trainers' published batch age
(:meth:`Coordinator.reclaim_deadline`), when that is longer than ``claim_timeout``.  The age is a
high quantile of recent claim-to-apply times, so a healthy item is rarely that old: the factor
covers the tail above the quantile, the seconds until the next publication, and the latency
growing while the pipeline fills (items claimed at the start wait for every batch ahead of them).
Reasoned, not tuned: at 2.5 no healthy item was re-claimed in the slow-pipeline runs of
docs/reliability.md (Cora at a simulated 1 s step, CoDEx-S); a larger factor only delays the
recovery from a dead sampler or loader in a slow pipeline."""
RECLAIM_BACKOFF_CAP = 8
"""An item delivered ``d`` times is re-claimed only once idle for ``2**(d-1)`` times the deadline,
at most this many times it: while a trainer is hung its unacknowledged items are re-sent after 1,
2, 4, 8, 8, ... deadlines instead of after every one."""
BATCH_AGE_TTL = 120.0
"""Seconds a trainer's published batch age lives in Redis.  A trainer that stops applying (hung,
dead, between jobs) stops publishing, and samplers fall back to ``claim_timeout`` this long after."""
BATCH_AGE_MAX = 3600.0
"""A published batch age is capped here (a skewed clock must not park re-claims for hours)."""
RECLAIM_SCAN = 16
""":meth:`Coordinator.reclaim` reads up to this many times ``count`` idle entries per stream, so items
still backing off do not hide the due ones behind them."""
APPLIED_PHASES = ("train", "val", "test")
"""The phases of an epoch (``argosy.shared.plan.PHASES``; not imported: it pulls in the store)."""

__all__ = ["Coordinator", "redact_url", "reclaim_backoff", "MAX_EPOCH_RECORDS", "EPOCH_COUNTER_WINDOW",
           "EPOCH_COUNTERS_MOVED", "RECLAIM_AGE_FACTOR", "RECLAIM_BACKOFF_CAP", "BATCH_AGE_TTL"]

logger = logging.getLogger(__name__)
_PER_EPOCH_FIELD = re.compile(r"^(.+)_e(\d+)$")


def redact_url(url: str) -> str:
    """``redis://:secret@host:6379/0`` -> ``redis://***@host:6379/0`` (passwords are never logged)."""
    import re
    u = urlparse(url)
    if u.password or u.username:
        url = url.replace(u.netloc, "***@" + (u.hostname or "") + (f":{u.port}" if u.port else ""), 1)
    # redis-py also takes ``?password=...`` in the query string
    return re.sub(r"(?i)([?&]password=)[^&#]*", r"\1***", url)


def reclaim_backoff(times_delivered: int) -> int:
    """How many deadlines an item delivered ``times_delivered`` times must stay idle before it is
    re-claimed: 1, 2, 4, ... up to :data:`RECLAIM_BACKOFF_CAP`.

    Example:
        >>> [reclaim_backoff(d) for d in (1, 2, 3, 4, 5, 9)]
        [1, 2, 4, 8, 8, 8]
    """
    return min(2 ** max(int(times_delivered) - 1, 0), RECLAIM_BACKOFF_CAP)


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class _NoAuthRetry(Retry):
    """Retries connection errors, but not refused credentials: redis-py's ``AuthenticationError``
    is a ``ConnectionError``, and retrying it only delays the real error by a minute."""

    def call_with_retry(self, do, fail, is_retryable=None, **kw):
        def retryable(e: Exception) -> bool:
            return not isinstance(e, redis.AuthenticationError) and (is_retryable is None or is_retryable(e))
        return super().call_with_retry(do, fail, retryable, **kw)


class Coordinator:
    """A job's view of Redis.

    Args:
        url: ``redis://[:password@]host:port/db`` (or ``rediss://``); ``ARGOSY_REDIS_URL`` by default.
        job: job id; every key is under ``argosy:{job}:``.
        connect_timeout: seconds to keep retrying the first connection before failing.
    """

    def __init__(self, url: str | None, job: str, connect_timeout: float = 30.0, retries: int | None = None,
                 socket_timeout: float = 30.0):
        url = url or envs.get(envs.REDIS_URL)
        if not url:
            raise CoordinationError("no Redis URL: pass --redis URL or set ARGOSY_REDIS_URL")
        self.url = url
        self.job = job
        self.max_events = MAX_EVENTS          # fleet events kept in Redis (record_event)
        self.max_epoch_records = MAX_EPOCH_RECORDS   # epoch records kept in Redis (append_epochs)
        # ~60 s of retries with backoff: every command rides out a Redis restart transparently,
        # then fails with a clear error instead of spinning or hanging forever.
        retry = _NoAuthRetry(ExponentialBackoff(cap=2.0, base=0.1),
                             retries=envs.get(envs.REDIS_RETRIES) if retries is None else retries)
        self.r = redis.Redis.from_url(url, socket_timeout=socket_timeout, socket_connect_timeout=min(5.0, socket_timeout),
                                      retry=retry,
                                      retry_on_error=[redis.ConnectionError, redis.TimeoutError],
                                      health_check_interval=15, decode_responses=False)
        self._hb_stop = threading.Event()
        self._hb_thread: threading.Thread | None = None
        self._wait_ready(connect_timeout)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        attempt = 0
        # the first connection is probed without the client's own retries (they would stretch
        # ``timeout`` to their ~60 s of backoff); ``timeout`` alone bounds this wait
        kw = self.r.connection_pool.connection_kwargs
        probe = redis.Redis.from_url(self.url, socket_timeout=kw.get("socket_timeout"),
                                     socket_connect_timeout=kw.get("socket_connect_timeout"),
                                     retry=Retry(ExponentialBackoff(), 0))
        while True:
            attempt += 1
            try:
                probe.ping()
                probe.close()
                return
            except redis.AuthenticationError as e:
                probe.close()
                raise CoordinationError(f"Redis at {redact_url(self.url)} refused the credentials ({e})") from None
            except (redis.ConnectionError, redis.TimeoutError) as e:
                left = deadline - time.monotonic()
                if left <= 0:
                    probe.close()
                    raise CoordinationError(f"cannot reach Redis at {redact_url(self.url)} after {attempt} "
                                            f"attempts ({e})") from None
                logger.warning("Redis at %s not reachable (%s); retrying for %.0f more s",
                               redact_url(self.url), e, left)
                time.sleep(min(1.0, left))

    # ---- job spec and state -------------------------------------------------------------------
    def put_spec(self, cfg: JobConfig) -> None:
        self.r.set(keys.spec(self.job), cfg.to_json())

    def get_spec(self, wait: float = 0.0) -> JobConfig:
        deadline = time.monotonic() + wait
        while True:
            raw = self.r.get(keys.spec(self.job))
            if raw is not None:
                return JobConfig.from_json(raw)
            if time.monotonic() >= deadline:
                raise CoordinationError(f"job {self.job!r} has no spec in Redis {redact_url(self.url)}")
            time.sleep(0.2)

    def set_state(self, state: JobState | str, result: dict | None = None) -> bool:
        """Set the job's state (and result). A final state (done/failed) is recorded once: a second
        one (a restarted pod's own failure, a late driver verdict) leaves the first, and its result,
        in place and returns False. Any other state may follow a final one (a job resubmitted or
        restarted from its checkpoint)."""
        state = JobState(state)
        skey, rkey = keys.state(self.job), keys.result(self.job)
        final = {s.value.encode() for s in FINAL_STATES}

        def write(pipe) -> bool:
            if state in FINAL_STATES and pipe.get(skey) in final:
                return False
            pipe.multi()
            pipe.set(skey, state.value)
            if result is not None:
                pipe.set(rkey, json.dumps(result))
            return True

        return self.r.transaction(write, skey, value_from_callable=True)

    def fail_job(self, error: str, **fields) -> bool:
        """Record the job's terminal failure once (``state`` failed, ``result.error``), keeping what an
        earlier writer recorded; ``fields`` go into the result (e.g. ``terminal=True``: restarting
        anything cannot help). Returns False when the job had already ended."""
        return self.set_state(JobState.FAILED, {**(self.get_result() or {}), "error": error, **fields})

    def get_state(self) -> str | None:
        raw = self.r.get(keys.state(self.job))
        return raw.decode() if raw else None

    def get_result(self) -> dict | None:
        raw = self.r.get(keys.result(self.job))
        return json.loads(raw) if raw else None

    def job_result(self) -> JobResult:
        """The result record (empty when the job has not ended)."""
        return JobResult.from_dict(self.get_result())

    # ---- registry -----------------------------------------------------------------------------
    def register(self, role: str, service_id: str, info: dict, interval: float = 1.0, ttl: float = 5.0) -> None:
        """Register this process and keep its key alive from a heartbeat thread."""
        key = keys.service(self.job, role, service_id)
        info = {**info, "role": role, "id": service_id, "host": socket.gethostname(), "pid": os.getpid(),
                "started": time.time()}
        self._hb_info = info                      # update_info() edits this dict, so heartbeats keep it
        self._hb_ttl_ms = int(ttl * 1000)
        self.r.sadd(keys.members(self.job, role), service_id)
        self.record_event("join", role, service_id)
        ttl_ms = int(ttl * 1000)

        def beat():
            while not self._hb_stop.is_set():
                try:
                    pipe = self.r.pipeline()
                    pipe.hset(key, mapping={k: json.dumps(v) for k, v in info.items()} | {"heartbeat": json.dumps(time.time())})
                    pipe.pexpire(key, ttl_ms)
                    pipe.execute()
                except redis.RedisError as e:
                    logger.warning("heartbeat to Redis failed (%s); will retry", e)
                self._hb_stop.wait(interval)

        beat_once = threading.Thread(target=beat, name=f"heartbeat-{role}", daemon=True)
        self._hb_thread = beat_once
        beat_once.start()

    def update_info(self, role: str, service_id: str, **fields) -> None:
        """Change fields of this service's registry entry.  The whole entry is written, with its TTL: a
        bare HSET after the key had expired (heartbeats lost on a bad link) left a hash with only these
        fields and no TTL, which crashed the launcher's FleetWatch (``KeyError: 'id'``) in a soak."""
        info = getattr(self, "_hb_info", None)
        if info is None:
            self.r.hset(keys.service(self.job, role, service_id), mapping={k: json.dumps(v) for k, v in fields.items()})
            return
        info.update(fields)
        key = keys.service(self.job, role, service_id)
        pipe = self.r.pipeline()
        pipe.hset(key, mapping={k: json.dumps(v) for k, v in info.items()})
        pipe.pexpire(key, self._hb_ttl_ms)
        pipe.execute()

    def deregister(self, role: str, service_id: str) -> None:
        self._hb_stop.set()
        try:
            self.r.delete(keys.service(self.job, role, service_id))
            self.record_event("leave", role, service_id)
        except redis.RedisError:
            pass

    def services(self, role: str, include_dead: bool = False) -> list[dict]:
        """Services of ``role``: live ones (heartbeat key present), plus dead ones if asked (``alive`` False)."""
        ids = sorted(i.decode() for i in self.r.smembers(keys.members(self.job, role)))
        pipe = self.r.pipeline()
        for i in ids:
            pipe.hgetall(keys.service(self.job, role, i))
        out = []
        for i, h in zip(ids, pipe.execute()):
            if h:
                d = {k.decode(): json.loads(v) for k, v in h.items()}
                d.setdefault("id", i)          # an entry written only in part is still this service's
                d.setdefault("role", role)
                d["alive"] = True
                out.append(d)
            elif include_dead:
                out.append({"role": role, "id": i, "alive": False})
        return out

    def service_infos(self, role: str, include_dead: bool = False) -> list[ServiceInfo]:
        """:meth:`services` as records."""
        return [ServiceInfo.from_dict(d) for d in self.services(role, include_dead)]

    # ---- work streams -------------------------------------------------------------------------
    def ensure_groups(self, num_parts: int) -> None:
        for p in range(num_parts):
            try:
                self.r.xgroup_create(keys.work_stream(self.job, p), keys.WORK_GROUP, id="0", mkstream=True)
            except redis.ResponseError as e:
                if "BUSYGROUP" not in str(e):
                    raise

    def publish_work(self, items: list[tuple[int, dict]]) -> None:
        """Append work items ``(part, fields)`` to the partitions' streams in one round trip."""
        pipe = self.r.pipeline(transaction=False)
        for part, fields in items:
            pipe.xadd(keys.work_stream(self.job, part), {"d": json.dumps(fields)})
        pipe.execute()

    def claim(self, parts: list[int], consumer: str, count: int = 1, block_ms: int | None = 500) -> list[tuple[str, str, dict]]:
        """Claim up to ``count`` new work items from each of the given partitions' streams (waiting up
        to ``block_ms`` for one; ``None``: not at all)."""
        if not parts:
            time.sleep((block_ms or 0) / 1000)
            return []
        streams = {keys.work_stream(self.job, p): ">" for p in parts}
        reply = self.r.xreadgroup(keys.WORK_GROUP, consumer, streams, count=count, block=block_ms)
        return self._unpack(reply)

    def reclaim(self, parts: list[int], consumer: str, min_idle_ms: int, count: int = 4) -> list[tuple[str, str, dict]]:
        """Take over up to ``count`` items per stream claimed by others and not acknowledged for long.

        An item delivered ``d`` times (XPENDING's ``times_delivered``: 1 after its first claim) is
        taken once idle for ``min_idle_ms * reclaim_backoff(d)``: a first re-claim after
        ``min_idle_ms``, the next after twice that, ... up to :data:`RECLAIM_BACKOFF_CAP` times it.
        XCLAIM repeats the idle test atomically, so two samplers never both take an item.  The fleet
        event (``reclaim``) names and counts only the items actually taken."""
        out = []
        for p in parts:
            stream = keys.work_stream(self.job, p)
            # the idle entries: who held them, how long (the fleet event's cost), how often delivered
            idle = self.r.xpending_range(stream, keys.WORK_GROUP, min="-", max="+", count=count * RECLAIM_SCAN,
                                         idle=min_idle_ms)
            due: dict[int, list] = {}           # idle needed -> entries idle that long
            for x in idle:
                wait = min_idle_ms * reclaim_backoff(x["times_delivered"])
                if int(x["time_since_delivered"]) >= wait and sum(map(len, due.values())) < count:
                    due.setdefault(wait, []).append(x)
            if not due:
                continue
            pipe = self.r.pipeline(transaction=False)
            for wait, xs in due.items():
                pipe.xclaim(stream, keys.WORK_GROUP, consumer, min_idle_time=wait,
                            message_ids=[x["message_id"] for x in xs])
            entries = [e for res in pipe.execute() for e in res if e and e[0] is not None]
            got = self._unpack([[stream.encode(), entries]])
            if got:                 # a stall of at least min_idle_ms: the report and Prometheus list each one
                taken = {eid for _, eid, _ in got}
                mine = [x for xs in due.values() for x in xs if _text(x["message_id"]) in taken]
                held: dict[str, int] = {}
                for x in mine:
                    c = _text(x["consumer"])
                    held[c] = held.get(c, 0) + 1
                self.record_event("reclaim", "sampler", consumer, part=p, items=len(got), held_by=held,
                                  seeds=sum(int(f.get("count", 0)) for _, _, f in got),
                                  redelivered=sum(1 for x in mine if int(x["times_delivered"]) > 1),
                                  idle_s=round(max(int(x["time_since_delivered"]) for x in mine) / 1000, 2))
            out += got
        return out

    def publish_batch_age(self, rank: int, seconds: float, ttl: float = BATCH_AGE_TTL) -> None:
        """Trainer ``rank``: its recent batches took ``seconds`` from claim to apply (a high quantile;
        capped at :data:`BATCH_AGE_MAX`).  Kept ``ttl`` seconds: a trainer publishes every few seconds
        while it applies batches, and a silent one stops counting."""
        age = min(max(float(seconds), 0.0), BATCH_AGE_MAX)
        self.r.set(keys.batch_age(self.job, rank), repr(age), px=max(1, int(ttl * 1000)))

    def batch_age(self, trainers: int) -> float | None:
        """The longest batch age trainers ``0..trainers-1`` published (None: none did lately)."""
        raw = self.r.mget([keys.batch_age(self.job, r) for r in range(max(int(trainers), 1))])
        ages = [float(v) for v in raw if v is not None]
        return max(ages) if ages else None

    def reclaim_deadline(self, claim_timeout: float, trainers: int) -> float:
        """Seconds a work item may stay unacknowledged before a sampler re-claims it (before
        :func:`reclaim_backoff`): ``max(claim_timeout, RECLAIM_AGE_FACTOR * batch age)``, or
        ``claim_timeout`` while no trainer publishes an age."""
        age = self.batch_age(trainers)
        return claim_timeout if age is None else max(float(claim_timeout), RECLAIM_AGE_FACTOR * age)

    @staticmethod
    def _unpack(reply) -> list[tuple[str, str, dict]]:
        out = []
        for stream, entries in reply or []:
            for entry_id, fields in entries:
                if fields is None:       # deleted while pending
                    continue
                s = stream.decode() if isinstance(stream, bytes) else stream
                out.append((s, entry_id.decode(), json.loads(fields[b"d"])))
        return out

    def ack(self, stream: str, entry_id: str) -> None:
        self.ack_many([(stream, entry_id)])

    def ack_many(self, refs: list[tuple[str, str]]) -> None:
        """Acknowledge and delete work items ``[(stream, entry id), ...]`` in one round trip."""
        if not refs:
            return
        pipe = self.r.pipeline()
        self._ack_into(pipe, refs)
        pipe.execute()

    @staticmethod
    def _ack_into(pipe, refs: list[tuple[str, str]]) -> None:
        for stream, entry_id in refs:
            pipe.xack(stream, keys.WORK_GROUP, entry_id)
            pipe.xdel(stream, entry_id)

    def pending(self, num_parts: int) -> int:
        """Work items claimed but not acknowledged, over all partitions."""
        pipe = self.r.pipeline()
        for p in range(num_parts):
            pipe.xpending(keys.work_stream(self.job, p), keys.WORK_GROUP)
        return sum(int(x["pending"]) for x in pipe.execute())

    def backlog(self, num_parts: int) -> int:
        """Work items still in the streams (claimed or not)."""
        pipe = self.r.pipeline()
        for p in range(num_parts):
            pipe.xlen(keys.work_stream(self.job, p))
        return sum(pipe.execute())

    def mark_applied(self, epoch: int, phase: str, batch_id: int, acks: list[tuple[str, str]] = ()) -> bool:
        """True the first time a batch id is applied in an epoch/phase, False for a duplicate.

        ``acks``: work items to acknowledge in the same round trip (see :meth:`ack_many`)."""
        if not acks:
            return bool(self.r.sadd(keys.applied(self.job, epoch, phase), batch_id))
        pipe = self.r.pipeline(transaction=False)
        self._ack_into(pipe, acks)
        pipe.sadd(keys.applied(self.job, epoch, phase), batch_id)
        return bool(pipe.execute()[-1])

    def clear_applied(self, from_epoch: int) -> None:
        """Forget applied batch ids of ``from_epoch`` and later (a resumed trainer re-runs them)."""
        for key in self.r.scan_iter(match=keys.prefix(self.job) + "applied:*", count=1000):
            if int(key.decode().split(":")[-2]) >= from_epoch:
                self.r.delete(key)

    def drop_applied(self, before: int, sweep: bool = False) -> int:
        """Forget applied batch ids of epoch ``before - 1`` (all phases), or, with ``sweep``, of every epoch
        before ``before`` (a SCAN: also the sets a late re-delivery of an old epoch re-created).  The
        trainer calls it when epoch ``before`` ends: a finished epoch's ids are never read again (a
        late arrival of an old epoch is known to be one without them, and a resumed trainer clears
        from its checkpoint on), and one set per epoch and phase made Redis grow for as long as the
        job ran.  Returns the keys deleted."""
        if sweep:
            old = [k for k in self.r.scan_iter(match=keys.prefix(self.job) + "applied:*", count=1000)
                   if int(k.decode().split(":")[-2]) < before]
        else:
            old = [keys.applied(self.job, before - 1, ph) for ph in APPLIED_PHASES]
        return int(self.r.delete(*old)) if old else 0

    def clear_dist_url(self) -> None:
        self.r.delete(keys.dist(self.job))

    def applied_count(self, epoch: int, phase: str) -> int:
        return int(self.r.scard(keys.applied(self.job, epoch, phase)))

    def set_phase(self, **fields) -> None:
        self.r.set(keys.phase(self.job), json.dumps(fields))

    def get_phase(self) -> dict:
        raw = self.r.get(keys.phase(self.job))
        return json.loads(raw) if raw else {}

    # ---- metrics ------------------------------------------------------------------------------
    def incr(self, **counters: float) -> None:
        pipe = self.r.pipeline(transaction=False)
        for k, v in counters.items():
            pipe.hincrbyfloat(keys.metrics(self.job), k, v)
        pipe.execute()

    def metrics(self) -> dict[str, float]:
        return {k.decode(): float(v) for k, v in self.r.hgetall(keys.metrics(self.job)).items()}

    def take_epoch_counters(self, before: int) -> dict[int, dict[str, float]]:
        """Remove the per-epoch counters (``{name}_e{E}``) of every epoch below ``before`` from the
        metrics hash and return them, ``{E: {name: value}}``; marks the hash
        (:data:`EPOCH_COUNTERS_MOVED`) so a reader knows they left.  Read and delete are one
        transaction: an increment is never lost between them (one landing later re-creates the field;
        the next call takes it, and its value adds to the earlier one).  Trainer rank 0 calls it every
        few epochs with ``epoch - EPOCH_COUNTER_WINDOW``: ~7 counters an epoch made the hash grow for
        as long as the job ran."""
        key = keys.metrics(self.job)
        fields = []
        for f in self.r.hkeys(key):
            m = _PER_EPOCH_FIELD.match(f.decode())
            if m and int(m.group(2)) < before:
                fields.append(f.decode())
        pipe = self.r.pipeline(transaction=True)
        if fields:
            pipe.hmget(key, fields)
            pipe.hdel(key, *fields)
        pipe.hget(key, EPOCH_COUNTERS_MOVED)
        out = pipe.execute()
        moved = float(out[-1] or 0)
        if before > moved:
            self.r.hset(key, EPOCH_COUNTERS_MOVED, before)
        taken: dict[int, dict[str, float]] = {}
        for f, v in zip(fields, out[0] if fields else []):
            if v is None:
                continue
            m = _PER_EPOCH_FIELD.match(f)
            taken.setdefault(int(m.group(2)), {})[m.group(1)] = float(v)
        return taken

    def append_epoch(self, record: EpochRecord | dict) -> None:
        self.append_epochs([record])

    def append_epochs(self, records: list) -> None:
        """Append epoch records (one round trip); past :data:`MAX_EPOCH_RECORDS` (``max_epoch_records``)
        the oldest are dropped from Redis and counted, as fleet events are: indexes stay those of the
        whole history (:meth:`epochs`), and the best record is kept aside (:meth:`best_epoch`)."""
        if not records:
            return
        recs = [(r if isinstance(r, EpochRecord) else EpochRecord.from_dict(r)).to_dict() for r in records]
        key, cap = keys.epoch_metrics(self.job), self.max_epoch_records
        best = next((r for r in reversed(recs) if r.get("test_accuracy") is not None), None)
        pipe = self.r.pipeline(transaction=True)
        pipe.rpush(key, *(json.dumps(r) for r in recs[-cap:]))
        if len(recs) > cap:                       # the older part of a long history never enters Redis
            pipe.incrby(self._epochs_key("dropped"), len(recs) - cap)
        if best is not None:
            pipe.set(self._epochs_key("best"), json.dumps(best))
        n = pipe.execute()[0]
        if n > cap:
            pipe = self.r.pipeline(transaction=True)
            pipe.ltrim(key, n - cap, -1)
            pipe.incrby(self._epochs_key("dropped"), n - cap)
            pipe.execute()

    def reset_epochs(self, records: list, total: int | None = None, best: dict | None = None) -> None:
        """Replace the job's epoch records by ``records`` (a resumed trainer re-publishes its history):
        only the newest :data:`MAX_EPOCH_RECORDS` go to Redis, the rest are counted as dropped.
        ``total``: the history's length when ``records`` are only its newest ones; ``best``: the
        history's best record (:meth:`best_epoch`) when it may be older than them."""
        pipe = self.r.pipeline(transaction=True)
        pipe.delete(keys.epoch_metrics(self.job), self._epochs_key("best"))
        pipe.set(self._epochs_key("dropped"), max(0, (total or len(records)) - len(records)))
        if best is not None:
            rec = best if isinstance(best, EpochRecord) else EpochRecord.from_dict(best)
            pipe.set(self._epochs_key("best"), json.dumps(rec.to_dict()))
        pipe.execute()
        self.append_epochs(records)

    def trim_epochs(self, n: int) -> None:
        """Keep only the first ``n`` epoch records of the whole history (a resumed job re-runs the rest)."""
        dropped = self.epochs_dropped()
        if n <= dropped:
            pipe = self.r.pipeline(transaction=True)
            pipe.delete(keys.epoch_metrics(self.job), self._epochs_key("best"))
            pipe.set(self._epochs_key("dropped"), n)
            pipe.execute()
        else:
            self.r.ltrim(keys.epoch_metrics(self.job), 0, n - dropped - 1)

    def _epochs_key(self, what: str) -> str:
        return keys.epoch_metrics(self.job) + ":" + what

    def epochs_dropped(self) -> int:
        """Epoch records dropped from the head of the Redis list (past :data:`MAX_EPOCH_RECORDS`)."""
        return int(self.r.get(self._epochs_key("dropped")) or 0)

    def epochs_count(self) -> int:
        """Epoch records of the whole history (those in Redis and those dropped from it): O(1)."""
        pipe = self.r.pipeline(transaction=True)
        pipe.get(self._epochs_key("dropped"))
        pipe.llen(keys.epoch_metrics(self.job))
        d, n = pipe.execute()
        return int(d or 0) + int(n)

    def epochs_from(self, start: int = 0) -> tuple[int, list[EpochRecord]]:
        """``(first, records)``: the records from index ``start`` of the whole history on, or from the
        oldest one kept when those before it were dropped (``first`` > ``start``)."""
        key = keys.epoch_metrics(self.job)
        dropped = self.epochs_dropped()
        for _ in range(5):              # a trim between the two reads shifts the list: read again
            pipe = self.r.pipeline(transaction=True)
            pipe.lrange(key, max(0, start - dropped), -1)
            pipe.get(self._epochs_key("dropped"))
            raw, now = pipe.execute()
            if int(now or 0) == dropped:
                break
            dropped = int(now or 0)
        return max(start, dropped), [EpochRecord.from_dict(json.loads(x)) for x in raw]

    def epochs(self, start: int = 0) -> list[EpochRecord]:
        """The epoch records kept in Redis from index ``start`` of the whole history on (a poller passes
        how many it has: O(new) per call).  At most :data:`MAX_EPOCH_RECORDS`: a long job's older
        records are in its run dir (``checkpoint.epochs.jsonl``); see :meth:`epochs_from`."""
        return self.epochs_from(start)[1]

    def last_epoch(self) -> EpochRecord | None:
        raw = self.r.lindex(keys.epoch_metrics(self.job), -1)
        return EpochRecord.from_dict(json.loads(raw)) if raw else None

    def best_epoch(self) -> EpochRecord | None:
        """The newest record with a test accuracy (the best-validation epoch), kept even once dropped."""
        raw = self.r.get(self._epochs_key("best"))
        return EpochRecord.from_dict(json.loads(raw)) if raw else None

    def publish_dist_url(self, url: str) -> None:
        self.r.set(keys.dist(self.job), url)

    def wait_dist_url(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            raw = self.r.get(keys.dist(self.job))
            if raw:
                return raw.decode()
            time.sleep(0.2)
        raise CoordinationError(f"trainer rank 0 did not publish a rendezvous address within {timeout:.0f} s")

    def count_work_streams(self) -> int:
        """Work streams that exist (one per partition once rank 0 created the groups)."""
        return sum(1 for _ in self.r.scan_iter(match=keys.work_stream(self.job, "*"), count=1000))  # type: ignore[arg-type]

    # ---- autoscaler records -------------------------------------------------------------------
    def record_autoscale(self, decision: dict | None = None, replicas: dict[str, int] | None = None,
                         observation: dict | None = None, max_decisions: int = 1000) -> None:
        """Append a decision and/or overwrite the replica targets and last observation (one round trip)."""
        pipe = self.r.pipeline(transaction=False)
        if decision is not None:
            pipe.rpush(keys.autoscale(self.job, "decisions"), json.dumps(decision))
            pipe.ltrim(keys.autoscale(self.job, "decisions"), -max_decisions, -1)
        if replicas:
            pipe.hset(keys.autoscale(self.job, "replicas"), mapping={k: int(v) for k, v in replicas.items()})
        if observation is not None:
            pipe.set(keys.autoscale(self.job, "observation"), json.dumps(observation))
        pipe.execute()

    def autoscale_decisions(self, last: int = 0) -> list[dict]:
        raw = self.r.lrange(keys.autoscale(self.job, "decisions"), -last if last else 0, -1)
        return [json.loads(x) for x in raw]

    def autoscale_replicas(self) -> dict[str, int]:
        return {k.decode(): int(v) for k, v in self.r.hgetall(keys.autoscale(self.job, "replicas")).items()}

    def autoscale_observation(self) -> dict | None:
        raw = self.r.get(keys.autoscale(self.job, "observation"))
        return json.loads(raw) if raw else None

    # ---- fleet events: joins, leaves, lost services, re-claims ---------------------------------
    def record_event(self, event: str, role: str, service_id: str, **fields) -> None:
        """Append one fleet event (``join`` | ``leave`` | ``lost`` | ``hung`` | ``reclaim``); read by :meth:`events`.

        At most :data:`MAX_EVENTS` are kept: past that the oldest are dropped and counted
        (:meth:`events_dropped`); indexes stay those of the whole history, so a poller's ``start`` holds."""
        rec = {"t": time.time(), "event": event, "role": role, "sid": service_id, **fields}
        n = self.r.rpush(keys.events(self.job), json.dumps(rec))
        if n > self.max_events:
            extra = n - self.max_events
            pipe = self.r.pipeline()
            pipe.ltrim(keys.events(self.job), extra, -1)
            pipe.incrby(self._events_dropped_key, extra)
            pipe.execute()

    @property
    def _events_dropped_key(self) -> str:
        return keys.events(self.job) + ":dropped"

    def events_dropped(self) -> int:
        """Fleet events dropped from the head of the list (past ``max_events``, :data:`MAX_EVENTS`)."""
        return int(self.r.get(self._events_dropped_key) or 0)

    def events(self, start: int = 0) -> list[dict]:
        """Fleet events from index ``start`` of the whole history on (oldest first; dropped ones are gone)."""
        for _ in range(5):           # a trim between the two reads shifts the list: read again
            dropped = self.events_dropped()
            raw = self.r.lrange(keys.events(self.job), max(0, start - dropped), -1)
            if self.events_dropped() == dropped:
                break
        return [json.loads(x) for x in raw]

    # ---- exits of service processes ----------------------------------------------------------
    def record_exit(self, role: str, service_id: str, code: int, message: str) -> None:
        """Append one failed exit (the process is about to end with ``code``); read by :meth:`exits`."""
        rec = {"role": role, "sid": service_id, "code": int(code), "message": message[-2000:], "t": time.time()}
        self.r.rpush(keys.exits(self.job), json.dumps(rec))

    def exits(self, start: int = 0) -> list[dict]:
        """Exit records from index ``start`` on (oldest first)."""
        return [json.loads(x) for x in self.r.lrange(keys.exits(self.job), start, -1)]

    # ---- health probe -------------------------------------------------------------------------
    def probe(self, role: str, service_id: str) -> tuple[str | None, bool, bool]:
        """``(state, has_spec, registered)`` in one round trip, for container health checks."""
        pipe = self.r.pipeline(transaction=False)
        pipe.get(keys.state(self.job))
        pipe.exists(keys.spec(self.job))
        pipe.exists(keys.service(self.job, role, service_id))
        try:
            state, spec, reg = pipe.execute()
        except redis.RedisError as e:
            raise CoordinationError(f"Redis at {redact_url(self.url)}: {e}") from None
        return (state.decode() if state else None), bool(spec), bool(reg)

    def delete_job(self) -> int:
        """Delete every key of the job; returns how many."""
        n = 0
        for key in self.r.scan_iter(match=keys.prefix(self.job) + "*", count=1000):
            n += self.r.delete(key)
        return n

    def close(self) -> None:
        self._hb_stop.set()
        self.r.close()
