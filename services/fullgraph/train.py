"""Training drivers behind ``python -m argosy.services.fullgraph train``: fullgraph, sar, memory.

Why this module exists: the CLI, the bench and the integration tests all need
"train this model on this graph in this mode and report the same metrics",
so the loop, timing and memory accounting live here once. ``memory`` is the
plain in-memory baseline the bench compares against.
"""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
import time
from dataclasses import dataclass

import numpy as np
import torch

from .fullgraph import OffloadTrainer
from .graph import build_plan, load_graph, partition_vertices
from .inmemory import InMemoryTrainer
from .memory import current_rss_bytes, peak_rss_bytes
from .model import ModelSpec, init_params, make_optimizer
from .sar import SARConfig, launch_sar
from .store import OffloadStore

__all__ = ["TrainArgs", "parse_size", "run_train"]

logger = logging.getLogger(__name__)


def parse_size(text: str | int) -> int:
    """``"512M"``, ``"1.5GiB"``, ``"4096"`` -> bytes (binary multiples)."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?b)?\s*", str(text).lower())
    if not m:
        raise ValueError(f"cannot parse size {text!r} (examples: 4096, 512M, 1.5GiB)")
    mult = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2)]
    return int(float(m.group(1)) * mult)


@dataclass
class TrainArgs:
    """Options of one training run (mirrors the CLI flags)."""

    data: str
    mode: str = "fullgraph"  # fullgraph | sar | memory
    model: str = "gcn"
    parts: int = 4
    trainers: int = 2
    epochs: int = 200
    lr: float = 0.01
    hidden: int = 16
    layers: int = 2
    dropout: float = 0.5
    weight_decay: float = 5e-4
    seed: int = 0
    cache_bytes: int = 256 << 20
    disk_bytes: int | None = None
    spill_dir: str | None = None
    eviction: str = "belady"
    prefetch: bool = True
    partition: str = "contiguous"
    device: str = "cpu"
    store_addr: str | None = None
    feature_norm: bool = True


def _device(name: str) -> str:
    if name == "cuda" and not torch.cuda.is_available():
        logger.warning("--device cuda requested but CUDA is not available; using cpu")
        return "cpu"
    return name


def run_train(a: TrainArgs) -> dict:
    """Train and return the metrics dict printed by ``--json``."""
    base_rss = current_rss_bytes()
    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    device = _device(a.device)
    g = load_graph(a.data)
    if g.features is None or g.labels is None:
        raise ValueError(f"{a.data} has no features/labels; training needs both")
    if a.feature_norm:  # Kipf & Welling row-normalise bag-of-words features
        rs = g.features.sum(1, keepdims=True, dtype=np.float64)
        rs[rs == 0] = 1.0
        g.features = np.ascontiguousarray(g.features, dtype=np.float32)
        g.features /= rs.astype(np.float32)  # in place: no second copy of the features
    n_cls = int(g.labels.max()) + 1
    dims = (int(g.features.shape[1]),) + (a.hidden,) * (a.layers - 1) + (n_cls,)
    spec = ModelSpec(a.model, dims, a.dropout)  # type: ignore[arg-type]
    out: dict = {"mode": a.mode, "model": a.model, "device": device, "epochs": a.epochs,
                 "num_nodes": g.num_nodes, "dims": list(dims)}
    if a.mode == "sar":
        cfg = SARConfig("", a.trainers, 0, a.model, dims, a.dropout, a.lr, a.weight_decay, a.epochs,
                        a.seed, device, "train", "")
        if a.spill_dir:
            cfg.part_dir = tempfile.mkdtemp(prefix="sar-parts-", dir=a.spill_dir)
        res = launch_sar(g, cfg, a.partition)
        del g
        ranks = res.pop("ranks")
        out.update({k: v for k, v in res.items() if k not in ("rank", "peak_rss_bytes", "base_rss_bytes")})
        out.update(parts=a.trainers, trainers=a.trainers,
                   peak_rss_bytes=max(r["peak_rss_bytes"] for r in ranks),
                   base_rss_bytes=max(r["base_rss_bytes"] for r in ranks),
                   rank_peak_rss_bytes=[r["peak_rss_bytes"] for r in ranks],
                   rank_base_rss_bytes=[r["base_rss_bytes"] for r in ranks],
                   launcher_peak_rss_bytes=peak_rss_bytes())
        return out

    params = init_params(spec, a.seed, device)
    opt = make_optimizer(params, a.lr, a.weight_decay)
    store = None
    made_dir: str | None = None
    if a.mode == "memory":
        trainer = InMemoryTrainer(spec, g, params, a.seed, device)
        out.update(parts=1, trainers=1)
    elif a.mode == "fullgraph":
        owner = partition_vertices(g.num_nodes, a.parts, a.partition, a.seed)  # type: ignore[arg-type]
        plan = build_plan(g, owner, spec.aggr)
        if a.store_addr:
            from .service import RemoteStore

            store = RemoteStore(a.store_addr)
        else:
            spill = tempfile.mkdtemp(prefix="offload-", dir=a.spill_dir) if a.spill_dir else "auto"
            made_dir = spill if a.spill_dir else None
            store = OffloadStore(a.cache_bytes, spill, a.disk_bytes, a.eviction, a.prefetch)
        trainer = OffloadTrainer(spec, plan, g, store, params, a.seed, device)
        out.update(parts=a.parts, trainers=1, alpha=plan.expansion_ratio(), cache_bytes=a.cache_bytes,
                   eviction=a.eviction, prefetch=a.prefetch)
        g.features = None  # the store owns the features now
        store.stats(reset=True)
    else:
        raise ValueError(f"unknown mode {a.mode!r} (expected fullgraph|sar|memory)")
    del g
    times, losses = [], []
    try:
        for epoch in range(a.epochs):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            losses.append(trainer.step(epoch))
            opt.step()
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        if store is not None:
            st = store.stats()
            out.update(cache_hit_rate=st["hit_rate"], bytes_read=st["bytes_read"],
                       bytes_written=st["bytes_written"], evictions=st["evictions"], store=st)
        acc = trainer.evaluate()
    finally:
        if store is not None:
            store.close()
        if made_dir:
            shutil.rmtree(made_dir, ignore_errors=True)
    out.update({k: v for k, v in acc.items() if k.endswith("_accuracy")})
    out.update(epoch_seconds=float(np.median(times)) if times else 0.0,
               epoch_seconds_all=times, final_loss=losses[-1] if losses else None,
               peak_rss_bytes=peak_rss_bytes(), base_rss_bytes=base_rss)
    if device == "cuda":
        out["peak_gpu_bytes"] = int(torch.cuda.max_memory_allocated())
    return out

