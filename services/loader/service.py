"""The loader process: receive SampledBatches, gather features, push FeatureBatches to trainers.

A loader holds the feature rows and labels of the parts :func:`~shared.ownership.assign_parts` gives
it (by host: every loader on a host holds all of the host's parts, one memory map shared by them),
answers other hosts' halo requests for them, and fetches the rows of other parts from their holders
(one request per holder per batch).  Samplers send each batch to a loader holding its part.  It binds one PULL socket (samplers find it through the registry)
and holds one PUSH socket per trainer rank, because each batch is addressed to a rank (DDP needs
every rank to get its own share).  A malformed message is logged and counted, never fatal.

To a trainer on its own host that offers a ring directory (``ring_dir`` in its registration), a
loader gathers the rows straight into a slot of its shared-memory ring and sends only the header
(:mod:`shared.shm_ring`); when no slot frees up within :data:`RING_WAIT`, or a batch does not fit,
the rows travel inline as to any other trainer.
"""
from __future__ import annotations

import logging
import os
import time

import zmq

from argosy.shared.errors import ConfigError, RequestFailedError
from argosy.shared.hot_rows import HotRows
from argosy.shared.store import PartitionStore
from argosy.shared.store.residency import queue_depth
from argosy.shared.holder import PartHolder
from argosy.shared.traffic import frames_bytes
from argosy.shared.lifecycle import ServiceContext
from argosy.shared.protocol import SampledBatch
from argosy.shared.shm_ring import Lease, RingWriter
from argosy.shared.transport import bind_random, connect_endpoint, make_socket
from argosy.shared.validate import job_receiver
from argosy.shared.wire import encode
from argosy.services.loader.core import LoaderCore

__all__ = ["LoaderProc"]

logger = logging.getLogger(__name__)


RING_WAIT = 5.0
"""Seconds a loader waits for its trainer to release a ring slot before sending a batch's rows inline."""


class _CacheChanged(Exception):
    """The trainer a batch was gathered for changed: it caches other rows, or it restarted and the
    batch's ring slot is in its predecessor's ring."""


class LoaderProc(PartHolder):
    def __init__(self, ctx: ServiceContext):
        self.cfg = ctx.cfg
        super().__init__(ctx, "loader", lambda store, fetch: LoaderCore(
            store, held_parts=[], fetch=fetch, cache_bytes=ctx.cfg.loader.halo_cache_bytes,
            memory_budget=ctx.cfg.memory_budget),
            timeout=ctx.cfg.sampler.halo_timeout)
        self.pull = make_socket(self.zctx, zmq.PULL, rcvhwm=self.cfg.loader.recv_hwm, curve="server")
        self.endpoint = bind_random(self.pull, ctx.port)
        self.rx = job_receiver(self.pull, self.cfg, ctx.coord, "loader")
        self.trainers: dict[int, tuple[str, zmq.Socket, str]] = {}
        self.rings: dict[int, RingWriter | None] = {}
        """The shared-memory ring towards each trainer rank on this host (None: rows go inline)."""
        self.hot: dict[int, HotRows | None] = {}
        """Each trainer rank's feature cache (rows to leave out of its batches), None = send every row."""
        self._known_caches: dict[int, HotRows] = {}
        self.whole_store = PartitionStore(self.cfg.store)   # every part's degrees (read once per cache size)
        self.counters = {"loader_batches": 0.0, "feature_bytes": 0.0, "remote_feature_rows": 0.0,
                         "feature_rows": 0.0, "load_seconds": 0.0, "bad_messages": 0.0,
                         "loader_send_stall_seconds": 0.0, "halo_fetch_failures": 0.0, "loader_ring_batches": 0.0}

    def refresh(self) -> None:
        self.refresh_parts()
        for s in self.ctx.coord.services("trainer"):
            rank, ep = int(s.get("rank", -1)), connect_endpoint(s)      # ipc:// on the same host
            if ep is None or rank < 0:
                continue
            cur = self.trainers.get(rank)
            if cur is None or cur[0] != ep:
                if cur is not None:
                    cur[1].close(0)
                sock = make_socket(self.zctx, zmq.PUSH, sndhwm=queue_depth(self.cfg.loader.send_hwm, self.budget),
                                   curve="client")
                sock.connect(ep)
                self.trainers[rank] = (ep, sock, s.get("host_label", s.get("host", "")))
                self.hot[rank] = self._trainer_cache(rank, s.get("feature_cache"))
                self._close_ring(rank)
                self.rings[rank] = self._open_ring(ep, s.get("ring_dir"))
                logger.info("connected to trainer rank %d at %s%s", rank, ep,
                            " (rows through a shared-memory ring)" if self.rings[rank] is not None else "")

    def _open_ring(self, endpoint: str, ring_dir) -> RingWriter | None:
        """A ring in the trainer's ring directory, if it listens there (``ipc://`` in that directory:
        so this loader runs on its kernel and sees its files) and the job uses rings."""
        slots = self.cfg.loader.shm_ring_slots
        if (not slots or not isinstance(ring_dir, str) or not endpoint.startswith("ipc://")
                or os.path.dirname(endpoint[len("ipc://"):]) != ring_dir or not os.path.isdir(ring_dir)):
            return None
        try:
            return RingWriter(ring_dir, slots, self.rx.check.bounds.ring_slot_bytes)
        except OSError as e:
            logger.info("no shared-memory ring in %s (%s): rows go over the socket", ring_dir, e)
            return None

    def _close_ring(self, rank: int) -> None:
        ring = self.rings.pop(rank, None)
        if ring is not None:
            ring.close()

    def _trainer_cache(self, rank: int, published: dict | None) -> HotRows | None:
        """The feature cache trainer ``rank`` published, if this loader derives the same set
        (else None: every row is sent, so a trainer never gets a batch built for another cache)."""
        try:
            hot = HotRows.matching(self.whole_store, published, self._known_caches, who=f"trainer rank {rank}")
        except ConfigError as e:
            logger.error("%s", e)
            return None
        if hot is not None:
            logger.info("trainer rank %d caches %d feature rows (%s): sending only the others", rank, hot.rows, hot.digest)
        return hot

    def registration(self) -> dict:
        return {"endpoint": self.endpoint, "held": [], "halo": self.server.endpoint, "host_label": self.host}

    def expected_members(self) -> int:
        return self.cfg.num_loaders

    def on_start(self) -> None:
        logger.info("listening on %s", self.endpoint)

    def sockets(self) -> list[zmq.Socket]:
        return [self.pull] + [sock for _, sock, _ in self.trainers.values()]

    def on_exit(self) -> None:
        self.rx.flush(force=True)
        for rank in list(self.rings):
            self._close_ring(rank)

    def step(self, now: float) -> None:
        """Receive one SampledBatch (waiting at most 200 ms), load its features, send them on."""
        msg = self.rx.recv(200)         # decoded and validated; bad ones dropped and counted
        if msg is None:
            return
        frames = self.rx.last_frames
        self.wire.add(frames_bytes(frames), sent=False, cross_host=self._from_other_host(msg), epoch=None, halo=False)
        self.handle(msg)

    def _from_other_host(self, batch: SampledBatch) -> bool:
        return not self.core.held[batch.part]     # samplers send a batch to the loader holding its part: same host

    def handle(self, batch: SampledBatch) -> None:
        rank = batch.trainer_rank
        self.epoch = batch.epoch
        if rank not in self.trainers:
            self.refresh()              # learn the trainer (and its feature cache) before gathering rows
        hot = self.hot.get(rank)
        ring = self.rings.get(rank)
        if ring is not None and not ring.alive():            # its file was removed: a new one
            self._close_ring(rank)
            ring = self.rings[rank] = self._open_ring(self.trainers[rank][0], os.path.dirname(ring.path))
        lease: list[Lease] = []
        waited = [0.0]

        def slot(rows: int):
            """The ring slot the rows are gathered into (None: a new array, sent inline)."""
            nbytes = rows * self.core.feature_dim * self.core.dtype.itemsize
            if ring is None or not nbytes:
                return None
            t = time.perf_counter()
            got = ring.acquire(nbytes, RING_WAIT, self.ctx.stop)
            waited[0] = time.perf_counter() - t
            if got is None:
                return None
            lease.append(got)
            return ring.rows(got, (rows, self.core.feature_dim), self.core.dtype)

        sent = False
        try:
            try:
                fb = self.core.load(batch, hot, slot)
            except RequestFailedError as e:
                logger.warning("batch %d: halo fetch failed (%s); dropped (its work item will be re-claimed)",
                               batch.batch_id, e)
                self.counters["halo_fetch_failures"] += 1
                return
            fb.loader_id = self.ctx.service_id
            fb.load_seconds = max(0.0, fb.load_seconds - waited[0])   # the wait for a slot is a stall, not work
            feats = fb.features
            if lease:                     # the rows are in the slot: the message names it
                fb.features = feats[:0]
                fb.ring, fb.ring_slot, fb.ring_seq, fb.ring_bytes = ring.name, lease[0].slot, lease[0].seq, feats.nbytes
            frames = encode(fb)
            t_send = time.perf_counter()

            def target() -> tuple[zmq.Socket, str] | None:
                # a trainer that died and came back has a new endpoint: send() re-reads the registry
                ent = self.trainers.get(rank)
                if ent is not None and hot is not None and self.hot.get(rank) is not hot:
                    raise _CacheChanged           # a batch built for the trainer's previous cache would be refused
                if lease and self.rings.get(rank) is not ring:
                    raise _CacheChanged           # a new trainer: the slot is in its predecessor's ring
                return None if ent is None else (ent[1], ent[2])
            try:
                peer_host = self.send(frames, target, f"batch {batch.batch_id} to trainer rank {rank}")
            except _CacheChanged:
                logger.info("trainer rank %d changed (restarted, or its feature cache did): batch %d gathered again",
                            rank, batch.batch_id)
                if lease:
                    ring.cancel(lease.pop())
                return self.handle(batch)
            if peer_host is None:
                return                      # dropped: its work item will be re-claimed and re-sent
            sent = True
        finally:
            if lease and not sent:
                ring.cancel(lease[0])
        self.wire.add(frames_bytes(frames), sent=True, cross_host=peer_host != self.host, epoch=batch.epoch, halo=False)
        c = self.counters
        c["loader_send_stall_seconds"] += time.perf_counter() - t_send + waited[0]
        c["loader_batches"] += 1
        c["loader_ring_batches"] += bool(lease)
        c["feature_bytes"] += feats.nbytes
        c["feature_rows"] += feats.shape[0]
        c["remote_feature_rows"] += fb.remote_feature_rows
        c["load_seconds"] += fb.load_seconds
