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
from pathlib import Path

import torch

from argosy.shared.config import FullGraphConfig, JobConfig
from argosy.shared.errors import ConfigError
from argosy.shared.preflight import check_trainable
from argosy.shared.report import write_report
from argosy.shared.store.reader import PartitionStore
from argosy.shared.models import make_optimizer

from .fullgraph import OffloadTrainer
from .graph import build_plan, load_store_graph
from .inmemory import InMemoryTrainer
from .kernels import warm_up
from .loop import fit, save_best
from argosy.services.offload.memory import current_rss_bytes, peak_rss_bytes
from .model import build_model
from .sar import launch_sar
from argosy.services.offload.store import OffloadStore

__all__ = ["run", "pick_device"]

logger = logging.getLogger(__name__)


def pick_device(name: str, workers: int = 1) -> torch.device:
    """``auto`` is CUDA when there are at least ``workers`` GPUs (SAR puts one rank on each), else CPU."""
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if name == "cuda" and have < workers:
        raise ConfigError(f"--device cuda needs {workers} CUDA device(s) and {have} are available")
    if name == "cuda" or (name == "auto" and have >= workers):
        return torch.device("cuda", 0)
    if name == "auto" and have:
        logger.info("device auto: %d GPU(s) for %d SAR workers (NCCL needs one each), running on the CPU",
                    have, workers)
    return torch.device("cpu")


def run(job: JobConfig, fg: FullGraphConfig) -> dict:
    """Train, write ``checkpoint.pt`` and the report into ``job.run_dir`` (if set); return the result."""
    warm_up()  # fixed per-process costs belong to the baseline
    base_rss = current_rss_bytes()
    t_start = time.time()
    if not job.store:
        raise ConfigError("full-graph training needs a partitioned store (--store DIR, or --data FILE to partition)")
    check_trainable(job.store, job)  # refuses a store without features/labels/splits; resolves normalisation
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
            epochs = _run_single(job, fg, out, made)
            out.update(peak_rss_bytes=peak_rss_bytes(), base_rss_bytes=base_rss)
    finally:
        for d in made:
            shutil.rmtree(d, ignore_errors=True)
    out["wall_seconds"] = time.time() - t_start
    if job.run_dir:
        report_result = {k: v for k, v in out.items() if not isinstance(v, (list, dict))}
        out["report"] = str(write_report(job.run_dir, report_result, epochs, [], {
            "job": job.job, "store": job.store, "config": asdict(job), "fullgraph": asdict(fg)}))
        out["checkpoint"] = str(Path(job.run_dir) / "best.pt")
    return out


def _run_single(job: JobConfig, fg: FullGraphConfig, out: dict, made: list[str]) -> list[dict]:
    store = PartitionStore(job.store)
    device = pick_device(job.trainer.device)
    g, owner = load_store_graph(store, job.trainer.normalize_features)
    m = store.manifest
    model, spec = build_model(job.trainer, m.feature_dim, m.num_classes, len(job.sampler.fanouts), job.seed, device)
    opt = make_optimizer(model, job.trainer)
    out.update(device=str(device), num_nodes=m.num_nodes, dims=list(spec.dims), trainers=1)
    ostore = None
    remote = 0.0
    if fg.mode == "memory":
        trainer = InMemoryTrainer(spec, g, model, job.seed, device)
        out.update(parts=1)
    else:
        plan = build_plan(g, owner, spec.aggr)
        nnz = sum(mt.nnz for mt in plan.matrix)
        remote = sum(mt.nnz - plan.block(p, p).nnz for p, mt in enumerate(plan.matrix)) / max(nnz, 1)
        if fg.store_addr:
            from argosy.services.offload.service import RemoteStore

            ostore = RemoteStore(fg.store_addr)
        else:
            spill = tempfile.mkdtemp(prefix="argosy-offload-", dir=fg.spill_dir)
            made.append(spill)
            ostore = OffloadStore(fg.cache_bytes, spill, fg.disk_bytes, fg.eviction, fg.prefetch)
        trainer = OffloadTrainer(spec, plan, g, ostore, model, job.seed, device)
        out.update(parts=plan.num_parts, alpha=plan.expansion_ratio(), cache_bytes=fg.cache_bytes,
                   eviction=fg.eviction, prefetch=fg.prefetch)
        ostore.stats(reset=True)
    del g
    def on_best(epoch: int, rec: dict) -> None:
        save_best(job, model, epoch, rec, m.feature_dim, m.num_classes, len(job.sampler.fanouts))

    try:
        epochs, res = fit(trainer, model, opt, job.trainer, device, remote, on_best)
        if ostore is not None:
            st = ostore.stats()
            out.update(cache_hit_rate=st["hit_rate"], bytes_read=st["bytes_read"],
                       bytes_written=st["bytes_written"], evictions=st["evictions"], offload_store=st)
    finally:
        if ostore is not None:
            ostore.close()
    out.update(res, remote_fraction=remote)
    if device.type == "cuda":
        out["peak_gpu_bytes"] = int(torch.cuda.max_memory_allocated(device))
    return epochs
