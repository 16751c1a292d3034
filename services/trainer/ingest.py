"""The trainer's ingest thread: receive, decode, validate and stage batches off the compute thread.

One thread per trainer owns the PULL socket.  For each message it

1. receives and decodes it (:class:`~shared.transport.Receiver`; arrays stay views of the frames),
2. validates it (:class:`~shared.validate.MessageValidator`): the structure on this thread; the
   per-byte finiteness check here too on the CPU, or on the GPU after the copy on CUDA; a batch
   whose rows wait in its loader's shared-memory ring (a loader on this host) has them copied
   into this process with the finiteness check fused into the copy, and the slot released
   (:class:`~shared.shm_ring.RingReader`),
3. stages it on the device (:meth:`TrainerCore.stage`): on CUDA one copy from a pinned buffer on a
   side stream (:class:`~services.trainer.staging.Staging`), which also runs the finiteness check,
4. claims its batch id in Redis (``mark_applied``: a re-delivery is known before it is queued), and
5. queues it in a bounded queue of ``trainer.prefetch`` batches, so the copy of the next batch or
   two overlaps the current step and a slow trainer still pushes back on the loaders (a full
   queue stops the receive, the socket's high-water mark fills, the loaders' sends block).

The compute thread takes :class:`Arrival` s with :meth:`Ingest.get` (the time it waits there is
the trainer's *idle* time, and nothing else) and hands acknowledgements back with
:meth:`Ingest.ack`: they are sent by this thread, batched into one Redis round trip, only after
the batch was applied (exactly-once: ack after apply, as before).  Time is measured where the work
runs: ``ingest_seconds`` (receive + decode + validate + Redis claim, on this thread, polling
excluded) and ``copy_seconds`` (pinned copy, host-to-device copy and device check, this thread
waiting for the side stream only); each :class:`Arrival` carries the time spent on it and on
any message dropped before it.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass

import numpy as np
import zmq

from argosy.shared.errors import ProtocolError
from argosy.shared.protocol import FeatureBatch
from argosy.shared.shm_ring import RingReader
from argosy.shared.traffic import frames_bytes
from argosy.shared.transport import Receiver
from argosy.shared.validate import job_receiver, nonfinite_features
from argosy.services.trainer.core import TrainerCore
from argosy.services.trainer.staging import DeviceBatch, Staging

__all__ = ["Arrival", "Ingest"]

logger = logging.getLogger(__name__)


@dataclass
class Arrival:
    """One valid batch handed from the ingest thread to the compute thread."""

    fb: FeatureBatch
    """The batch (on CUDA its ``features`` were released after the copy: use ``staged.x``)."""
    staged: DeviceBatch
    fresh: bool
    """First arrival of this batch id in its epoch/phase (Redis ``mark_applied``); False = re-delivery."""
    feature_rows: int
    """Feature rows the batch needs (one per node)."""
    cached_rows: int
    """Of those, rows served from the trainer's feature cache (not on the wire)."""
    wire_bytes: int
    """Bytes received: the message's frames, and the rows read from the loader's ring (if any)."""
    ingest_seconds: float
    copy_seconds: float


class Ingest:
    """Runs the receive path of one trainer on a thread of its own (see the module docstring).

    Args:
        sock: the trainer's bound PULL socket (used by this thread only from :meth:`start` on).
        cfg: the job config.  coord: the job's coordinator (thread-safe redis client).
        rank: this trainer's rank.  core: the trainer core (device, :meth:`TrainerCore.stage`).
        depth: batches staged ahead of the step (the queue's bound).
        ring_dir: where loaders on this host put their rings (:func:`~shared.transport.local_ring_dir`;
            None: every batch carries its rows).
    """

    def __init__(self, sock: zmq.Socket, cfg, coord, rank: int, core: TrainerCore, depth: int = 2,
                 ring_dir: str | None = None):
        self.core, self.coord = core, coord
        self.on_cuda = core.device.type == "cuda"
        rings = bool(ring_dir) and cfg.loader.shm_ring_slots > 0
        # on CUDA the finiteness check runs on the GPU after the copy (Staging.finish)
        self.rx: Receiver = job_receiver(sock, cfg, coord, "trainer", rank=rank, check_values=not self.on_cuda,
                                         hot=core.hot, rings=rings)
        self.validator = self.rx.check
        self.rings = RingReader(ring_dir, self.validator.bounds) if rings else None
        if self.rings is not None:
            self.rx.check = self.rings.wrap(self.validator)
        self._last_sweep = time.monotonic()
        self.staging = Staging(core.device) if self.on_cuda else None
        self.q: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._acks: list[tuple[str, str]] = []
        self._acks_cv = threading.Condition()
        self._unsent = 0
        self._stop = threading.Event()
        self._carry = [0.0, 0.0]                  # ingest/copy seconds of dropped messages, not yet charged
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        """Why the thread stopped (re-raised by :meth:`get` on the compute thread)."""

    # ---- compute-thread side ------------------------------------------------------------------
    def start(self) -> "Ingest":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="argosy-ingest", daemon=True)
            self._thread.start()
        return self

    def set_plan(self, epoch: int, phase: str, plan) -> None:
        """Hand the validator the plan the trainer derived (thread-safe, see ``PlanIndex``)."""
        self.validator.set_plan(epoch, phase, plan)

    def get(self, timeout: float) -> Arrival | None:
        """The next valid batch, or None after ``timeout`` seconds; re-raises the thread's failure."""
        if self._error is not None:
            raise self._error
        try:
            return self.q.get(timeout=timeout)
        except queue.Empty:
            if self._error is not None:
                raise self._error from None
            return None

    def ack(self, stream: str, work_id: str) -> None:
        """Acknowledge an applied (or duplicate) work item; sent by the ingest thread, batched."""
        with self._acks_cv:
            self._acks.append((stream, work_id))
            self._unsent += 1

    def flush_acks(self, timeout: float = 30.0) -> None:
        """Wait until every acknowledgement handed in so far is in Redis (end of a phase)."""
        deadline = time.monotonic() + timeout
        with self._acks_cv:
            while self._unsent and self._thread is not None and self._thread.is_alive():
                if not self._acks_cv.wait(timeout=max(0.0, deadline - time.monotonic())):
                    break
        if self._unsent and (self._thread is None or not self._thread.is_alive()):
            self._send_acks()                      # the thread is gone: send them from here

    def close(self) -> None:
        """Stop the thread (it drops what it holds: unacknowledged batches are re-delivered)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._send_acks()
        if self.rings is not None:
            self.rings.close()

    # ---- the ingest thread --------------------------------------------------------------------
    def _take_acks(self) -> list[tuple[str, str]]:
        with self._acks_cv:
            refs, self._acks = self._acks, []
        return refs

    def _acks_sent(self, n: int) -> None:
        with self._acks_cv:
            self._unsent -= n
            self._acks_cv.notify_all()

    def _send_acks(self) -> None:
        refs = self._take_acks()
        if refs:
            self.coord.ack_many(refs)
            self._acks_sent(len(refs))

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if not self.rx.sock.poll(0, zmq.POLLIN):   # nothing waiting: send the acks, then wait
                    self._send_acks()
                    if not self.rx.sock.poll(20, zmq.POLLIN):
                        self.rx.flush()
                        if self.rings is not None and time.monotonic() - self._last_sweep > 5.0:
                            self.rings.sweep()         # rings of loaders that left
                            self._last_sweep = time.monotonic()
                        continue
                a = self._ingest_one()             # a valid batch's claim carries the pending acks
                if a is None:
                    self._send_acks()
                while a is not None and not self._stop.is_set():
                    try:
                        self.q.put(a, timeout=0.02)
                        break
                    except queue.Full:             # the compute thread is behind: keep acking meanwhile
                        self._send_acks()
        except BaseException as e:  # noqa: BLE001  (handed to the compute thread, which raises it)
            logger.error("ingest thread failed: %s", e)
            self._error = e
        finally:
            with self._acks_cv:
                self._acks_cv.notify_all()

    def _ingest_one(self) -> Arrival | None:
        t0 = time.perf_counter()
        try:
            fb = self.rx.recv(0)                   # decoded and validated; bad ones dropped and counted
        except ProtocolError as e:
            logger.warning("dropped a malformed message: %s", e)
            fb = None
        if fb is not None and not isinstance(fb, FeatureBatch):
            logger.warning("ignored an unexpected %s message", type(fb).__name__)
            fb = None
        if fb is None:
            self._carry[0] += time.perf_counter() - t0
            return None
        wire_bytes = frames_bytes(self.rx.last_frames) + (fb.ring_bytes if fb.ring else 0)
        t1 = time.perf_counter()
        staged = self.core.stage(fb, self.staging)
        t2 = time.perf_counter()
        if staged is None:                         # the device found NaN/inf: the check of check_feature_values
            self.rx.strike(self.rx.last_peer, nonfinite_features(fb))
            self._carry[0] += t1 - t0
            self._carry[1] += t2 - t1
            return None
        acks = self._take_acks()                   # applied batches' acks ride on this claim: one round trip
        fresh = self.coord.mark_applied(fb.epoch, fb.phase, fb.batch_id, acks)   # only for batches that will be used
        self._acks_sent(len(acks))
        t3 = time.perf_counter()
        rows, sent = int(fb.nodes.shape[0]), int(fb.features.shape[0])
        if self.on_cuda:                           # the frames can go back to the allocator now
            fb.features = np.empty((0,) + fb.features.shape[1:], fb.features.dtype)
        ingest, copy = (t1 - t0) + (t3 - t2) + self._carry[0], (t2 - t1) + self._carry[1]
        self._carry = [0.0, 0.0]
        return Arrival(fb=fb, staged=staged, fresh=fresh, feature_rows=rows, cached_rows=rows - sent,
                       wire_bytes=wire_bytes, ingest_seconds=ingest, copy_seconds=copy)
