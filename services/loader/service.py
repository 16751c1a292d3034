"""The loader process: receive SampledBatches, gather features, push FeatureBatches to trainers.

A loader binds one PULL socket (samplers connect to it, found through the registry) and holds
one PUSH socket per trainer rank, because each batch is addressed to a rank (DDP needs every
rank to get its own share).  A malformed message is logged and counted, never fatal.
"""
from __future__ import annotations

import logging
import time

import zmq

from argosy.shared.errors import ProtocolError
from argosy.shared.lifecycle import ServiceContext
from argosy.shared.protocol import SampledBatch
from argosy.shared.store import PartitionStore
from argosy.shared.transport import bind_random, make_socket, recv_msg, send_msg
from argosy.services.loader.core import LoaderCore

__all__ = ["LoaderProc"]

logger = logging.getLogger(__name__)


class LoaderProc:
    def __init__(self, ctx: ServiceContext):
        self.ctx = ctx
        self.cfg = ctx.cfg
        self.store = PartitionStore(self.cfg.store)
        self.core = LoaderCore(self.store)
        self.zctx = zmq.Context()
        self.pull = make_socket(self.zctx, zmq.PULL, rcvhwm=self.cfg.loader.recv_hwm, curve="server")
        self.endpoint = bind_random(self.pull, ctx.port)
        self.trainers: dict[int, tuple[str, zmq.Socket]] = {}
        self._counters = {"loader_batches": 0.0, "feature_bytes": 0.0, "remote_feature_rows": 0.0,
                          "feature_rows": 0.0, "load_seconds": 0.0, "bad_messages": 0.0,
                          "loader_send_stall_seconds": 0.0}

    def refresh(self) -> None:
        for s in self.ctx.coord.services("trainer"):
            rank, ep = int(s.get("rank", -1)), s.get("endpoint")
            if ep is None or rank < 0:
                continue
            cur = self.trainers.get(rank)
            if cur is None or cur[0] != ep:
                if cur is not None:
                    cur[1].close(0)
                sock = make_socket(self.zctx, zmq.PUSH, sndhwm=self.cfg.loader.send_hwm, curve="client")
                sock.connect(ep)
                self.trainers[rank] = (ep, sock)
                logger.info("connected to trainer rank %d at %s", rank, ep)

    def run(self) -> None:
        ctx, coord, cfg = self.ctx, self.ctx.coord, self.cfg
        coord.register("loader", ctx.service_id, {"endpoint": self.endpoint}, cfg.coord.heartbeat_seconds,
                       cfg.coord.heartbeat_ttl)
        logger.info("listening on %s", self.endpoint)
        last_refresh = last_flush = 0.0
        try:
            while not ctx.stop.is_set():
                now = time.monotonic()
                if now - last_refresh > 1.0:
                    if coord.get_state() in ("done", "failed"):
                        break
                    self.refresh()
                    last_refresh = now
                if now - last_flush > 1.0:
                    ctx.metrics.inc_many(self._counters)
                    ctx.metrics.publish(coord)
                    coord.incr(**self._counters)
                    self._counters = dict.fromkeys(self._counters, 0.0)
                    last_flush = now
                try:
                    msg = recv_msg(self.pull, 200)
                except ProtocolError as e:
                    logger.warning("dropped a malformed message: %s", e)
                    self._counters["bad_messages"] += 1
                    continue
                if msg is None:
                    continue
                if not isinstance(msg, SampledBatch) or type(msg) is not SampledBatch:
                    logger.warning("ignored an unexpected %s message", type(msg).__name__)
                    self._counters["bad_messages"] += 1
                    continue
                self.handle(msg)
        finally:
            coord.incr(**self._counters)
            coord.deregister("loader", ctx.service_id)
            self.pull.close(0)
            for _, sock in self.trainers.values():
                sock.close(0)
            self.zctx.term()

    def handle(self, batch: SampledBatch) -> None:
        fb = self.core.load(batch)
        fb.loader_id = self.ctx.service_id
        t_send = time.perf_counter()
        give_up = t_send + self.cfg.coord.claim_timeout
        while True:
            # A trainer that died and came back has a new endpoint: re-read the registry between
            # short send attempts instead of blocking forever on the dead peer's full pipe.
            if self.ctx.stop.is_set():
                return
            sock = self.trainers.get(batch.trainer_rank, (None, None))[1]
            if sock is not None and send_msg(sock, fb, stop=self.ctx.stop, timeout=1.0):
                break
            if time.perf_counter() > give_up:
                logger.warning("trainer rank %d unreachable for %.0f s: dropping batch %d (its work item will be "
                               "re-claimed and re-sent)", batch.trainer_rank, self.cfg.coord.claim_timeout, batch.batch_id)
                return
            self.refresh()
        c = self._counters
        c["loader_send_stall_seconds"] += time.perf_counter() - t_send
        c["loader_batches"] += 1
        c["feature_bytes"] += fb.features.nbytes
        c["feature_rows"] += fb.features.shape[0]
        c["remote_feature_rows"] += fb.remote_feature_rows
        c["load_seconds"] += fb.load_seconds
