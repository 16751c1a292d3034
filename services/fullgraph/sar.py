"""SAR mode: N worker processes, one part each, sequential aggregation over remote parts.

Why this module exists: in distributed full-batch training the naive layer
gathers the whole halo of a part at once, so memory per worker stops falling
with more workers. SAR (Mostafa, MLSys'22) instead visits the other parts one
at a time in ring order: in round ``r`` worker ``k`` sends the rows that
worker ``k+r`` needs and receives the rows it needs from worker ``k-r``,
folds them into an accumulator and frees them. For sum/mean aggregation
(GCN, GraphSAGE-mean) the backward pass needs no remote *features* at all:
each round computes the gradient for the remote rows as ``A_kq^T g`` and
ships it to the owner, who scatter-adds it (SAR's "case A"); nothing remote
is kept between forward and backward, and nothing is re-fetched. Weight
gradients are summed with ``torch.distributed.all_reduce``.

Communication is ``torch.distributed`` point-to-point (``batch_isend_irecv``)
over gloo on CPU or NCCL on CUDA. Each worker reads only its own part file
(written by :func:`write_part_files`), so per-worker memory is that of its
part plus one remote block.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from .graph import GraphData, build_plan, partition_vertices
from .kernels import CSR, spmm
from .memory import configure_malloc, current_rss_bytes, peak_rss_bytes
from .model import (ModelSpec, dropout_mask, flat_grads, init_params, layer_forward, make_optimizer,
                    masked_loss_sum, post_activation)

__all__ = ["SARConfig", "SARContext", "SARAggregate", "SARWorker", "write_part_files", "launch_sar",
           "launch_sar_jobs", "free_port"]

logger = logging.getLogger(__name__)


@dataclass
class SARConfig:
    """Everything a SAR worker needs besides its part file (passed to every rank)."""

    part_dir: str
    world_size: int
    port: int
    kind: str
    dims: tuple[int, ...]
    dropout: float = 0.5
    lr: float = 0.01
    weight_decay: float = 5e-4
    epochs: int = 200
    seed: int = 0
    device: str = "cpu"
    task: str = "train"  # train | grads
    out_dir: str = ""
    alpha: float = 0.0


def free_port() -> int:
    """A free TCP port on 127.0.0.1 for the rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_part_files(g: GraphData, num_parts: int, aggr: str, out_dir: str,
                     method: str = "contiguous", seed: int = 0) -> dict:
    """Partition ``g`` and write one ``part_{k}.npz`` per worker.

    Each file holds the part's own global ids, features, labels and masks, and
    for every other part ``q`` the aggregation block ``A_kq`` (columns = the
    rows of ``q`` it needs, ``need{q}``) and the rows of ``k`` that ``q``
    needs (``give{q}``).

    Returns:
        summary with ``alpha`` and the global training count.
    """
    owner = partition_vertices(g.num_nodes, num_parts, method, seed)  # type: ignore[arg-type]
    plan = build_plan(g, owner, aggr)  # type: ignore[arg-type]
    n_train = int((g.train_mask & (g.labels >= 0)).sum()) if g.train_mask is not None else 0
    os.makedirs(out_dir, exist_ok=True)
    n = g.num_nodes
    for k in range(num_parts):
        o = plan.own[k]
        arrs: dict[str, np.ndarray] = {
            "own": o, "features": np.ascontiguousarray(g.features[o], dtype=np.float32),
            "labels": g.labels[o],
            "n_train": np.array(n_train),
        }
        for name in ("train_mask", "val_mask", "test_mask"):
            m = getattr(g, name)
            arrs[name] = m[o] if m is not None else np.zeros(len(o), bool)
        for q in range(num_parts):
            blk = plan.block(k, q)
            arrs[f"a{q}_indptr"], arrs[f"a{q}_indices"], arrs[f"a{q}_data"] = blk.indptr, blk.indices, blk.data
            arrs[f"need{q}"] = plan.boundary[k].get(q, np.zeros(0, np.int64)) if q != k else np.zeros(0, np.int64)
            arrs[f"give{q}"] = plan.boundary[q].get(k, np.zeros(0, np.int64)) if q != k else np.zeros(0, np.int64)
        np.savez(os.path.join(out_dir, f"part_{k}.npz"), **arrs)
    return {"alpha": plan.expansion_ratio(), "n_train": n_train, "num_nodes": n}


class SARContext:
    """One worker's view: its aggregation blocks and exchange lists, plus the ring.

    Attributes:
        rank, world: this worker and ``N``.
        a, at: ``a[q]`` CSR ``(n_k, len(need[q]))`` (``a[k]`` is ``(n_k, n_k)``) and transposes.
        need: ``need[q]`` rows of part ``q`` this worker aggregates (``int64``).
        give: ``give[q]`` rows of this part that worker ``q`` needs (``int64``).
    """

    def __init__(self, rank: int, world: int, z: dict, device: torch.device,
                 group: dist.ProcessGroup | None = None, peers: list[int] | None = None) -> None:
        self.rank, self.world, self.device = rank, world, device
        self.group = group
        self.peers = peers if peers is not None else list(range(world))
        self.n_local = int(len(z["own"]))
        self.a: dict[int, CSR] = {}
        self.at: dict[int, CSR] = {}
        self.need: dict[int, torch.Tensor] = {}
        self.give: dict[int, torch.Tensor] = {}
        for q in range(world):
            ncols = self.n_local if q == rank else len(z[f"need{q}"])
            m = CSR(z[f"a{q}_indptr"], z[f"a{q}_indices"], z[f"a{q}_data"], (self.n_local, ncols))
            self.a[q], self.at[q] = m, m.transpose()
            self.need[q] = torch.from_numpy(z[f"need{q}"]).to(device)
            self.give[q] = torch.from_numpy(z[f"give{q}"]).to(device)
        self.max_block_rows = max([len(v) for v in self.need.values()] + [0])

    def exchange(self, send: torch.Tensor | None, dst: int, recv: torch.Tensor | None, src: int) -> None:
        """Send to ``dst`` and receive from ``src`` concurrently (empty sides skipped)."""
        ops = []
        if send is not None:
            ops.append(dist.P2POp(dist.isend, send.contiguous(), self.peers[dst], self.group))
        if recv is not None:
            ops.append(dist.P2POp(dist.irecv, recv, self.peers[src], self.group))
        if ops:
            for req in dist.batch_isend_irecv(ops):
                req.wait()


class SARAggregate(torch.autograd.Function):
    """``out_k = sum_q A_kq x_q[need_q]``, one remote block at a time (SAR forward + case-A backward).

    Shapes:
        x: ``[n_k, f]`` this worker's rows; returns ``[n_k, f]``.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, sc: SARContext) -> torch.Tensor:  # type: ignore[override]
        ctx.sc = sc
        k, N = sc.rank, sc.world
        xd = x.detach()
        out = spmm(sc.a[k], xd)
        for r in range(1, N):
            dst, src = (k + r) % N, (k - r) % N
            send = xd.index_select(0, sc.give[dst]) if len(sc.give[dst]) else None
            recv = torch.empty((len(sc.need[src]), x.shape[1]), dtype=x.dtype, device=x.device) \
                if len(sc.need[src]) else None
            sc.exchange(send, dst, recv, src)
            if recv is not None:
                out += spmm(sc.a[src], recv)
            del send, recv  # one remote block at a time
        return out

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        sc: SARContext = ctx.sc
        k, N = sc.rank, sc.world
        g = g.contiguous()
        grad = spmm(sc.at[k], g)
        for r in range(1, N):
            dst, src = (k - r) % N, (k + r) % N  # reverse of the forward ring
            send = spmm(sc.at[dst], g) if len(sc.need[dst]) else None
            recv = torch.empty((len(sc.give[src]), g.shape[1]), dtype=g.dtype, device=g.device) \
                if len(sc.give[src]) else None
            sc.exchange(send, dst, recv, src)
            if recv is not None:
                grad.index_add_(0, sc.give[src], recv)
            del send, recv
        return grad, None


class SARWorker:
    """Model state and training loop of one SAR rank."""

    def __init__(self, rank: int, cfg: SARConfig, group: dist.ProcessGroup | None = None) -> None:
        self.rank, self.cfg, self.group = rank, cfg, group
        self.device = torch.device(cfg.device)
        with np.load(os.path.join(cfg.part_dir, f"part_{rank}.npz")) as zf:
            z = {k: zf[k] for k in zf.files}
        self.sc = SARContext(rank, cfg.world_size, z, self.device, group, list(range(cfg.world_size)))
        self.x = torch.from_numpy(z["features"]).to(self.device)
        self.labels = torch.from_numpy(z["labels"]).to(self.device)
        self.masks = {k: torch.from_numpy(z[k]).to(self.device) for k in ("train_mask", "val_mask", "test_mask")}
        self.n_train = int(z["n_train"])
        del z
        self.spec = ModelSpec(cfg.kind, tuple(cfg.dims), cfg.dropout)  # type: ignore[arg-type]
        self.params = init_params(self.spec, cfg.seed, self.device)
        for p in self.params:  # identical replicas even if init ever became rank-dependent
            for t in p.values():
                dist.broadcast(t.data, 0, group=group)

    def forward(self, epoch: int, training: bool) -> torch.Tensor:
        agg = lambda x: SARAggregate.apply(x, self.sc)  # noqa: E731
        drop = self.spec.dropout if training else 0.0
        n = self.sc.n_local
        h = self.x
        m = dropout_mask((n, self.spec.dims[0]), drop, self.cfg.seed, epoch, 0, self.rank, self.device)
        if m is not None:
            h = h * m
        for l in range(self.spec.num_layers):
            z = layer_forward(self.spec, l, self.params[l], agg, h, h)
            h = post_activation(z, dropout_mask((n, self.spec.dims[l + 1]), drop, self.cfg.seed, epoch,
                                                l + 1, self.rank, self.device)) \
                if l < self.spec.num_layers - 1 else z
        return h

    def step(self, epoch: int) -> float:
        """Forward + backward + weight-gradient all-reduce. Returns the global mean loss."""
        logits = self.forward(epoch, training=True)
        loss = masked_loss_sum(logits, self.labels, self.masks["train_mask"]) / max(1, self.n_train)
        loss.backward()
        grads = [t.grad if t.grad is not None else torch.zeros_like(t) for p in self.params for t in p.values()]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=self.group)
        off = 0
        for p in self.params:
            for t in p.values():
                t.grad = flat[off:off + t.numel()].view_as(t).clone()
                off += t.numel()
        lv = loss.detach().reshape(1).clone()
        dist.all_reduce(lv, group=self.group)
        return float(lv)

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        pred = self.forward(0, training=False).argmax(1)
        counts = []
        for k in ("train_mask", "val_mask", "test_mask"):
            sel = self.masks[k] & (self.labels >= 0)
            counts += [int((pred[sel] == self.labels[sel]).sum()), int(sel.sum())]
        t = torch.tensor(counts, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, group=self.group)
        c = t.cpu().tolist()
        return {"train_accuracy": c[0] / max(1, c[1]), "val_accuracy": c[2] / max(1, c[3]),
                "test_accuracy": c[4] / max(1, c[5])}


def _run_job(rank: int, cfg: SARConfig, group: dist.ProcessGroup | None, base_rss: int) -> None:
    w = SARWorker(rank, cfg, group)
    result: dict = {"rank": rank}
    if cfg.task == "grads":
        result["loss"] = w.step(0)
        np.savez(os.path.join(cfg.out_dir, f"grads_{rank}.npz"),
                 **{k: v.numpy() for k, v in flat_grads(w.params).items()})
    else:
        opt = make_optimizer(w.params, cfg.lr, cfg.weight_decay)
        times, losses = [], []
        for epoch in range(cfg.epochs):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            losses.append(w.step(epoch))
            opt.step()
            if cfg.device.startswith("cuda"):
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        result.update(w.evaluate())
        result["epoch_seconds"] = float(np.median(times)) if times else 0.0
        result["epoch_seconds_all"] = times
        result["final_loss"] = losses[-1] if losses else None
    result["peak_rss_bytes"] = peak_rss_bytes()
    result["base_rss_bytes"] = base_rss
    if cfg.device.startswith("cuda"):
        result["peak_gpu_bytes"] = int(torch.cuda.max_memory_allocated())
    with open(os.path.join(cfg.out_dir, f"result_{rank}.json"), "w") as f:
        json.dump(result, f)


def _worker_main(rank: int, jobs: list[SARConfig], nprocs: int, port: int) -> None:
    """Entry of one spawned process: rendezvous once, then run every job it is a member of.

    A job of ``world_size < nprocs`` runs on a sub-group of ranks ``0..world_size-1``
    (so one spawn can test N = 1, 2, 4 without paying process start-up three times).
    """
    configure_malloc()
    base_rss = current_rss_bytes()
    threads = max(1, (os.cpu_count() or 1) // nprocs)
    torch.set_num_threads(threads)
    try:
        import numba

        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    except (ImportError, ValueError):
        pass
    cuda = jobs[0].device.startswith("cuda")
    if cuda:
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=nprocs)
    try:
        for job in jobs:
            if cuda:
                job.device = f"cuda:{rank % torch.cuda.device_count()}"
            group = None if job.world_size == nprocs else dist.new_group(list(range(job.world_size)))
            if rank < job.world_size:
                _run_job(rank, job, group, base_rss)
            dist.barrier()
    finally:
        dist.destroy_process_group()


def launch_sar_jobs(g: GraphData, jobs: list[SARConfig], partition: str = "contiguous") -> list[dict]:
    """Run several SAR jobs (each ``part_dir``/``out_dir`` set) in one spawn of max(world) processes."""
    import torch.multiprocessing as mp

    for job in jobs:
        os.makedirs(job.part_dir, exist_ok=True)
        job.out_dir = job.out_dir or job.part_dir
        job.alpha = write_part_files(g, job.world_size, "gcn" if job.kind == "gcn" else "mean",
                                     job.part_dir, partition, job.seed)["alpha"]
    nprocs = max(j.world_size for j in jobs)
    port = jobs[0].port or free_port()
    mp.spawn(_worker_main, args=(jobs, nprocs, port), nprocs=nprocs, join=True)
    outs = []
    for job in jobs:
        ranks = []
        for k in range(job.world_size):
            with open(os.path.join(job.out_dir, f"result_{k}.json")) as f:
                ranks.append(json.load(f))
        out = dict(ranks[0])
        out.update(ranks=ranks, alpha=job.alpha)
        outs.append(out)
    return outs


def launch_sar(g: GraphData, cfg: SARConfig, partition: str = "contiguous") -> dict:
    """Partition, write part files, spawn ``cfg.world_size`` ranks, collect their results.

    Returns:
        ``{"ranks": [per-rank result dicts], "alpha": ..., **rank 0's metrics}``;
        for ``task="grads"`` rank ``k``'s gradients are in ``out_dir/grads_{k}.npz``.
    """
    tmp = None
    if not cfg.part_dir:
        tmp = tempfile.mkdtemp(prefix="argosy-sar-")
        cfg.part_dir = tmp
    try:
        return launch_sar_jobs(g, [cfg], partition)[0]
    finally:
        if tmp is not None and cfg.task != "grads":
            shutil.rmtree(tmp, ignore_errors=True)
