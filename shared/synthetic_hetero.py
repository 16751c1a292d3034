r"""A typed graph shaped like ogbn-mag, with planted learnable paper labels (scale tests).

Why this module exists: typed (heterogeneous) training needs an input far larger than the test
fixtures, with ogbn-mag's shape, that needs no download and has a known answer.
:func:`mag_like` builds one in memory as a :class:`~argosy.shared.graphio.typed.TypedGraph`.

Model.  Every vertex of every type has a planted class (balanced, at random ids); a paper's
class is its label.  Each relation is a degree-corrected block model: an edge picks one end by
a power-law propensity and the other by propensity inside the first end's class with
probability ``1 - mixing[rel]``, else inside a uniformly drawn class.  Papers also have a
hidden time rank; a paper cites only older papers (``cites`` is a DAG: no self loops), and the
split is by time: the oldest ``split[0]`` of the papers train, the next ``split[1]`` validate,
the newest ``split[2]`` test (ogbn-mag's own split is by year too, 85 / 9 / 6 %).  Authors and
fields of study follow their papers' classes, so ``writes`` and ``has_topic`` carry label
signal that the paper features do not; affiliations carry a little.  Paper features are the
class centroid (``N(0, 1)`` per entry) plus ``N(0, feature_noise**2)`` noise; the other types
have no features (they get learned embeddings).  Duplicate edges are kept (rare: see below).

Measured on this machine, ``mag_like(num_papers=1_200_000)``: 3,160,953 vertices, 34,401,937
edges in 17 s wall (6.5 s user + 4.7 s system CPU; 2 cores shared with other jobs, load ~4.5),
peak RSS 1.54 GiB (the result itself: 0.57 GiB features, 0.51 GiB edges).  Duplicates there:
under 0.1 % per relation (a 20,000-paper graph: up to 3.5 % of ``has_topic``).  At the defaults
(16 classes, chance 0.06), nearest-centroid on the paper features alone gets 0.44 test accuracy
(the isotropic Gaussian model makes it about Bayes-optimal for features alone: logistic
regression cannot do better); on each paper's features averaged with its cited and citing
papers' it gets 0.85; a majority vote of training labels over the papers of a paper's authors
gets 0.87, over the papers of its fields 0.82.

Example:
    >>> g = mag_like(num_papers=2000, seed=0)
    >>> g.node_types, g.features["paper"].shape, int(g.labels.max()) + 1
    (['paper', 'author', 'institution', 'field_of_study'], (2000, 128), 16)
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from argosy.shared.graphio.typed import TypedGraph

__all__ = ["mag_like", "OGBN_MAG", "MAG_RELATIONS", "MIXING"]

OGBN_MAG = {"paper": 736_389, "author": 1_134_649, "institution": 8_740, "field_of_study": 59_965,
            "affiliated_with": 1_043_998, "writes": 7_145_660, "cites": 5_416_271, "has_topic": 7_505_078}
"""ogbn-mag's vertex count per node type and edge count per relation (scaled by ``num_papers``)."""

MAG_RELATIONS = [("author", "affiliated_with", "institution"), ("author", "writes", "paper"),
                 ("paper", "cites", "paper"), ("paper", "has_topic", "field_of_study")]
"""ogbn-mag's relations, in PyG's ``OGB_MAG`` order."""

MIXING = {"affiliated_with": 0.6, "writes": 0.3, "cites": 0.3, "has_topic": 0.4}
"""Default fraction of each relation's edges whose far end is drawn from a random class."""

_CHUNK = 1 << 22                                            # edges drawn per step (bounds temporaries)


class _Sorted:
    """A sorted array ``a`` with a bucket table, so that ``find(v)`` equals
    ``np.searchsorted(a, v, side)`` at O(1) per query (binary search over millions of entries
    with random queries misses the cache at every level: 4x slower).  Buckets are ``width``
    wide; a width at most half the smallest gap of ``a`` leaves a few steps per query, and the
    rare query that is not settled after them falls back to ``searchsorted``."""

    def __init__(self, a: np.ndarray, width: float, side: str):
        self.a, self.w, self.side = a, float(width), side
        self.lo = float(a[0]) if len(a) else 0.0
        ends = np.floor((a - self.lo) / self.w).astype(np.int64) + 1       # bucket + 1 of each entry
        self.g = np.cumsum(np.bincount(ends))               # g[b]: entries in buckets < b

    def _before(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        return x <= v if self.side == "right" else x < v

    def find(self, v: np.ndarray) -> np.ndarray:
        a, n = self.a, len(self.a)
        # bucket(x) is monotone in x, so every entry of a bucket below v's is before v
        b = np.minimum(np.floor((v - self.lo) / self.w).astype(np.int64), len(self.g) - 1)
        j = self.g[np.maximum(b, 0)] * (b >= 0)
        for _ in range(2):
            j += (j < n) & self._before(a[np.minimum(j, n - 1)], v)
        bad = (j < n) & self._before(a[np.minimum(j, n - 1)], v)
        if bad.any():
            j[bad] = np.searchsorted(a, v[bad], side=self.side)
        return j


class _Pool:
    """The vertices of one node type, grouped by class (and by ``rank`` inside a class), drawn
    in proportion to ``theta`` (``None``: uniformly) anywhere, inside given classes, or inside a
    class and below a rank (an older paper)."""

    def __init__(self, cls: np.ndarray, num_classes: int, theta: np.ndarray | None = None,
                 rank: np.ndarray | None = None):
        self.n = n = len(cls)
        small = cls.astype(np.int16 if num_classes < 2 ** 15 else np.int64)
        if rank is None:
            self.order = np.argsort(small, kind="stable")   # radix sort
        else:
            by_rank = np.empty(n, np.int64)
            by_rank[rank] = np.arange(n)
            self.order = by_rank[np.argsort(small[by_rank], kind="stable")]
            key = cls[self.order].astype(np.int64) * n + rank[self.order]
            self.key = _Sorted(key, max(1.0, num_classes / 4), "left")      # (class, rank) keys
        self.starts = np.concatenate([[0], np.cumsum(np.bincount(cls, minlength=num_classes))])
        self.cdf = None
        if theta is not None:
            cdf = np.cumsum(theta[self.order])
            self.cdf = _Sorted(cdf, 0.5 * float(theta.min()), "right")

    def draw_any(self, rng: np.random.Generator, k: int) -> np.ndarray:
        if self.cdf is None:
            return rng.integers(0, self.n, k)
        j = self.cdf.find(rng.random(k) * self.cdf.a[-1])
        return self.order[np.minimum(j, self.n - 1)]

    def draw(self, rng: np.random.Generator, c: np.ndarray, hi: np.ndarray | None = None) -> np.ndarray:
        """One vertex of class ``c[i]`` for every ``i`` (sorted positions ``< hi[i]`` if given;
        every block drawn from must be non-empty)."""
        lo = self.starts[c]
        hi = self.starts[c + 1] if hi is None else hi
        if self.cdf is None:
            j = lo + (rng.random(len(c)) * (hi - lo)).astype(np.int64)
        else:
            cdf = self.cdf.a
            base = np.where(lo > 0, cdf[lo - 1], 0.0)
            j = self.cdf.find(base + rng.random(len(c)) * (cdf[hi - 1] - base))
        return self.order[np.clip(j, lo, hi - 1)]


def _far_class(rng: np.random.Generator, c: np.ndarray, mixing: float, num_classes: int) -> np.ndarray:
    """``c``, except a ``mixing`` fraction replaced by uniformly drawn classes."""
    return np.where(rng.random(len(c)) < mixing, rng.integers(0, num_classes, len(c)), c)


def _propensity(rng: np.random.Generator, n: int, power_law: float) -> np.ndarray:
    """Pareto (Lomax ``power_law``) + 1 propensities, hubs capped at ``sqrt(n)`` times the floor."""
    return np.minimum(rng.pareto(power_law, n) + 1.0, np.sqrt(n))


def _block_edges(rng, m: int, a: _Pool, b: _Pool, cls_a, cls_b, mixing: float, num_classes: int,
                 cover_a: bool = False, cover_b: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``m`` edges ``a -> b``: with ``cover_a`` / ``cover_b`` every vertex of that side first gets
    one edge (its partner drawn by class); the rest draw ``a`` by propensity, ``b`` by class."""
    src, dst = [], []
    if cover_a:
        src.append(np.arange(a.n))
        dst.append(b.draw(rng, _far_class(rng, cls_a, mixing, num_classes)))
    if cover_b:
        dst.append(np.arange(b.n))
        src.append(a.draw(rng, _far_class(rng, cls_b, mixing, num_classes)))
    rest = m - sum(len(s) for s in src)
    for k in (min(_CHUNK, rest - i) for i in range(0, max(rest, 0), _CHUNK)):
        s = a.draw_any(rng, k)
        src.append(s)
        dst.append(b.draw(rng, _far_class(rng, cls_a[s], mixing, num_classes)))
    return np.concatenate(src).astype(np.int64), np.concatenate(dst).astype(np.int64)


def _cite_edges(rng, m: int, citing: _Pool, cited: _Pool, cls, rank, mixing: float,
                num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """``m`` edges from a paper (by ``citing`` propensity) to an older paper of its class (or of
    a random class); a draw with no older paper in that class is drawn again."""
    src, dst, made, n = [], [], 0, cited.n
    while made < m:
        s = citing.draw_any(rng, min(_CHUNK, m - made))
        c = _far_class(rng, cls[s], mixing, num_classes)
        hi = cited.key.find(c * n + rank[s])                # first position not older than s
        ok = hi > cited.starts[c]
        s, c, hi = s[ok], c[ok], hi[ok]
        src.append(s)
        dst.append(cited.draw(rng, c, hi))
        made += len(s)
    return np.concatenate(src).astype(np.int64), np.concatenate(dst).astype(np.int64)


def mag_like(num_papers: int = 736_389, seed: int = 0, num_classes: int = 16, feature_dim: int = 128,
             feature_noise: float = 7.0, mixing: float | Mapping[str, float] | None = None,
             power_law: float = 2.1, split: tuple[float, float, float] = (0.6, 0.2, 0.2)) -> TypedGraph:
    r"""Generate an ogbn-mag-shaped typed graph with planted paper labels.

    Args:
        num_papers (int): paper vertices; every other count is ogbn-mag's scaled by
            ``num_papers / 736389`` (each type at least ``num_classes`` vertices).
        seed (int): the graph is a function of all arguments (same arguments, same arrays).
        num_classes (int, optional): planted classes = paper labels (default: :obj:`16`).
        feature_dim (int, optional): paper feature width (default: :obj:`128`).
        feature_noise (float, optional): std of the Gaussian noise around each class centroid
            (centroid entries ~ N(0, 1)); higher is harder (default: :obj:`7.0`).
        mixing (float or dict, optional): fraction of edges drawn across classes, one number or
            per relation name (missing names take :data:`MIXING`) (default: :data:`MIXING`).
        power_law (float, optional): Lomax shape of the popularity propensities (cited papers,
            authors, fields, institutions); reference and author-count propensities use
            ``power_law + 1`` (default: :obj:`2.1`).
        split (tuple, optional): train / val / test fractions of the papers, oldest first
            (default: :obj:`(0.6, 0.2, 0.2)`).

    Shapes:
        edges[rel]: int64 ``(src[m_rel], dst[m_rel])``; features["paper"]: float32
        ``[n_paper, feature_dim]``; labels: int64 ``[n_paper]``; masks: bool ``[n_paper]``.
    """
    if num_classes < 1 or num_papers < 2 * num_classes:
        raise ValueError(f"'mag_like' needs num_classes >= 1 and num_papers >= 2 * num_classes "
                         f"(got {num_papers}, {num_classes})")
    if feature_dim < 1 or feature_noise < 0:
        raise ValueError(f"'mag_like' needs feature_dim >= 1 and feature_noise >= 0 "
                         f"(got {feature_dim}, {feature_noise})")
    mix = dict(MIXING)
    if isinstance(mixing, Mapping):
        unknown = set(mixing) - set(mix)
        if unknown:
            raise ValueError(f"'mag_like' got mixing for unknown relation(s) {sorted(unknown)} "
                             f"(expected some of {sorted(mix)})")
        mix.update(mixing)
    elif mixing is not None:
        mix = dict.fromkeys(mix, float(mixing))
    if any(not 0 <= v <= 1 for v in mix.values()):
        raise ValueError(f"'mag_like' needs every mixing in [0, 1] (got {mix})")
    if len(split) != 3 or min(split) < 0 or sum(split) > 1 + 1e-9:
        raise ValueError(f"'mag_like' needs split = (train, val, test) >= 0 summing to <= 1 (got {split})")

    C, scale = int(num_classes), num_papers / OGBN_MAG["paper"]
    types = ["paper", "author", "institution", "field_of_study"]
    n = {t: max(C, round(OGBN_MAG[t] * scale)) for t in types}
    n["paper"] = int(num_papers)
    m = {r: round(OGBN_MAG[r] * scale) for _, r, _ in MAG_RELATIONS}
    m["writes"] = max(m["writes"], n["paper"] + n["author"])          # room for both covers
    m["has_topic"] = max(m["has_topic"], n["paper"] + n["field_of_study"])
    m["affiliated_with"] = max(m["affiliated_with"], n["institution"])

    rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(6)]
    r = rngs[0]                                             # planted classes, time, propensities
    cls = {t: r.permutation(np.arange(n[t]) % C) for t in types}
    rank = r.permutation(n["paper"])                        # paper time rank (0 = oldest)
    lomax, count = power_law, power_law + 1.0
    cited = _Pool(cls["paper"], C, _propensity(r, n["paper"], lomax), rank)
    citing = _Pool(cls["paper"], C, _propensity(r, n["paper"], count))
    authored = _Pool(cls["paper"], C, _propensity(r, n["paper"], count))
    topical = _Pool(cls["paper"], C)
    authors = _Pool(cls["author"], C, _propensity(r, n["author"], lomax))
    members = _Pool(cls["author"], C)
    insts = _Pool(cls["institution"], C, _propensity(r, n["institution"], lomax))
    fields = _Pool(cls["field_of_study"], C, _propensity(r, n["field_of_study"], lomax))

    a, w, ci, h = MAG_RELATIONS
    edges = {
        a: _block_edges(rngs[1], m["affiliated_with"], members, insts, cls["author"], cls["institution"],
                        mix["affiliated_with"], C, cover_b=True),
        w: _block_edges(rngs[2], m["writes"], authors, authored, cls["author"], cls["paper"],
                        mix["writes"], C, cover_a=True, cover_b=True),
        ci: _cite_edges(rngs[3], m["cites"], citing, cited, cls["paper"], rank, mix["cites"], C),
        h: _block_edges(rngs[4], m["has_topic"], topical, fields, cls["paper"], cls["field_of_study"],
                        mix["has_topic"], C, cover_a=True, cover_b=True),
    }

    r = rngs[5]                                             # paper features, in row blocks
    labels = cls["paper"].astype(np.int64)
    centroids = r.standard_normal((C, feature_dim), dtype=np.float32)
    x = np.empty((n["paper"], feature_dim), np.float32)
    step = max(1, (1 << 24) // feature_dim)
    for i in range(0, n["paper"], step):
        block = x[i:i + step]
        r.standard_normal(out=block, dtype=np.float32)
        block *= np.float32(feature_noise)
        block += centroids[labels[i:i + step]]
    cut = np.cumsum(np.asarray(split, np.float64)) * n["paper"]
    cut = np.round(cut).astype(np.int64)
    return TypedGraph(node_types=types, num_nodes=n, relations=list(MAG_RELATIONS), edges=edges,
                      features={"paper": x}, target="paper", labels=labels,
                      train_mask=rank < cut[0], val_mask=(rank >= cut[0]) & (rank < cut[1]),
                      test_mask=(rank >= cut[1]) & (rank < cut[2]), name=f"mag-like-{num_papers}")
