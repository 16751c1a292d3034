"""Link prediction's model: an encoder (any node model) and a pair scorer.

The encoder is the job's model (built-in or ``MODULE:FACTORY``) built with ``out_channels =
hidden``: its OUTPUT is each vertex's embedding (the choice that works for any model without
knowing its layers; GAE's encoder is a GCN whose last layer outputs the embedding).  The scorer
turns the embeddings of a pair into one logit:

* ``dot``: ``<z_u, z_v>`` (GAE's inner-product decoder; no parameters);
* ``mlp``: ``MLP(z_u * z_v)``, two layers (the OGB baselines' ``LinkPredictor``).

Example:
    >>> m = LinkModel(nn.Identity(), make_scorer("dot", 2))
    >>> m.score(torch.tensor([[1., 0.], [2., 3.]]), torch.tensor([[0, 1]])).tolist()
    [2.0]
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["DotScorer", "MLPScorer", "make_scorer", "LinkModel"]


class DotScorer(nn.Module):
    """``<z_u, z_v>``.  Shapes: (P, d), (P, d) -> (P,)."""

    def forward(self, zu: Tensor, zv: Tensor) -> Tensor:
        return (zu * zv).sum(-1)


class MLPScorer(nn.Module):
    """``Linear(d, d) -> ReLU -> Linear(d, 1)`` on ``z_u * z_v``.  Shapes: (P, d), (P, d) -> (P,)."""

    def __init__(self, dim: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, 1))

    def forward(self, zu: Tensor, zv: Tensor) -> Tensor:
        return self.mlp(zu * zv).squeeze(-1)


def make_scorer(kind: str, dim: int) -> nn.Module:
    if kind == "dot":
        return DotScorer()
    if kind == "mlp":
        return MLPScorer(dim)
    raise ValueError(f"scorer must be dot or mlp (got {kind!r})")


class LinkModel(nn.Module):
    """Encoder + scorer, one module (so DDP synchronises both).

    ``forward(x, blocks, pairs)`` returns one logit per pair: ``pairs`` int[P, >= 2] holds LOCAL
    seed indices (``link_pairs[:, :2]`` of a batch).  :meth:`embed` is the encoder alone
    (``argosy predict --embeddings``), :meth:`score` the scorer on given embeddings.
    """

    def __init__(self, encoder: nn.Module, scorer: nn.Module):
        super().__init__()
        self.encoder = encoder
        self.scorer = scorer

    def embed(self, x: Tensor, blocks) -> Tensor:
        return self.encoder(x, blocks)

    def score(self, z: Tensor, pairs: Tensor) -> Tensor:
        return self.scorer(z[pairs[:, 0]], z[pairs[:, 1]])

    def forward(self, x: Tensor, blocks, pairs: Tensor) -> Tensor:
        return self.score(self.encoder(x, blocks), pairs)
