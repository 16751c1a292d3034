"""The sampler process: claim work items from Redis, sample, push SampledBatches to loaders.

Ownership (see :mod:`shared.ownership` and docs/distributed.md): live samplers share the parts by
:func:`~shared.ownership.assign_parts` (by host; every replica on a host holds all of its parts), recomputed every second from the
registry.  A sampler loads the topology of its assigned parts into memory, publishes them as
``held`` with its halo endpoint, and only then claims their work; it keeps a part it lost until the
new owner publishes it as held, so no part is ever without a holder while both are alive.
Neighbours in parts held elsewhere are fetched from their holder, one request per holder and hop.
A batch goes to the loader holding its part (its features are local there).
"""
from __future__ import annotations

import logging
import time

import zmq

from argosy.shared.coord import RECLAIM_AGE_FACTOR
from argosy.shared.errors import RequestFailedError
from argosy.shared.holder import PartHolder
from argosy.shared.ownership import Membership
from argosy.shared.traffic import frames_bytes
from argosy.shared.lifecycle import ServiceContext
from argosy.shared import keys
from argosy.shared.plan import PHASES, WorkItem
from argosy.shared.transport import make_socket
from argosy.shared.wire import encode
from argosy.services.sampler.core import SamplerCore

__all__ = ["SamplerProc"]

logger = logging.getLogger(__name__)


def _plan_position(item: WorkItem) -> tuple[int, int, int]:
    return item.epoch, PHASES.index(item.phase), item.seq


class SamplerProc(PartHolder):
    def __init__(self, ctx: ServiceContext):
        self.cfg = ctx.cfg
        super().__init__(ctx, "sampler", lambda store, fetch: SamplerCore(
            store, served_parts=[], seed=ctx.cfg.seed, held_parts=[], fetch=fetch,
            cache_bytes=ctx.cfg.sampler.halo_cache_bytes,
            # weights travel only to a model that uses them (not GAT, not MODULE:FACTORY: 1.41x bytes per batch)
            edge_weights=ctx.cfg.trainer.edge_weights_used(True) is True,
            link=ctx.cfg.link if ctx.cfg.trainer.task == "link" else None, memory_budget=ctx.cfg.memory_budget),
            timeout=ctx.cfg.sampler.halo_timeout)
        self.loaders = Membership(ctx.coord, "loader", self.store.num_parts, ctx.service_id, self.host)
        self.push: dict[str, tuple[str, zmq.Socket]] = {}
        self.parts: list[int] = []
        self._last_reclaim = 0.0
        self._heads: dict[str, tuple[str, str, WorkItem, float]] = {}
        """Per stream, the claimed item waiting for its turn (:meth:`step` takes the earliest in plan order)."""
        self._deadline_logged = False
        self.reclaim_deadline = ctx.cfg.coord.claim_timeout
        """Seconds an item may stay unacknowledged before this sampler re-claims it (:meth:`step`)."""
        self.counters = {"sampler_batches": 0.0, "sampled_edges": 0.0, "remote_neighbors": 0.0,
                        "sample_seconds": 0.0, "sampled_seeds": 0.0, "sampler_send_stall_seconds": 0.0,
                        "halo_fetch_failures": 0.0}

    def refresh(self) -> None:
        """Re-derive assigned/held/claimed parts and loader connections from the registry."""
        coord = self.ctx.coord
        want = self.refresh_parts()
        if want != self.parts:
            self.parts = want
            self.core.set_served(want)
            coord.update_info("sampler", self.ctx.service_id, parts=want)
        self.loaders.refresh()
        live = {sid: s["endpoint"] for sid, s in self.loaders.members.items() if "endpoint" in s}
        for sid, ep in live.items():
            cur = self.push.get(sid)
            if cur is None or cur[0] != ep:
                if cur is not None:
                    cur[1].close(0)
                sock = make_socket(self.zctx, zmq.PUSH, sndhwm=self.cfg.sampler.send_hwm, curve="client")
                sock.connect(ep)
                self.push[sid] = (ep, sock)
                logger.info("connected to loader %s at %s", sid, ep)
        for sid in set(self.push) - set(live):
            self.push.pop(sid)[1].close(0)

    def _loader_for(self, part: int, batch_id: int = 0) -> str | None:
        """A loader holding ``part`` (its features are local there), on this host when one is, the
        batches spread over the host's loaders by id; else any live loader."""
        hs = [h for h in self.loaders.holders(part) if h in self.push]
        near = [h for h in hs if self.loaders.members[h].get("host_label") == self.host]
        hs = near or hs
        if hs:
            return hs[batch_id % len(hs)]
        return min(self.push) if self.push else None

    def registration(self) -> dict:
        return {"parts": [], "held": [], "halo": self.server.endpoint, "host_label": self.host}

    def expected_members(self) -> int:
        return self.cfg.num_samplers

    def on_start(self) -> None:
        self.ctx.coord.ensure_groups(self.store.num_parts)

    def sockets(self) -> list[zmq.Socket]:
        return [sock for _, sock in self.push.values()]

    def step(self, now: float) -> None:
        """Claim one work item (or re-claim those left unacknowledged too long), sample it, send it."""
        ctx, coord, cfg = self.ctx, self.ctx.coord, self.cfg
        items = []
        if now - self._last_reclaim > cfg.coord.claim_timeout / 4:
            deadline = self._update_deadline()
            items = coord.reclaim(self.parts, ctx.service_id, int(deadline * 1000))
            if items:
                logger.warning("re-claimed %d work items left unacknowledged for %.0f s or longer",
                               len(items), deadline)
                coord.incr(reclaimed_batches=len(items), reclaimed_seeds=sum(f["count"] for _, _, f in items))
            self._last_reclaim = now
        if items:
            claimed_at = time.time()
            for stream, entry_id, fields in items:
                self.handle(stream, entry_id, WorkItem(**fields), claimed_at)
            return
        # A sampler holding several parts merges their streams in plan order: each stream is in plan
        # order, so taking the earliest of one claimed item per stream is the trainers' order. Taken one
        # per stream in turn instead, a small part ran ahead of a large one, and its batches waited at the
        # trainer for the large part's (past a small memory budget's reorder bound: applied out of order,
        # a run not bit-reproducible).
        want = [p for p in self.parts if keys.work_stream(coord.job, p) not in self._heads]
        if want:
            claimed_at = time.time()
            for stream, entry_id, fields in coord.claim(want, ctx.service_id, count=1,
                                                        block_ms=None if self._heads else 200):
                self._heads[stream] = (stream, entry_id, WorkItem(**fields), claimed_at)
        if self._heads:
            self.handle(*self._earliest_head())

    def _earliest_head(self) -> tuple[str, str, WorkItem, float]:
        first = min(self._heads, key=lambda k: _plan_position(self._heads[k][2]))
        return self._heads.pop(first)

    def on_exit(self) -> None:
        """Items claimed and waiting for their turn are sampled and sent now: left pending, they would
        wait a re-claim deadline (a scale-down's stall)."""
        while self._heads:
            stream, entry_id, item, claimed_at = self._earliest_head()
            try:
                self.handle(stream, entry_id, item, claimed_at)
            except Exception as e:                 # exiting anyway: the item stays pending and is re-claimed
                logger.warning("batch %d not sent at exit (%s); it will be re-claimed", item.batch_id, e)

    def _update_deadline(self) -> float:
        """The re-claim deadline: ``claim_timeout``, or longer when the trainers' batches take long
        from claim to apply (:meth:`~shared.coord.Coordinator.reclaim_deadline`); kept as a gauge."""
        timeout = self.cfg.coord.claim_timeout
        self.reclaim_deadline = self.ctx.coord.reclaim_deadline(timeout, self.cfg.num_trainers)
        self.ctx.metrics.set_gauge("reclaim_deadline", self.reclaim_deadline)
        if self.reclaim_deadline > timeout and not self._deadline_logged:
            self._deadline_logged = True
            logger.info("batches take %.1f s from claim to apply (trainers' 90th percentile): re-claiming work "
                        "items after %.1f s instead of the %.1f s claim timeout (logged once; gauge "
                        "argosy_reclaim_deadline_seconds)", self.reclaim_deadline / RECLAIM_AGE_FACTOR,
                        self.reclaim_deadline, timeout)
        return self.reclaim_deadline

    def handle(self, stream: str, entry_id: str, item: WorkItem, claimed_at: float = 0.0) -> None:
        """Sample ``item`` (claimed at wall time ``claimed_at``) and send it to a loader of its part."""
        fanouts = self.cfg.fanouts_for(item.phase)
        self.epoch = item.epoch
        if not self.core.held[item.part]:
            return                       # claimed just before the part moved: left pending, re-claimed by its holder
        try:
            batch = self.core.sample_item(item, fanouts, self.cfg.relation_fanouts_for(item.phase))
        except RequestFailedError as e:
            logger.warning("batch %d: halo fetch failed (%s); the item stays pending and will be re-claimed",
                           item.batch_id, e)
            self.counters["halo_fetch_failures"] += 1
            return
        batch.job, batch.work_stream, batch.work_id, batch.sampler_id = self.ctx.coord.job, stream, entry_id, self.ctx.service_id
        batch.claimed_at = claimed_at
        frames = encode(batch)
        t_send = time.perf_counter()

        def target() -> tuple[zmq.Socket, str] | None:
            sid = self._loader_for(item.part, item.batch_id)
            return None if sid is None else (self.push[sid][1], self.loaders.members.get(sid, {}).get("host_label") or "")
        peer_host = self.send(frames, target, f"batch {item.batch_id} to a loader")
        if peer_host is None:
            return                      # dropped: the item stays pending and is re-claimed
        self.wire.add(frames_bytes(frames), sent=True, cross_host=peer_host != self.host, epoch=item.epoch, halo=False)
        c = self.counters
        c["sampler_send_stall_seconds"] += time.perf_counter() - t_send
        self.ctx.metrics.observe_remote_fraction(batch.remote_neighbors / max(batch.num_sampled_edges, 1))
        c["sampler_batches"] += 1
        c["sampled_edges"] += batch.num_sampled_edges
        c["remote_neighbors"] += batch.remote_neighbors
        c["sample_seconds"] += batch.sample_seconds
        c["sampled_seeds"] += batch.num_seeds
