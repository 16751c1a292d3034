"""The process wrapper a sampler and a loader share: held parts, halo ends, the busy loop, sending.

:class:`PartHolder` owns what both roles have: the parts this process holds, its tier's membership,
the halo client and server for the rows it does not hold, the wire and metric counters, and the
busy loop (:meth:`PartHolder.run`): register, wait for the tier, then every second re-read the
registry (:meth:`refresh`) and flush the metrics (and every minute hand the free heap back), and in between run the role's :meth:`step`
(claim and sample, or receive and load).  A role supplies the hooks; its pure logic is its core.

**The one retry rule** (:meth:`PartHolder.send`): a batch goes to the peer :meth:`~PartHolder.send`'s
``target`` names (re-evaluated each attempt); an attempt waits up to 1 s for room on that peer's
socket.  With no peer or no room, the process re-reads the registry (a peer that died and came back
has a new endpoint; another may have taken its parts) and tries again, until it is stopping or
``coord.claim_timeout`` seconds have passed.  Then the batch is dropped: its work item is still
unacknowledged, so it is re-claimed (by this tier) after the same timeout and sent again: giving up
loses nothing, and a dead peer never blocks a process for longer than one claim timeout.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

import zmq

from argosy.shared import envs
from argosy.shared.halo import HaloClient, HaloServer
from argosy.shared.ownership import Membership, host_label
from argosy.shared.records import STOP_STATES
from argosy.shared.rss import memory_fields, rss_bytes
from argosy.shared.malloc import HeapTrimmer, keep_heap
from argosy.shared.store.residency import DiskCounters, tight_budget
from argosy.shared.traffic import WireCounter

__all__ = ["PartHolder"]

logger = logging.getLogger(__name__)
STAGE_RETRY_SECONDS = 10.0
"""After a part could not be staged (disk full), wait this long before copying it again."""


def _reason(e: OSError) -> str:
    """One line for a failed copy (``shutil.Error`` carries a list of (src, dst, why), one per file)."""
    if e.args and isinstance(e.args[0], list) and e.args[0] and len(e.args[0][0]) == 3:
        return f"{len(e.args[0])} file(s) failed, first: {e.args[0][0][2]}"
    return str(e)


class PartHolder:
    """What a sampler and a loader share: the parts this process holds, its tier's membership, and
    the halo client and server for the rows it does not hold.

    ``make_core(store, fetch)`` builds the role's core over the (initially empty) store view;
    :meth:`refresh_parts` re-derives the held parts from the registry (a newcomer's first call loads
    its share) and :meth:`close` releases the sockets.  A role subclass sets ``counters`` (its metric
    names, zeroed at each flush) and implements :meth:`registration`, :meth:`step` and :meth:`sockets`.
    """

    counters: dict[str, float]
    """The role's metrics since the last flush (added to the job's metrics and the Prometheus endpoint)."""

    def __init__(self, ctx, role: str, make_core: Callable, timeout: float):
        from argosy.shared.store.stage import PartSource
        self.ctx, self.role = ctx, role
        self.host = host_label()
        self.base_rss = rss_bytes()              # before any part is loaded: the interpreter and libraries
        self.source = PartSource(ctx.cfg.store, envs.get(envs.LOCAL_STORE))
        self.budget = tight_budget(ctx.cfg.memory_budget, self.source.src_store)
        """The memory budget when the job's store does not fit it, else None (what bounds heap and queues)."""
        if self.budget:
            keep_heap(budget=self.budget)       # parts served from disk: freed heap goes back (shared/malloc.py)
        self.store = self.source.open([])
        self._stage_retry_at = 0.0
        self.zctx = zmq.Context()
        self.wire = WireCounter()
        self.disk = DiskCounters()
        self.epoch: int | None = None
        """Epoch of the work last handled: disk reads and row-cache counts are attributed to it."""
        self.members = Membership(ctx.coord, role, self.store.num_parts, ctx.service_id, self.host)
        self.client = HaloClient(self.zctx, self.members, self.store.assignment, self.wire, timeout=timeout, stop=ctx.stop)
        self.core = make_core(self.store, self.client.fetch)
        self.server = HaloServer(self.zctx, self.core.serve, self.wire, coord=ctx.coord,
                                 cut_off_after=ctx.cfg.wire.cut_off_after)

    def refresh_parts(self) -> list[int]:
        """Hold the assigned parts, keeping a lost part until its new owner publishes it as held
        (so no part is ever without a holder while both are alive); returns the held parts."""
        self.members.refresh()
        mine = self.members.mine()
        held = self.core.held_parts

        def handed_over(p: int) -> bool:
            return any(p in (self.members.members.get(new, {}).get("held") or []) for new in self.members.owners_of(p))

        want = sorted(set(mine) | {p for p in held if p not in mine and not handed_over(p)})
        if want != held and time.monotonic() >= self._stage_retry_at:
            t0 = time.perf_counter()
            try:
                self.store = self.source.open(want)
            except OSError as e:        # the host's staging disk is full or unwritable: keep serving what we hold
                self._stage_retry_at = time.monotonic() + STAGE_RETRY_SECONDS
                self.counters["staging_failures"] = self.counters.get("staging_failures", 0.0) + 1
                logger.error("cannot stage part(s) %s into %s (%s); still holding %s, retrying in %.0f s",
                             sorted(set(want) - set(held)), self.source.local, _reason(e), held, STAGE_RETRY_SECONDS)
                return held
            self.core.replicas_on_host = self.members.on_my_host()
            self.core.set_held(want)
            res = self.core.residency
            logger.info("holding parts %s (assigned %s; %d live %ss) after %.2f s%s", want, mine,
                        len(self.members.members), self.role, time.perf_counter() - t0,
                        f"; {res.describe()}" if res is not None else "")
            self.ctx.coord.update_info(self.role, self.ctx.service_id, held=want)
        return want

    def close(self) -> None:
        """Publish this process's memory figures, then close the halo sockets."""
        self.ctx.coord.incr(**memory_fields(self.ctx.service_id, self.base_rss))
        self.server.close()
        self.client.close()

    # ------------------------------------------------------------------ the role's hooks
    def registration(self) -> dict:
        """The role's registry entry (held parts, endpoints, host label)."""
        raise NotImplementedError

    def expected_members(self) -> int:
        """Tier size to wait for before loading parts (so a newcomer loads its final share once)."""
        raise NotImplementedError

    def refresh(self) -> None:
        """Re-read the registry: held parts and peer connections."""
        raise NotImplementedError

    def step(self, now: float) -> None:
        """One round of the role's work; blocks at most ~200 ms."""
        raise NotImplementedError

    def on_start(self) -> None:
        """After registering, before waiting for the tier (e.g. create the work streams' groups)."""

    def sockets(self) -> list[zmq.Socket]:
        """The role's own sockets, closed at exit."""
        return []

    def on_exit(self) -> None:
        """Last words before the sockets close (e.g. the receiver's final counts)."""

    # ------------------------------------------------------------------ the shared process wrapper
    def flush_metrics(self) -> None:
        """Add the counters, the wire bytes and the core's stats to the job's metrics; zero them."""
        io = self.disk.take()
        per_epoch = {**io, **{k: v for k, v in self.core.stats.items() if k.startswith("row_cache_")}}
        c = {**self.counters, **self.wire.drain(), **self.core.stats, **io}
        if self.epoch is not None:
            c.update({f"{k}_e{self.epoch}": v for k, v in per_epoch.items() if v})
        self.core.stats = dict.fromkeys(self.core.stats, 0.0)
        self.ctx.metrics.inc_many(c)
        self.ctx.metrics.publish(self.ctx.coord)
        self.ctx.coord.incr(**c)
        self.counters = dict.fromkeys(self.counters, 0.0)

    def send(self, frames: list, target: Callable[[], tuple[zmq.Socket, str] | None], what: str) -> str | None:
        """Send ``frames`` by the one retry rule (module docstring); ``target()`` gives the socket and
        the host label of the peer to send to, or None when there is none.  Returns that host label,
        or None when the batch was dropped (stopping, or no peer took it within ``claim_timeout``)."""
        give_up = time.perf_counter() + self.ctx.cfg.coord.claim_timeout
        while True:
            t = target()
            if t is not None and t[0].poll(1000, zmq.POLLOUT):
                try:
                    t[0].send_multipart(frames, copy=False, flags=zmq.NOBLOCK)
                    return t[1]
                except zmq.Again:
                    pass
            if self.ctx.stop.is_set():
                return None             # stopping: the work item stays pending and is re-claimed
            if time.perf_counter() > give_up:
                logger.warning("%s: no peer took it for %.0f s; dropped (its work item will be re-claimed and "
                               "re-sent)", what, self.ctx.cfg.coord.claim_timeout)
                return None
            self.refresh()              # peers may have died or moved: reconnect, then retry

    def run(self) -> None:
        """Register, wait for the tier, then loop: refresh and flush every second, :meth:`step` between."""
        ctx, coord, cfg = self.ctx, self.ctx.coord, self.ctx.cfg
        coord.register(self.role, ctx.service_id, self.registration(), cfg.coord.heartbeat_seconds,
                       cfg.coord.heartbeat_ttl)
        self.on_start()
        self.members.wait_for(self.expected_members(), ctx.stop)
        last_refresh = last_flush = 0.0
        heap = HeapTrimmer()
        try:
            while not ctx.stop.is_set():
                now = time.monotonic()
                if now - last_refresh > 1.0:
                    if coord.get_state() in STOP_STATES:
                        break
                    self.refresh()
                    last_refresh = now
                if now - last_flush > 1.0:
                    self.flush_metrics()
                    last_flush = now
                    heap.maybe(now)     # the freed heap a burst (a fault's send queues) left, back every minute
                self.step(now)
        finally:
            self.flush_metrics()
            self.on_exit()
            self.close()
            coord.deregister(self.role, ctx.service_id)
            for sock in self.sockets():
                sock.close(0)
            self.zctx.term()
