"""The sampler process: claim work items from Redis, sample, push SampledBatches to loaders.

Which partitions a sampler serves follows the registry: live samplers sorted by id share the
parts round-robin, recomputed every second, so a new replica takes work within a second and a
dead one's parts (and, after ``claim_timeout``, its claimed items) move to the survivors.
"""
from __future__ import annotations

import logging
import time

import zmq

from argosy.shared.lifecycle import ServiceContext
from argosy.shared.plan import WorkItem
from argosy.shared.store import PartitionStore
from argosy.shared.transport import make_socket, send_msg
from argosy.services.sampler.core import SamplerCore

__all__ = ["SamplerProc"]

logger = logging.getLogger(__name__)


class SamplerProc:
    def __init__(self, ctx: ServiceContext):
        self.ctx = ctx
        self.cfg = ctx.cfg
        self.store = PartitionStore(self.cfg.store)
        self.core = SamplerCore(self.store, served_parts=[], seed=self.cfg.seed)
        self.zctx = zmq.Context()
        self.push = make_socket(self.zctx, zmq.PUSH, sndhwm=self.cfg.sampler.send_hwm, curve="client")
        self.loaders: set[str] = set()
        self.parts: list[int] = []
        self._counters = {"sampler_batches": 0.0, "sampled_edges": 0.0, "remote_neighbors": 0.0,
                          "sample_seconds": 0.0, "sampled_seeds": 0.0, "sampler_send_stall_seconds": 0.0}

    def refresh(self) -> None:
        """Re-derive served parts and loader connections from the registry."""
        coord, k = self.ctx.coord, self.store.num_parts
        ids = sorted(s["id"] for s in coord.services("sampler"))
        if self.ctx.service_id not in ids:
            ids = sorted(ids + [self.ctx.service_id])
        i = ids.index(self.ctx.service_id)
        parts = [p for p in range(k) if p % len(ids) == i]
        if parts != self.parts:
            logger.info("serving parts %s (%d live samplers)", parts, len(ids))
            self.parts = parts
            self.core.set_served(parts)
            coord.update_info("sampler", self.ctx.service_id, parts=parts)
        live = {s["endpoint"] for s in coord.services("loader") if "endpoint" in s}
        for ep in live - self.loaders:
            self.push.connect(ep)
            logger.info("connected to loader %s", ep)
        for ep in self.loaders - live:
            try:
                self.push.disconnect(ep)
            except zmq.ZMQError:
                pass
        self.loaders = live

    def flush_metrics(self) -> None:
        self.ctx.metrics.inc_many(self._counters)
        self.ctx.metrics.publish(self.ctx.coord)
        self.ctx.coord.incr(**self._counters)
        for k in self._counters:
            self._counters[k] = 0.0

    def run(self) -> None:
        ctx, coord, cfg = self.ctx, self.ctx.coord, self.cfg
        coord.register("sampler", ctx.service_id, {"parts": []}, cfg.coord.heartbeat_seconds, cfg.coord.heartbeat_ttl)
        coord.ensure_groups(self.store.num_parts)
        last_refresh = last_reclaim = last_flush = 0.0
        try:
            while not ctx.stop.is_set():
                now = time.monotonic()
                if now - last_refresh > 1.0:
                    if coord.get_state() in ("done", "failed"):
                        break
                    self.refresh()
                    last_refresh = now
                items = []
                if now - last_reclaim > cfg.coord.claim_timeout / 4:
                    items = coord.reclaim(self.parts, ctx.service_id, int(cfg.coord.claim_timeout * 1000))
                    if items:
                        logger.warning("re-claimed %d work items left unacknowledged for %.0f s",
                                       len(items), cfg.coord.claim_timeout)
                        coord.incr(reclaimed_batches=len(items), reclaimed_seeds=sum(f["count"] for _, _, f in items))
                    last_reclaim = now
                if not items:
                    items = coord.claim(self.parts, ctx.service_id, count=1, block_ms=200)
                for stream, entry_id, fields in items:
                    self.handle(stream, entry_id, WorkItem(**fields))
                if now - last_flush > 1.0:
                    self.flush_metrics()
                    last_flush = now
        finally:
            self.flush_metrics()
            coord.deregister("sampler", ctx.service_id)
            self.push.close(0)
            self.zctx.term()

    def handle(self, stream: str, entry_id: str, item: WorkItem) -> None:
        cfg = self.cfg.sampler
        fanouts = cfg.fanouts if item.phase == "train" else cfg.eval_fanouts
        batch = self.core.sample_item(item, fanouts)
        batch.job, batch.work_stream, batch.work_id, batch.sampler_id = self.ctx.coord.job, stream, entry_id, self.ctx.service_id
        t_send = time.perf_counter()
        while not send_msg(self.push, batch, stop=self.ctx.stop, timeout=1.0):
            if self.ctx.stop.is_set():
                return                  # stopping: the item stays pending and is re-claimed
            self.refresh()              # loaders may have died or moved: reconnect, then retry
        c = self._counters
        c["sampler_send_stall_seconds"] += time.perf_counter() - t_send
        self.ctx.metrics.observe_remote_fraction(batch.remote_neighbors / max(batch.num_sampled_edges, 1))
        c["sampler_batches"] += 1
        c["sampled_edges"] += batch.num_sampled_edges
        c["remote_neighbors"] += batch.remote_neighbors
        c["sample_seconds"] += batch.sample_seconds
        c["sampled_seeds"] += batch.num_seeds
