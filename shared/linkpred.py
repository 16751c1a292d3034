"""Link prediction's data side: the edge split, the store's link arrays, negatives.

Why this module exists: ``--task link`` needs held-out edges that never reach message passing,
training edges that samplers can cut into work items, and negatives drawn the same way in every
process.  One module owns all three (metrics are in :mod:`shared.linkmetrics`).

**The split** (``--edge-split 0.85,0.05,0.10``) is a hash split: the undirected edge ``{u, v}``
goes to val or test when ``splitmix64(seed, min, max)`` falls in that fraction of the range.  It
streams (no edge list in memory, the same answer for both directions and for duplicates in any
chunk), so the counts are binomial around the fractions; the manifest records the exact counts.
``--val-edges V.npy --test-edges T.npy`` give the held-out edges instead (``(m, 2)`` pairs).
Either way the held-out edges, both directions, are removed from the store's graph before any
CSR is written, so no sampler can ever see them.

**The store's link arrays** (written into the store's temporary directory, before it is verified)::

    link_degrees.npy             # int32[n]  every vertex's training-graph degree
    part-NNNNN/train_edges.npy   # int64[e_p, 2]  (u, v), u < v, u owned by the part: each undirected
                                 #                training edge once, in the part of its lower endpoint
    part-NNNNN/{val,test}_pairs.npy   # int64[m_p, 2] held-out positives and sampled negatives whose
                                      #               first vertex the part owns
    part-NNNNN/{val,test}_labels.npy  # uint8[m_p]  1 = held-out edge, 0 = negative (not an edge)

and ``manifest.link`` (per-part counts, the split record).  Val/test negatives are uniform
vertex pairs that are edges of neither the training graph nor the held-out sets, as many as
positives (GAE's protocol), drawn with the split's seed.

Example:
    >>> sp = EdgeSplit(num_nodes=4, seed=0, fractions=(1.0, 0.0))      # everything held out for val
    >>> [len(s) for s, _ in sp.filter([(np.array([0, 1]), np.array([1, 0]))])]
    [0]
    >>> sp.held_out()["val"].tolist()
    [[0, 1]]
"""
from __future__ import annotations

import json
import weakref
from pathlib import Path

import numpy as np

from argosy.shared.config import NEG_SAMPLERS
from argosy.shared.errors import ConfigError, GraphFormatError
from argosy.shared.hashing import splitmix64

__all__ = ["EdgeSplit", "RelationEdgeSplit", "parse_edge_split", "load_pairs", "write_link_arrays", "link_counts", "pair_keys",
           "NEG_SAMPLERS", "negatives", "EVAL_PHASES", "part_pairs", "degree_cdf"]

EVAL_PHASES = ("val", "test")


def parse_edge_split(text: str | None) -> tuple[float, float] | None:
    """``"0.85,0.05,0.10"`` -> ``(0.05, 0.10)``, the val and test fractions (train is the rest)."""
    if text is None:
        return None
    usage = "expected --edge-split TRAIN,VAL,TEST fractions summing to 1, e.g. 0.85,0.05,0.10"
    try:
        vals = [float(v) for v in str(text).split(",")]
    except ValueError:
        raise ConfigError(f"--edge-split {text}: not three numbers; {usage}") from None
    if len(vals) != 3 or any(v < 0 for v in vals) or vals[0] <= 0 or abs(sum(vals) - 1) > 1e-6:
        raise ConfigError(f"--edge-split {text}: {usage} (got {vals})")
    return vals[1], vals[2]


def pair_keys(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """One int64 key per undirected pair: ``min * n + max`` (order-free).  Shapes: int[m] -> int64[m]."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    return np.minimum(a, b) * np.int64(n) + np.maximum(a, b)


def load_pairs(path: str, n: int, what: str) -> np.ndarray:
    """An ``(m, 2)`` integer pair file, checked: ids in ``[0, n)``, no self pairs.  -> int64[m, 2]."""
    try:
        a = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise GraphFormatError(f"{path}: cannot read {what} ({e})") from None
    if a.ndim != 2 or a.shape[1] != 2 or a.dtype.kind not in "iu":
        raise GraphFormatError(f"{path}: {what} must be an integer (m, 2) array of vertex pairs "
                               f"(got {a.dtype}{list(a.shape)})")
    a = a.astype(np.int64)
    if a.size and (a.min() < 0 or a.max() >= n):
        raise GraphFormatError(f"{path}: {what} ids span [{a.min()}, {a.max()}], outside [0, {n})")
    if (a[:, 0] == a[:, 1]).any():
        raise GraphFormatError(f"{path}: {what} holds self pairs (u, u), e.g. row {int(np.flatnonzero(a[:, 0] == a[:, 1])[0])}")
    return a


class EdgeSplit:
    """Removes held-out edges from an edge stream and remembers them.

    Args:
        num_nodes: vertices.  seed: the split's seed (the hash split and the negatives).
        fractions: ``(val, test)`` fractions of the undirected edges (the hash split), or
        val_edges / test_edges: explicit held-out pairs (int64[m, 2]).
    """

    def __init__(self, num_nodes: int, seed: int = 0, fractions: tuple[float, float] | None = None,
                 val_edges: np.ndarray | None = None, test_edges: np.ndarray | None = None):
        if (fractions is None) == (val_edges is None and test_edges is None):
            raise ConfigError("give either --edge-split fractions or --val-edges/--test-edges files, not both"
                              if fractions is not None else "no edge split given (--edge-split or --val-edges/--test-edges)")
        self.n, self.seed, self.fractions = int(num_nodes), int(seed), fractions
        self._given = {}
        if fractions is None:
            for name, pairs in (("val", val_edges), ("test", test_edges)):
                pairs = np.empty((0, 2), np.int64) if pairs is None else pairs
                keys = np.unique(pair_keys(pairs[:, 0], pairs[:, 1], self.n))
                self._given[name] = keys
            both = np.intersect1d(self._given["val"], self._given["test"])
            if both.size:
                a, b = divmod(int(both[0]), self.n)
                raise GraphFormatError(f"{both.size} edges are both val and test edges, e.g. ({a}, {b})")
        self._held: dict[str, list[np.ndarray]] = {"val": [], "test": []}
        self.removed_entries = 0

    def classify(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """0 = train, 1 = val, 2 = test for each entry (both directions of an edge agree).  -> int8[m]."""
        keys = pair_keys(src, dst, self.n)
        out = np.zeros(keys.shape[0], np.int8)
        if self.fractions is not None:
            h = splitmix64(keys.astype(np.uint64) ^ splitmix64(np.uint64(self.seed & 0xFFFFFFFFFFFFFFFF)))
            u = (h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
            val, test = self.fractions
            out[u < val + test] = 2
            out[u < val] = 1
        else:
            for c, name in ((1, "val"), (2, "test")):
                g = self._given[name]
                if g.size:
                    pos = np.minimum(np.searchsorted(g, keys), g.size - 1)
                    out[g[pos] == keys] = c
        return out

    def filter(self, chunks):
        """Yield each chunk's training entries; held-out ones (stored once, as u < v) are kept aside."""
        for chunk in chunks:                  # (src, dst) or (src, dst, weight, mirrored): filtered alike
            src, dst = np.asarray(chunk[0]), np.asarray(chunk[1])
            cls = self.classify(src, dst)
            keep = (cls == 0) | (src == dst)
            if not keep.all():
                self.removed_entries += int(np.count_nonzero(~keep))
                for c, name in ((1, "val"), (2, "test")):
                    sel = (cls == c) & (src < dst)
                    if sel.any():
                        self._held[name].append(pair_keys(src[sel], dst[sel], self.n))
                chunk = tuple(np.asarray(a)[keep] for a in chunk)
            yield chunk

    def held_out(self) -> dict[str, np.ndarray]:
        """``{"val": int64[m, 2], "test": ...}``: the held-out edges seen in the stream, ``u < v``, sorted."""
        out = {}
        for name, parts in self._held.items():
            keys = np.unique(np.concatenate(parts)) if parts else np.empty(0, np.int64)
            out[name] = np.stack([keys // self.n, keys % self.n], axis=1)
        return out

    def record(self) -> dict:
        """What the manifest records about the split (how, seed, counts)."""
        held = self.held_out()
        how = {"kind": "random", "val_fraction": self.fractions[0], "test_fraction": self.fractions[1]} \
            if self.fractions is not None else {"kind": "files"}
        return {**how, "seed": self.seed, "val_edges": int(held["val"].shape[0]), "test_edges": int(held["test"].shape[0])}


class RelationEdgeSplit(EdgeSplit):
    """The split of one relation's edges of a typed graph (recommendation: ``user buys item``).

    The typed store writer's chunks are entries ``(row, neighbour, relation)``: edge ``s -> d`` of
    relation ``r`` is the entry ``(d, s, r)`` and, with reverse relations, ``(s, d, r + R)``.  An
    edge is held out by the hash of its directed pair ``(s, d)``, so both of its entries leave the
    graph together; entries of other relations always stay.  Held-out pairs are ``(head, tail)``
    (``s`` of the source type, ``d`` of the destination type), negatives replace the tail by a
    vertex of the destination type (``tail_range``).

    Args:
        relation: the relation id ``r`` (the graph's own, not a reverse).  num_relations: the
            graph's relations R (entries ``r + R`` are reverses).  tail_range: ``[lo, hi)`` global
            ids of the destination type.
    """

    def __init__(self, num_nodes: int, seed: int, fractions: tuple[float, float], relation: int,
                 num_relations: int, tail_range: tuple[int, int], name: list | None = None):
        super().__init__(num_nodes, seed, fractions)
        self.relation, self.R, self.tail_range = int(relation), int(num_relations), (int(tail_range[0]), int(tail_range[1]))
        self.name = list(name or [])

    def classify_entries(self, row: np.ndarray, nbr: np.ndarray, rel: np.ndarray) -> np.ndarray:
        """0 = train, 1 = val, 2 = test per entry (a forward entry and its reverse agree)."""
        out = np.zeros(row.shape[0], np.int8)
        fwd, rev = rel == self.relation, rel == self.relation + self.R
        sel = fwd | rev
        if sel.any():
            head = np.where(fwd[sel], nbr[sel], row[sel]).astype(np.int64)
            tail = np.where(fwd[sel], row[sel], nbr[sel]).astype(np.int64)
            h = splitmix64((head * np.int64(self.n) + tail).astype(np.uint64)
                           ^ splitmix64(np.uint64(self.seed & 0xFFFFFFFFFFFFFFFF)))
            u = (h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
            val, test = self.fractions
            c = np.zeros(u.shape[0], np.int8)
            c[u < val + test] = 2
            c[u < val] = 1
            out[sel] = c
        return out

    def filter(self, chunks):
        """Yield each ``(row, neighbour, relation)`` chunk's training entries; a held-out edge is kept
        aside once, from its forward entry, as ``head * n + tail``."""
        for chunk in chunks:
            row, nbr, rel = (np.asarray(a) for a in chunk[:3])
            cls = self.classify_entries(row, nbr, rel)
            keep = cls == 0
            if not keep.all():
                self.removed_entries += int(np.count_nonzero(~keep))
                for c, name in ((1, "val"), (2, "test")):
                    sel = (cls == c) & (rel == self.relation)
                    if sel.any():
                        self._held[name].append(nbr[sel].astype(np.int64) * np.int64(self.n) + row[sel])
                chunk = tuple(np.asarray(a)[keep] for a in chunk)
            yield chunk

    def record(self) -> dict:
        return {**super().record(), "relation": self.name, "relation_id": self.relation,
                "tail_range": list(self.tail_range)}


def _relation_train_pairs(root: Path, entry, relation: int) -> np.ndarray:
    """A written typed part's training edges of ``relation``: ``(head, tail)`` from its forward entries."""
    d = root / entry.path
    nodes = np.load(d / "nodes.npy")
    indptr = np.load(d / "indptr.npy")
    rows = np.repeat(nodes.astype(np.int64), np.diff(indptr))
    sel = np.load(d / "edge_type.npy") == relation
    return np.stack([np.load(d / "indices.npy").astype(np.int64)[sel], rows[sel]], axis=1)


def _tail_negatives(heads: np.ndarray, lo: int, hi: int, n: int, forbid: np.ndarray,
                    rng: np.random.Generator) -> np.ndarray:
    """One negative per head: ``(head, t)`` with ``t`` uniform in ``[lo, hi)`` and ``head * n + t`` not
    in ``forbid`` (sorted keys of every known edge of the relation), redrawn until none is."""
    tails = rng.integers(lo, hi, size=heads.shape[0])
    for _ in range(64):
        keys = heads * np.int64(n) + tails
        pos = np.minimum(np.searchsorted(forbid, keys), max(forbid.size - 1, 0))
        bad = forbid[pos] == keys if forbid.size else np.zeros(keys.shape[0], np.bool_)
        if not bad.any():
            return np.stack([heads, tails], axis=1)
        tails[bad] = rng.integers(lo, hi, size=int(bad.sum()))
    raise GraphFormatError(f"could not draw negatives for {int(bad.sum())} heads: the relation is too dense")


def _write_relation_link_arrays(root: Path, manifest, split: RelationEdgeSplit, assign: np.ndarray):
    """:func:`write_link_arrays` for one relation of a typed store (see :class:`RelationEdgeSplit`)."""
    n, r = manifest.num_nodes, split.relation
    train, train_counts = [], []
    for entry in manifest.parts:
        pairs = _relation_train_pairs(root, entry, r)
        np.save(root / entry.path / "train_edges.npy", pairs)
        train_counts.append(int(pairs.shape[0]))
        train.append(pairs[:, 0] * np.int64(n) + pairs[:, 1])
    held = split.held_out()
    known = [np.concatenate(train)] + [h[:, 0] * np.int64(n) + h[:, 1] for h in held.values()]
    forbid = np.unique(np.concatenate(known))
    rng = np.random.default_rng([split.seed, 0x11A7])
    lo, hi = split.tail_range
    counts = {name: _save_eval_pairs(root, manifest, name, held[name],
                                     _tail_negatives(held[name][:, 0], lo, hi, n, forbid, rng), assign)
              for name in EVAL_PHASES}
    return train_counts, counts


def _save_eval_pairs(root: Path, manifest, name: str, pos: np.ndarray, neg: np.ndarray, assign: np.ndarray) -> list[int]:
    """A phase's held-out positives and negatives, labelled 1/0, each pair in the part owning its
    first vertex (``part-*/<name>_pairs.npy``, ``<name>_labels.npy``).  -> pairs per part."""
    pairs = np.concatenate([pos, neg])
    labels = np.concatenate([np.ones(pos.shape[0], np.uint8), np.zeros(neg.shape[0], np.uint8)])
    owner = assign[pairs[:, 0]]
    counts = []
    for entry in manifest.parts:
        sel = owner == entry.part
        np.save(root / entry.path / f"{name}_pairs.npy", pairs[sel])
        np.save(root / entry.path / f"{name}_labels.npy", labels[sel])
        counts.append(int(sel.sum()))
    return counts


def _part_keys(root: Path, entry, n: int) -> tuple[np.ndarray, np.ndarray]:
    """A written part's CSR as sorted entry keys ``src * n + dst`` and its ``u < v`` edges."""
    d = root / entry.path
    nodes = np.load(d / "nodes.npy")
    indptr = np.load(d / "indptr.npy")
    indices = np.load(d / "indices.npy").astype(np.int64)
    rows = np.repeat(nodes.astype(np.int64), np.diff(indptr))
    keys = rows * np.int64(n) + indices                 # sorted: nodes ascend, each row's neighbours ascend
    up = rows < indices
    return keys, np.stack([rows[up], indices[up]], axis=1)


def _negatives_for(root: Path, manifest, count: int, forbid: np.ndarray, rng: np.random.Generator,
                   assign: np.ndarray) -> np.ndarray:
    """``count`` distinct uniform pairs ``u != v`` that are not edges (training CSR or ``forbid`` keys)."""
    n = manifest.num_nodes
    got = np.empty(0, np.int64)
    for _ in range(64):
        need = count - got.shape[0]
        if need <= 0:
            break
        a = rng.integers(0, n, size=2 * need + 16)
        b = rng.integers(0, n, size=2 * need + 16)
        ok = a != b
        keys = pair_keys(a[ok], b[ok], n)
        keys = keys[~np.isin(keys, forbid) & ~np.isin(keys, got)]
        keys = keys[np.sort(np.unique(keys, return_index=True)[1])]   # distinct, in draw order
        lo, hi = keys // n, keys % n
        bad = np.zeros(keys.shape[0], np.bool_)
        for entry in manifest.parts:                    # an edge of the training graph: (lo, hi) in lo's row
            sel = np.flatnonzero(assign[lo] == entry.part)
            if sel.size:
                pk, _ = _part_keys(root, entry, n)
                q = lo[sel] * np.int64(n) + hi[sel]
                pos = np.minimum(np.searchsorted(pk, q), max(pk.size - 1, 0))
                if pk.size:
                    bad[sel] = pk[pos] == q
        got = np.concatenate([got, keys[~bad][:need]])
    if got.shape[0] < count:
        raise GraphFormatError(f"could draw only {got.shape[0]} of {count} negative pairs: the graph is too dense")
    return np.stack([got // n, got % n], axis=1)


def write_link_arrays(root: Path, manifest, split: EdgeSplit):
    """Write the link arrays into the (temporary) store at ``root`` and fill ``manifest.link``.

    Called by the store writer before it verifies the store (see :func:`shared.store.write_store_from_edges`).
    Returns the manifest, rewritten on disk.
    """
    from argosy.shared.store.manifest import MANIFEST_NAME
    n = manifest.num_nodes
    assign = np.load(root / "assignment.npy")
    degrees = np.zeros(n, np.int32)                     # training-graph degrees (degree^0.75 negatives)
    for entry in manifest.parts:
        d = root / entry.path
        degrees[np.load(d / "nodes.npy")] = np.diff(np.load(d / "indptr.npy"))
    np.save(root / "link_degrees.npy", degrees)
    if isinstance(split, RelationEdgeSplit):            # one relation of a typed graph
        train_counts, counts = _write_relation_link_arrays(root, manifest, split, assign)
    else:
        held = split.held_out()
        train_counts = []
        for entry in manifest.parts:
            _, up = _part_keys(root, entry, n)
            np.save(root / entry.path / "train_edges.npy", up)
            train_counts.append(int(up.shape[0]))
        rng = np.random.default_rng([split.seed, 0x11A7])
        forbid = np.unique(np.concatenate([pair_keys(h[:, 0], h[:, 1], n) for h in held.values()]))
        counts = {}
        for name in EVAL_PHASES:
            neg = _negatives_for(root, manifest, held[name].shape[0], forbid, rng, assign)
            forbid = np.union1d(forbid, pair_keys(neg[:, 0], neg[:, 1], n))      # val and test negatives differ
            counts[name] = _save_eval_pairs(root, manifest, name, held[name], neg, assign)
    manifest.link = {"split": split.record(), "train_edges": train_counts, "val_pairs": counts["val"],
                     "test_pairs": counts["test"], "removed_entries": split.removed_entries}
    (root / MANIFEST_NAME).write_text(manifest.to_json())
    return manifest


KG_PHASE_SPLIT = {"train": "train", "val": "valid", "test": "test"}
"""A knowledge graph's triple file per phase (``kg_<split>.npy``, :func:`shared.store.typed.write_kg_triples`)."""


def kg_relations(store) -> int:
    """Relations of a knowledge-graph store's triples (the graph's own, reverses excluded); 0: not a KG."""
    typed = getattr(store.manifest, "typed", None) or {}
    if not typed.get("triples"):
        return 0
    return int(typed.get("reverse") or len(typed.get("relations", ())))


def kg_trainer_args(store) -> dict:
    """A knowledge-graph store's relations and every known true triple (each part's train, valid
    and test, int64[M, 3]: the filtered ranking's filter), as the trainer core's keyword arguments;
    ``{}`` for a store without triples."""
    R = kg_relations(store)
    if not R:
        return {}
    known = [np.asarray(store.read_part(p, (f"kg_{s}",), advice=None)[f"kg_{s}"], np.int64).reshape(-1, 3)
             for p in range(store.num_parts) for s in KG_PHASE_SPLIT.values()]
    return {"kg_relations": R, "kg_known": np.concatenate(known)}


def link_counts(store, phase: str) -> np.ndarray:
    """Per part: training edges (``train``) or val/test pairs of a link store, or a knowledge graph's
    train/valid/test triples.  -> int64[k]."""
    if kg_relations(store):
        return np.asarray(store.manifest.typed["triples"][KG_PHASE_SPLIT[phase]], np.int64)
    link = getattr(store.manifest, "link", None) or {}
    key = "train_edges" if phase == "train" else f"{phase}_pairs"
    if key not in link:
        raise ConfigError(f"{store.root}: the store has no link-prediction split (partition it with "
                          "--edge-split 0.85,0.05,0.10 or --val-edges/--test-edges for --task link)")
    return np.asarray(link[key], np.int64)


_PAIRS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def part_pairs(store, part: int, phase: str) -> tuple[np.ndarray, np.ndarray]:
    """A part's training edges (``train``; labels all 1) or held-out pairs and labels, memory-mapped
    once per store; a knowledge graph's ``(head, tail)`` pairs of the phase's triples and their
    relation ids in place of labels.  Shapes: -> (int64[m, 2], uint8[m] | int64[m])."""
    cache = _PAIRS.setdefault(store, {})
    key = (int(part), phase)
    if key not in cache and kg_relations(store):   # a knowledge graph: (head, tail) and the relation as label
        name = f"kg_{KG_PHASE_SPLIT[phase]}"
        tr = store.read_part(part, (name,), advice=None)[name]
        if tr is None:
            raise ConfigError(f"{store.root}: part {part} has no {name}.npy (a knowledge-graph store's triples)")
        tr = np.asarray(tr, np.int64)
        cache[key] = (np.ascontiguousarray(tr[:, [0, 2]]), np.ascontiguousarray(tr[:, 1]))
    if key not in cache:
        if phase == "train":
            a = store.read_part(part, ("train_edges",), advice=None)["train_edges"]
            lab = np.ones(0 if a is None else a.shape[0], np.uint8)
        else:
            r = store.read_part(part, (f"{phase}_pairs", f"{phase}_labels"), advice=None)
            a, lab = r[f"{phase}_pairs"], r[f"{phase}_labels"]
        if a is None:
            raise ConfigError(f"{store.root}: part {part} has no link-prediction arrays (partition the graph "
                              "with --edge-split or --val-edges/--test-edges for --task link)")
        cache[key] = (a, lab)
    return cache[key]


def degree_cdf(store) -> np.ndarray:
    """Cumulative degree^0.75 of every vertex (``degree`` negatives).  -> float64[n]."""
    cache = _PAIRS.setdefault(store, {})
    if "cdf" not in cache:
        deg = store._load("link_degrees.npy")
        cache["cdf"] = np.cumsum(np.asarray(deg, np.float64) ** 0.75)
    return cache["cdf"]


# ----------------------------------------------------------------------------- training negatives
def negatives(kind: str, src: np.ndarray, dst: np.ndarray, k: int, num_nodes: int, rng: np.random.Generator,
              degree_cdf: np.ndarray | None = None, low: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``k`` negatives per positive ``(src[i], dst[i])``: the source kept, the destination replaced
    (PyG's and DGL's corruption of the destination).

    ``uniform``: destinations uniform over the vertices ``[low, num_nodes)`` (one relation's
    destination type: its id range); ``degree``: drawn by ``degree_cdf`` (cumulative degree^0.75,
    float64[n]) within that range; ``in_batch``: the destinations of other positives of the
    batch (uniform over them).  A negative may coincide with an edge (unlikely on sparse graphs;
    every library samples them this way).  Shapes: src, dst int64[P] -> (int64[P*k], int64[P*k]),
    negative ``j`` of positive ``i`` at ``i * k + j``.
    """
    P = src.shape[0]
    nsrc = np.repeat(src, k)
    if kind == "uniform":
        ndst = rng.integers(low, num_nodes, size=P * k)
    elif kind == "degree":
        if degree_cdf is None:
            raise ValueError("degree negatives need degree_cdf")
        base = degree_cdf[low - 1] if low > 0 else 0.0
        ndst = np.searchsorted(degree_cdf, base + rng.random(P * k) * (degree_cdf[num_nodes - 1] - base), side="right")
        ndst = np.clip(ndst, low, num_nodes - 1)
    elif kind == "in_batch":
        ndst = dst[rng.integers(0, max(P, 1), size=P * k)] if P else np.empty(0, np.int64)
    else:
        raise ConfigError(f"negative sampler must be one of {NEG_SAMPLERS} (got {kind!r})")
    return nsrc.astype(np.int64), np.asarray(ndst, np.int64)


def split_summary(manifest) -> str:
    """One line describing a store's link split (for logs and ``argosy inspect``)."""
    return json.dumps(getattr(manifest, "link", {}).get("split", {}))
