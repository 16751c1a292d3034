"""GNN layers and models over sampled blocks, in plain torch (no DGL/PyG import).

A model receives the blocks of a :class:`~shared.protocol.FeatureBatch` (see the node-id
conventions in :mod:`shared.protocol`) and applies the OUTERMOST hop first: layer ``i`` of an
``H``-layer model consumes hop ``H - i``, mapping the representations of ``nodes[:hop_nodes[H-i]]``
to ``nodes[:hop_nodes[H-i-1]]``; the last layer outputs the seeds' logits.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
import torch.nn.functional as F

__all__ = ["Blocks", "SAGEConv", "GCNConv", "GNN", "full_graph_aggr", "full_graph_conv"]


@dataclass
class Blocks:
    """Tensors of one batch's blocks on the compute device.

    Shapes:
        hop_nodes: python list[H + 1]; degrees: float[N] full-graph degrees;
        edge_src, edge_dst: int64[E] local ids; hop_edges: python list[H + 1].
    """

    hop_nodes: list[int]
    hop_edges: list[int]
    edge_src: Tensor
    edge_dst: Tensor
    degrees: Tensor

    @property
    def num_hops(self) -> int:
        return len(self.hop_nodes) - 1

    def hop(self, h: int) -> tuple[Tensor, Tensor, int, int]:
        """``(edge_src, edge_dst, num_src, num_dst)`` of hop ``h`` (1-based, innermost = 1)."""
        e0, e1 = self.hop_edges[h - 1], self.hop_edges[h]
        return self.edge_src[e0:e1], self.edge_dst[e0:e1], self.hop_nodes[h], self.hop_nodes[h - 1]


class SAGEConv(nn.Module):
    """GraphSAGE layer, mean aggregator: ``W_self h_v + W_neigh mean_{u in N(v)} h_u``.

    Shapes: x (num_src, F_in) -> (num_dst, F_out).
    """

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.lin_self = nn.Linear(in_dim, out_dim)
        self.lin_neigh = nn.Linear(in_dim, out_dim, bias=False)

    def forward(self, x: Tensor, src: Tensor, dst: Tensor, num_dst: int, degrees: Tensor) -> Tensor:
        cnt = torch.bincount(dst, minlength=num_dst).clamp_(min=1).to(x.dtype)
        # The mean is linear, so project first when that shrinks the rows gathered per edge
        # (E x F_out instead of E x F_in): same result, far less memory traffic for wide inputs.
        project_first = self.lin_neigh.out_features < self.lin_neigh.in_features
        h = self.lin_neigh(x) if project_first else x
        agg = torch.zeros(num_dst, h.shape[1], dtype=h.dtype, device=h.device).index_add_(0, dst, h[src]) / cnt[:, None]
        return self.lin_self(x[:num_dst]) + (agg if project_first else self.lin_neigh(agg))

    def __repr__(self) -> str:
        return f"SAGEConv({self.lin_self.in_features}, {self.lin_self.out_features}, aggr=mean)"


class GCNConv(nn.Module):
    """Kipf & Welling GCN layer with symmetric normalisation and self loops.

    ``h_v' = W (h_v/(d_v+1) + (d_v/s_v) * sum_{u sampled} h_u / sqrt((d_u+1)(d_v+1)))`` where ``d``
    are full-graph degrees and ``s_v`` the number of sampled neighbours of ``v``; with every
    neighbour sampled this is exactly ``D^-1/2 (A+I) D^-1/2 H W`` on the seeds.

    Shapes: x (num_src, F_in) -> (num_dst, F_out).
    """

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.lin = nn.Linear(in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_dim))

    def forward(self, x: Tensor, src: Tensor, dst: Tensor, num_dst: int, degrees: Tensor) -> Tensor:
        x = self.lin(x)
        d1 = degrees + 1.0
        sampled = torch.bincount(dst, minlength=num_dst).to(x.dtype)
        scale = torch.where(sampled > 0, degrees[:num_dst] / sampled.clamp(min=1), torch.zeros_like(sampled))
        w = scale[dst] * torch.rsqrt(d1[src] * d1[dst])
        out = torch.zeros(num_dst, x.shape[1], dtype=x.dtype, device=x.device).index_add_(0, dst, x[src] * w[:, None])
        return out + x[:num_dst] / d1[:num_dst, None] + self.bias

    def __repr__(self) -> str:
        return f"GCNConv({self.lin.in_features}, {self.lin.out_features})"


class GNN(nn.Module):
    """A stack of ``num_layers`` GCN or SAGE layers with ReLU and dropout between them.

    Args:
        model: ``"sage"`` or ``"gcn"``.
    """

    def __init__(self, model: str, in_dim: int, hidden: int, out_dim: int, num_layers: int, dropout: float = 0.5):
        super().__init__()
        conv = {"sage": SAGEConv, "gcn": GCNConv}[model]
        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        self.layers = nn.ModuleList(conv(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = dropout

    def forward(self, x: Tensor, blocks: Blocks) -> Tensor:
        """Logits of the seeds.  Shapes: x (N, F_in) aligned with ``nodes`` -> (B, out_dim)."""
        H = blocks.num_hops
        if H != len(self.layers):
            raise ValueError(f"batch has {H} hops but the model has {len(self.layers)} layers")
        h = x[:blocks.hop_nodes[H]]
        for i, layer in enumerate(self.layers):
            src, dst, num_src, num_dst = blocks.hop(H - i)
            h = F.dropout(h, self.dropout, self.training)
            h = layer(h, src, dst, num_dst, blocks.degrees)
            if i < len(self.layers) - 1:
                h = F.relu(h)
        return h


# ----------------------------------------------------------------------------- full-graph execution
# The full-graph and SAR modes run these same conv modules (same parameters, same arithmetic) over a
# whole-graph or per-part aggregation operator instead of sampled edges.  ``agg`` maps source rows to
# destination rows by the layer's normalised adjacency: GCN ``D^-1/2 (A+I) D^-1/2`` (self loops
# included), SAGE the mean over neighbours.  Only layers whose aggregation is such a fixed linear
# operator can be split into column blocks (offload) or ring rounds whose backward needs no remote
# features (SAR); attention (GAT) weights depend on both endpoints, so it is refused here.

def full_graph_aggr(layer: nn.Module) -> str:
    """The aggregation operator ``layer`` needs in the full-graph modes: ``"gcn"`` or ``"mean"``."""
    if isinstance(layer, GCNConv):
        return "gcn"
    if isinstance(layer, SAGEConv):
        return "mean"
    raise TypeError(f"{type(layer).__name__} cannot run in the full-graph modes: they support GCNConv and "
                    "SAGEConv, whose aggregation is a fixed linear operator")


def full_graph_conv(layer: nn.Module, agg, x_src: Tensor, x_dst: Tensor) -> Tensor:
    """Pre-activation output of ``layer`` on destination rows, given an aggregation operator ``agg``.

    With every neighbour present this equals ``layer(x, src, dst, num_dst, degrees)`` on those rows.
    The operator is linear, so the projection runs on whichever side has fewer columns.

    Shapes: x_src (num_src, F_in) rows ``agg`` reads; x_dst (num_dst, F_in) -> (num_dst, F_out).
    """
    if isinstance(layer, GCNConv):
        lin = layer.lin
        z = agg(lin(x_src)) if lin.out_features < lin.in_features else lin(agg(x_src))
        return z + layer.bias
    if isinstance(layer, SAGEConv):
        lin = layer.lin_neigh
        neigh = agg(lin(x_src)) if lin.out_features < lin.in_features else lin(agg(x_src))
        return layer.lin_self(x_dst) + neigh
    full_graph_aggr(layer)  # raises with the reason
    raise AssertionError("unreachable")
