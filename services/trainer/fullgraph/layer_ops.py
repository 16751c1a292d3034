"""The sampled-block conv layers run over a whole graph: their output and parameter gradients.

Why this module exists: the full-graph and SAR modes run these same conv modules (same parameters, same arithmetic) over a
whole-graph or per-part aggregation operator instead of sampled edges.  ``agg`` maps source rows to
destination rows by the layer's normalised adjacency: GCN ``D^-1/2 (A+I) D^-1/2`` (self loops
included), SAGE the mean over neighbours (``(D+I)^-1 (A+I)`` for its gcn aggregator).  Only layers whose aggregation is such a fixed linear
operator can be split into column blocks (offload) or ring rounds whose backward needs no remote
features (SAR); attention (GAT) weights depend on both endpoints, so it is refused here.  R-GCN's
aggregation is linear too: per relation r the mean over v's in-neighbours along r (``A_r``), so its
operator ``relation_mean`` has one row per (destination, relation), ``agg(x)`` is ``[m * R, F]``
(row ``v * R + r``), and the layer contracts it with the relation matrices; GCN and SAGE are R = 1.
A layer narrower than its input, and the featureless (one-hot input) layer, project first: their
per-source messages ``[k, R * O]`` go through ``agg.messages`` (the same operator with
relation-major columns, ``[k * R, O]``), so the transient is ``R * O`` wide instead of ``R * F``.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from argosy.shared.models import GCNConv, SAGEConv
from argosy.shared.rgcn import RGCNConv

__all__ = ["full_graph_aggr", "full_graph_conv", "full_graph_param_grads"]


def full_graph_aggr(layer: nn.Module) -> str:
    """The aggregation operator ``layer`` needs in the full-graph modes: ``"gcn"``, ``"mean"``,
    ``"mean_self"`` (SAGE's ``gcn`` aggregator: the mean over the neighbours and the vertex) or
    ``"relation_mean"`` (R-GCN: the mean per destination and relation)."""
    if isinstance(layer, GCNConv):
        return "gcn"
    if isinstance(layer, SAGEConv):
        return "mean" if layer.aggr == "mean" else "mean_self"
    if isinstance(layer, RGCNConv):
        return "relation_mean"
    raise TypeError(f"{type(layer).__name__} cannot run in the full-graph modes: they support GCNConv, "
                    "SAGEConv and RGCNConv, whose aggregation is a fixed linear operator")


def full_graph_conv(layer: nn.Module, agg, x_src: Tensor, x_dst: Tensor) -> Tensor:
    """Pre-activation output of ``layer`` on destination rows, given an aggregation operator ``agg``.

    With every neighbour present this equals ``layer(x, src, dst, num_dst, degrees)`` on those rows.
    The operator is linear, so the projection runs on whichever side has fewer columns.

    Shapes: x_src (num_src, F_in) rows ``agg`` reads; x_dst (num_dst, F_in) -> (num_dst, F_out); R-GCN:
    ``agg(x_src)`` is ``(num_dst * R, F_in)`` and ``agg.messages(y)`` maps ``y (num_src, R * F)`` to ``(num_dst, F)``.
    """
    if isinstance(layer, RGCNConv):
        R, m = layer.num_relations, x_dst.shape[0]
        if layer.featureless:                        # x = [V_1[u] .. V_B[u], W_0[u]]: project, then aggregate
            B, O = layer.num_bases, layer.out_dim
            rows = x_src[:, :B * O].reshape(x_src.shape[0], B, O)
            msg = rows if layer.comp is None else torch.einsum("kbo,rb->kro", rows, layer.comp.to(rows.dtype))
            return agg.messages(msg.reshape(x_src.shape[0], R * O)) + x_dst[:, B * O:] + layer.bias
        W = layer.weights().to(x_src.dtype)
        if layer.out_dim < x_src.shape[1]:           # project per relation first: R * F_out columns aggregated
            msg = torch.einsum("ki,rio->kro", x_src, W).reshape(x_src.shape[0], R * layer.out_dim)
            return layer.root(x_dst) + agg.messages(msg)
        means = agg(x_src).view(m, R, x_src.shape[1])  # the mini-batch layer's per-(destination, relation) means
        return layer.root(x_dst) + torch.einsum("vri,rio->vo", means, W)
    if isinstance(layer, GCNConv):
        lin = layer.lin
        z = agg(lin(x_src)) if lin.out_features < lin.in_features else lin(agg(x_src))
        return z + layer.bias
    if isinstance(layer, SAGEConv):
        lin = layer.lin_neigh
        neigh = agg(lin(x_src)) if lin.out_features < lin.in_features else lin(agg(x_src))
        if layer.aggr == "gcn":                      # the operator includes the self loop
            return neigh + layer.bias
        return layer.lin_self(x_dst) + neigh
    full_graph_aggr(layer)  # raises with the reason
    raise AssertionError("unreachable")


def full_graph_param_grads(layer: nn.Module, dz: Tensor, agg_src: Tensor, x_dst: Tensor) -> None:
    """Add to ``.grad`` of ``layer``'s parameters their gradient, given ``dz``, the gradient of
    :func:`full_graph_conv`'s output, for a layer that aggregates before it projects and whose aggregate
    ``agg_src`` (``agg(x_src)``) the caller kept: ``dz^T input`` per linear map and ``dz`` summed per
    bias. The output itself is not recomputed: the layer is affine in its parameters, so its value
    does not enter their gradient (the offloaded schedule's layer-0 backward pass saves a projection).

    Shapes: dz (num_dst, F_out); agg_src, x_dst (num_dst, F_in) (x_dst: SAGE-mean's ``lin_self`` input).
    """
    def add(p: nn.Parameter | None, g: Tensor) -> None:
        if p is not None and p.requires_grad:
            p.grad = g if p.grad is None else p.grad.add_(g)

    lin = layer.lin if isinstance(layer, GCNConv) else layer.lin_neigh if isinstance(layer, SAGEConv) else None
    if lin is None or lin.out_features < lin.in_features:
        raise ValueError(f"full_graph_param_grads: {type(layer).__name__} does not aggregate before it projects")
    with torch.no_grad():
        dzt = dz.t()
        add(lin.weight, dzt @ agg_src)
        add(lin.bias, dz.sum(0))
        if isinstance(layer, SAGEConv) and layer.aggr != "gcn":
            add(layer.lin_self.weight, dzt @ x_dst)
            add(layer.lin_self.bias, dz.sum(0))
        else:
            add(layer.bias, dz.sum(0))
