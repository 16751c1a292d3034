"""SAR mode: N worker processes, each owning a group of the store's parts; sequential aggregation.

Why this module exists: in distributed full-batch training the naive layer gathers the whole halo
of a part at once, so memory per worker stops falling with more workers.  SAR (Mostafa, MLSys'22)
instead visits the other workers one at a time in ring order: in round ``r`` worker ``k`` sends the
rows that worker ``k+r`` needs and receives the rows it needs from worker ``k-r``, folds them into
an accumulator and frees them.  For sum/mean aggregation (GCN, GraphSAGE-mean) the backward pass
needs no remote *features*: each round computes the gradient for the remote rows as ``A_kq^T g``
and ships it to the owner, who scatter-adds it (SAR's "case A").  Weight gradients are summed with
``torch.distributed.all_reduce``.  R-GCN is the same ring over its per-(destination, relation) operator
(:mod:`.graph`): the rows exchanged are the layer's inputs, as for GCN; its featureless first layer
projects first, so that layer's ring carries each row's ``R`` messages (:meth:`SARContext.messages`),
and its learned input table is replicated, each row's gradient coming from its owner alone.

Ownership: worker ``k`` of ``N`` owns the store parts ``p`` with ``p % N == k`` (:func:`owned_parts`)
and opens only those parts' files, plus the store-wide assignment and local-index arrays to place
its neighbours.  The graph is symmetric, so the rows ``k`` must send to ``q`` are exactly its rows
with a neighbour on ``q``; the degrees of remote neighbours (for GCN's normalisation) arrive in one
setup round of the same ring.  Communication is ``torch.distributed`` point-to-point over gloo on
CPU or NCCL on CUDA.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.distributed as dist

from argosy.shared.config import FullGraphConfig, JobConfig
from argosy.shared.errors import ConfigError, StoreFormatError
from argosy.shared.redis_server import free_port
from argosy.shared.store.reader import PartitionStore

from .graph import normalize_rows
from .graph import relation_rows
from .kernels import CSR, csr_from_coo, spmm, spmm_relation, spmm_relation_t, warm_up
from .loop import fit, save_best
from argosy.shared.malloc import configure_malloc
from argosy.shared.rss import peak_rss_bytes, rss_bytes
from .model import (check_model, dropout_mask, flat_grads, full_graph_model, full_graph_optimizer, input_table, layer_forward,
                    masked_loss_sum, post_activation)

__all__ = ["SARJob", "SARContext", "SARAggregate", "SARWorker", "owned_parts", "check_sar_job", "launch_sar",
           "launch_sar_jobs"]

logger = logging.getLogger(__name__)


@dataclass
class SARJob:
    """One SAR run as every rank receives it (JSON strings only cross the spawn)."""

    job: str
    """:meth:`JobConfig.to_json` of the run (store, seed, trainer section)."""
    fullgraph: str
    """JSON of the :class:`FullGraphConfig`."""
    world_size: int
    out_dir: str
    task: str = "train"
    """``train`` (the full loop) or ``grads`` (one step, gradients written per rank: exactness tests)."""
    device: str = "cpu"


def owned_parts(num_parts: int, rank: int, world: int) -> list[int]:
    """Store parts worker ``rank`` of ``world`` owns: ``p % world == rank``."""
    return list(range(rank, num_parts, world))


def _layout(store: PartitionStore, world: int) -> tuple[np.ndarray, np.ndarray]:
    """``(worker of each part, row offset of each part inside its worker's block)``."""
    k = store.num_parts
    sizes = np.array([e.num_nodes for e in store.manifest.parts], np.int64)
    worker_of = np.arange(k, dtype=np.int64) % world
    offset = np.zeros(k, np.int64)
    for w in range(world):
        mine = np.flatnonzero(worker_of == w)
        offset[mine] = np.concatenate([[0], np.cumsum(sizes[mine])[:-1]]) if len(mine) else []
    return worker_of, offset


class SARContext:
    """One worker's view: its aggregation blocks and exchange lists, plus the ring.

    Attributes:
        rank, world: this worker and ``N``.
        a, at: ``a[q]`` CSR ``(n_k * R, len(need[q]))`` (``a[k]`` is ``(n_k * R, n_k)``) and transposes.
        relations: ``R`` (1 but for R-GCN).
        need: ``need[q]`` rows of worker ``q``'s block this worker aggregates (``int64``, sorted).
        give: ``give[q]`` rows of this block that worker ``q`` needs (``int64``, sorted).
    """

    def __init__(self, rank: int, world: int, n_local: int, device: torch.device,
                 group: dist.ProcessGroup | None = None) -> None:
        self.rank, self.world, self.device, self.group = rank, world, device, group
        self.n_local = n_local
        self.a: dict[int, CSR] = {}
        self.at: dict[int, CSR] = {}
        self.need: dict[int, torch.Tensor] = {}
        self.give: dict[int, torch.Tensor] = {}
        self.relations = 1

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """The layer's ``agg``: ``sum_q A_kq x_q`` over the ring (:class:`SARAggregate`)."""
        return SARAggregate.apply(x, self, False)

    def messages(self, y: torch.Tensor) -> torch.Tensor:
        """``agg.messages``: per-source, per-relation messages ``y`` ``[n_k, R * F]`` into their
        destinations ``[n_k, F]``; the ring carries ``y``'s rows."""
        return SARAggregate.apply(y, self, True)

    def set_blocks(self, a: dict[int, CSR], need: dict[int, np.ndarray], give: dict[int, np.ndarray]) -> None:
        for q, m in a.items():
            self.a[q], self.at[q] = m, m.transpose()
        self.need = {q: torch.from_numpy(v).to(self.device) for q, v in need.items()}
        self.give = {q: torch.from_numpy(v).to(self.device) for q, v in give.items()}

    def exchange(self, send: torch.Tensor | None, dst: int, recv: torch.Tensor | None, src: int) -> None:
        """Send to ``dst`` and receive from ``src`` concurrently (empty sides skipped)."""
        ops = []
        if send is not None:
            ops.append(dist.P2POp(dist.isend, send.contiguous(), dst, self.group))
        if recv is not None:
            ops.append(dist.P2POp(dist.irecv, recv, src, self.group))
        if ops:
            for req in dist.batch_isend_irecv(ops):
                req.wait()


class SARAggregate(torch.autograd.Function):
    """``out_k = sum_q A_kq x_q[need_q]``, one remote block at a time (SAR forward + case-A backward).
    ``messages``: the operator on per-source, per-relation messages (:meth:`SARContext.messages`,
    :func:`~.kernels.spmm_relation`); an exchanged row is then a source's ``R`` messages.

    Shapes:
        x: ``[n_k, f]`` this worker's rows; returns ``[n_k * R, f]`` (``messages``: x ``[n_k, R * f]`` -> ``[n_k, f]``).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, sc: SARContext, messages: bool) -> torch.Tensor:  # type: ignore[override]
        ctx.sc, ctx.messages = sc, messages
        k, N = sc.rank, sc.world
        R = sc.relations

        def product(a: CSR, rows: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
            return spmm_relation(a, rows, R, out) if messages else spmm(a, rows, out)
        xd = x.detach().contiguous()
        out = product(sc.a[k], xd)
        for r in range(1, N):
            dst, src = (k + r) % N, (k - r) % N
            send = xd.index_select(0, sc.give[dst]) if len(sc.give[dst]) else None
            recv = torch.empty((len(sc.need[src]), x.shape[1]), dtype=x.dtype, device=x.device) \
                if len(sc.need[src]) else None
            sc.exchange(send, dst, recv, src)
            if recv is not None:
                product(sc.a[src], recv, out)
            del send, recv  # one remote block at a time
        return out

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        sc: SARContext = ctx.sc
        k, N = sc.rank, sc.world
        R = sc.relations

        def product_t(at: CSR) -> torch.Tensor:
            return spmm_relation_t(at, g, R) if ctx.messages else spmm(at, g)
        g = g.contiguous()
        grad = product_t(sc.at[k])
        width = grad.shape[1]
        for r in range(1, N):
            dst, src = (k - r) % N, (k + r) % N  # reverse of the forward ring
            send = product_t(sc.at[dst]) if len(sc.need[dst]) else None
            recv = torch.empty((len(sc.give[src]), width), dtype=g.dtype, device=g.device) \
                if len(sc.give[src]) else None
            sc.exchange(send, dst, recv, src)
            if recv is not None:
                grad.index_add_(0, sc.give[src], recv)
            del send, recv
        return grad, None, None


class SARWorker:
    """Model state and training step of one SAR rank, built from its own parts of the store."""

    def __init__(self, rank: int, world: int, job: JobConfig, fg: FullGraphConfig, device: torch.device,
                 group: dist.ProcessGroup | None = None) -> None:
        self.rank, self.world, self.job, self.group, self.device = rank, world, job, group, device
        store = PartitionStore(job.store)
        m = check_sar_job(job, world, store)
        R = int(m.num_relations) if job.trainer.model == "rgcn" else 1
        self.parts = owned_parts(store.num_parts, rank, world)
        pds = [store.part(p) for p in self.parts]
        sizes = [len(pd.nodes) for pd in pds]
        n = int(sum(sizes))
        feats = np.empty((n, m.feature_dim), np.float32)
        labels = np.empty(n, np.int64)
        masks = {k: np.zeros(n, bool) for k in ("train_mask", "val_mask", "test_mask")}
        indptrs, indices, types, off, eoff = [np.zeros(1, np.int64)], [], [], 0, 0
        for pd, sz in zip(pds, sizes):
            if m.feature_dim:
                store.features.dense(pd.part, out=feats[off:off + sz])
            labels[off:off + sz] = pd.labels
            for k, arr in masks.items():
                if getattr(pd, k) is not None:
                    arr[off:off + sz] = getattr(pd, k)
            indptrs.append(np.asarray(pd.indptr[1:], np.int64) + eoff)
            indices.append(np.asarray(pd.indices, np.int64))
            if job.trainer.model == "rgcn" and pd.edge_type is not None:
                types.append(np.asarray(pd.edge_type, np.int64))
            off += sz
            eoff += int(pd.indptr[-1])
        if job.trainer.normalize_features:
            normalize_rows(feats)
        indptr = np.concatenate(indptrs)
        col = np.concatenate(indices) if indices else np.zeros(0, np.int64)
        deg = np.diff(indptr)
        rows = np.repeat(np.arange(n, dtype=np.int64), deg)
        worker_of, offset = _layout(store, world)
        col_part = np.asarray(store.assignment)[col].astype(np.int64)
        col_worker = worker_of[col_part]
        col_pos = offset[col_part] + np.asarray(store.local_index)[col]
        ids = np.concatenate([np.asarray(pd.nodes, np.int64) for pd in pds]) if pds else np.zeros(0, np.int64)
        del store, pds, indices, col_part, col
        need, give = {}, {}
        for q in range(world):
            if q != rank:
                sel = col_worker == q
                need[q] = np.unique(col_pos[sel])
                give[q] = np.unique(rows[sel])
        self.sc = SARContext(rank, world, n, device, group)
        self.sc.need = {q: torch.from_numpy(v) for q, v in need.items()}  # for the degree round below
        self.sc.give = {q: torch.from_numpy(v) for q, v in give.items()}
        remote_deg = self._exchange_degrees(deg)
        aggr = ("gcn" if job.trainer.model == "gcn" else "relation_mean" if job.trainer.model == "rgcn"
                else "mean_self" if job.trainer.aggregator == "gcn" else "mean")
        a = {}
        own_d = deg.astype(np.float64)
        mine = col_worker == rank
        if aggr == "relation_mean":  # row v * R + r: the mean of v's in-neighbours along r (local counts)
            if len(types) != len(sizes):
                raise StoreFormatError(f"{job.store}: a typed part lacks edge_type.npy")
            rrows, rval = relation_rows(rows, np.concatenate(types) if types else np.zeros(0, np.int64), n, R)
            a[rank] = csr_from_coo(rrows[mine], col_pos[mine], rval[mine], (n * R, n))
        elif aggr == "gcn":
            dinv = 1.0 / np.sqrt(own_d + 1.0)
            r_ = np.concatenate([rows[mine], np.arange(n, dtype=np.int64)])
            c_ = np.concatenate([col_pos[mine], np.arange(n, dtype=np.int64)])
            a[rank] = csr_from_coo(r_, c_, (dinv[r_] * dinv[c_]).astype(np.float32), (n, n))
        elif aggr == "mean_self":
            inv = 1.0 / (own_d + 1.0)
            r_ = np.concatenate([rows[mine], np.arange(n, dtype=np.int64)])
            c_ = np.concatenate([col_pos[mine], np.arange(n, dtype=np.int64)])
            a[rank] = csr_from_coo(r_, c_, inv[r_].astype(np.float32), (n, n))
        else:
            inv = 1.0 / np.maximum(own_d, 1.0)
            a[rank] = csr_from_coo(rows[mine], col_pos[mine], inv[rows[mine]].astype(np.float32), (n, n))
        for q in need:
            sel = col_worker == q
            r_, c_ = rows[sel], np.searchsorted(need[q], col_pos[sel])
            if aggr == "relation_mean":
                r_, val = rrows[sel], rval[sel]
            elif aggr == "gcn":
                val = dinv[r_] / np.sqrt(remote_deg[q][c_] + 1.0)
            else:
                val = inv[r_]
            a[q] = csr_from_coo(r_, c_, val.astype(np.float32), (n * R, len(need[q])))
        self.sc.relations = R
        self.sc.set_blocks(a, need, give)
        self.remote_entries = int((~mine).sum())
        self.local_entries = int(mine.sum())
        del rows, col_pos, col_worker
        self.x = torch.from_numpy(feats).to(device)
        self.ids = torch.from_numpy(ids).to(device)
        """Global ids of this worker's rows (a learned input table's rows)."""
        self.labels = torch.from_numpy(labels).to(device)
        self.masks = {k: torch.from_numpy(v).to(device) for k, v in masks.items()}
        cnt = torch.tensor([int((masks["train_mask"] & (labels >= 0)).sum())], dtype=torch.float64, device=device)
        dist.all_reduce(cnt, group=group)
        self.n_train = int(cnt.item())
        self.model, self.spec = full_graph_model(job.trainer, m.feature_dim, m.num_classes, len(job.sampler.fanouts),
                                                 job.seed, device, m.num_relations, m.num_nodes, job.link.node_embeddings)
        self.table = input_table(self.model)
        for t in self.model.parameters():  # identical replicas even if init ever became rank-dependent
            dist.broadcast(t.data, 0, group=group)  # sub-groups are ranks 0..N-1
        self.seed = job.seed

    def _exchange_degrees(self, deg: np.ndarray) -> dict[int, np.ndarray]:
        """Degrees of the remote rows in ``need``: each worker sends the degrees of its ``give`` rows."""
        sc, k, N = self.sc, self.rank, self.world
        out = {}
        d = torch.from_numpy(deg.astype(np.float64)).to(self.device)
        for r in range(1, N):
            dst, src = (k + r) % N, (k - r) % N
            send = d.index_select(0, sc.give[dst].to(self.device)) if len(sc.give[dst]) else None
            recv = torch.empty(len(sc.need[src]), dtype=torch.float64, device=self.device) \
                if len(sc.need[src]) else None
            sc.exchange(send, dst, recv, src)
            out[src] = recv.cpu().numpy() if recv is not None else np.zeros(0)
        return out

    def forward(self, epoch: int, training: bool) -> torch.Tensor:
        self.model.train(training)
        agg = self.sc
        drop = self.spec.dropout if training else 0.0
        n, L = self.sc.n_local, self.spec.num_layers
        h = self.x if self.table is None else self.table.index_select(0, self.ids)
        m = dropout_mask((n, self.spec.dims[0]), drop, self.seed, epoch, 0, self.rank, self.device)
        if m is not None:
            h = h * m
        for l in range(L):
            z = layer_forward(self.model, l, agg, h, h)
            h = post_activation(z, dropout_mask((n, self.spec.dims[l + 1]), drop, self.seed, epoch, l + 1,
                                                self.rank, self.device)) if l < L - 1 else z
        return h

    def step(self, epoch: int) -> float:
        """Forward + backward + weight-gradient all-reduce. Returns the global mean loss."""
        logits = self.forward(epoch, training=True)
        loss = masked_loss_sum(logits, self.labels, self.masks["train_mask"]) / max(1, self.n_train)
        loss.backward()
        params = list(self.model.parameters())
        flat = torch.cat([(t.grad if t.grad is not None else torch.zeros_like(t)).reshape(-1) for t in params])
        dist.all_reduce(flat, group=self.group)
        off = 0
        for t in params:
            t.grad = flat[off:off + t.numel()].view_as(t).clone()
            off += t.numel()
        lv = loss.detach().reshape(1).clone()
        dist.all_reduce(lv, group=self.group)
        return float(lv)

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        logits = self.forward(0, training=False)
        pred = logits.argmax(1)
        counts = [float(masked_loss_sum(logits, self.labels, self.masks["val_mask"]))]
        for k in ("train_mask", "val_mask", "test_mask"):
            sel = self.masks[k] & (self.labels >= 0)
            counts += [int((pred[sel] == self.labels[sel]).sum()), int(sel.sum())]
        t = torch.tensor(counts, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, group=self.group)
        loss, *c = t.cpu().tolist()
        return {"train_accuracy": c[0] / max(1, c[1]), "val_accuracy": c[2] / max(1, c[3]),
                "test_accuracy": c[4] / max(1, c[5]), "val_loss": loss / max(1, c[3])}


def check_sar_job(job: JobConfig, world: int, store: PartitionStore | None = None):
    """Refuse a SAR run this store or model cannot give, in one line (the launcher calls it before
    spawning, each worker again); returns the store's manifest."""
    store = store or PartitionStore(job.store)
    m = store.manifest
    if store.num_parts < world:
        raise ConfigError(f"{job.store} has {store.num_parts} parts and SAR runs {world} workers: "
                          f"partition with --parts {world} (or a multiple)")
    if not m.num_classes or not (m.feature_dim or m.num_relations):  # typed, featureless: R-GCN's learned input
        raise StoreFormatError(f"{job.store}: SAR needs features and labels (store has {m.feature_dim} "
                               f"feature columns, {m.num_classes} classes)")
    if m.directed:
        raise ConfigError(f"{job.store} is directed: SAR sends each worker the rows with a neighbour on it, "
                          "which needs a symmetric store (partition without --directed / --no-reverse-relations)")
    check_model(job.trainer, m.feature_dim, m.num_relations, m.num_nodes, job.link.node_embeddings)
    return m


def _run_job(rank: int, sj: SARJob, group: dist.ProcessGroup | None, base_rss: int) -> None:
    job, fg = JobConfig.from_json(sj.job), FullGraphConfig(**json.loads(sj.fullgraph))
    device = torch.device(sj.device)
    w = SARWorker(rank, sj.world_size, job, fg, device, group)
    result: dict = {"rank": rank, "parts": w.parts}
    if sj.task == "grads":
        w.model.zero_grad(set_to_none=True)
        result["loss"] = w.step(0)
        np.savez(os.path.join(sj.out_dir, f"grads_{rank}.npz"),
                 **{k: v.numpy() for k, v in flat_grads(w.model).items()})
    else:
        tot = torch.tensor([w.remote_entries, w.local_entries + w.remote_entries], dtype=torch.float64)
        dist.all_reduce(tot, group=group)
        remote = float(tot[0] / max(float(tot[1]), 1.0))
        m = PartitionStore(job.store).manifest

        def on_best(epoch: int, rec: dict) -> None:
            if rank == 0:
                save_best(job, w.model, epoch, rec, m.feature_dim, m.num_classes, len(job.sampler.fanouts))

        epochs, res = fit(w, w.model, full_graph_optimizer(w.model, job.trainer), job.trainer, device, remote, on_best)
        result.update(res, remote_fraction=remote, epoch_records=epochs if rank == 0 else [])
    result["peak_rss_bytes"] = peak_rss_bytes()
    result["base_rss_bytes"] = base_rss
    if device.type == "cuda":
        result["peak_gpu_bytes"] = int(torch.cuda.max_memory_allocated(device))
    with open(os.path.join(sj.out_dir, f"result_{rank}.json"), "w") as f:
        json.dump(result, f)


def _worker_main(rank: int, jobs: list[str], nprocs: int, port: int) -> None:
    """Entry of one spawned process: rendezvous once, then run every job it is a member of.

    A job of ``world_size < nprocs`` runs on a sub-group of ranks ``0..world_size-1``
    (so one spawn can test N = 1, 2, 4 without paying process start-up three times).
    """
    configure_malloc()
    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING,
                        format=f"%(asctime)s sar[{rank}] %(levelname)s %(name)s: %(message)s")
    warm_up()  # fixed per-process costs belong to the baseline
    base_rss = rss_bytes()
    sjobs = [SARJob(**json.loads(j)) for j in jobs]
    threads = max(1, (os.cpu_count() or 1) // nprocs)
    torch.set_num_threads(threads)
    try:
        import numba

        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    except (ImportError, ValueError):
        pass
    cuda = sjobs[0].device.startswith("cuda")
    if cuda:
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=nprocs)
    try:
        for sj in sjobs:
            if cuda:
                sj.device = f"cuda:{rank % torch.cuda.device_count()}"
            group = None if sj.world_size == nprocs else dist.new_group(list(range(sj.world_size)))
            if rank < sj.world_size:
                _run_job(rank, sj, group, base_rss)
            dist.barrier()
    finally:
        dist.destroy_process_group()


def launch_sar_jobs(jobs: list[SARJob]) -> list[dict]:
    """Run several SAR jobs in one spawn of max(world) processes; returns rank 0's result of each
    with ``ranks`` (every rank's result) added."""
    import torch.multiprocessing as mp

    for sj in jobs:
        os.makedirs(sj.out_dir, exist_ok=True)
    nprocs = max(sj.world_size for sj in jobs)
    mp.spawn(_worker_main, args=([json.dumps(asdict(sj)) for sj in jobs], nprocs, free_port()),
             nprocs=nprocs, join=True)
    outs = []
    for sj in jobs:
        ranks = []
        for k in range(sj.world_size):
            with open(os.path.join(sj.out_dir, f"result_{k}.json")) as f:
                ranks.append(json.load(f))
        out = dict(ranks[0])
        out["ranks"] = ranks
        outs.append(out)
    return outs


def launch_sar(job: JobConfig, fg: FullGraphConfig, out_dir: str, device: str) -> dict:
    """Spawn ``job.num_trainers`` ranks over the store and collect their results."""
    check_sar_job(job, job.num_trainers)
    return launch_sar_jobs([SARJob(job.to_json(), json.dumps(asdict(fg)), job.num_trainers, out_dir,
                                   device=device)])[0]
