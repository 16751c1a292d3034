"""Learned node embeddings split by part between the trainers: each row lives with its part's owner.

With one trainer a link job's table of learned node embeddings (``--node-embeddings``) is a
:class:`~shared.scorers.NodeEmbedding` in the model.  With several it is not replicated: trainer
``r`` holds the rows of the parts it owns (:func:`owned_parts`: the parts of its host, as
:func:`~shared.ownership.assign_parts` deals parts to hosts, split between the trainers on that
host) with their SparseAdam moments (:class:`EmbeddingShard`).  A batch's rows held by another
trainer are pulled from it through the halo exchange (one ``embeddings`` request per owner, on the
same sockets, limits, CURVE keys and strike rules as the samplers' and loaders' halo), and their
gradients pushed back (``embedding_grads``) for the owner to apply (:class:`ShardedNodeEmbedding`).

Consistency: an owner applies each push when it arrives (as DistDGL's sparse embeddings), so a row
another trainer reads between two of its steps may be one update behind; the dense parameters stay
synchronous (DDP).  A push is sent once per backward pass; if its owner does not answer within the
halo timeout the step fails loudly (the trainers' process group would fail alike).
"""
from __future__ import annotations

import logging
import threading

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor, nn

from argosy.shared import rundir
from argosy.shared.errors import RequestFailedError
from argosy.shared.halo import HaloClient, HaloServer
from argosy.shared.ownership import Membership, assign_parts, host_label
from argosy.shared.traffic import WireCounter
from argosy.shared.protocol import FeatureRows, HaloRequest
from argosy.shared.validate import all_finite

__all__ = ["owned_parts", "EmbeddingShard", "ShardedNodeEmbedding"]

logger = logging.getLogger(__name__)


def owned_parts(num_parts: int, hosts: list[str], rank: int) -> list[int]:
    """The parts whose embedding rows trainer ``rank`` holds, given every rank's host (``hosts[r]``).

    Parts go to hosts as the sampler and loader tiers deal them (:func:`assign_parts`, a function of
    the set of hosts only), so a part's rows sit on the host that holds its graph and features;
    the trainers of one host take that host's parts in turn, by rank.

    Example:
        >>> owned_parts(4, ["a", "a"], 1)
        [1, 3]
    """
    if not 0 <= rank < len(hosts):
        raise ValueError(f"rank {rank} out of range for {len(hosts)} trainers")
    host_parts = assign_parts(num_parts, [(h, f"rank{r}") for r, h in enumerate(hosts)])[f"rank{rank}"]
    peers = [r for r, h in enumerate(hosts) if h == hosts[rank]]
    return host_parts[peers.index(rank)::len(peers)]


class EmbeddingShard:
    """The rows of learned node embeddings one trainer owns, and their optimizer (``SparseAdam``).

    Row of vertex ``v`` (of an owned part ``p``): ``base[p] + local_index[v]``, the owned parts'
    rows one after the other in part order; nothing of size ``num_nodes`` beyond the store's own
    ``assignment`` and ``local_index`` maps.  Thread-safe: the halo server's thread and the compute
    thread share it.  Memory: ``rows * dim * 4`` bytes, three times (weights and Adam's two moments).
    """

    def __init__(self, store, parts: list[int], dim: int, lr: float, seed: int = 0):
        m = store.manifest
        self.parts = sorted(int(p) for p in parts)
        if any(not 0 <= p < m.num_parts for p in self.parts):
            raise ValueError(f"parts {self.parts} out of range [0, {m.num_parts})")
        self.store, self.num_nodes, self.dim = store, m.num_nodes, dim
        self.assignment, self.local_index = store.assignment, store.local_index
        self.base = np.full(m.num_parts, -1, np.int64)
        """First row of each owned part in :attr:`weight` (-1: held by another trainer)."""
        rows = 0
        for p in self.parts:
            self.base[p] = rows
            rows += m.parts[p].num_nodes
        gen = torch.Generator().manual_seed(seed)
        self.weight = nn.Parameter(torch.randn(rows, dim, generator=gen))     # N(0, 1) as nn.Embedding's
        self.opt = torch.optim.SparseAdam([self.weight], lr=lr)
        self.lock = threading.Lock()

    @property
    def rows(self) -> int:
        return self.weight.shape[0]

    def owns(self, ids: np.ndarray) -> np.ndarray:
        """bool per id: is its row held here (ids must lie in ``[0, num_nodes)``)."""
        return self.base[self.assignment[ids]] >= 0

    def slots(self, ids: np.ndarray) -> np.ndarray:
        """The rows of ``ids`` here; ``RequestFailedError`` ``bad_request`` (out of range) or
        ``not_owner`` (a part held by another trainer)."""
        ids = np.asarray(ids)
        if ids.ndim != 1 or ids.dtype != np.int64:
            raise RequestFailedError("bad_request", f"ids must be int64[m] (got {ids.dtype}{list(ids.shape)})")
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_nodes):
            raise RequestFailedError("bad_request", f"vertex ids must lie in [0, {self.num_nodes})")
        base = self.base[self.assignment[ids]]
        if (base < 0).any():
            parts = sorted(set(np.asarray(self.assignment[ids[base < 0]]).tolist()))
            raise RequestFailedError("not_owner", f"embedding rows of parts {parts} are not held here "
                                                  f"(held: {self.parts})")
        return base + np.asarray(self.local_index[ids], np.int64)

    def pull(self, ids: np.ndarray) -> np.ndarray:
        """float32[m, dim]: the current rows of ``ids``."""
        s = torch.from_numpy(self.slots(ids))
        with self.lock:
            return self.weight.detach().index_select(0, s).numpy()

    def push(self, ids: np.ndarray, grads: np.ndarray) -> None:
        """Apply one SparseAdam step to the rows of ``ids`` with gradients ``grads`` float32[m, dim]
        (rows of a repeated id are summed, as ``nn.Embedding``'s sparse gradient)."""
        s = self.slots(ids)
        if grads.dtype != np.float32 or grads.shape != (s.shape[0], self.dim):
            raise RequestFailedError("bad_request", f"gradients must be float32[{s.shape[0]}, {self.dim}] "
                                                    f"(got {grads.dtype}{list(grads.shape)})")
        if not all_finite(grads):
            raise RequestFailedError("bad_request", "gradients hold NaN or inf")
        if not s.shape[0]:
            return
        g = torch.sparse_coo_tensor(torch.from_numpy(s)[None], torch.from_numpy(np.ascontiguousarray(grads)),
                                    self.weight.shape, check_invariants=False)
        with self.lock:
            self.weight.grad = g
            self.opt.step()
            self.weight.grad = None

    def serve(self, req: HaloRequest) -> FeatureRows:
        """The halo server's handler: ``embeddings`` -> the rows; ``embedding_grads`` -> applied."""
        if req.what == "embeddings":
            return FeatureRows(features=self.pull(req.ids))
        if req.what == "embedding_grads":
            self.push(req.ids, req.values)
            return FeatureRows()
        raise RequestFailedError("bad_request", f"a trainer serves embeddings and embedding_grads, not {req.what!r}")

    def state(self) -> dict:
        with self.lock:
            return {"parts": list(self.parts), "weight": self.weight.detach().clone(), "opt": self.opt.state_dict()}

    def load_state(self, state: dict) -> None:
        if list(state["parts"]) != self.parts or tuple(state["weight"].shape) != tuple(self.weight.shape):
            raise ValueError(f"embedding shard of parts {list(state['parts'])} {tuple(state['weight'].shape)} "
                             f"does not match this trainer's (parts {self.parts}, {tuple(self.weight.shape)})")
        with self.lock:
            self.weight.data.copy_(state["weight"])
            self.opt.load_state_dict(state["opt"])

    def table_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """``(ids int64[rows], weights float32[rows, dim])``: this shard's vertices and their rows
        (a part's vertices in its local order are its rows in order)."""
        ids = np.concatenate([np.asarray(self.store.part(p).nodes, np.int64) for p in self.parts] or
                             [np.empty(0, np.int64)])
        with self.lock:
            return ids, self.weight.detach().numpy().copy()


class _Lookup(torch.autograd.Function):
    """Rows of ``ids`` from their owners; the backward pass sends each owner its rows' gradients.
    (The exchange's bytes are kept as running totals, :meth:`ShardedEmbeddings.traffic`, so requests
    carry epoch 0: the halo's per-epoch attribution is not used for them.)"""

    @staticmethod
    def forward(ctx, ids: Tensor, anchor: Tensor, emb: "ShardedNodeEmbedding") -> Tensor:
        host = ids.detach().cpu().numpy().astype(np.int64, copy=False)
        mine = emb.shard.owns(host)
        rows = np.empty((host.shape[0], emb.shard.dim), np.float32)
        rows[mine] = emb.shard.pull(host[mine])
        if not mine.all():
            rows[~mine] = emb.client.fetch("embeddings", host[~mine], 0).features
        ctx.host, ctx.mine, ctx.emb = host, mine, emb
        emb.rows_pulled += int((~mine).sum())
        return torch.from_numpy(rows).to(anchor.device)

    @staticmethod
    def backward(ctx, grad: Tensor):
        g = np.ascontiguousarray(grad.detach().float().cpu().numpy())
        host, mine, emb = ctx.host, ctx.mine, ctx.emb
        emb.shard.push(host[mine], g[mine])
        if not mine.all():
            emb.client.fetch("embedding_grads", host[~mine], 0, values=g[~mine])
        return None, None, None


class ShardedNodeEmbedding(nn.Module):
    """Drop-in for :class:`~shared.scorers.NodeEmbedding` when the rows are split between trainers.

    It registers no parameter (DDP must not all-reduce the table: each owner steps its rows
    itself), so :meth:`forward`'s output hangs on a zero-size ``anchor`` that requires grad, which
    makes autograd call the lookup's backward pass (the pushes).
    """

    def __init__(self, shard: EmbeddingShard, client, device: torch.device):
        super().__init__()
        self.shard, self.client = shard, client
        self.anchor = torch.zeros(0, device=device, requires_grad=True)
        self.rows_pulled = 0
        """Rows fetched from other trainers (the rest were this trainer's own)."""

    def forward(self, ids: Tensor) -> Tensor:
        return _Lookup.apply(ids, self.anchor, self)


def gather_hosts(rank: int, world: int, host: str, device: torch.device) -> list[str]:
    """Every rank's host label, in rank order (one all_gather of fixed-size byte rows)."""
    raw = host.encode()[:255]
    mine = torch.zeros(256, dtype=torch.uint8)
    mine[0] = len(raw)
    mine[1:1 + len(raw)] = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else mine[1:1]
    out = [torch.zeros(256, dtype=torch.uint8, device=device) for _ in range(world)]
    dist.all_gather(out, mine.to(device))
    return [bytes(t.cpu()[1:1 + int(t[0])].tolist()).decode(errors="replace") for t in out]


class ShardedEmbeddings:
    """One trainer's side of the split table: its shard, the halo server answering for it, the
    client fetching the others' rows, and the collective steps at epoch ends (snapshots for
    checkpoints and ``best.pt``).  Built after the process group exists, before DDP wraps the model.
    """

    def __init__(self, ctx, store, zctx, rank: int, world: int, dim: int, lr: float, seed: int,
                 device: torch.device, timeout: float):
        self.rank, self.world, self.device = rank, world, device
        self.hosts = gather_hosts(rank, world, host_label(), device)
        self.parts_of = [owned_parts(store.num_parts, self.hosts, r) for r in range(world)]
        self.shard = EmbeddingShard(store, self.parts_of[rank], dim, lr, seed=seed * 1_000_003 + rank)
        self.wire = WireCounter()
        self.bytes = 0
        self.server = HaloServer(zctx, self.shard.serve, self.wire, coord=ctx.coord,
                                 cut_off_after=ctx.cfg.wire.cut_off_after)
        ctx.coord.update_info("trainer", ctx.service_id, held=self.shard.parts, halo=self.server.endpoint)
        dist.barrier()                                  # every rank has published its rows' endpoint
        members = Membership(ctx.coord, "trainer", store.num_parts, ctx.service_id, host_label())
        members.refresh()
        self.client = HaloClient(zctx, members, store.assignment, self.wire, timeout=timeout, stop=ctx.stop)
        self.module = ShardedNodeEmbedding(self.shard, self.client, device)
        m = store.manifest
        self.rows_of = [sum(m.parts[p].num_nodes for p in ps) for ps in self.parts_of]
        logger.info("node embeddings split between %d trainers: rank %d holds parts %s, %d of %d rows "
                    "(%.1f MB, 3x that with Adam's moments)", world, rank, self.shard.parts, self.shard.rows,
                    m.num_nodes, self.shard.rows * dim * 4 / 1e6)

    def end_epoch(self, best: bool, save_to: str | None, epoch: int, rec: dict) -> torch.Tensor | None:
        """Collective, every rank at the same epoch end.  Adds the exchange's totals to the epoch's
        record ``rec`` (:meth:`traffic`), snapshots this rank's rows, saves them (``save_to``: the
        run dir, when a checkpoint is due) and, for a new ``best``, gathers the whole table on rank 0
        (returned there: float32[n, dim]; None elsewhere).  The barrier between the snapshot and the
        gather keeps a faster rank's next pushes out of both."""
        rec.update(self.traffic())
        ids, rows = self.shard.table_rows() if best else (None, None)
        if save_to:
            self.save(save_to, epoch)
        dist.barrier()
        if not best:
            return None
        dim, dev = self.shard.dim, (self.device if dist.get_backend() == "nccl" else torch.device("cpu"))
        pad = max(self.rows_of)
        mine_ids = torch.full((pad,), -1, dtype=torch.int64, device=dev)
        mine_ids[:ids.shape[0]] = torch.from_numpy(ids).to(dev)
        mine = torch.zeros(pad, dim, device=dev)
        mine[:rows.shape[0]] = torch.from_numpy(rows).to(dev)
        root = self.rank == 0
        got_ids = [torch.empty_like(mine_ids) for _ in range(self.world)] if root else None
        got = [torch.empty_like(mine) for _ in range(self.world)] if root else None
        dist.gather(mine_ids, got_ids, dst=0)
        dist.gather(mine, got, dst=0)
        if not root:
            return None
        table = torch.empty(self.shard.num_nodes, dim)
        for r in range(self.world):
            k = self.rows_of[r]
            table[got_ids[r][:k].cpu()] = got[r][:k].cpu()
        return table

    def save(self, run_dir: str, epoch: int) -> None:
        """Write this rank's rows and moments as they are at the end of ``epoch``."""
        rundir.save_shard(run_dir, self.rank, self.world, {**self.shard.state(), "epoch": epoch})

    def resume(self, run_dir: str, epoch: int) -> None:
        """Load this rank's rows and moments as saved at the end of ``epoch``."""
        st = rundir.load_shard(run_dir, self.rank, self.world)
        if int(st["epoch"]) != epoch:
            raise ValueError(f"embedding shard of rank {self.rank} is from epoch {st['epoch']}, the checkpoint "
                             f"from epoch {epoch}; use another --run-dir")
        self.shard.load_state(st)

    def traffic(self) -> dict:
        """Collective: rows every trainer pulled from another so far, and the bytes the table's
        exchange sent between trainers (pulls, pushes and their replies, each message once)."""
        self.bytes += int(self.wire.drain().get("halo_bytes_sent", 0))
        dev = self.device if dist.get_backend() == "nccl" else torch.device("cpu")
        t = torch.tensor([self.module.rows_pulled, self.bytes], dtype=torch.int64, device=dev)
        dist.all_reduce(t)
        return {"embedding_rows_pulled": int(t[0]), "embedding_bytes": int(t[1])}

    def close(self) -> None:
        self.client.close()
        self.server.close()
