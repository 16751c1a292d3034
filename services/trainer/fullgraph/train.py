"""The full-graph run: ``fullgraph`` (offloaded), ``sar`` or ``memory`` over a partitioned store.

Why this module exists: the CLI, the bench and the integration tests all need "train this model
on this store in this mode, keep the best-validation weights (``best.pt``) and write the run
report", so that lives here once.  ``memory`` is the plain in-memory baseline the bench compares
against.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from dataclasses import asdict

import numpy as np
import torch

from argosy.shared import rundir
from argosy.shared.config import FullGraphConfig, JobConfig
from argosy.shared.errors import ConfigError
from argosy.shared.preflight import check_trainable
from argosy.shared.report import write_report
from argosy.shared.store.reader import PartitionStore
from argosy.shared.store.residency import memory_budget

from .budget import MIN_UNIT_ROWS, auto_cache_bytes, unit_rows
from .fullgraph import OffloadTrainer
from .graph import build_plan, load_store_graph
from .inmemory import InMemoryTrainer
from .kernels import warm_up
from .loop import fit, save_best
from argosy.shared.rss import peak_rss_bytes, rss_bytes
from argosy.services.trainer.core import pick_device, set_threads
from argosy.shared.envs import torch_threads

from .model import full_graph_model, full_graph_optimizer
from .sar import launch_sar
from .source import StoreSource, make_units, plan_from_store
from argosy.services.offload.store import OffloadStore

__all__ = ["run", "memory_breakdown"]

MEMORY_PARTS = ("process_baseline", "graph", "features", "model_optimizer", "activation_cache", "spill_buffers",
                "compute")
"""The breakdown of a single-process run's peak RSS (:func:`memory_breakdown`)."""

logger = logging.getLogger(__name__)


def run(job: JobConfig, fg: FullGraphConfig) -> dict:
    """Train, write ``best.pt`` and the report into ``job.run_dir`` (if set); return the result."""
    if fg.mode != "sar":  # SAR splits the cores between its ranks itself
        set_threads(torch_threads())  # ARGOSY_TORCH_THREADS, or 1 when the load already fills the cores
    warm_up()  # fixed per-process costs belong to the baseline
    base_rss = rss_bytes()
    t_start = time.time()
    if not job.store:
        raise ConfigError("full-graph training needs a partitioned store (--store DIR, or --data FILE to partition)")
    check_trainable(job.store, job)  # refuses a store without features/labels/splits; resolves normalisation
    if job.trainer.edge_weights and PartitionStore(job.store).manifest.edge_weights:
        raise ConfigError(f"{job.store} has edge weights, which the full-graph modes do not use yet; train in "
                          "mini-batch mode (the default), or pass --no-edge-weights to train without them")
    out: dict = {"mode": fg.mode, "model": job.trainer.model, "store": job.store,
                 "normalize_features": job.trainer.normalize_features}
    made: list[str] = []
    try:
        if fg.mode == "sar":
            device = pick_device(job.trainer.device, job.num_trainers)
            res_dir = job.run_dir or tempfile.mkdtemp(prefix="argosy-sar-")
            if not job.run_dir:
                made.append(res_dir)
            res = launch_sar(job, fg, os.path.join(res_dir, "sar"), str(device))
            ranks = res.pop("ranks")
            epochs = res.pop("epoch_records")
            out.update({k: v for k, v in res.items() if k not in ("rank", "parts", "peak_rss_bytes", "base_rss_bytes")})
            out.update(device=str(device), trainers=job.num_trainers,
                       peak_rss_bytes=max(r["peak_rss_bytes"] for r in ranks),
                       base_rss_bytes=max(r["base_rss_bytes"] for r in ranks),
                       rank_peak_rss_bytes=[r["peak_rss_bytes"] for r in ranks],
                       rank_base_rss_bytes=[r["base_rss_bytes"] for r in ranks],
                       rank_parts=[r["parts"] for r in ranks], launcher_peak_rss_bytes=peak_rss_bytes())
        else:
            out["threads"] = torch.get_num_threads()
            held = _run_single(job, fg, out, made)
            epochs = held.pop("epochs")
            out.update(peak_rss_bytes=peak_rss_bytes(), base_rss_bytes=base_rss)
            out["memory"] = memory_breakdown(out["peak_rss_bytes"], base_rss, held)
            out.update({f"memory_{k}_MiB": round(v / 2**20, 1) for k, v in out["memory"].items()})
            logger.info("peak RSS %.0f MiB: %s", out["peak_rss_bytes"] / 2**20,
                        ", ".join(f"{k} {v / 2**20:.0f}" for k, v in out["memory"].items() if k != "peak"))
    finally:
        for d in made:
            shutil.rmtree(d, ignore_errors=True)
    out["wall_seconds"] = time.time() - t_start
    if job.run_dir:
        report_result = {k: v for k, v in out.items() if not isinstance(v, (list, dict))}
        out["report"] = str(write_report(job.run_dir, report_result, epochs, [], {
            "job": job.job, "store": job.store, "config": asdict(job), "fullgraph": asdict(fg),
            "memory_breakdown_bytes": out.get("memory")}))
        out["checkpoint"] = str(rundir.best_path(job.run_dir))
    return out


def memory_breakdown(peak: int, base: int, held: dict[str, int]) -> dict[str, int]:
    """Where a single-process run's peak resident set goes, in bytes.

    ``process_baseline``: RSS after imports and kernel warm-up, before anything is loaded.
    ``graph``: aggregation matrices, part index arrays, labels and masks.  ``features``: the input
    features held (memory: the whole matrix; fullgraph: the largest part, read per gather).
    ``model_optimizer``: parameters, gradients and optimizer state.  ``activation_cache``: the
    offload store's peak resident blocks.  ``spill_buffers``: peak bytes of write-behind writes and
    prefetch staging.  ``compute``: the rest of the peak: what the layers hold while they run (memory:
    the whole graph's activations autograd keeps; fullgraph: one part's tensors) and allocator slack.
    """
    out = {"peak": int(peak), "process_baseline": int(base)}
    for k in MEMORY_PARTS[1:-1]:
        out[k] = int(held.get(k, 0))
    out["compute"] = max(0, int(peak) - sum(out[k] for k in MEMORY_PARTS[:-1]))
    return out


def _nbytes(*arrays) -> int:
    return int(sum(a.nbytes if isinstance(a, np.ndarray) else a.numel() * a.element_size() for a in arrays))


def _model_optimizer_bytes(model: torch.nn.Module, opt: torch.optim.Optimizer) -> int:
    ps = list(model.parameters())
    state = [t for st in opt.state.values() for t in st.values() if torch.is_tensor(t)]
    return _nbytes(*ps) * 2 + _nbytes(*state)  # parameters, their gradients, the optimizer's state


def _cache_bytes(job: JobConfig, fg: FullGraphConfig, plan, spec) -> tuple[int, str]:
    """The offload store's cache: ``--cache-bytes`` when given, else sized by :func:`.budget.auto_cache_bytes`."""
    if fg.cache_bytes != "auto":
        return int(fg.cache_bytes), "--cache-bytes"
    budget, source = memory_budget(job.memory_budget)
    cache, why = auto_cache_bytes(plan, spec, budget, rss_bytes())
    return cache, f"auto, {why}" + (f" (budget: {source})" if budget is not None else " (no memory budget)")


def _layout(units, num_parts: int) -> str:
    """The units in words, e.g. ``16 store parts -> 14 units (2 groups of 2, 2 parts)``."""
    whole = [len(parts) for parts, rows in units if rows is None]
    multi = [k for k in whole if k > 1]
    cut = sorted({parts[0] for parts, rows in units if rows is not None})
    what = []
    if multi:
        what.append(f"{len(multi)} group{'s' * (len(multi) > 1)} of {', '.join(map(str, multi))} parts")
    if cut:
        what.append(f"{len(cut)} part{'s' * (len(cut) > 1)} cut into {len(units) - len(whole)} pieces")
    return f"{num_parts} store parts -> {len(units)} units" + (f" ({'; '.join(what)})" if what else "")


def _run_single(job: JobConfig, fg: FullGraphConfig, out: dict, made: list[str]) -> dict:
    """Train one process; returns the epoch records (``epochs``) and the bytes each part of the
    memory breakdown holds."""
    store = PartitionStore(job.store)
    device = pick_device(job.trainer.device)
    m = store.manifest
    model, spec = full_graph_model(job.trainer, m.feature_dim, m.num_classes, len(job.sampler.fanouts), job.seed, device,
                                   m.num_relations, m.num_nodes, job.link.node_embeddings)
    opt = full_graph_optimizer(model, job.trainer)
    out.update(device=str(device), num_nodes=m.num_nodes, dims=list(spec.dims), trainers=1)
    held: dict[str, int] = {}
    ostore = None
    remote = 0.0
    if fg.mode == "memory":
        g, _ = load_store_graph(store, job.trainer.normalize_features)
        trainer = InMemoryTrainer(spec, g, model, job.seed, device)
        del g
        held["graph"] = (trainer.a.nbytes + trainer.at.nbytes
                         + _nbytes(trainer.labels, *trainer.masks.values()))
        held["features"] = _nbytes(trainer.x)
        out.update(parts=1)
    else:
        units, spill = None, None  # one unit per store part, or sized by the cache (see budget.unit_rows)
        if not fg.store_addr:
            units = make_units(store, unit_rows(_cache_bytes(job, fg, m.num_nodes, spec)[0], spec), MIN_UNIT_ROWS)
            out["units"] = [[list(parts), None if rows is None else len(rows)] for parts, rows in units]
            out["unit_layout"] = _layout(units, store.num_parts)
            if fg.spill_dir:
                os.makedirs(fg.spill_dir, exist_ok=True)
            spill = tempfile.mkdtemp(prefix="argosy-offload-", dir=fg.spill_dir)
            made.append(spill)
        # on the CPU the units' aggregation matrices wait in the spill directory between uses
        plan = plan_from_store(store, spec.aggr, units, spill if spill and device.type == "cpu" else None)
        source = StoreSource(store, job.trainer.normalize_features, units)
        out["store_parts"] = store.num_parts
        nnz = sum(mt.nnz for mt in plan.matrix)
        remote = sum(mt.nnz - plan.block(p, p).nnz for p, mt in enumerate(plan.matrix)) / max(nnz, 1)
        if fg.store_addr:
            from argosy.services.offload.service import RemoteStore

            ostore = RemoteStore(fg.store_addr)
        else:
            # write-behind holds up to two of the largest blocks beyond a quarter of the cache, so a
            # part's writes overlap the next part's compute instead of waiting one block at a time
            block = max(plan.expanded_size(p) for p in range(plan.num_parts)) * max(spec.dims) * 4
            cache, why = _cache_bytes(job, fg, plan, spec)
            logger.info("offload cache %.0f MiB: %s; %d units of at most %d rows over %d store parts", cache / 2**20,
                        why, plan.num_parts, max(plan.part_sizes()), store.num_parts)
            out.update(cache_bytes=cache, cache_reason=why)
            ostore = OffloadStore(cache, spill, fg.disk_bytes, fg.eviction, fg.prefetch,
                                  max_pending_bytes=cache // 4 + 2 * block)
        trainer = OffloadTrainer(spec, plan, source, ostore, model, job.seed, device)
        held["graph"] = (plan.matrix_bytes() + _nbytes(plan.owner, plan.local, *plan.own)
                         + sum(_nbytes(*b.values()) for b in plan.boundary)
                         + _nbytes(*trainer.labels, *(t for v in trainer.masks.values() for t in v)))
        held["features"] = max(plan.part_sizes()) * m.feature_dim * 4
        out.update(parts=plan.num_parts, unit_max_rows=max(plan.part_sizes()), alpha=plan.expansion_ratio(),
                   eviction=fg.eviction, prefetch=fg.prefetch)
        ostore.stats(reset=True)

    def on_best(epoch: int, rec: dict) -> None:
        save_best(job, model, epoch, rec, m.feature_dim, m.num_classes, len(job.sampler.fanouts))

    try:
        epochs, res = fit(trainer, model, opt, job.trainer, device, remote, on_best)
        held["model_optimizer"] = _model_optimizer_bytes(model, opt)
        if ostore is not None:
            st = ostore.stats()
            out.update(cache_hit_rate=st["hit_rate"], bytes_read=st["bytes_read"],
                       bytes_written=st["bytes_written"], evictions=st["evictions"], offload_store=st)
            held["activation_cache"] = int(st["peak_resident_bytes"])
            held["spill_buffers"] = int(st.get("peak_pending_bytes", 0) + st.get("peak_staged_bytes", 0))
            wr, rd = st.get("write_seconds", 0.0), st.get("read_seconds", 0.0)
            out.update(disk_write_MBps=st["bytes_written"] / wr / 1e6 if wr else None,
                       disk_read_MBps=st["bytes_read"] / rd / 1e6 if rd else None,
                       disk_seconds_per_epoch=(wr + rd) / max(1, len(epochs)),
                       disk_MB_per_epoch=(st["bytes_written"] + st["bytes_read"]) / max(1, len(epochs)) / 1e6,
                       spill_disk_peak_MB=st["peak_file_bytes"] / 1e6)
    finally:
        if ostore is not None:
            ostore.close()
    out.update(res, remote_fraction=remote)
    if device.type == "cuda":
        out["peak_gpu_bytes"] = int(torch.cuda.max_memory_allocated(device))
    held["epochs"] = epochs
    return held
