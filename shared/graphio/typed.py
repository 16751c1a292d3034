"""The typed (heterogeneous) graph in memory: :class:`TypedGraph`, PyG ``HeteroData``-shaped.

Why this module exists: every typed input (RDF N-Triples, knowledge-graph triples, the typed
directory layout, OGB heterogeneous directories, a PyG ``HeteroData``) is read into this one
object, and the store writer takes it from here.  A homogeneous graph is the one-type,
one-relation case of the same thing.

Id space: node types are laid out one after another in ``node_types`` order, so type ``t``
owns the global ids ``[type_offsets[t], type_offsets[t + 1])``; ids inside ``edges``,
``features`` and ``labels`` are *local to their type* (``0 .. num_nodes[t] - 1``), as in PyG.
Relations are canonical edge types ``(src_type, relation, dst_type)``; relation id ``r`` is the
position in ``relations``.  An edge ``(s, d)`` of relation ``r`` is a message ``s -> d``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from argosy.shared.errors import GraphFormatError

__all__ = ["TypedGraph", "Relation", "REVERSE_PREFIX", "looks_typed"]

Relation = tuple[str, str, str]
"""A canonical edge type: ``(src_type, relation_name, dst_type)``."""

REVERSE_PREFIX = "rev_"
"""Name prefix of the reverse relation added for each relation (``(d, rev_r, s)`` for ``(s, r, d)``)."""


def looks_typed(path) -> bool:
    """Whether ``path`` is a typed input, by its layout (and at most a file's first line): the one
    detection, :func:`~argosy.shared.graphio.typed_open.typed_format`."""
    from argosy.shared.graphio.typed_open import typed_format
    return typed_format(path) is not None


@dataclass
class TypedGraph:
    """A heterogeneous graph with node data on its types.

    Shapes:
        edges[rel]: ``(src int64[m_r], dst int64[m_r])`` type-local ids;
        features[type]: float32[n_type, F_type] (each type its own width; a type without an
        entry is featureless: it gets a learned embedding);
        labels: int64[n_target] (-1 = unlabelled) on ``target``; train/val/test_mask: bool[n_target];
        triples[split]: int64[m_split, 3] ``(head, relation id, tail)`` in *global* ids (knowledge
        graphs: ``train``, ``valid``, ``test``); node_names[type]: str array[n_type] (optional).
    """

    node_types: list[str]
    num_nodes: dict[str, int]
    relations: list[Relation]
    edges: dict[Relation, tuple[np.ndarray, np.ndarray]]
    features: dict[str, np.ndarray] = field(default_factory=dict)
    target: str | None = None
    labels: np.ndarray | None = None
    train_mask: np.ndarray | None = None
    val_mask: np.ndarray | None = None
    test_mask: np.ndarray | None = None
    triples: dict[str, np.ndarray] = field(default_factory=dict)
    node_names: dict[str, np.ndarray] = field(default_factory=dict)
    label_names: list[str] | None = None
    name: str = "graph"

    # ---- derived -------------------------------------------------------------------------
    @property
    def type_offsets(self) -> np.ndarray:
        """int64[T + 1]: type ``t`` owns global ids ``[off[t], off[t + 1])``."""
        return np.concatenate([[0], np.cumsum([self.num_nodes[t] for t in self.node_types])]).astype(np.int64)

    @property
    def total_nodes(self) -> int:
        return int(sum(self.num_nodes[t] for t in self.node_types))

    @property
    def total_edges(self) -> int:
        return int(sum(int(s.shape[0]) for s, _ in self.edges.values()))

    def offset(self, node_type: str) -> int:
        return int(self.type_offsets[self.node_types.index(node_type)])

    def relation_segments(self) -> list[tuple[np.ndarray, np.ndarray, int, int]]:
        """``(src, dst, src_offset, dst_offset)`` per relation, in relation order: its type-local ids
        and the offsets that make them global (``src + src_offset``), without copying them."""
        off = {t: int(o) for t, o in zip(self.node_types, self.type_offsets)}
        return [(*self.edges[key], off[key[0]], off[key[2]]) for key in self.relations]

    def global_edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(src, dst, rel)``: every edge in global ids, with its relation id (int64, int64, int32)."""
        src, dst, rel = [], [], []
        for r, (s, d, so, do) in enumerate(self.relation_segments()):
            src.append(np.asarray(s, np.int64) + so)
            dst.append(np.asarray(d, np.int64) + do)
            rel.append(np.full(len(s), r, np.int32))
        if not src:
            return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int32)
        return np.concatenate(src), np.concatenate(dst), np.concatenate(rel)

    def node_type_of(self) -> np.ndarray:
        """int16[n]: the type index of every global id."""
        return np.repeat(np.arange(len(self.node_types), dtype=np.int16),
                         [self.num_nodes[t] for t in self.node_types])

    def validate(self, source: str = "typed graph") -> "TypedGraph":
        """Raise :class:`GraphFormatError` (one line naming ``source`` and the fault) on any
        inconsistency: a relation naming an unknown type, ids out of a type's range, node data of
        the wrong length, labels or masks without a target type."""
        types = set(self.node_types)
        if len(types) != len(self.node_types):
            raise GraphFormatError(f"{source}: node types repeat ({self.node_types})")
        for t in self.node_types:
            if t not in self.num_nodes or int(self.num_nodes[t]) < 0:
                raise GraphFormatError(f"{source}: node type {t!r} has no vertex count")
        if len(set(self.relations)) != len(self.relations):
            raise GraphFormatError(f"{source}: relations repeat")
        for key in self.relations:
            if len(key) != 3:
                raise GraphFormatError(f"{source}: relation {key!r} is not (src_type, relation, dst_type)")
            for t in (key[0], key[2]):
                if t not in types:
                    raise GraphFormatError(f"{source}: relation {key!r} names unknown node type {t!r} "
                                           f"(types: {', '.join(self.node_types)})")
            if key not in self.edges:
                raise GraphFormatError(f"{source}: relation {key!r} has no edges entry")
            s, d = self.edges[key]
            if len(s) != len(d):
                raise GraphFormatError(f"{source}: relation {key!r}: {len(s)} sources but {len(d)} destinations")
            for ids, t, end in ((s, key[0], "source"), (d, key[2], "destination")):
                ids = np.asarray(ids)
                if ids.size and (ids.dtype.kind not in "iu"):
                    raise GraphFormatError(f"{source}: relation {key!r}: {end} ids are {ids.dtype}, not integers")
                if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= int(self.num_nodes[t])):
                    bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
                    raise GraphFormatError(f"{source}: relation {key!r}: {end} id {bad} is out of node type "
                                           f"{t!r}'s range [0, {self.num_nodes[t]})")
        extra = set(self.edges) - set(self.relations)
        if extra:
            raise GraphFormatError(f"{source}: edges given for undeclared relation(s) {sorted(extra)}")
        for t, x in self.features.items():
            if t not in types:
                raise GraphFormatError(f"{source}: features given for unknown node type {t!r}")
            if x.ndim != 2 or x.shape[0] != int(self.num_nodes[t]):
                raise GraphFormatError(f"{source}: features of node type {t!r} have shape {x.shape}; expected "
                                       f"({self.num_nodes[t]}, F)")
            if x.dtype.kind != "f":
                raise GraphFormatError(f"{source}: features of node type {t!r} are {x.dtype}, not floats")
        node_data = [(k, getattr(self, k)) for k in ("labels", "train_mask", "val_mask", "test_mask")]
        if any(v is not None for _, v in node_data):
            if self.target not in types:
                raise GraphFormatError(f"{source}: labels/masks given but the target node type {self.target!r} "
                                       f"is not one of {', '.join(self.node_types)}")
            n_t = int(self.num_nodes[self.target])
            for k, v in node_data:
                if v is not None and np.asarray(v).shape != (n_t,):
                    raise GraphFormatError(f"{source}: {k} has shape {np.asarray(v).shape}; the target type "
                                           f"{self.target!r} has {n_t} vertices")
        n = self.total_nodes
        for split, tr in self.triples.items():
            tr = np.asarray(tr)
            if tr.ndim != 2 or tr.shape[1] != 3:
                raise GraphFormatError(f"{source}: {split} triples have shape {tr.shape}; expected (m, 3)")
            if tr.size and (tr[:, [0, 2]].min() < 0 or tr[:, [0, 2]].max() >= n
                            or tr[:, 1].min() < 0 or tr[:, 1].max() >= len(self.relations)):
                raise GraphFormatError(f"{source}: {split} triples hold an entity or relation id out of range")
        return self
