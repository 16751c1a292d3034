"""GCN and GraphSAGE layers written once for every execution mode.

Why this module exists: exactness between the in-memory reference, the
offloaded part-by-part mode and SAR rests on all three running the *same*
layer arithmetic; only the aggregation operator differs (one whole-graph
CSR, one part's expanded CSR, or SAR's sequential remote rounds). So a layer
is written against an abstract ``agg`` callable, and the order of operations
(aggregate-then-transform when ``in <= out``, else transform-then-aggregate)
is fixed here for everybody.

Dropout masks are a pure function of ``(seed, epoch, layer, part)`` so the
offloaded backward pass can regenerate the forward mask instead of storing it.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Callable, Literal

import numpy as np
import torch
import torch.nn.functional as F

from .optim import Adam

__all__ = ["ModelSpec", "init_params", "layer_forward", "post_activation", "dropout_mask",
           "make_optimizer", "masked_loss_sum", "flat_grads"]

logger = logging.getLogger(__name__)

Agg = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class ModelSpec:
    """Architecture of a full-graph model.

    Attributes:
        kind: ``gcn`` (Kipf & Welling) or ``sage`` (GraphSAGE-mean with root weight).
        dims: ``[in, hidden..., classes]``; ``len(dims) - 1`` layers.
        dropout: probability on every layer input (0 for exactness tests).
    """

    kind: Literal["gcn", "sage"]
    dims: tuple[int, ...]
    dropout: float = 0.5

    @property
    def num_layers(self) -> int:
        return len(self.dims) - 1

    @property
    def aggr(self) -> Literal["gcn", "mean"]:
        return "gcn" if self.kind == "gcn" else "mean"

    def agg_first(self, layer: int) -> bool:
        """Aggregate before transforming when that is the cheaper side."""
        return self.dims[layer] <= self.dims[layer + 1]


def _glorot(fan_in: int, fan_out: int, gen: torch.Generator) -> torch.Tensor:
    a = math.sqrt(6.0 / (fan_in + fan_out))
    return (torch.rand(fan_in, fan_out, generator=gen) * 2 - 1) * a


def init_params(spec: ModelSpec, seed: int, device: torch.device | str = "cpu") -> list[dict[str, torch.Tensor]]:
    """Glorot weights and zero biases, identical for a given seed in every process.

    Returns:
        one dict per layer: GCN ``{"w": [in, out], "b": [out]}``; SAGE
        ``{"w_self", "w_neigh": [in, out], "b": [out]}``; all ``requires_grad``.
    """
    gen = torch.Generator().manual_seed(seed)
    params = []
    for l in range(spec.num_layers):
        fi, fo = spec.dims[l], spec.dims[l + 1]
        p = {"w": _glorot(fi, fo, gen)} if spec.kind == "gcn" else {
            "w_self": _glorot(fi, fo, gen), "w_neigh": _glorot(fi, fo, gen)}
        p["b"] = torch.zeros(fo)
        params.append({k: v.to(device).requires_grad_(True) for k, v in p.items()})
    return params


def layer_forward(spec: ModelSpec, layer: int, p: dict[str, torch.Tensor], agg: Agg,
                  h_src: torch.Tensor, h_self: torch.Tensor) -> torch.Tensor:
    """Pre-activation output of one layer for a set of destination rows.

    Args:
        spec: model spec.
        layer: layer index ``l``.
        p: that layer's parameters.
        agg: maps source-space rows to destination rows (differentiable).
        h_src: layer input in the source space ``agg`` reads.
        h_self: layer input of the destination rows themselves (SAGE root term).

    Shapes:
        h_src: ``[k, in]``; h_self: ``[m, in]``; returns ``[m, out]``.
    """
    first = spec.agg_first(layer)
    if spec.kind == "gcn":
        z = agg(h_src) @ p["w"] if first else agg(h_src @ p["w"])
    else:
        neigh = agg(h_src) @ p["w_neigh"] if first else agg(h_src @ p["w_neigh"])
        z = h_self @ p["w_self"] + neigh
    return z + p["b"]


def dropout_mask(shape: tuple[int, int], prob: float, seed: int, epoch: int, layer: int,
                 part: int, device: torch.device | str = "cpu") -> torch.Tensor | None:
    """Deterministic inverted-dropout scale mask for one (epoch, layer, part) block.

    Returns None when ``prob == 0``. ``prob`` is quantised to 1/65536. Shapes:
    returns ``float32[shape]`` with entries ``0`` or ``1/(1-prob)``.
    """
    if prob <= 0:
        return None
    rng = np.random.default_rng([seed, epoch, layer, part])
    n = shape[0] * shape[1]
    # 16-bit uniforms sliced from raw PCG64 output: several times faster than rng.random()
    u = rng.bit_generator.random_raw((n + 3) // 4).view(np.uint16)[:n].reshape(shape)
    keep = torch.from_numpy(u >= np.uint16(min(65535, round(prob * 65536))))
    return keep.to(torch.float32).mul_(1.0 / (1.0 - prob)).to(device)


def post_activation(z: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """ReLU then (optional) dropout: the next layer's input rows. Shapes: ``[m, f]``."""
    h = F.relu(z)
    return h * mask if mask is not None else h


def masked_loss_sum(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum of cross-entropy over masked, labelled rows (caller divides by the global count).

    Shapes:
        logits: ``[m, C]``; labels: ``int64[m]``; mask: ``bool[m]``.
    """
    sel = mask & (labels >= 0)
    if not bool(sel.any()):
        return logits.sum() * 0.0
    return F.cross_entropy(logits[sel], labels[sel], reduction="sum")


def make_optimizer(params: list[dict[str, torch.Tensor]], lr: float, weight_decay: float) -> Adam:
    """Adam with weight decay on the first layer only (Kipf & Welling's recipe)."""
    groups = [{"params": list(params[0].values()), "weight_decay": weight_decay}]
    rest = [t for p in params[1:] for t in p.values()]
    if rest:
        groups.append({"params": rest, "weight_decay": 0.0})
    return Adam(groups, lr=lr)


def flat_grads(params: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """``{"l0.w": grad, ...}`` copies of all parameter gradients (zeros where None)."""
    out = {}
    for l, p in enumerate(params):
        for k, v in p.items():
            out[f"l{l}.{k}"] = (v.grad.detach().clone() if v.grad is not None
                                else torch.zeros_like(v)).cpu()
    return out
