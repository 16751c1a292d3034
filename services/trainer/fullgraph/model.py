"""The full-graph view of the shared model: build it, step it, and the pieces every mode shares.

The layers themselves are :class:`argosy.shared.models.GNN` (the mini-batch model, same parameters
and arithmetic, via :func:`~argosy.services.trainer.fullgraph.layer_ops.full_graph_conv`); what is specific to full-graph
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
from argosy.services.trainer.fullgraph.layer_ops import full_graph_aggr, full_graph_conv
from argosy.shared.models import GNN, EmbeddedInput, RGCNConv, build_model, dropout_scale, make_optimizer
from argosy.shared.scorers import NodeEmbedding

__all__ = ["ModelSpec", "full_graph_model", "check_model", "gnn", "input_table", "full_graph_optimizer", "layer_forward", "post_activation", "dropout_mask",
           "masked_loss_sum", "flat_grads"]

FULL_GRAPH_MODELS = ("gcn", "sage", "rgcn")
"""Models the full-graph modes run: their aggregation is a fixed linear operator (see shared.models)."""


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a model as the full-graph schedules see it.

    Attributes:
        kind: ``gcn``, ``sage`` or ``rgcn``.
        dims: ``(in, hidden..., classes)``; ``len(dims) - 1`` layers (a featureless R-GCN's ``in`` is
            the width of its learned input rows).
        dropout: probability on every layer input (0 for exactness tests).
        aggregator: SAGE's aggregator, ``mean`` or ``gcn``.
        relations: R-GCN's relations (1 otherwise): the aggregation's rows per destination.
        learned_input: layer 0's input rows are parameters (the featureless R-GCN layer's
            ``input``), read and stepped like any parameter, not the store's features.
    """

    kind: str
    dims: tuple[int, ...]
    dropout: float = 0.5
    aggregator: str = "mean"
    relations: int = 1
    learned_input: bool = False

    @property
    def num_layers(self) -> int:
        return len(self.dims) - 1

    @property
    def row_width(self) -> int:
        """Columns of the widest per-row tensor a layer computes: the widest layer, or R-GCN's aggregate
        or messages, ``R * min(F_in, F_out)`` wide (:func:`~argosy.services.trainer.fullgraph.layer_ops.full_graph_conv`)."""
        if self.kind != "rgcn":
            return max(self.dims)
        return max(max(self.dims), self.relations * max(min(a, b) for a, b in zip(self.dims[:-1], self.dims[1:])))

    @property
    def aggr(self) -> str:
        """Aggregation operator of every layer: ``gcn`` (symmetric, self loops), ``mean``,
        ``mean_self`` (the mean including the vertex: SAGE's ``gcn`` aggregator) or ``relation_mean``
        (R-GCN: the mean per destination and relation)."""
        if self.kind == "gcn":
            return "gcn"
        if self.kind == "rgcn":
            return "relation_mean"
        return "mean_self" if self.aggregator == "gcn" else "mean"


def full_graph_model(cfg: TrainerConfig, in_dim: int, num_classes: int, num_layers: int, seed: int,
                     device: torch.device | str = "cpu", num_relations: int = 0, num_nodes: int = 0,
                     node_embeddings: int | None = None) -> tuple[torch.nn.Module, ModelSpec]:
    """The mini-batch model (:func:`argosy.shared.models.build_model`, the one model builder) with the
    mini-batch trainer's seed-dependent initialisation, refused unless the full-graph modes can run
    it, plus its spec.

    R-GCN (``num_relations``: a typed store's) runs on the store's features, or on a featureless store
    (``in_dim`` 0) with the paper's one-hot first layer, as the mini-batch trainer builds it: an
    :class:`~argosy.shared.models.EmbeddedInput` whose table (``num_nodes`` rows) holds each vertex's
    rows of every basis and of the self-loop matrix.  Learned ``--node-embeddings`` rows are refused.
    """
    featureless = cfg.model == "rgcn" and in_dim == 0
    in_dim = check_model(cfg, in_dim, num_relations, num_nodes, node_embeddings)
    R = int(num_relations) if cfg.model == "rgcn" else 0
    torch.manual_seed(seed)
    model = build_model(cfg.model, in_dim, cfg.hidden, num_classes, num_layers, cfg.dropout, heads=cfg.heads,
                        aggregator=cfg.aggregator, num_relations=R, num_bases=cfg.num_bases, featureless=featureless)
    for layer in model.layers:
        full_graph_aggr(layer)  # raises for a layer type the full-graph modes cannot run
    if featureless:             # the mini-batch trainer's table and initialisation (services.trainer.core)
        from argosy.services.trainer.core import FEATURELESS_INIT_STD

        emb = NodeEmbedding(num_nodes, in_dim, sparse=False)
        torch.nn.init.normal_(emb.table.weight, std=FEATURELESS_INIT_STD)
        model = EmbeddedInput(model, emb)
    dims = (in_dim,) + (cfg.hidden,) * (num_layers - 1) + (num_classes,)
    return model.to(device), ModelSpec(cfg.model, dims, cfg.dropout, cfg.aggregator, max(R, 1), featureless)


def check_model(cfg: TrainerConfig, in_dim: int, num_relations: int = 0, num_nodes: int = 0,
                node_embeddings: int | None = None) -> int:
    """Refuse, in one :class:`ConfigError` line, a model the full-graph modes do not run on this store;
    else return its layer-0 input width (a featureless R-GCN's: its learned rows').  The launcher calls
    it before anything starts (SAR's workers would each fail with a traceback)."""
    if cfg.model not in FULL_GRAPH_MODELS:
        raise ConfigError(f"--model {cfg.model} cannot run in the full-graph modes (they run "
                          f"{', '.join(FULL_GRAPH_MODELS)}: aggregation must be a fixed linear operator)")
    if node_embeddings:
        raise ConfigError(f"--node-embeddings {node_embeddings}: the full-graph modes do not learn input rows "
                          "(R-GCN on a featureless typed store learns its one-hot layer; train in mini-batch mode)")
    if cfg.model == "rgcn" and not num_relations:
        raise ConfigError("--model rgcn needs a typed store (each edge's relation), and this store has none")
    if in_dim:
        return in_dim
    if cfg.model != "rgcn":
        raise ConfigError(f"--model {cfg.model} in the full-graph modes needs node features, and the store has none "
                          "(R-GCN on a typed store learns its featureless first layer)")
    from argosy.services.trainer.core import FEATURELESS_MAX_BYTES

    width = RGCNConv.featureless_width(cfg.hidden, num_relations, cfg.num_bases)
    if num_nodes * width * 4 > FEATURELESS_MAX_BYTES:
        raise ConfigError(f"R-GCN's one-hot input layer would take {num_nodes * width * 4 / 1e6:.0f} MB "
                          f"({num_nodes} x {width}), more than the full-graph modes learn; train in mini-batch mode")
    return width


def gnn(model: torch.nn.Module) -> GNN:
    """The layers' :class:`GNN` of a full-graph model (inside an ``EmbeddedInput`` when layer 0 learns its input)."""
    return model.model if isinstance(model, EmbeddedInput) else model


def input_table(model: torch.nn.Module) -> torch.nn.Parameter | None:
    """The learned layer-0 input rows (``float32[n, dims[0]]``, global id order), or None: the store's features."""
    return model.embedding.table.weight if isinstance(model, EmbeddedInput) else None


def full_graph_optimizer(model: torch.nn.Module, cfg: TrainerConfig) -> torch.optim.Adam:
    """The mini-batch trainer's optimizer (:func:`~argosy.shared.models.make_optimizer`); learned input
    rows get Adam without weight decay (the mini-batch trainer steps them with ``SparseAdam``, which
    has none; every row has a gradient in a full-graph step, so the rows move alike)."""
    opt = make_optimizer(gnn(model), cfg)
    table = input_table(model)
    if table is not None:
        opt.add_param_group({"params": [table], "weight_decay": 0.0})
    return opt


def layer_forward(model: torch.nn.Module, layer: int, agg, h_src: torch.Tensor, h_self: torch.Tensor) -> torch.Tensor:
    """Pre-activation output of layer ``layer`` of ``model`` (see :func:`gnn`) for a set of destination rows.

    Shapes:
        h_src: ``[k, in]`` rows ``agg`` reads; h_self: ``[m, in]`` the destination rows; returns ``[m, out]``.
    """
    return full_graph_conv(gnn(model).layers[layer], agg, h_src, h_self)


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
