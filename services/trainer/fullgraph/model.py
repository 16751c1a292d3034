"""The full-graph view of the shared model: build it, step it, and the pieces every mode shares.

The layers themselves are :class:`argosy.shared.models.GNN` (the mini-batch model, same parameters
and arithmetic, via :func:`~argosy.shared.models.full_graph_conv`); what is specific to full-graph
execution lives here: dropout masks that are a pure function of ``(seed, epoch, layer, part)`` so
the offloaded backward pass can regenerate the forward mask instead of storing it, the loss as a
per-part sum over a global count (partition-invariant gradients), and the optimizer groups.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from argosy.shared.config import TrainerConfig
from argosy.shared.errors import ConfigError
from argosy.shared.models import GNN, build_model, dropout_scale, full_graph_aggr, full_graph_conv

__all__ = ["ModelSpec", "full_graph_model", "layer_forward", "post_activation", "dropout_mask",
           "masked_loss_sum", "flat_grads"]

FULL_GRAPH_MODELS = ("gcn", "sage")
"""Models the full-graph modes run: their aggregation is a fixed linear operator (see shared.models)."""


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a model as the full-graph schedules see it.

    Attributes:
        kind: ``gcn`` or ``sage``.
        dims: ``(in, hidden..., classes)``; ``len(dims) - 1`` layers.
        dropout: probability on every layer input (0 for exactness tests).
        aggregator: SAGE's aggregator, ``mean`` or ``gcn``.
    """

    kind: str
    dims: tuple[int, ...]
    dropout: float = 0.5
    aggregator: str = "mean"

    @property
    def num_layers(self) -> int:
        return len(self.dims) - 1

    @property
    def aggr(self) -> str:
        """Aggregation operator of every layer: ``gcn`` (symmetric, self loops), ``mean`` or
        ``mean_self`` (the mean including the vertex: SAGE's ``gcn`` aggregator)."""
        if self.kind == "gcn":
            return "gcn"
        return "mean_self" if self.aggregator == "gcn" else "mean"


def full_graph_model(cfg: TrainerConfig, in_dim: int, num_classes: int, num_layers: int, seed: int,
                     device: torch.device | str = "cpu") -> tuple[GNN, ModelSpec]:
    """The mini-batch model (:func:`argosy.shared.models.build_model`, the one model builder) with the
    mini-batch trainer's seed-dependent initialisation, refused unless the full-graph modes can run
    it, plus its spec."""
    if cfg.model not in FULL_GRAPH_MODELS:
        raise ConfigError(f"--model {cfg.model} cannot run in the full-graph modes (they run "
                          f"{', '.join(FULL_GRAPH_MODELS)}: aggregation must be a fixed linear operator)")
    torch.manual_seed(seed)
    model = build_model(cfg.model, in_dim, cfg.hidden, num_classes, num_layers, cfg.dropout, heads=cfg.heads,
                        aggregator=cfg.aggregator).to(device)
    for layer in model.layers:
        full_graph_aggr(layer)  # raises for a layer type the full-graph modes cannot run
    dims = (in_dim,) + (cfg.hidden,) * (num_layers - 1) + (num_classes,)
    return model, ModelSpec(cfg.model, dims, cfg.dropout, cfg.aggregator)


def layer_forward(model: GNN, layer: int, agg, h_src: torch.Tensor, h_self: torch.Tensor) -> torch.Tensor:
    """Pre-activation output of ``model.layers[layer]`` for a set of destination rows.

    Shapes:
        h_src: ``[k, in]`` rows ``agg`` reads; h_self: ``[m, in]`` the destination rows; returns ``[m, out]``.
    """
    return full_graph_conv(model.layers[layer], agg, h_src, h_self)


def dropout_mask(shape: tuple[int, int], prob: float, seed: int, epoch: int, layer: int,
                 part: int, device: torch.device | str = "cpu") -> torch.Tensor | None:
    """Deterministic inverted-dropout scale mask for one (epoch, layer, part) block.

    Returns None when ``prob == 0``. ``prob`` is quantised to 1/65536. Shapes:
    returns ``float32[shape]`` with entries ``0`` or ``1/(1-prob)``.
    """
    if prob <= 0:
        return None
    scale = dropout_scale(np.random.default_rng([seed, epoch, layer, part]), shape, prob)
    return torch.from_numpy(scale).to(device)


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


def flat_grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``{parameter name: gradient}`` copies on the CPU (zeros where a parameter has none)."""
    return {k: (v.grad.detach().clone() if v.grad is not None else torch.zeros_like(v)).cpu()
            for k, v in model.named_parameters()}
