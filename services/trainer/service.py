"""The trainer process: receive FeatureBatches, train, acknowledge, and (rank 0) drive epochs.

Epochs run as an explicit state machine (:class:`EpochDriver`): ``TRAIN`` -> ``VAL`` -> ``TEST``
per epoch, then ``DONE``.  Every rank derives the same plan (:func:`shared.plan.plan_phase`);
rank 0 alone publishes it to Redis.  A batch is applied only if Redis has not seen its id in this
epoch/phase, and acknowledged (XACK+XDEL) only after it was applied, so a crash anywhere upstream
means re-delivery, never loss, and a duplicate is counted, never applied twice.  Dense gradients
are synchronised by DDP (gloo on CPU, NCCL on CUDA); ``Join`` covers ranks with one batch fewer.

Two threads per trainer: the ingest thread (:mod:`services.trainer.ingest`) receives, decodes,
validates, claims (``mark_applied``) and stages batches on the device, and sends the
acknowledgements; this (compute) thread only waits for staged batches, steps and hands the
acknowledgements back, so its idle time is waiting for input and nothing else.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import zmq
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP

from argosy.shared.records import JobState
from argosy.shared import envs, rundir
from argosy.shared.coord import EPOCH_COUNTER_WINDOW
from argosy.shared.malloc import HeapTrimmer
from argosy.shared.errors import PeerDeadError
from argosy.shared.lifecycle import ServiceContext
from argosy.shared.config import KG_MIN_GAIN, selection_metric
from argosy.shared.early_stopping import EarlyStopping
from argosy.shared.linkmetrics import link_metrics
from argosy.shared.kg import kg_phase_record
from argosy.shared.linkpred import kg_trainer_args
from argosy.shared.plan import PHASES, WorkItem
from argosy.shared.validate import job_plan
from argosy.shared.protocol import FeatureBatch
from argosy.shared.store import PartitionStore
from argosy.shared.store.residency import queue_depth, tight_budget
from argosy.shared.transport import (bind_local, bind_random, host_boot_id, local_ring_dir, make_socket,
                                     rendezvous_store, retain_large_buffers, unbind_local)
from argosy.services.trainer.batch_age import BatchAges
from argosy.services.trainer.core import TrainerCore, cache_budget, resolved
from argosy.services.trainer.embedding_shards import ShardedEmbeddings
from argosy.services.trainer.history import EpochHistory
from argosy.services.trainer.ingest import Arrival, Ingest
from argosy.services.trainer.phase_stats import LINK_KEYS, PhaseStats, applied_units

__all__ = ["TrainerProc"]

logger = logging.getLogger(__name__)
HISTORY_FILE = rundir.HISTORY_FILE
"""Beside ``checkpoint.pt`` in the run dir: every epoch record of the run, one JSON line each (rank 0);
the checkpoint holds how many belong to it (``epochs_n``)."""
COUNTERS_MOVE_EVERY = 16
"""Every this many epochs, trainer rank 0 moves the per-epoch counters of epochs older than
``EPOCH_COUNTER_WINDOW`` from Redis's metrics hash to the run dir (``EPOCH_COUNTERS_FILE``)."""
APPLIED_SWEEP_EVERY = 64
"""Every this many epochs, trainer rank 0 deletes every applied-id set of a finished epoch (a SCAN)."""
STARVE_WAIT_MAX = 1.0
"""At most this much of one 0.2 s poll for a batch counts toward ``peer_timeout``: a longer poll means
this process was stopped (SIGSTOP) or not scheduled, and its stop must not be blamed on the samplers."""


def _host_bytes(a: Arrival) -> int:
    """Host memory a waiting batch holds: its message, and its staged features when on the CPU
    (float16 on the wire are a float32 copy there: 3x the wire's feature bytes in all)."""
    x = a.staged.x
    return a.wire_bytes + (x.element_size() * x.nelement() if x.device.type == "cpu" else 0)


class TrainerProc:
    def __init__(self, ctx: ServiceContext, rank: int):
        self.ctx = ctx
        self.cfg = ctx.cfg
        self.rank = rank
        self.world = self.cfg.num_trainers
        if not 0 <= rank < self.world:
            raise ValueError(f"--rank must be in [0, {self.world}) (got {rank})")
        self.store = PartitionStore(self.cfg.store)
        m = self.store.manifest
        # learned node embeddings: the whole table on one trainer; with several, each holds its parts'
        # rows (ShardedEmbeddings, attached in init_distributed; docs/link-prediction.md)
        self.core = TrainerCore(self.cfg.trainer, m.feature_dim, max(m.num_classes, 1),
                                len(self.cfg.sampler.fanouts), seed=self.cfg.seed, link=self.cfg.link,
                                num_nodes=m.num_nodes, shard_embeddings=self.world > 1,
                                num_relations=m.num_relations, typed=m.typed or None,
                                feature_layout=self.store.features,
                                **(kg_trainer_args(self.store) if self.link else {}))
        self.shards: ShardedEmbeddings | None = None
        tc = self.cfg.trainer
        logger.info("edge weights: %s; step precision: %s", json.dumps(tc.edge_weights_used(m.edge_weights)), self.core.precision)
        if self.core.embedding_dim and self.world == 1:
            logger.info("node embeddings: %d x %d learned (%.1f MB, and twice that for Adam's moments)",
                        m.num_nodes, self.core.embedding_dim, m.num_nodes * self.core.embedding_dim * 4 / 1e6)
        budget = cache_budget(tc.gpu_cache, self.core.device, m.num_nodes * m.feature_dim *
                              np.dtype(m.feature_dtype or "float32").itemsize)
        hot = self.core.fill_cache(self.store, budget)   # before the ingest thread: its validator knows the cache
        self.feature_cache = hot.published(budget) if hot is not None else {"rows": 0, "budget": budget}
        """What this rank registers: loaders leave these rows out of its batches (:mod:`shared.hot_rows`)."""
        budget_bytes = tight_budget(self.cfg.memory_budget, self.store)
        self.reorder_bytes = tc.reorder_bytes if budget_bytes is None else min(tc.reorder_bytes, budget_bytes // 16)
        """Bytes of received batches that may wait for an earlier one (the window's second bound)."""
        retain_large_buffers(budget=budget_bytes)   # 33 MB batches reuse freed buffers instead of faulting in new pages
        # one libzmq I/O thread receives ~5 GB/s here; several loaders' connections spread over a few
        self.zctx = zmq.Context(io_threads=max(1, min(4, (os.cpu_count() or 1) // 4)))
        self.pull = make_socket(self.zctx, zmq.PULL, rcvhwm=queue_depth(self.cfg.trainer.recv_hwm, budget_bytes),
                                curve="server")
        self.endpoint = bind_random(self.pull, ctx.port)
        self.local_endpoint = bind_local(self.pull)
        """The same socket on a Unix-domain path: loaders on this host send there (no TCP stack)."""
        self.ring_dir = local_ring_dir(self.local_endpoint)
        """Where loaders on this host put their shared-memory rings (None: rows cross the socket)."""
        self.ingest = Ingest(self.pull, self.cfg, ctx.coord, rank, self.core, depth=self.cfg.trainer.prefetch,
                             ring_dir=self.ring_dir)
        self.rx = self.ingest.rx
        self._early: list[Arrival] = []
        """Batches of a later phase that arrived before this trainer reached it (used there)."""
        self.ages = BatchAges()
        """Claim-to-apply ages of the batches applied lately, published for the samplers' re-claim deadline."""
        self.epochs = EpochHistory()
        """Count, newest records and running sums (every record is in the run dir's HISTORY_FILE)."""
        self.heap = HeapTrimmer()
        """Hands the free heap back every minute, at an epoch's end (:data:`~argosy.shared.malloc.HEAP_TRIM_EVERY_S`)."""
        self._history_end: int | None = None
        """Resumed: the history file's size after the checkpoint's records (what follows is cut)."""
        self._old_records: list[dict] = []
        """Resumed from a checkpoint that holds its records (written before HISTORY_FILE): written out."""
        self.start_epoch = 0
        self.resumed_from: int | None = None
        self.stopper, self.result = EarlyStopping(self.cfg.trainer.patience), {}

    @property
    def link(self) -> bool:
        """A link-prediction job (``--task link``)."""
        return self.cfg.trainer.task == "link"

    @property
    def metric(self) -> str:
        """The validation figure that picks the best epoch (``accuracy``, a link job's ``--link-metric``, ``mrr``)."""
        return selection_metric("link" if self.link else "node", self.cfg.link.metric, self.kg)

    @property
    def kg(self) -> bool:
        """A knowledge-graph link job (its trainer core ranks triples, :class:`~argosy.shared.scorers.KGModel`)."""
        core = getattr(self, "core", None)
        return core is not None and core.kg_filter is not None

    # ---- setup --------------------------------------------------------------------------------
    def init_distributed(self) -> None:
        if self.world == 1:
            return
        coord = self.ctx.coord
        if self.rank == 0:                  # the store listens on ARGOSY_BIND_HOST only (loopback by default)
            store, url = rendezvous_store(self.world, self.cfg.coord.peer_timeout)
            coord.publish_dist_url(url)
        else:
            url = coord.wait_dist_url(self.cfg.coord.peer_timeout)
            store, _ = rendezvous_store(self.world, self.cfg.coord.peer_timeout, url=url)
        backend = "nccl" if self.core.device.type == "cuda" else "gloo"
        logger.info("joining torch.distributed %s world=%d rank=%d via %s", backend, self.world, self.rank, url)
        dist.init_process_group(backend, store=store, world_size=self.world, rank=self.rank,
                                timeout=__import__("datetime").timedelta(seconds=self.cfg.coord.peer_timeout))
        if self.core.embedding_dim and self.link and not self.kg:   # a node or KG job's table: replicated
            self.shards = ShardedEmbeddings(self.ctx, self.store, self.zctx, self.rank, self.world,
                                            self.core.embedding_dim, self.cfg.trainer.lr, self.cfg.seed,
                                            self.core.device, self.cfg.coord.peer_timeout)
            self.core.attach_embeddings(self.shards.module)
            if self.resumed_from is not None:
                self.shards.resume(self.cfg.run_dir, self.resumed_from - 1)
        self.core.module = DDP(self.core.model, device_ids=None if backend == "gloo" else [self.core.device.index])

    # ---- the receive/apply loop ---------------------------------------------------------------
    def run_phase(self, epoch: int, phase: str, plan: list[WorkItem]) -> PhaseStats:
        """Apply this rank's batches of one phase, in plan order, each exactly once.

        Batches come staged from the ingest thread (:class:`Ingest`); this (compute) thread only
        waits for them, steps, and hands acknowledgements back.  A step's loss and accuracy are
        read after the next step is queued, so the device never waits for this thread's read.
        """
        coord, timeout = self.ctx.coord, self.cfg.coord.peer_timeout
        mine = {it.batch_id: it for it in plan if it.trainer_rank == self.rank}
        self.ingest.set_plan(epoch, phase, plan)
        st = PhaseStats(planned_seeds=sum(it.count for it in mine.values()),
                        scores=[] if (self.link and phase != "train") else None)
        phase_t0 = time.perf_counter()
        here = (epoch, PHASES.index(phase))

        def live(force: bool = False) -> None:     # live counters for the autoscaler, at most 1/s
            self.ctx.metrics.push_totals(coord, (epoch, phase), force=force, trainer_idle_seconds=st.idle_seconds,
                                         trainer_ingest_seconds=st.ingest_seconds, trainer_copy_seconds=st.copy_seconds,
                                         trainer_compute_seconds=st.compute_seconds, trainer_batches=st.batches,
                                         trainer_received_bytes=st.wire_bytes, trainer_feature_rows=st.feature_rows,
                                         trainer_cached_rows=st.cached_rows,
                                         trainer_train_seconds=time.perf_counter() - phase_t0)

        done: set[int] = set()
        applied_seeds: list[np.ndarray] = []
        # Batches are applied in plan order, whatever order they arrive in, so a run (and a run
        # resumed from a checkpoint) replays the same updates. Out-of-order arrivals wait in
        # `pending`; past `reorder_window` of them (say the next batch was lost and awaits
        # re-claim) the earliest pending batch is applied anyway, so a fault never stalls training.
        order = [it.batch_id for it in plan if it.trainer_rank == self.rank]
        rank_of = {b: i for i, b in enumerate(order)}
        pending: dict[int, Arrival] = {}
        later_acks: dict[int, list[tuple[str, str]]] = {}   # re-deliveries of a pending batch: acked after it
        window = max(1, self.cfg.trainer.reorder_window)
        # ... and past `reorder_bytes` of waiting batches' host memory (large batches under a memory budget), too
        max_held, late = self.reorder_bytes, None   # late: the first batch found missing (for the warning)
        nxt = 0
        # seconds this process waited for a batch while it ran: a wait far past the poll's 0.2 s
        # means the process itself was not running (SIGSTOP, a suspended VM), which is not starvation
        starved = 0.0
        gathered = [0]                 # seeds since the last optimizer step
        unread: list[tuple] = []       # (loss sum, correct) of the last step, read after the next is queued

        def settle() -> None:
            while unread:
                loss_sum, correct = unread.pop(0)
                st.loss_sum += float(loss_sum)
                st.correct += int(correct)

        def finish(fb: FeatureBatch) -> None:
            self.ingest.ack(fb.work_stream, fb.work_id)
            for ref in later_acks.pop(fb.batch_id, ()):
                self.ingest.ack(*ref)
            done.add(fb.batch_id)

        def apply(a: Arrival) -> None:
            fb = a.fb
            if not a.fresh:                        # applied by an earlier incarnation
                st.duplicate_arrivals += 1
                finish(fb)
                return
            sim = self.cfg.trainer.simulate_gpu_step
            t1 = time.perf_counter()
            if sim > 0:              # SIMULATION: the batch was received, decoded and staged; wait instead of computing
                time.sleep(sim)
                loss_sum, correct, count = 0.0, 0, a.staged.count
            elif phase == "train":
                # one optimizer step per ~batch_size seeds: small per-part batches are gathered
                # (a single trainer; with several, DDP's average over ranks already gathers them)
                gathered[0] += mine[fb.batch_id].count        # seeds, or a link batch's positives
                step = self.world > 1 or gathered[0] >= self.cfg.sampler.batch_size or len(done) + 1 == len(mine)
                r = self.core.train_step(a.staged, step=step, sync=False)
                if step:
                    gathered[0] = 0
                loss_sum, correct, count = r["loss"] * r["count"], r["correct"], r["count"]
            else:
                r = self.core.eval_step(a.staged)
                loss_sum, correct, count = r["loss_sum"], r["correct"], r["count"]
                if st.scores is not None:
                    st.scores.append((r["scores"], r["labels"]))
            settle()                 # the previous step's figures (read now: this step is queued already)
            unread.append((loss_sum, correct))
            st.labelled += count
            st.compute_seconds += time.perf_counter() - t1
            finish(fb)
            self._note_age(fb)
            applied_seeds.append(applied_units(fb, self.store.manifest.num_nodes))
            st.batches += 1
            st.seeds += mine[fb.batch_id].count
            st.sampled_edges += fb.num_sampled_edges
            st.remote_neighbors += fb.remote_neighbors
            st.feature_rows += a.feature_rows
            st.cached_rows += a.cached_rows
            st.wire_bytes += a.wire_bytes
            st.remote_feature_rows += fb.remote_feature_rows

        def arrive(a: Arrival) -> None:
            fb = a.fb
            st.ingest_seconds += a.ingest_seconds
            st.copy_seconds += a.copy_seconds
            there = (fb.epoch, PHASES.index(fb.phase))
            if there > here:
                self._early.append(a)                    # a later phase's batch: kept for it
                return
            if there < here or fb.batch_id not in mine or fb.batch_id in done:
                st.duplicate_arrivals += 1               # a re-delivery of something already applied
                self.ingest.ack(fb.work_stream, fb.work_id)
                return
            if fb.batch_id in pending:                   # a re-delivery of a batch waiting here
                st.duplicate_arrivals += 1
                later_acks.setdefault(fb.batch_id, []).append((fb.work_stream, fb.work_id))
                return
            pending[fb.batch_id] = a

        early, self._early = self._early, []
        for a in early:
            arrive(a)
        join = Join([self.core.module]) if (phase == "train" and self.world > 1) else contextlib.nullcontext()
        with join:
            while len(done) < len(mine):
                if self.ctx.stop.is_set():
                    raise KeyboardInterrupt("stop requested")
                while nxt < len(order) and order[nxt] in done:
                    nxt += 1
                if nxt < len(order) and order[nxt] in pending:
                    apply(pending.pop(order[nxt]))
                    continue
                if len(pending) >= window or (len(pending) > 1 and
                                              sum(map(_host_bytes, pending.values())) > max_held):
                    first = min(pending, key=rank_of.__getitem__)
                    late = order[nxt] if late is None else late
                    st.out_of_order += 1
                    apply(pending.pop(first))
                    continue
                t0 = time.perf_counter()
                a = self.ingest.get(0.2)             # staged by the ingest thread; the wait is idle time
                waited = time.perf_counter() - t0
                st.idle_seconds += waited
                if phase == "train":
                    live()
                if a is None:
                    starved += min(waited, STARVE_WAIT_MAX)
                    if starved > timeout:
                        raise PeerDeadError(self._starvation_report(epoch, phase, len(mine) - len(done), timeout))
                    continue
                starved = 0.0
                arrive(a)
        settle()
        if st.out_of_order:                  # one line per phase, not one per batch
            logger.warning("epoch %d %s: %d batches applied out of plan order (batch %d was the first one "
                           "missing: late, or lost and re-claimed after claim_timeout), as the batches waiting "
                           "for it reached reorder_window (%d) or reorder_bytes (%.0f MiB); the run is not "
                           "bit-reproducible", epoch, phase, st.out_of_order, late, window, max_held / 2**20)
        if phase == "train":
            self.core.finish_step()        # a phase whose last batch came as a duplicate
        self.ingest.flush_acks()
        if phase == "train":
            live(force=True)
        if applied_seeds:
            allseeds = np.concatenate(applied_seeds)
            st.duplicate_seeds = int(allseeds.shape[0] - np.unique(allseeds).shape[0])
        return st

    def _note_age(self, fb: FeatureBatch) -> None:
        """Note an applied batch's age (apply minus claim); every few seconds publish the recent
        high quantile to Redis (:mod:`services.trainer.batch_age`) and as the ``batch_age`` gauge."""
        now = time.monotonic()
        self.ages.add(fb.claimed_at, time.time(), now)
        age = self.ages.due(now)
        if age is not None:
            self.ctx.coord.publish_batch_age(self.rank, age)
            self.ctx.metrics.set_gauge("batch_age", age)

    def _starvation_report(self, epoch, phase, missing, timeout) -> str:
        coord = self.ctx.coord
        live = {role: len(coord.services(role)) for role in ("sampler", "loader", "trainer")}
        return (f"trainer rank {self.rank} received no batch for {timeout:.0f} s in epoch {epoch} {phase} "
                f"({missing} batches missing); live services: {live}. A sampler or loader tier is down or "
                "stuck; check `argosy status`")

    # ---- the epoch driver ---------------------------------------------------------------------
    def run(self) -> None:
        ctx, coord, cfg = self.ctx, self.ctx.coord, self.cfg
        coord.register("trainer", ctx.service_id, {"rank": self.rank, "endpoint": self.endpoint,
                                                   "local_endpoint": self.local_endpoint, "boot_id": host_boot_id(),
                                                   "ring_dir": self.ring_dir,
                                                   "host_label": envs.get(envs.HOST_LABEL) or socket.gethostname(),
                                                   "feature_cache": self.feature_cache},
                       cfg.coord.heartbeat_seconds, cfg.coord.heartbeat_ttl)
        if self.kg:
            self.stopper.min_gain = KG_MIN_GAIN
        try:
            self._maybe_resume()
            self._open_history()
            if self.rank == 0:                      # before the rendezvous, so no rank receives early
                coord.ensure_groups(self.store.num_parts)
                coord.clear_applied(self.start_epoch)
                coord.reset_epochs(list(self.epochs.newest), total=len(self.epochs), best=self.epochs.best)
                coord.set_state(JobState.RUNNING)
            self.init_distributed()
            self.ingest.start()                     # after clear_applied: its claims are this run's
            last = self.start_epoch - 1
            for epoch in range(self.start_epoch, cfg.trainer.epochs):
                if self._patience_spent():
                    break
                last = epoch
                rec = {"epoch": epoch}
                for phase in PHASES:
                    if phase == "test" and not self._improves(rec):
                        # only the best-validation weights' test accuracy is reported: skip the rest
                        rec.update(test_accuracy=None, test_loss=None, test_seconds=0.0)
                        continue
                    plan = job_plan(cfg, self.store, epoch, phase, self.world)
                    if self.rank == 0:
                        coord.set_phase(epoch=epoch, phase=phase, planned=len(plan))
                        coord.publish_work([(it.part, it.to_fields()) for it in plan])
                    t0 = time.perf_counter()
                    st = self.run_phase(epoch, phase, plan).reduce(self.world)
                    secs = time.perf_counter() - t0
                    if self.world > 1:
                        dist.barrier()
                    self._record(rec, phase, st, secs)
                improved = self._track_best(epoch, rec)
                if self.kg and not improved and (lr := self.core.plateau_decay(self.stopper.since_gain)):
                    logger.info("epoch %d: %d epochs without a validation MRR gain of %g: lr now %.3g", epoch,
                                self.stopper.since_gain, KG_MIN_GAIN, lr)
                every = cfg.trainer.checkpoint_every
                due = bool(cfg.run_dir) and bool(every) and (epoch + 1) % every == 0
                table = None if self.shards is None else self.shards.end_epoch(   # collective, every rank
                    improved and bool(cfg.run_dir), cfg.run_dir if due else None, epoch, rec)
                self.epochs.append(rec)
                if (t_trim := self.heap.maybe()) is not None:
                    logger.debug("epoch %d: heap trimmed in %.3f s", epoch, t_trim)
                if self.rank == 0:
                    self._append_history(rec)
                    coord.append_epoch(rec)
                    # the last epoch's applied ids are not needed any more (every rank is past it); a
                    # sweep now and then also drops the sets late re-deliveries of older epochs re-created
                    coord.drop_applied(epoch, sweep=epoch % APPLIED_SWEEP_EVERY == 0)
                    if epoch % COUNTERS_MOVE_EVERY == 0 and epoch >= EPOCH_COUNTER_WINDOW:
                        self._move_epoch_counters(epoch - EPOCH_COUNTER_WINDOW)
                    if self.kg:   # filtered ranking of the valid triples
                        logger.info("epoch %d: loss %.4f val mrr %.4f hits@1 %.4f hits@10 %.4f (%.2f s, idle %.0f%%)",
                                    epoch, rec["train_loss"], rec["val_mrr"], rec["val_hits1"], rec["val_hits10"],
                                    rec["epoch_seconds"], 100 * rec["trainer_idle_fraction"])
                    elif self.link:                # ranking scores: AUC/AP/Hits/MRR, no thresholded accuracy
                        logger.info("epoch %d: loss %.4f val auc %.4f ap %.4f hits@%d %.4f mrr %.4f (%.2f s, "
                                    "idle %.0f%%)", epoch, rec["train_loss"], rec["val_auc"], rec["val_ap"],
                                    cfg.link.hits_k, rec["val_hits"], rec["val_mrr"], rec["epoch_seconds"],
                                    100 * rec["trainer_idle_fraction"])
                    else:
                        logger.info("epoch %d: loss %.4f train %.3f val %.3f test %s (%.2f s, idle %.0f%%)", epoch,
                                    rec["train_loss"], rec["train_accuracy"], rec["val_accuracy"],
                                    "-" if rec["test_accuracy"] is None else f"{rec['test_accuracy']:.3f}",
                                    rec["epoch_seconds"], 100 * rec["trainer_idle_fraction"])
                    if improved:
                        self._save_best(epoch, rec, table)
                    if due:
                        self._save_checkpoint(epoch)
            if self.shards is not None and last >= 0 and cfg.run_dir:
                self.shards.save(cfg.run_dir, last)
            if self.rank == 0:
                if last >= 0:
                    self._save_checkpoint(last)
                self.result.update(self._summary())
                coord.set_state(JobState.DONE, self.result)
        except BaseException as e:
            if self.rank == 0 or isinstance(e, PeerDeadError):
                coord.set_state(JobState.FAILED, {"error": f"{type(e).__name__}: {e}", "rank": self.rank})
            logger.error("trainer failed: %s", e)
            raise
        finally:
            coord.deregister("trainer", ctx.service_id)
            if getattr(self, "_history", None) is not None:
                self._history.close()
            self.ingest.close()
            if self.shards is not None:
                self.shards.close()
            self.rx.flush(force=True)
            self.pull.close(0)
            self.zctx.term()
            unbind_local(self.local_endpoint)
            if dist.is_initialized():
                dist.destroy_process_group()

    def _track_best(self, epoch: int, rec: dict) -> bool:
        """Early-stopping bookkeeping (:class:`EarlyStopping`): is this epoch the best so far?

        Every rank sees the same reduced figures, so all ranks stop at the same epoch.
        """
        if not self.stopper.update(self._val_score(rec), rec["val_loss"]):
            return False
        self.result.update(best_epoch=epoch, val_accuracy=rec["val_accuracy"], test_accuracy=rec["test_accuracy"],
                           val_loss=rec["val_loss"], best_checkpoint=str(self._best_path()) if self.cfg.run_dir else None)
        if self.link:
            self.result.update({k: rec.get(k) for k in LINK_KEYS})
        return True

    def _val_score(self, rec: dict) -> float:
        """What picks the best epoch: validation accuracy, or a link job's ``--link-metric`` (AUC by default;
        filtered MRR for a knowledge graph)."""
        v = rec[f"val_{self.metric}"]
        return -1.0 if v is None or v != v else float(v)

    def _improves(self, rec: dict) -> bool:
        return self.stopper.improves(self._val_score(rec), rec["val_loss"])

    def _patience_spent(self) -> bool:
        if self.stopper.spent:
            self.result["stopped_early"] = True
            return True
        return False

    def _record(self, rec: dict, phase: str, st: PhaseStats, secs: float) -> None:
        if phase == "train":
            rec.update(train_loss=st.loss_sum / max(st.labelled, 1), train_accuracy=st.correct / max(st.labelled, 1),
                       epoch_seconds=secs, batches=st.batches, seeds_planned=st.planned_seeds, seeds_trained=st.seeds,
                       duplicates=st.duplicate_seeds, duplicate_arrivals=st.duplicate_arrivals,
                       out_of_order_batches=st.out_of_order,
                       seeds_dropped=max(st.planned_seeds - st.seeds, 0), sampled_edges=st.sampled_edges,
                       remote_fraction=st.remote_neighbors / max(st.sampled_edges, 1),
                       halo_fraction=st.remote_feature_rows / max(st.feature_rows, 1),
                       trainer_idle_fraction=st.idle_seconds / max(secs * self.world, 1e-9),
                       idle_seconds=st.idle_seconds, ingest_seconds=st.ingest_seconds, copy_seconds=st.copy_seconds,
                       compute_seconds=st.compute_seconds, cache_hit_rate=st.cached_rows / max(st.feature_rows, 1),
                       bytes_per_batch=st.wire_bytes / max(st.batches, 1), batches_per_second=st.batches / max(secs, 1e-9),
                       sampled_edges_per_second=st.sampled_edges / max(secs, 1e-9))
        else:
            if st.scores is not None and self.kg:   # filtered ranks, both directions
                rec.update(kg_phase_record(phase, [x for x, _ in st.scores]))
            elif st.scores is not None:
                scores = np.concatenate([x for x, _ in st.scores]) if st.scores else np.empty(0)
                labels = np.concatenate([y for _, y in st.scores]) if st.scores else np.empty(0, np.int8)
                met = link_metrics(scores, labels, self.cfg.link.hits_k)
                rec.update({f"{phase}_{k}": v for k, v in met.items()})
                rec[f"{phase}_pairs"] = int(scores.shape[0])
            rec[f"{phase}_accuracy"] = st.correct / max(st.labelled, 1)
            rec[f"{phase}_loss"] = st.loss_sum / max(st.labelled, 1)
            rec[f"{phase}_seconds"] = secs
            rec["duplicate_arrivals"] = rec.get("duplicate_arrivals", 0) + st.duplicate_arrivals

    def _summary(self) -> dict:
        # epochs, accuracies, throughput, idle, cache, remote fraction, seeds: over every epoch (EpochHistory)
        return {
            **self.epochs.summary(), "max_epochs": self.cfg.trainer.epochs, "patience": self.cfg.trainer.patience,
            "stopped_early": bool(self.result.get("stopped_early")),
            "feature_cache_rows": int(self.feature_cache["rows"]),
            "seeds_redelivered": int(self.ctx.coord.metrics().get("reclaimed_seeds", 0)),
            "resumed_from_epoch": self.resumed_from, "config_fingerprint": self.cfg.fingerprint(),
            "task": self.cfg.trainer.task, "precision": self.core.precision,
            "selection_metric": self.metric,
            **({"scorer": self.cfg.link.scorer, "link_loss": self.cfg.link.loss,
                "node_embeddings": self.core.embedding_dim} if self.link and not self.kg else {}),
            **({"scorer": self.cfg.link.kg_scorer, "link_loss": "1vsAll + N3", "entity_dim": self.core.embedding_dim,
                "evaluation": "filtered ranking: each triple's tail and head against every entity, other true "
                              "triples (train/valid/test) removed, ties as the mean rank"}
               if self.kg else {}),
            **({"node_embedding_rows": list(self.shards.rows_of),
                "embedding_rows_pulled": self.epochs.last.get("embedding_rows_pulled", 0),
                "embedding_bytes": self.epochs.last.get("embedding_bytes", 0)} if self.shards is not None else {}),
            "simulated_gpu_step_seconds": self.cfg.trainer.simulate_gpu_step or None,
            "simulation": ("SIMULATED GPU: forward/backward replaced by a fixed wait per batch; accuracies are meaningless"
                           if self.cfg.trainer.simulate_gpu_step > 0 else None),
        }

    def _best_path(self) -> Path:
        return rundir.best_path(self.cfg.run_dir)

    def _save_best(self, epoch: int, rec: dict, table: torch.Tensor | None = None) -> None:
        """The best-validation weights with what rebuilds the model (:func:`argosy.load_model`,
        ``argosy predict``), through :func:`argosy.shared.rundir.save_best`; ``table``: the learned
        node embeddings gathered from every trainer, saved as one table (as one trainer's)."""
        if not self.cfg.run_dir:
            return
        m = self.store.manifest
        state = self.core.user_model().state_dict()
        if table is not None:
            state["embedding.table.weight"] = table
        rundir.save_best(self.cfg.run_dir, state, epoch=epoch,
                         val_accuracy=rec["val_accuracy"], test_accuracy=rec["test_accuracy"], spec=self.cfg.to_json(),
                         in_dim=m.feature_dim, num_classes=self.core.out_dim,
                         num_layers=len(self.cfg.sampler.fanouts), store=str(self.cfg.store),
                         metrics={k: rec.get(k) for k in LINK_KEYS} if self.link else None)

    def _save_checkpoint(self, epoch: int) -> None:
        """Atomically write model, optimizer, RNG state and progress after ``epoch`` (rank 0).

        The epoch records are not in it: they are appended, one line each, to :data:`HISTORY_FILE`
        (:meth:`_append_history`) and the checkpoint keeps their count.  Pickling the whole history into
        every epoch's checkpoint made each checkpoint O(epochs): 0.45 s per epoch after 6,000 epochs."""
        if not self.cfg.run_dir:
            return
        rundir.save_checkpoint(self.cfg.run_dir, {**self.core.state(), "epoch": epoch, "epochs_n": len(self.epochs),
                                                  **self.stopper.state(), "result": self.result,
                                                  "fingerprint": self.cfg.fingerprint()})

    def _history_path(self) -> Path:
        return Path(self.cfg.run_dir) / HISTORY_FILE

    def _open_history(self) -> None:
        """Rank 0: (re)write the history file with the records this run starts from (none, or the resumed
        checkpoint's), so a line of a later epoch left by a crash before its checkpoint is dropped."""
        self._history = None
        if self.rank != 0 or not self.cfg.run_dir:
            return
        self._history_path().parent.mkdir(parents=True, exist_ok=True)   # a pod's run dir may not exist yet
        if self._history_end is not None:           # resumed: the checkpoint's records stay, later ones go
            os.truncate(self._history_path(), self._history_end)
        else:
            with open(self._history_path(), "w") as f:
                f.writelines(json.dumps(rec) + "\n" for rec in self._old_records)
        if self.resumed_from is None:               # a new run: no moved counters of an earlier one
            (Path(self.cfg.run_dir) / rundir.EPOCH_COUNTERS_FILE).unlink(missing_ok=True)
        self._history = open(self._history_path(), "a")

    def _move_epoch_counters(self, before: int) -> None:
        """Per-epoch counters of epochs below ``before`` leave Redis (``Coordinator.take_epoch_counters``)
        for :data:`~argosy.shared.rundir.EPOCH_COUNTERS_FILE`, where the report reads them (without a
        run dir they are dropped; the report then shows those epochs' values as unknown)."""
        taken = self.ctx.coord.take_epoch_counters(before)
        if taken and self.cfg.run_dir:
            with open(Path(self.cfg.run_dir) / rundir.EPOCH_COUNTERS_FILE, "a") as f:
                f.writelines(json.dumps({"epoch": e, "counters": c}) + "\n" for e, c in sorted(taken.items()))

    def _append_history(self, rec: dict) -> None:
        if self._history is not None:
            self._history.write(json.dumps(rec) + "\n")
            self._history.flush()

    def _maybe_resume(self) -> None:
        """Continue after the last checkpointed epoch if this job's run dir has one.

        A checkpoint of a job with a different config fingerprint is refused rather than silently mixed in.
        """
        if not self.cfg.run_dir or not rundir.checkpoint_path(self.cfg.run_dir).exists():
            return
        if not self.ctx.coord.get_spec().resume:       # re-read: the launcher sets it when restarting us
            return
        path = rundir.checkpoint_path(self.cfg.run_dir)
        ck = rundir.load_checkpoint(self.cfg.run_dir, self.core.device)
        if ck.get("fingerprint") != self.cfg.fingerprint():
            raise ValueError(f"{path} belongs to a job with a different configuration "
                             f"({ck.get('fingerprint')} != {self.cfg.fingerprint()}); use another --run-dir")
        self.core.load_state(ck)
        self.start_epoch = int(ck["epoch"]) + 1
        self.epochs = EpochHistory()
        if "epochs" in ck:                             # a checkpoint written before HISTORY_FILE
            self._old_records = list(ck["epochs"])
            for rec in self._old_records:
                self.epochs.append(rec)
        else:
            n = int(ck["epochs_n"])
            with open(self._history_path(), "rb") as f:     # streamed: a soak's history has thousands
                for _ in range(n):
                    ln = f.readline()
                    if not ln:
                        break
                    self.epochs.append(json.loads(ln))
                self._history_end = f.tell()
            if len(self.epochs) < n:
                raise ValueError(f"{self._history_path()} has {len(self.epochs)} epoch records, the checkpoint "
                                 f"{path} needs {n}: the run dir is damaged; start the job again in a new --run-dir")
        self.result = dict(ck["result"])
        self.stopper.load(ck)
        self.resumed_from = self.start_epoch
        logger.info("resumed from %s: continuing at epoch %d", path, self.start_epoch)
