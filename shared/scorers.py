"""Link prediction's model: an encoder (any node model) and a pair scorer.

The encoder is the job's model (built-in or ``MODULE:FACTORY``) built with ``out_channels =
hidden``: its OUTPUT is each vertex's embedding (the choice that works for any model without
knowing its layers; GAE's encoder is a GCN whose last layer outputs the embedding).  The scorer
turns the embeddings of a pair into one logit:

* ``dot``: ``<z_u, z_v>`` (GAE's inner-product decoder; no parameters);
* ``mlp``: ``MLP(z_u * z_v)``, two layers (the OGB baselines' ``LinkPredictor``);
* ``distmult``: ``<z_u, r, z_v> = sum_i z_u[i] r[i] z_v[i]`` with a learnable diagonal relation
  vector ``r`` (Yang et al. 2015; DGL-KE's and GraphStorm's DistMult).  One relation until typed
  edges exist; ``r`` starts at ones, so training starts from the dot product.

With ``--node-embeddings`` the model also owns a learnable table of vertex inputs
(:class:`NodeEmbedding`), looked up by the batch's global vertex ids and concatenated after the
store's features (or alone, on a featureless graph).

Example:
    >>> m = LinkModel(nn.Identity(), make_scorer("dot", 2))
    >>> m.score(torch.tensor([[1., 0.], [2., 3.]]), torch.tensor([[0, 1]])).tolist()
    [2.0]
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["DotScorer", "MLPScorer", "DistMultScorer", "NodeEmbedding", "make_scorer", "LinkModel"]


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


class DistMultScorer(nn.Module):
    """``sum(z_u * r * z_v)``, ``r`` a learnable float[d] (one relation).  Shapes: (P, d), (P, d) -> (P,)."""

    def __init__(self, dim: int):
        super().__init__()
        self.rel = nn.Parameter(torch.ones(dim))

    def forward(self, zu: Tensor, zv: Tensor) -> Tensor:
        return (zu * self.rel * zv).sum(-1)


def make_scorer(kind: str, dim: int) -> nn.Module:
    if kind == "dot":
        return DotScorer()
    if kind == "mlp":
        return MLPScorer(dim)
    if kind == "distmult":
        return DistMultScorer(dim)
    raise ValueError(f"scorer must be dot, mlp or distmult (got {kind!r})")


class NodeEmbedding(nn.Module):
    """A learnable input row per vertex: ``float[n, dim]``, looked up by global vertex id.

    ``sparse``: the lookup's gradient is a sparse tensor of the batch's rows (stepped by
    ``torch.optim.SparseAdam``: a step touches only those rows); dense otherwise (what DDP
    all-reduces when several trainers share the table).  Rows start as N(0, 1) like
    ``torch.nn.Embedding``'s.  Memory: ``n * dim * 4`` bytes, twice that again for Adam's moments.
    """

    def __init__(self, num_nodes: int, dim: int, sparse: bool = True):
        super().__init__()
        if num_nodes < 1 or dim < 1:
            raise ValueError(f"NodeEmbedding needs num_nodes >= 1 and dim >= 1 (got {num_nodes}, {dim})")
        self.table = nn.Embedding(num_nodes, dim, sparse=sparse)

    def forward(self, ids: Tensor) -> Tensor:
        return self.table(ids)


class LinkModel(nn.Module):
    """Encoder + scorer, one module (so DDP synchronises both).

    ``forward(x, blocks, pairs)`` returns one logit per pair: ``pairs`` int[P, >= 2] holds LOCAL
    seed indices (``link_pairs[:, :2]`` of a batch).  :meth:`embed` is the encoder alone
    (``argosy predict --embeddings``), :meth:`score` the scorer on given embeddings.
    """

    def __init__(self, encoder: nn.Module, scorer: nn.Module, embedding: NodeEmbedding | None = None):
        super().__init__()
        self.encoder = encoder
        self.scorer = scorer
        self.embedding = embedding

    def inputs(self, x: Tensor, ids: Tensor | None = None) -> Tensor:
        """The encoder's input: ``x`` float[N, F], then the vertices' learned rows when the model has
        a :class:`NodeEmbedding` (``ids`` int64[N], global ids) -> float[N, F + dim]."""
        if self.embedding is None:
            return x
        if ids is None:
            raise ValueError("a LinkModel with node embeddings needs the batch's global vertex ids")
        e = self.embedding(ids)
        return e if x.shape[1] == 0 else torch.cat([x, e], 1)

    def embed(self, x: Tensor, blocks, ids: Tensor | None = None) -> Tensor:
        return self.encoder(self.inputs(x, ids), blocks)

    def score(self, z: Tensor, pairs: Tensor) -> Tensor:
        return self.scorer(z[pairs[:, 0]], z[pairs[:, 1]])

    def forward(self, x: Tensor, blocks, pairs: Tensor, ids: Tensor | None = None) -> Tensor:
        return self.score(self.embed(x, blocks, ids), pairs)


class KGModel(nn.Module):
    """A knowledge graph's model: a learned embedding per entity and a relation scorer
    (:mod:`shared.kg`: ComplEx, DistMult, RotatE, reciprocal relations), one module so DDP syncs both.

    Training scores each triple's tail and (through the reciprocal relation) head against every
    entity (``1vsAll``: softmax cross-entropy) with the N3 penalty; evaluation ranks them by the
    filtered protocol.  Shapes: ``triples`` int64[B, 3] ``(head, relation, tail)`` in global ids.
    """

    def __init__(self, num_entities: int, num_relations: int, scorer: str = "complex", dim: int = 512,
                 init_std: float = 1e-3):
        super().__init__()
        from argosy.shared.kg import make_kg_scorer
        self.embedding = NodeEmbedding(num_entities, dim, sparse=False)
        nn.init.normal_(self.embedding.table.weight, std=init_std)
        self.scorer = make_kg_scorer(scorer, num_relations, dim)
        self.scorer.reset_parameters(init_std)

    def forward(self, triples: Tensor, n3: float = 0.0, label_smoothing: float = 0.0) -> Tensor:
        """Mean 1vsAll loss of a batch of triples (both directions) plus ``n3`` times its N3 penalty
        (``forward``, so a DDP wrapper synchronises it)."""
        from argosy.shared.kg import kg_loss
        return kg_loss(self.scorer, self.embedding.table.weight, triples, "1vsAll", n3=n3,
                       label_smoothing=label_smoothing)

    @torch.no_grad()
    def ranks(self, triples: Tensor, known) -> Tensor:
        """Filtered ranks (float64[2B]: as tail, then as head) of ``triples`` against every entity,
        every other known true triple removed (``known``: a :class:`~argosy.shared.kg.TripleFilter`)."""
        from argosy.shared.kg import filtered_ranks, table_score_fn
        table = self.embedding.table.weight
        r = filtered_ranks(table_score_fn(self.scorer, table), triples, known, table.shape[0])
        return torch.cat([r.tail, r.head])
