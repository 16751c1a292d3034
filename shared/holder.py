"""What a sampler and a loader process share: the parts it holds, its tier's membership, the halo
client and server for the rows it does not hold.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

import zmq

from argosy.shared import envs
from argosy.shared.halo import HaloClient, HaloServer
from argosy.shared.ownership import Membership, host_label
from argosy.shared.rss import memory_fields, rss_bytes
from argosy.shared.traffic import WireCounter

__all__ = ["PartHolder"]

logger = logging.getLogger(__name__)


class PartHolder:
    """What a sampler and a loader share: the parts this process holds, its tier's membership, and
    the halo client and server for the rows it does not hold.

    ``make_core(store, fetch)`` builds the role's core over the (initially empty) store view;
    :meth:`refresh_parts` re-derives the held parts from the registry (a newcomer's first call loads
    its share) and :meth:`close` releases the sockets.
    """

    def __init__(self, ctx, role: str, make_core: Callable, timeout: float):
        from argosy.shared.store.stage import PartSource
        self.ctx, self.role = ctx, role
        self.host = host_label()
        self.base_rss = rss_bytes()              # before any part is loaded: the interpreter and libraries
        self.source = PartSource(ctx.cfg.store, envs.get(envs.LOCAL_STORE))
        self.store = self.source.open([])
        self.zctx = zmq.Context()
        self.wire = WireCounter()
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
        if want != held:
            t0 = time.perf_counter()
            self.store = self.source.open(want)
            self.core.set_held(want)
            logger.info("holding parts %s (assigned %s; %d live %ss) after %.2f s", want, mine,
                        len(self.members.members), self.role, time.perf_counter() - t0)
            self.ctx.coord.update_info(self.role, self.ctx.service_id, held=want)
        return want

    def close(self) -> None:
        """Publish this process's memory figures, then close the halo sockets."""
        self.ctx.coord.incr(**memory_fields(self.ctx.service_id, self.base_rss))
        self.server.close()
        self.client.close()
