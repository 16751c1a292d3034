"""Plain in-memory full-batch training: the reference for exactness and the bench baseline.

Why this module exists: the offloaded and SAR modes must produce the same
gradients as ordinary full-batch training and must be measured against it
(epoch time, peak memory). This trainer is the ordinary thing: one
whole-graph aggregation matrix, all activations kept by autograd.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from .graph import GraphData, full_matrix
from .kernels import Aggregation
from .model import ModelSpec, dropout_mask, input_table, layer_forward, masked_loss_sum, post_activation

__all__ = ["InMemoryTrainer"]

logger = logging.getLogger(__name__)


class InMemoryTrainer:
    """Whole-graph forward/backward with autograd keeping every activation.

    Args:
        spec: model architecture.
        graph: graph with ``features`` and ``labels``.
        model: the shared GNN whose parameters get the gradients (a featureless R-GCN's
            ``EmbeddedInput``: its table is layer 0's input instead of the features).
        seed: dropout seed (masks are those of part 0 of a 1-part plan, so a
            1-part offloaded run sees identical masks).
        device: compute device.

    Shapes:
        features ``float32[n, dims[0]]``; logits ``[n, dims[-1]]``.
    """

    def __init__(self, spec: ModelSpec, graph: GraphData, model: torch.nn.Module,
                 seed: int = 0, device: torch.device | str = "cpu") -> None:
        self.spec, self.model, self.seed = spec, model, seed
        self.device = torch.device(device)
        self.a = full_matrix(graph, spec.aggr)
        self.at = self.a.transpose()
        self.table = input_table(model)
        self.x = torch.from_numpy(np.ascontiguousarray(graph.features, dtype=np.float32)).to(self.device)
        self.labels = torch.from_numpy(graph.labels).to(self.device)
        n = graph.num_nodes
        self.masks = {k: torch.from_numpy(getattr(graph, k) if getattr(graph, k) is not None
                                          else np.zeros(n, bool)).to(self.device)
                      for k in ("train_mask", "val_mask", "test_mask")}
        self.n_train = int((self.masks["train_mask"] & (self.labels >= 0)).sum())

    def forward(self, epoch: int, training: bool) -> torch.Tensor:
        """Logits of all vertices. Shapes: returns ``[n, C]``."""
        n = self.x.shape[0]
        agg = Aggregation(self.a, self.at, self.spec.relations)
        drop = self.spec.dropout if training else 0.0
        h = self.x if self.table is None else self.table
        m = dropout_mask((n, self.spec.dims[0]), drop, self.seed, epoch, 0, 0, self.device)
        if m is not None:
            h = h * m
        for l in range(self.spec.num_layers):
            z = layer_forward(self.model, l, agg, h, h)
            if l < self.spec.num_layers - 1:
                h = post_activation(z, dropout_mask((n, self.spec.dims[l + 1]), drop, self.seed,
                                                    epoch, l + 1, 0, self.device))
            else:
                h = z
        return h

    def step(self, epoch: int) -> float:
        """Forward + backward; accumulates parameter ``.grad``. Returns the mean training loss."""
        logits = self.forward(epoch, training=True)
        loss = masked_loss_sum(logits, self.labels, self.masks["train_mask"]) / max(1, self.n_train)
        loss.backward()
        return float(loss.detach())

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Accuracy on each split and the validation loss, without dropout."""
        logits = self.forward(0, training=False)
        pred = logits.argmax(1)
        n_val = int((self.masks["val_mask"] & (self.labels >= 0)).sum())
        out = {"val_loss": float(masked_loss_sum(logits, self.labels, self.masks["val_mask"])) / max(1, n_val)}
        for k, m in self.masks.items():
            sel = m & (self.labels >= 0)
            out[k.replace("_mask", "_accuracy")] = float((pred[sel] == self.labels[sel]).float().mean()) \
                if bool(sel.any()) else 0.0
        return out
