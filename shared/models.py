"""GNN layers and models over sampled blocks, in plain torch (no DGL/PyG import).

A model receives the blocks of a :class:`~shared.protocol.FeatureBatch` (see the node-id
conventions in :mod:`shared.protocol`) and applies the OUTERMOST hop first: layer ``i`` of an
``H``-layer model consumes hop ``H - i``, mapping the representations of ``nodes[:hop_nodes[H-i]]``
to ``nodes[:hop_nodes[H-i-1]]``; the last layer outputs the seeds' logits.
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn
import torch.nn.functional as F

from argosy.shared.aggregate import csr_ptr, edge_softmax, segment_sum
from argosy.shared.config import SAGE_AGGREGATORS
from argosy.shared.rgcn import RELATIONAL, RGATConv, RGCNConv

__all__ = ["Blocks", "SAGEConv", "GCNConv", "GATConv", "RGCNConv", "GNN", "EmbeddedInput", "EdgeIndexModel", "load_factory", "build_model",
           "make_optimizer"]


@dataclass
class Blocks:
    """Tensors of one batch's blocks on the compute device.

    Shapes:
        hop_nodes: python list[H + 1]; degrees: float[N] full-graph degrees;
        edge_src, edge_dst: int32|int64[E] local ids; hop_edges: python list[H + 1];
        dst_ptr: python list[H] of int[hop_nodes[h-1] + 1], hop ``h``'s edges of each destination
        (offsets within the hop; edges grouped by destination), or None: the layers build it;
        edge_weight: float[E] aligned with edge_src, and weighted_degrees: float[N] full-graph sums
        of each node's edge weights -- both None for an unweighted batch (GCN and SAGE use them,
        GAT ignores them); edge_type: int64[E] the relation of each edge (a typed store's; R-GCN
        uses it, the others ignore it) or None; node_type: int64[N] each node's type (a typed
        store's, for a PyG heterogeneous model) or None.
    """

    hop_nodes: list[int]
    hop_edges: list[int]
    edge_src: Tensor
    edge_dst: Tensor
    degrees: Tensor
    dst_ptr: list[Tensor] | None = None
    edge_weight: Tensor | None = None
    weighted_degrees: Tensor | None = None
    edge_type: Tensor | None = None
    node_type: Tensor | None = None

    @property
    def num_hops(self) -> int:
        return len(self.hop_nodes) - 1

    def hop(self, h: int) -> tuple[Tensor, Tensor, int, int]:
        """``(edge_src, edge_dst, num_src, num_dst)`` of hop ``h`` (1-based, innermost = 1)."""
        e0, e1 = self.hop_edges[h - 1], self.hop_edges[h]
        return self.edge_src[e0:e1], self.edge_dst[e0:e1], self.hop_nodes[h], self.hop_nodes[h - 1]

    def hop_ptr(self, h: int) -> Tensor | None:
        """Hop ``h``'s CSR offsets over destinations, when the batch carries them."""
        return None if self.dst_ptr is None else self.dst_ptr[h - 1]

    def hop_weight(self, h: int) -> Tensor | None:
        """Hop ``h``'s edge weights (aligned with :meth:`hop`'s edges), when the batch is weighted."""
        return None if self.edge_weight is None else self.edge_weight[self.hop_edges[h - 1]:self.hop_edges[h]]

    def hop_type(self, h: int) -> Tensor | None:
        """Hop ``h``'s edge relations (aligned with :meth:`hop`'s edges), when the batch is typed."""
        return None if self.edge_type is None else self.edge_type[self.hop_edges[h - 1]:self.hop_edges[h]]

    @classmethod
    def full_graph(cls, indptr, indices, num_layers: int, device: str | torch.device = "cpu",
                   edge_weight=None, edge_type=None) -> "Blocks":
        """Every vertex, every edge, at every hop: a block model on a whole (small) graph in one call.

        Shapes: indptr int[n + 1], indices int[E] (CSR, neighbours of row v are in-edges of v);
        edge_weight float[E] aligned with indices, or None; edge_type int[E] likewise, or None.
        """
        indptr = torch.as_tensor(indptr, dtype=torch.int64)
        n, E = indptr.shape[0] - 1, int(indptr[-1])
        dst = torch.repeat_interleave(torch.arange(n), indptr.diff())
        src = torch.as_tensor(indices, dtype=torch.int64)
        ew = wdeg = None
        if edge_weight is not None:
            w = torch.as_tensor(edge_weight, dtype=torch.float32)
            ew = w.repeat(num_layers).to(device)
            wdeg = torch.zeros(n, dtype=torch.float64).index_add_(0, dst, w.double()).float().to(device)
        return cls(hop_nodes=[n] * (num_layers + 1), hop_edges=[h * E for h in range(num_layers + 1)],
                   edge_src=src.repeat(num_layers).to(device), edge_dst=dst.repeat(num_layers).to(device),
                   degrees=indptr.diff().to(device, torch.float32), dst_ptr=[indptr.to(device)] * num_layers,
                   edge_weight=ew, weighted_degrees=wdeg,
                   edge_type=None if edge_type is None else
                   torch.as_tensor(edge_type, dtype=torch.int64).repeat(num_layers).to(device))

    def edge_index(self, with_types: bool = False):
        """The sampled subgraph as one PyG ``edge_index`` (row 0 source, row 1 target, local ids).

        Hop ``h`` keeps only the edges into the vertices it discovered (``nodes[hop_nodes[h-2]:hop_nodes[h-1]]``),
        as PyG's ``NeighborLoader`` does: each vertex's in-edges come from the hop that sampled it, once.
        Shapes: -> int64[2, E'] (``with_types``: and the kept edges' relations int64[E']).
        """
        src, dst, et = [], [], []
        for h in range(1, self.num_hops + 1):
            s, d, _, _ = self.hop(h)
            t = self.hop_type(h) if with_types else None
            if h > 1:
                keep = d >= self.hop_nodes[h - 2]
                s, d = s[keep], d[keep]
                t = None if t is None else t[keep]
            src.append(s)
            dst.append(d)
            et.append(t)
        ei = torch.stack([torch.cat(src), torch.cat(dst)])
        if not with_types:
            return ei
        if self.edge_type is None:
            raise ValueError("a heterogeneous model needs each edge's relation: train it on a typed store")
        return ei, torch.cat(et)


def keep_threshold(p: float) -> int:
    """Dropout keeps an entry whose 16-bit uniform is at least this (``round(p * 65536)``, at most
    65535): the one rule of every CPU mask (:func:`dropout_scale`, the full-graph bit masks)."""
    return min(65535, round(p * 65536))


def dropout_scale(rng: np.random.Generator, shape: tuple[int, ...], p: float) -> np.ndarray:
    """Inverted-dropout scale mask: ``float32[shape]`` of ``0`` (probability ``p``, quantised to
    1/65536) and ``1 / (1 - p)``. 16-bit uniforms sliced from raw PCG64 output, compared, and
    scaled in one numpy pass: ~1.5 ms per 4.8M entries on one core, where torch 2.13's CPU
    ``rand_like`` alone took 60 ms (and ``bernoulli_`` more; docs/compute.md)."""
    n = int(np.prod(shape))
    u = rng.bit_generator.random_raw((n + 3) // 4).view(np.uint16)[:n].reshape(shape)
    keep = u >= np.uint16(keep_threshold(p))
    return np.multiply(keep, np.float32(1.0 / (1.0 - p)), dtype=np.float32)


DROPOUT_CHUNK = 1 << 18
"""Entries per chunk of :func:`_dropout_into` (a multiple of 4: one PCG64 draw is 4 uint16s)."""


def _dropout_into(rng: np.random.Generator, x: np.ndarray, p: float, out: np.ndarray) -> None:
    """``out = x * dropout_scale(rng, x.shape, p)`` (bit for bit, the same stream), flat, by chunks.

    Why: a train step's input dropout is as wide as the batch's features (1-6 MB on Cora batches),
    and building the float mask whole took four such buffers of a new size every step (raw bits,
    the comparison, the mask, the product); chunk-sized temporaries (the same size every step,
    0.8 MB) leave only the product (4.8M entries: 7.4 -> 6.9 ms).  Whether that churn was what grew
    the trainer's kept heap is not shown (``bench/results/soak_rss_issue44.md``)."""
    thr = np.uint16(keep_threshold(p))
    c = np.float32(1.0 / (1.0 - p))
    n = x.shape[0]
    keep = np.empty(min(n, DROPOUT_CHUNK), np.bool_)
    for s in range(0, n, DROPOUT_CHUNK):
        m = min(DROPOUT_CHUNK, n - s)
        u = rng.bit_generator.random_raw((m + 3) // 4).view(np.uint16)[:m]
        np.greater_equal(u, thr, out=keep[:m])
        np.multiply(x[s:s + m], keep[:m], out=out[s:s + m])
        out[s:s + m] *= c


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """``F.dropout``'s function. On CPU the mask is :func:`dropout_scale`'s, from a PCG64 stream
    seeded by one draw of torch's generator (so ``torch.manual_seed`` still makes runs repeat);
    elsewhere (CUDA) torch's fused kernel.  An input with no gradient (a batch's features) is masked
    in one pass into its output (:func:`_dropout_into`); a hidden layer's keeps the mask for backward."""
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return torch.zeros_like(x)
    if x.device.type != "cpu":
        return F.dropout(x, p, True)
    seed = int(torch.randint(0, 2**62, (), dtype=torch.int64))
    rng = np.random.default_rng(seed)
    if not x.requires_grad and x.dtype == torch.float32 and x.is_contiguous():
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
        _dropout_into(rng, x.detach().numpy().reshape(-1), p, out.numpy().reshape(-1))
        return out
    scale = torch.from_numpy(dropout_scale(rng, tuple(x.shape), p))
    return x * (scale if x.dtype == torch.float32 else scale.to(x.dtype))


def _block_csr(src: Tensor, dst: Tensor, num_dst: int, ptr: Tensor | None, ew: Tensor | None):
    """``(ptr, src, ew)`` of a block: edges grouped by destination (weights follow their edges)."""
    if ptr is not None:
        return ptr, src, ew
    if ew is not None and dst.numel() and not bool((dst[1:] >= dst[:-1]).all()):
        order = torch.argsort(dst, stable=True)
        src, dst, ew = src[order], dst[order], ew[order]
    ptr, src, _ = csr_ptr(src, dst, num_dst)
    return ptr, src, ew


def _wsum(h: Tensor, ptr: Tensor, src: Tensor, num_dst: int, ew: Tensor) -> Tensor:
    """``out[v] = sum_e ew[e] h[src[e]]`` through the weighted CSR kernel (one head)."""
    return segment_sum(h.unsqueeze(1), ptr, src, num_dst, ew.to(h.dtype).unsqueeze(1)).squeeze(1)


class SAGEConv(nn.Module):
    """GraphSAGE layer.

    ``aggr="mean"`` (GraphSAGE-mean, PyG's default): ``W_self h_v + W_neigh mean_{u in N(v)} h_u``.
    ``aggr="gcn"`` (GraphSAGE-GCN, DGL's example default): ``W (h_v + sum_{u in N(v)} h_u) / (|N(v)| + 1) + b``,
    the mean over the neighbourhood *with* the vertex itself and one weight matrix; on small
    citation graphs it is the stronger of the two (DGL's figures on Cora: mean ~80.4, gcn ~83.4).

    With edge weights ``w`` the mean is the weighted mean ``sum_u w_uv h_u / sum_u w_uv`` over the
    sampled neighbours (``gcn``: ``(h_v + sum_u w_uv h_u) / (1 + sum_u w_uv)``, the vertex itself
    weighing 1); unit weights give the unweighted layer.  DGL's ``SAGEConv(edge_weight=)`` divides
    by the neighbour count instead; PyG's ``SAGEConv`` takes no weights.

    Shapes: x (num_src, F_in); src, dst int[E]; ptr int[num_dst + 1] (see :class:`Blocks`) -> (num_dst, F_out).
    """

    def __init__(self, in_dim: int, out_dim: int, aggr: str = "mean"):
        super().__init__()
        if aggr not in SAGE_AGGREGATORS:
            raise ValueError(f"SAGE aggregator must be one of {', '.join(SAGE_AGGREGATORS)} (got {aggr!r})")
        self.aggr = aggr
        if aggr == "mean":
            self.lin_self = nn.Linear(in_dim, out_dim)
            self.lin_neigh = nn.Linear(in_dim, out_dim, bias=False)
        else:                                   # DGL's SAGEConv("gcn") parameters and init
            self.lin_neigh = nn.Linear(in_dim, out_dim, bias=False)
            self.bias = nn.Parameter(torch.zeros(out_dim))
            nn.init.xavier_uniform_(self.lin_neigh.weight, gain=nn.init.calculate_gain("relu"))

    def forward(self, x: Tensor, src: Tensor, dst: Tensor, num_dst: int, degrees: Tensor,
                ptr: Tensor | None = None, ew: Tensor | None = None, wdeg: Tensor | None = None) -> Tensor:
        ptr, src, ew = _block_csr(src, dst, num_dst, ptr, ew)
        # The mean is linear, so project first when that shrinks the rows read per edge
        # (F_out instead of F_in): same result, less memory traffic for wide inputs.
        project_first = self.lin_neigh.out_features < self.lin_neigh.in_features
        h = self.lin_neigh(x) if project_first else x
        if ew is not None:                      # weighted mean: the weights' sum replaces the count
            agg = _wsum(h, ptr, src, num_dst, ew)
            cnt = torch.zeros(num_dst, dtype=x.dtype, device=x.device).index_add_(
                0, torch.repeat_interleave(torch.arange(num_dst, device=x.device), ptr.diff(), output_size=src.shape[0]),
                ew.to(x.dtype))
            if self.aggr == "gcn":
                agg = (agg + h[:num_dst]) / (cnt + 1)[:, None]
                return (agg if project_first else self.lin_neigh(agg)) + self.bias
            agg = agg / torch.where(cnt > 0, cnt, torch.ones_like(cnt))[:, None]
            return self.lin_self(x[:num_dst]) + (agg if project_first else self.lin_neigh(agg))
        cnt = ptr.diff().to(x.dtype)
        agg = segment_sum(h, ptr, src, num_dst)
        if self.aggr == "gcn":
            agg = (agg + h[:num_dst]) / (cnt + 1)[:, None]
            return (agg if project_first else self.lin_neigh(agg)) + self.bias
        agg = agg / cnt.clamp_(min=1)[:, None]
        return self.lin_self(x[:num_dst]) + (agg if project_first else self.lin_neigh(agg))

    def __repr__(self) -> str:
        return f"SAGEConv({self.lin_neigh.in_features}, {self.lin_neigh.out_features}, aggr={self.aggr})"


class GCNConv(nn.Module):
    """Kipf & Welling GCN layer with symmetric normalisation and self loops.

    ``h_v' = W (h_v/(d_v+1) + (d_v/s_v) * sum_{u sampled} h_u / sqrt((d_u+1)(d_v+1)))`` where ``d``
    are full-graph degrees and ``s_v`` the number of sampled neighbours of ``v``; with every
    neighbour sampled this is exactly ``D^-1/2 (A+I) D^-1/2 H W`` on the seeds.

    With edge weights (``ew``, ``wdeg``): PyG's ``gcn_norm`` with ``edge_weight`` and self loops of
    weight 1, ``h_v' = W (h_v/dw_v + (d_v/s_v) * sum_{u sampled} w_uv h_u / sqrt(dw_u dw_v))`` with
    ``dw = 1 + `` the full-graph sum of a vertex's edge weights.

    Shapes: x (num_src, F_in); src, dst int[E]; ptr int[num_dst + 1] (see :class:`Blocks`) -> (num_dst, F_out).
    """

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.lin = nn.Linear(in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_dim))
        # Glorot, as Kipf & Welling (and PyG): torch's default is 2.5x smaller on wide bag-of-words
        # inputs and learns visibly slower (Citeseer).
        nn.init.xavier_uniform_(self.lin.weight)

    def forward(self, x: Tensor, src: Tensor, dst: Tensor, num_dst: int, degrees: Tensor,
                ptr: Tensor | None = None, ew: Tensor | None = None, wdeg: Tensor | None = None) -> Tensor:
        ptr, src, ew = _block_csr(src, dst, num_dst, ptr, ew)
        # The layer is linear before the bias: project first when that narrows the rows aggregated,
        # else aggregate first and project only the destinations (DGL's GraphConv does the same).
        project_first = self.lin.out_features < self.lin.in_features
        if project_first:
            x = self.lin(x)
        deg = degrees[:x.shape[0]].to(x.dtype)
        d1 = deg + 1.0 if ew is None else wdeg[:x.shape[0]].to(x.dtype) + 1.0
        sampled = ptr.diff().to(x.dtype)
        scale = torch.where(sampled > 0, deg[:num_dst] / sampled.clamp(min=1), torch.zeros_like(sampled))
        # the edge weight scale_v / sqrt(d1_u d1_v) splits into a source and a destination factor
        c = torch.rsqrt(d1)
        agg = segment_sum(x * c[:, None], ptr, src, num_dst) if ew is None else _wsum(x * c[:, None], ptr, src, num_dst, ew)
        out = agg * (scale * c[:num_dst])[:, None]
        out = out + x[:num_dst] / d1[:num_dst, None]
        return (out if project_first else self.lin(out)) + self.bias

    def __repr__(self) -> str:
        return f"GCNConv({self.lin.in_features}, {self.lin.out_features})"


class GATConv(nn.Module):
    """Graph attention layer (Velickovic et al.) with a self loop on every destination vertex.

    ``h_v' = || _k sum_{u in N(v) + v} a^k_vu W^k h_u``, ``a^k_vu = softmax_u(LeakyReLU(s^k.W^k h_u + t^k.W^k h_v))``;
    heads are concatenated (``concat=True``) or averaged (the output layer).  The softmax runs
    over the sampled neighbours; with every neighbour sampled it is the full-graph layer.

    Shapes: x (num_src, F_in); src, dst int[E]; ptr int[num_dst + 1] (see :class:`Blocks`)
    -> (num_dst, heads * F_out) if concat else (num_dst, F_out).
    """

    def __init__(self, in_dim: int, out_dim: int, heads: int = 1, concat: bool = True, attn_dropout: float = 0.0):
        super().__init__()
        self.heads, self.out_dim, self.concat, self.attn_dropout = heads, out_dim, concat, attn_dropout
        self.lin = nn.Linear(in_dim, heads * out_dim, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_dim))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_dim))
        self.bias = nn.Parameter(torch.zeros(heads * out_dim if concat else out_dim))
        nn.init.xavier_uniform_(self.lin.weight)
        nn.init.xavier_uniform_(self.att_src)
        nn.init.xavier_uniform_(self.att_dst)

    def forward(self, x: Tensor, src: Tensor, dst: Tensor, num_dst: int, degrees: Tensor,
                ptr: Tensor | None = None, ew: Tensor | None = None, wdeg: Tensor | None = None) -> Tensor:
        # edge weights are ignored (attention learns its own; the trainer logs this once)
        if ptr is None:
            ptr, src, dst = csr_ptr(src, dst, num_dst)
        H, C = self.heads, self.out_dim
        h = self.lin(x).view(-1, H, C)
        a_src = (h * self.att_src).sum(-1)
        a_dst = (h[:num_dst] * self.att_dst).sum(-1)
        # scores of the sampled edges (E, H) and of each destination's self loop (destinations are
        # a prefix of the sources); one (E, H) row per edge, never an (E, H, C) one
        s = F.leaky_relu(a_src[src] + a_dst[dst], 0.2)
        s_self = F.leaky_relu(a_src[:num_dst] + a_dst, 0.2)
        alpha, alpha_self = edge_softmax(s, s_self, ptr)
        alpha = dropout(alpha, self.attn_dropout, self.training)
        alpha_self = dropout(alpha_self, self.attn_dropout, self.training)
        out = segment_sum(h, ptr, src, num_dst, alpha) + alpha_self[..., None] * h[:num_dst]
        out = out.reshape(num_dst, H * C) if self.concat else out.mean(1)
        return out + self.bias

    def __repr__(self) -> str:
        return f"GATConv({self.lin.in_features}, {self.out_dim}, heads={self.heads}, concat={self.concat})"


class GNN(nn.Module):
    """A stack of ``num_layers`` GCN, SAGE, GAT or R-GCN layers with an activation and dropout between them.

    Args:
        model: ``"sage"``, ``"gcn"``, ``"gat"``, ``"rgcn"`` or ``"rgat"`` (the last two need ``num_relations``, ``num_bases``).
        hidden: hidden width (per head for GAT).  heads: GAT attention heads of the hidden layers
            (the output layer has one head).  dropout: on every layer's input (and GAT's attention).
        aggregator: SAGE's neighbour aggregator, ``"mean"`` or ``"gcn"`` (see :class:`SAGEConv`).
    """

    def __init__(self, model: str, in_dim: int, hidden: int, out_dim: int, num_layers: int, dropout: float = 0.5,
                 heads: int = 8, aggregator: str = "mean", num_relations: int = 0, num_bases: int = 0,
                 featureless: bool = False):
        super().__init__()
        if model not in ("sage", "gcn", "gat") + RELATIONAL:
            raise ValueError(f"built-in models are sage, gcn, gat, rgcn and rgat (got {model!r})")
        self.kind = model
        if model == "rgcn":
            dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
            self.layers = nn.ModuleList(RGCNConv(a, b, num_relations, num_bases, featureless=featureless and i == 0)
                                        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])))
        elif model == "rgat":
            dims = [in_dim] + [hidden * heads] * (num_layers - 1)
            self.layers = nn.ModuleList(
                [RGATConv(a, hidden, num_relations, num_bases, heads, concat=True, attn_dropout=dropout) for a in dims[:-1]]
                + [RGATConv(dims[-1], out_dim, num_relations, num_bases, 1, concat=False, attn_dropout=dropout)])
        elif model == "gat":
            dims = [in_dim] + [hidden * heads] * (num_layers - 1)
            self.layers = nn.ModuleList(
                [GATConv(a, hidden, heads, concat=True, attn_dropout=dropout) for a in dims[:-1]]
                + [GATConv(dims[-1], out_dim, 1, concat=False, attn_dropout=dropout)])
        else:
            dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
            self.layers = nn.ModuleList(SAGEConv(a, b, aggregator) if model == "sage" else GCNConv(a, b)
                                        for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = dropout

    def layer_forward(self, i: int, h: Tensor, src: Tensor, dst: Tensor, num_dst: int, degrees: Tensor,
                      ptr: Tensor | None = None, ew: Tensor | None = None, wdeg: Tensor | None = None,
                      et: Tensor | None = None) -> Tensor:
        """Layer ``i`` with its input dropout and (but for the last layer) its activation.

        Mini-batch training, full-graph modes and layer-wise inference (``argosy predict``) all go
        through here, so they compute the same function.  ``ptr``: the block's CSR offsets over
        destinations, when known (see :class:`Blocks`); ``ew``/``wdeg``: the block's edge weights
        and the sources' weighted degrees (a weighted batch); ``et``: the edges' relations (R-GCN).
        """
        h = dropout(h, self.dropout, self.training)
        if self.kind in RELATIONAL:
            h = self.layers[i](h, src, dst, num_dst, degrees, ptr, ew, wdeg, et)
        else:
            h = self.layers[i](h, src, dst, num_dst, degrees, ptr, ew, wdeg)
        if i < len(self.layers) - 1:
            h = F.elu(h) if self.kind in ("gat", "rgat") else F.relu(h)
        return h

    def forward(self, x: Tensor, blocks: Blocks) -> Tensor:
        """Logits of the seeds.  Shapes: x (N, F_in) aligned with ``nodes`` -> (B, out_dim)."""
        H = blocks.num_hops
        if H != len(self.layers):
            raise ValueError(f"batch has {H} hops but the model has {len(self.layers)} layers")
        h = x[:blocks.hop_nodes[H]]
        for i in range(len(self.layers)):
            src, dst, num_src, num_dst = blocks.hop(H - i)
            h = self.layer_forward(i, h, src, dst, num_dst, blocks.degrees, blocks.hop_ptr(H - i),
                                   blocks.hop_weight(H - i), blocks.weighted_degrees, blocks.hop_type(H - i))
        return h


class EmbeddedInput(nn.Module):
    """A node model whose input rows are the store's features followed by a learned row per vertex
    (:class:`~argosy.shared.scorers.NodeEmbedding`, looked up by global id): node classification on a
    featureless (or partly featureless) graph, e.g. an RDF graph whose entities have no features.

    ``forward(x, blocks, ids)``: x float[N, F] (F may be 0), ids int64[N] global ids -> the wrapped
    model on float[N, F + dim].
    """

    def __init__(self, model: nn.Module, embedding: nn.Module):
        super().__init__()
        self.model = model
        self.embedding = embedding

    def forward(self, x: Tensor, blocks: "Blocks", ids: Tensor) -> Tensor:
        e = self.embedding(ids[:x.shape[0]])
        return self.model(e if x.shape[1] == 0 else torch.cat([x, e.to(x.dtype)], 1), blocks)


class EdgeIndexModel(nn.Module):
    """Runs a PyG-style model, ``forward(x, edge_index)``, on a batch's sampled subgraph.

    The subgraph is :meth:`Blocks.edge_index` over ``nodes[:hop_nodes[H]]`` (seeds first), as
    PyG's mini-batch convention has it; the first ``batch_size`` output rows are the seeds' logits.
    So ``torch_geometric.nn.models.GraphSAGE`` or ``GAT`` run unmodified.

    ``input_dropout`` drops input features while training, so ``--dropout`` means what it means for
    the built-in models (every layer's input, the first included): PyG's models apply their
    ``dropout=`` between layers only.  On Cora it is worth ~1.5 points to PyG's GraphSAGE.
    """

    def __init__(self, inner: nn.Module, input_dropout: float = 0.0, metadata: tuple | None = None, in_dim: int = 0):
        super().__init__()
        self.inner = inner
        self.input_dropout = input_dropout
        self.metadata = metadata
        """``(node_types, relations)`` of a PyG heterogeneous model (``to_hetero``, ``HeteroConv``):
        it runs as ``forward(x_dict, edge_index_dict)`` on the batch split by type; None: homogeneous."""
        if metadata is not None:
            self._init_lazy(in_dim)

    def forward(self, x: Tensor, blocks: Blocks) -> Tensor:
        x = dropout(x[:blocks.hop_nodes[blocks.num_hops]], self.input_dropout, self.training)
        if self.metadata is not None:
            return self._hetero(x, blocks)
        out = self.inner(x, blocks.edge_index())
        return out[:blocks.hop_nodes[0]]

    def _hetero(self, x: Tensor, blocks: Blocks) -> Tensor:
        """The subgraph as PyG's ``HeteroData`` mini-batch: per type its rows (in batch order, so
        seeds stay first), per relation ``(src_type, relation, dst_type)`` its edges in type-local
        ids; each seed's logits come from its own type's output rows."""
        node_types, relations = self.metadata
        if blocks.node_type is None:
            raise ValueError("a heterogeneous model needs each node's type: train it on a typed store")
        ei, et = blocks.edge_index(with_types=True)
        nt = blocks.node_type[:x.shape[0]]
        local = torch.empty_like(nt)
        x_dict = {}
        for t, name in enumerate(node_types):
            rows = torch.nonzero(nt == t).flatten()
            local[rows] = torch.arange(rows.shape[0], device=rows.device)
            x_dict[name] = x[rows]
        ei_dict = {}
        for r, rel in enumerate(relations):
            m = et == r
            ei_dict[tuple(rel)] = torch.stack([local[ei[0, m]], local[ei[1, m]]])
        out = self.inner(x_dict, ei_dict)
        B = blocks.hop_nodes[0]
        seed_t, seed_l = nt[:B], local[:B]
        width = next(v.shape[1] for v in out.values())
        logits = torch.zeros(B, width, dtype=next(iter(out.values())).dtype, device=x.device)
        for t, name in enumerate(node_types):
            m = seed_t == t
            if bool(m.any()):
                if name not in out:
                    raise ValueError(f"the heterogeneous model gives no output for node type {name!r}")
                logits[m] = out[name][seed_l[m]].to(logits.dtype)
        return logits

    def _init_lazy(self, in_dim: int) -> None:
        """Run the model once on a two-vertex-per-type graph so that PyG's lazy layers
        (``in_channels=-1``, what ``to_hetero`` models use) have their parameters before the
        optimizer is built (PyG's documented step)."""
        node_types, relations = self.metadata
        x_dict = {t: torch.zeros(2, in_dim) for t in node_types}
        ei_dict = {tuple(r): torch.tensor([[0], [1]]) for r in relations}
        with torch.no_grad():
            self.inner(x_dict, ei_dict)


def load_factory(spec: str):
    """Resolve ``"package.module:FACTORY"`` to the callable (a clear error if it cannot be)."""
    mod_name, _, attr = spec.partition(":")
    if not mod_name or not attr:
        raise ValueError(f"--model must be sage, gcn, gat or MODULE:FACTORY (got {spec!r})")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise ValueError(f"--model {spec}: cannot import {mod_name} ({e}); is it installed "
                         f"(e.g. `pip install 'argosy[pyg]'` for torch_geometric)?") from None
    fn = mod
    for part in attr.split("."):
        if not hasattr(fn, part):
            raise ValueError(f"--model {spec}: {mod_name} has no attribute {attr!r}")
        fn = getattr(fn, part)
    if not callable(fn):
        raise ValueError(f"--model {spec}: {attr} is not callable")
    return fn


def attr_call(model: str, kwargs: dict) -> str:
    return f"{model.partition(':')[2]}({', '.join(f'{k}={v}' for k, v in kwargs.items())})"


def build_model(model: str, in_dim: int, hidden: int, out_dim: int, num_layers: int, dropout: float = 0.5,
                heads: int = 8, aggregator: str = "mean", num_relations: int = 0, num_bases: int = 0,
                featureless: bool = False, metadata: tuple | None = None) -> nn.Module:
    """A built-in :class:`GNN`, or ``MODULE:FACTORY`` called as
    ``FACTORY(in_channels=, hidden_channels=, num_layers=, out_channels=)`` (plus ``dropout=`` when
    the factory's signature names it, as PyG's models do) and wrapped in :class:`EdgeIndexModel`,
    which applies ``dropout`` to the input features.  On a typed store (``metadata``: its node types
    and ``(src, relation, dst)`` relations) a factory whose signature names ``metadata`` gets it, as
    PyG's ``to_hetero(model, metadata)`` wants, and its model runs on the batch split by type."""
    if ":" not in model:
        return GNN(model, in_dim, hidden, out_dim, num_layers, dropout, heads=heads, aggregator=aggregator,
                   num_relations=num_relations, num_bases=num_bases, featureless=featureless)
    fn = load_factory(model)
    kwargs = dict(in_channels=in_dim, hidden_channels=hidden, num_layers=num_layers, out_channels=out_dim)
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}
    if "dropout" in params:
        kwargs["dropout"] = dropout
    hetero = metadata is not None and "metadata" in params
    if hetero:
        kwargs["metadata"] = (list(metadata[0]), [tuple(r) for r in metadata[1]])
    try:
        inner = fn(**kwargs)
    except TypeError as e:     # a signature mismatch: deterministic, so the service exits as cannot-start
        raise ValueError(f"--model {model}: {attr_call(model, kwargs)} failed: {e}") from e
    if not isinstance(inner, nn.Module):
        raise ValueError(f"--model {model}: the factory returned {type(inner).__name__}, not a torch.nn.Module")
    if not hetero:
        return EdgeIndexModel(inner, input_dropout=dropout)
    try:
        return EdgeIndexModel(inner, input_dropout=dropout, metadata=kwargs["metadata"], in_dim=in_dim)
    except Exception as e:     # noqa: BLE001 - the user's module failed on a typed toy graph
        raise ValueError(f"--model {model}: the heterogeneous model failed on a two-vertex-per-type graph "
                         f"(forward(x_dict, edge_index_dict)): {type(e).__name__}: {e}") from e


def make_optimizer(model: nn.Module, cfg) -> torch.optim.Adam:
    """Adam of every training mode: GCN decays only its first layer (Kipf & Welling); SAGE, GAT and
    user models decay every parameter (PyG's examples).  ``cfg``: a ``TrainerConfig``."""
    if cfg.model == "gcn":
        layers = list(model.layers)
        groups = [{"params": list(layers[0].parameters()), "weight_decay": cfg.weight_decay}]
        rest = [p for layer in layers[1:] for p in layer.parameters()]
        if rest:
            groups.append({"params": rest, "weight_decay": 0.0})
    else:
        groups = [{"params": list(model.parameters()), "weight_decay": cfg.weight_decay}]
    return torch.optim.Adam(groups, lr=cfg.lr)
