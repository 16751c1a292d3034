"""Knowledge-graph link prediction: relation scorers, the 1-N training loss, filtered ranking.

A triple is ``(h, r, t)``: int64[B, 3] rows of (head, relation, tail).  Entity embeddings are plain
tensors the caller owns (a full table, or rows gathered by id); a scorer owns only its relation
table, so a distributed trainer can shard the entity table and still call the same functions.

Scorers (``KGScorer(num_relations, dim, reciprocal=True)``; ``dim`` is the entity embedding's width
in real numbers; complex scorers read its first half as the real part and its second half as the
imaginary part, LibKGE's layout):

* ``distmult``: ``sum(h * r * t)`` (Yang et al. 2015);
* ``complex``: ``Re(sum(h * r * conj(t)))`` (Trouillon et al. 2016);
* ``rotate``: ``margin - ||h o r - t||_2``, ``r = exp(i theta)`` (Sun et al. 2019; Euclidean distance
  over all ``dim`` coordinates, so 1-N scoring is one matmul; the paper sums per-coordinate moduli).

Head queries ``(?, r, t)``: with ``reciprocal=True`` (the default, and what LibKGE's best CoDEx models
use) the scorer holds ``2R`` relations and scores ``(t, r + R, ?)``; without it each scorer scores
heads through its own closed form (``h . (r * conj(t))`` for ComplEx, ``t o conj(r)`` for RotatE).

Ranking follows the filtered protocol: every test triple is ranked as tail and as head against all
entities, with every OTHER known true triple removed; ties count as the mean of the optimistic and
pessimistic rank (LibKGE's and OGB's rule), i.e. ``1 + #greater + #equal / 2``.

Example:
    >>> s = make_kg_scorer("distmult", 2, 4)
    >>> s.score_all_tails(torch.ones(3, 4), torch.tensor([0, 1, 1]), torch.randn(5, 4)).shape
    torch.Size([3, 5])
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from argosy.shared.errors import ConfigError

__all__ = ["KGScorer", "DistMult", "ComplEx", "RotatE", "make_kg_scorer", "kg_loss", "TripleFilter",
           "Ranks", "filtered_ranks", "table_score_fn", "kg_metrics", "kg_phase_record", "KG_SCORERS", "KG_LOSSES"]

KG_LOSSES = ("1vsAll", "KvsAll", "negsample")


class KGScorer(nn.Module):
    """A relation scorer with a learnable relation table ``rel`` float[R or 2R, rel_dim].

    Args:
        num_relations (int): R, the dataset's relations (ids 0..R-1 in every call).
        dim (int): the entity embedding width.
        reciprocal (bool, optional): learn an inverse relation ``r + R`` for head queries.
        rel_dropout (float, optional): dropout on relation rows while training.
        init_std (float, optional): relation rows start N(0, init_std); default Xavier-normal.

    Shapes: ``score``: (B, d), int[B], (B, d) -> (B,); ``score_all_tails`` / ``score_all_heads``:
    (B, d), int[B], (N, d) -> (B, N).
    """

    complex_valued = False
    rel_per_dim = 1                                                 # entity reals per relation parameter

    def __init__(self, num_relations: int, dim: int, reciprocal: bool = True, rel_dropout: float = 0.0,
                 init_std: float | None = None):
        super().__init__()
        name = type(self).__name__
        if num_relations < 1 or dim < 1:
            raise ConfigError(f"{name} needs num_relations >= 1 and dim >= 1 (got {num_relations}, {dim})")
        if self.complex_valued and dim % 2:
            raise ConfigError(f"{name} needs an even dim (real and imaginary halves) (got {dim})")
        if not 0.0 <= rel_dropout < 1.0:
            raise ConfigError(f"{name}'s rel_dropout must be in [0, 1) (got {rel_dropout})")
        self.num_relations, self.dim, self.reciprocal, self.rel_dropout = num_relations, dim, reciprocal, rel_dropout
        self.rel = nn.Parameter(torch.empty(num_relations * (2 if reciprocal else 1), dim // self.rel_per_dim))
        self.reset_parameters(init_std)

    def reset_parameters(self, std: float | None = None) -> None:
        nn.init.xavier_normal_(self.rel) if std is None else nn.init.normal_(self.rel, 0.0, std)

    def extra_repr(self) -> str:
        return f"{self.num_relations}, {self.dim}, reciprocal={self.reciprocal}"

    def relations(self, rel_ids: Tensor, inverse: bool = False) -> Tensor:
        """The rows of relations ``rel_ids`` (of their inverses with ``inverse``), dropout applied."""
        r = self.rel[rel_ids + self.num_relations if inverse else rel_ids]
        return F.dropout(r, self.rel_dropout, self.training) if self.rel_dropout > 0 else r

    # a subclass defines _query(h, r) (tail queries, and head queries of reciprocal scorers) and
    # _head_query(t, r) (head queries without reciprocal relations); bilinear scorers match by dot
    def query(self, anchor_emb: Tensor, rel_ids: Tensor, side: str = "tail") -> Tensor:
        """float[B, d]: the vector :meth:`match` compares with candidates, for ``(anchor, r, ?)``
        (``side="tail"``) or ``(?, r, anchor)`` (``"head"``: relation ``r + R`` when reciprocal)."""
        if side == "tail" or self.reciprocal:
            return self._query(anchor_emb, self.relations(rel_ids, inverse=side == "head"))
        return self._head_query(anchor_emb, self.relations(rel_ids))

    def match(self, q: Tensor, cand: Tensor, pairwise: bool = False) -> Tensor:
        """Scores of queries against candidates: (B, d), (B, d) -> (B,) pairwise; (B, d), (N, d) -> (B, N)."""
        return (q * cand).sum(-1) if pairwise else q @ cand.t()

    def score(self, h_emb: Tensor, rel_ids: Tensor, t_emb: Tensor) -> Tensor:
        return self.match(self.query(h_emb, rel_ids), t_emb, True)

    def score_all_tails(self, h_emb: Tensor, rel_ids: Tensor, all_emb: Tensor) -> Tensor:
        return self.match(self.query(h_emb, rel_ids), all_emb)

    def score_all_heads(self, t_emb: Tensor, rel_ids: Tensor, all_emb: Tensor) -> Tensor:
        """Scores of ``(e, r, t)`` for every row ``e`` of ``all_emb`` (reciprocal: of ``(t, r+R, e)``)."""
        return self.match(self.query(t_emb, rel_ids, "head"), all_emb)

    def factors(self, h_emb: Tensor, rel_ids: Tensor, t_emb: Tensor, inverse: bool = False) -> list[Tensor]:
        """Per-coordinate magnitudes N3/L2 regularise: |x| (real), the modulus (complex)."""
        mag = _modulus if self.complex_valued else torch.abs
        return [mag(h_emb), mag(self.relations(rel_ids, inverse)), mag(t_emb)]


def _modulus(x: Tensor) -> Tensor:
    re, im = x.chunk(2, -1)
    return torch.sqrt(re * re + im * im + 1e-12)


class DistMult(KGScorer):
    """``sum_i h_i r_i t_i`` (symmetric in h and t)."""

    def _query(self, h: Tensor, r: Tensor) -> Tensor:
        return h * r

    def _head_query(self, t: Tensor, r: Tensor) -> Tensor:
        return t * r


class ComplEx(KGScorer):
    """``Re(sum_i h_i r_i conj(t_i))``; entity and relation rows are ``[re | im]``."""

    complex_valued = True

    def _query(self, h: Tensor, r: Tensor) -> Tensor:
        (a, b), (c, d) = h.chunk(2, -1), r.chunk(2, -1)
        return torch.cat([a * c - b * d, a * d + b * c], -1)        # h * r, then <., conj(t)> = dot

    def _head_query(self, t: Tensor, r: Tensor) -> Tensor:
        (e, f), (c, d) = t.chunk(2, -1), r.chunk(2, -1)
        return torch.cat([c * e + d * f, c * f - d * e], -1)        # Re(h . (r conj t)) = dot with [re | -im]


class RotatE(KGScorer):
    """``margin - ||h o exp(i theta_r) - t||_2``; the relation rows are phases float[R, dim / 2].

    ``margin`` only shifts the score: it matters for the negative-sampling loss, not for the
    1vsAll/KvsAll softmax or for ranks.
    """

    complex_valued, rel_per_dim = True, 2

    def __init__(self, num_relations: int, dim: int, reciprocal: bool = True, rel_dropout: float = 0.0,
                 init_std: float | None = None, margin: float = 6.0):
        super().__init__(num_relations, dim, reciprocal, rel_dropout, init_std)
        self.margin = margin

    def reset_parameters(self, std: float | None = None) -> None:
        nn.init.uniform_(self.rel, -math.pi, math.pi)

    def _query(self, h: Tensor, r: Tensor) -> Tensor:
        (a, b), c, d = h.chunk(2, -1), torch.cos(r), torch.sin(r)
        return torch.cat([a * c - b * d, a * d + b * c], -1)

    def _head_query(self, t: Tensor, r: Tensor) -> Tensor:
        return self._query(t, -r)                                   # |h r - t| = |h - t conj(r)|, |r| = 1

    def match(self, q: Tensor, cand: Tensor, pairwise: bool = False) -> Tensor:
        if pairwise:
            return self.margin - torch.sqrt(((q - cand) ** 2).sum(-1) + 1e-12)
        sq = (q * q).sum(1, keepdim=True) + (cand * cand).sum(1) - 2.0 * (q @ cand.t())
        return self.margin - torch.sqrt(sq.clamp_min(0.0) + 1e-12)

    def factors(self, h_emb: Tensor, rel_ids: Tensor, t_emb: Tensor, inverse: bool = False) -> list[Tensor]:
        return [_modulus(h_emb), _modulus(t_emb)]                   # rotations have modulus 1


KG_SCORERS = {"distmult": DistMult, "complex": ComplEx, "rotate": RotatE}


def make_kg_scorer(name: str, num_relations: int, dim: int, **kw) -> KGScorer:
    """``distmult``, ``complex`` or ``rotate``; ``kw`` go to the constructor (``reciprocal``, ...)."""
    if name not in KG_SCORERS:
        raise ConfigError(f"kg scorer must be one of {', '.join(KG_SCORERS)} (got {name!r})")
    return KG_SCORERS[name](num_relations, dim, **kw)


# ------------------------------------------------------------------------------------------ filter
class TripleFilter:
    """The known true triples as two CSRs: ``(h, r) -> tails`` and ``(t, r) -> heads``.

    Each CSR is sorted int64 query keys ``anchor * R + r`` (only those present), offsets and the
    sorted answers, so memory is O(triples) whatever N and R are.
    """

    def __init__(self, triples, num_entities: int, num_relations: int):
        tr = torch.as_tensor(triples, dtype=torch.int64).reshape(-1, 3)
        if tr.numel() and (tr[:, [0, 2]].min() < 0 or tr[:, [0, 2]].max() >= num_entities
                           or tr[:, 1].min() < 0 or tr[:, 1].max() >= num_relations):
            raise ConfigError(f"TripleFilter: ids outside {num_entities} entities / {num_relations} relations")
        self.num_entities, self.num_relations = num_entities, num_relations
        R = num_relations
        self._csr = {"tail": self._build(tr[:, 0] * R + tr[:, 1], tr[:, 2]),
                     "head": self._build(tr[:, 2] * R + tr[:, 1], tr[:, 0])}

    def to(self, device) -> "TripleFilter":
        """This filter with its CSRs on ``device`` (queries are moved to where the CSRs are)."""
        self._csr = {k: tuple(x.to(device) for x in v) for k, v in self._csr.items()}
        return self

    def _build(self, q: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        key = torch.unique(q * self.num_entities + v)               # sorted by query, then answer
        q, v = key // self.num_entities, key % self.num_entities
        uq, counts = torch.unique_consecutive(q, return_counts=True)
        return uq, torch.cat([counts.new_zeros(1), counts.cumsum(0)]), v

    def answers(self, anchors: Tensor, rel_ids: Tensor, side: str) -> tuple[Tensor, Tensor]:
        """(query index, answer entity) int64 pairs of every known answer of each query, where
        ``side="tail"`` asks ``(anchor, r, ?)`` and ``side="head"`` asks ``(?, r, anchor)``."""
        uq, ptr, vals = self._csr[side]
        dev = self._csr[side][0].device
        qb = anchors.to(dev, torch.int64) * self.num_relations + rel_ids.to(dev, torch.int64)
        if uq.numel() == 0:
            return qb.new_zeros(0), qb.new_zeros(0)
        pos = torch.searchsorted(uq, qb).clamp_max(uq.numel() - 1)
        cnt = torch.where(uq[pos] == qb, ptr[pos + 1] - ptr[pos], 0)
        rows = torch.repeat_interleave(torch.arange(qb.numel(), device=qb.device), cnt)
        first = torch.repeat_interleave(ptr[pos] - (cnt.cumsum(0) - cnt), cnt)
        return rows, vals[first + torch.arange(rows.numel(), device=qb.device)]

    def mask(self, anchors: Tensor, rel_ids: Tensor, side: str) -> Tensor:
        """bool[B, N]: True where ``(anchor, r, e)`` (tail) or ``(e, r, anchor)`` (head) is known."""
        rows, cols = self.answers(anchors, rel_ids, side)
        m = torch.zeros(anchors.numel(), self.num_entities, dtype=torch.bool, device=rows.device)
        m[rows, cols] = True
        return m


# ------------------------------------------------------------------------------------------- loss
def kg_loss(scorer: KGScorer, emb: Tensor, triples: Tensor, mode: str = "1vsAll", *, ids: Tensor | None = None,
            known: TripleFilter | None = None, label_smoothing: float = 0.0, num_negatives: int = 256,
            dropout: float = 0.0, n3: float = 0.0, l2: float = 0.0, both: bool = True) -> Tensor:
    """The mean training loss of a batch of triples, tail queries ``(h, r, ?)`` and (``both``) head
    queries ``(?, r, t)``, each scored against every row of ``emb``.

    Args:
        emb (float[C, d]): the candidate entities: the full table, or rows gathered by id (then the
            batch's softmax runs over those rows only); dropout ``dropout`` applies while training.
        triples (int64[B, 3]): ``(h, r, t)`` with h and t ROW indices into ``emb``, r relation ids.
        mode: ``1vsAll`` (softmax cross-entropy against all rows, LibKGE's and Lacroix et al.'s),
            ``KvsAll`` (binary cross-entropy, every known answer of the query a positive: ``known``
            is a :class:`TripleFilter` of the training triples, ``ids`` the rows' global ids),
            ``negsample`` (``-log s(pos) - mean log s(-neg)`` against ``num_negatives`` rows drawn
            uniformly, shared by the batch).
        label_smoothing: 1vsAll: ``F.cross_entropy``'s; KvsAll: targets ``(1 - ls) y + ls / C``.
        n3, l2: weights of the N3 (sum |x|^3, Lacroix et al. 2018) and squared-L2 penalties on each
            query's anchor, relation and answer magnitudes, averaged over the queries.
    """
    if mode not in KG_LOSSES:
        raise ConfigError(f"kg_loss mode must be one of {', '.join(KG_LOSSES)} (got {mode!r})")
    if mode == "KvsAll" and known is None:
        raise ConfigError("kg_loss: KvsAll needs known=TripleFilter(train triples, ...)")
    h, r, t = triples[:, 0], triples[:, 1], triples[:, 2]
    drop = (lambda x: F.dropout(x, dropout, scorer.training)) if dropout > 0 else (lambda x: x)
    cand = drop(emb)
    losses = []
    for side, anchor, target in [("tail", h, t), ("head", t, h)][: 2 if both else 1]:
        q = scorer.query(drop(emb[anchor]), r, side)
        if mode == "negsample":
            neg = torch.randint(0, emb.shape[0], (num_negatives,), device=emb.device)
            pos, negs = scorer.match(q, cand[target], pairwise=True), scorer.match(q, cand[neg])
            losses.append(F.softplus(-pos) + F.softplus(negs).mean(1))
            continue
        s = scorer.match(q, cand)
        if mode == "1vsAll":
            losses.append(F.cross_entropy(s, target, label_smoothing=label_smoothing, reduction="none"))
        else:
            g = torch.arange(emb.shape[0], device=emb.device) if ids is None else ids
            y = known.mask(g[anchor], r, side).to(s.device)[:, g].to(s.dtype)
            y = (1.0 - label_smoothing) * y + label_smoothing / emb.shape[0]
            losses.append(F.binary_cross_entropy_with_logits(s, y, reduction="none").mean(1))
    loss = torch.cat(losses).mean()
    if n3 > 0 or l2 > 0:                                            # per query, as Lacroix et al.
        for side, anchor, other in [("tail", h, t), ("head", t, h)][: len(losses)]:
            for f in scorer.factors(emb[anchor], r, emb[other], side == "head" and scorer.reciprocal):
                loss = loss + (n3 * (f ** 3).sum() + l2 * (f ** 2).sum()) / (triples.shape[0] * len(losses))
    return loss


# ---------------------------------------------------------------------------------------- ranking
class Ranks(NamedTuple):
    """Filtered ranks (float64, ties as the mean rank) of each triple as tail and as head."""
    tail: Tensor
    head: Tensor


ScoreFn = Callable[[Tensor, Tensor, str], Tensor]
"""``score_fn(anchor_ids int64[B], rel_ids int64[B], side) -> float[B, N]``: every entity's score as
the tail of ``(anchor, r, ?)`` (``side="tail"``) or the head of ``(?, r, anchor)`` (``"head"``)."""


def table_score_fn(scorer: KGScorer, emb: Tensor) -> ScoreFn:
    """The :data:`ScoreFn` of a scorer over a full entity table float[N, d] (no gradient)."""
    @torch.no_grad()
    def fn(anchors: Tensor, rel_ids: Tensor, side: str) -> Tensor:
        return scorer.match(scorer.query(emb[anchors], rel_ids, side), emb)
    return fn


@torch.no_grad()
def filtered_ranks(score_fn: ScoreFn, triples, known, num_entities: int, num_relations: int | None = None,
                   batch: int = 256) -> Ranks:
    """Rank each triple's tail among all entities for ``(h, r, ?)`` and its head for ``(?, r, t)``,
    every other known true triple removed (``known``: a :class:`TripleFilter`, or int64[M, 3] of
    train + valid + test); the triple itself always stays.  Rank = ``1 + #greater + #equal / 2``
    over the kept candidates (a NaN score counts as neither)."""
    tr = torch.as_tensor(triples, dtype=torch.int64).reshape(-1, 3)
    if not isinstance(known, TripleFilter):
        kn = torch.as_tensor(known, dtype=torch.int64).reshape(-1, 3)
        if num_relations is None:
            num_relations = int(max(kn[:, 1].max(), tr[:, 1].max())) + 1 if kn.numel() else 1
        known = TripleFilter(kn, num_entities, num_relations)
    out = {}
    for side, a, b in (("tail", 0, 2), ("head", 2, 0)):
        parts = []
        for lo in range(0, tr.shape[0], batch):
            x = tr[lo:lo + batch]
            anchor, rel, target = x[:, a], x[:, 1], x[:, b]
            s = score_fn(anchor, rel, side).float()
            keep = ~known.mask(anchor, rel, side).to(s.device)
            idx, target = torch.arange(x.shape[0], device=s.device), target.to(s.device)
            keep[idx, target] = False                               # the triple itself, counted below
            st = s[idx, target].unsqueeze(1)
            greater = ((s > st) & keep).sum(1)
            equal = ((s == st) & keep).sum(1)
            rank = 1.0 + greater.double() + 0.5 * equal.double()
            worst = keep.sum(1).double() + 1.0                      # a NaN true score ranks last
            parts.append(torch.where(torch.isnan(st.squeeze(1)), worst, rank).cpu())
        out[side] = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)
    return Ranks(out["tail"], out["head"])


def kg_phase_record(phase: str, rank_batches: list) -> dict:
    """An epoch record's fields for one evaluated phase of a knowledge-graph job: ``<phase>_mrr``,
    ``_hits1/3/10``, ``_hits`` (= Hits@10, the link jobs' Hits column), ``_pairs`` (triples ranked)
    and no AUC/AP.  ``rank_batches``: per batch, float[2B] ranks (as tail, then as head)."""
    import numpy as np
    ranks = np.concatenate(rank_batches) if rank_batches else np.empty(0)
    met = kg_metrics(ranks) if ranks.size else {"mrr": float("nan")}
    out = {f"{phase}_{k.replace('@', '')}": v for k, v in met.items()}
    out.update({f"{phase}_hits": met.get("hits@10"), f"{phase}_pairs": int(ranks.shape[0] // 2),
                f"{phase}_auc": None, f"{phase}_ap": None})
    return out


def kg_metrics(ranks) -> dict:
    """MRR and Hits@1/3/10 (``rank <= k``) over all ranks given (a :class:`Ranks` pools both sides)."""
    parts = ranks if isinstance(ranks, (tuple, list)) else [ranks]
    r = torch.cat([torch.as_tensor(x, dtype=torch.float64).reshape(-1) for x in parts])
    return {"mrr": float((1.0 / r).mean()), **{f"hits@{k}": float((r <= k).double().mean()) for k in (1, 3, 10)}}
