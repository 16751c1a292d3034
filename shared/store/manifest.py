"""The store format: a versioned JSON manifest plus memory-mappable ``.npy`` arrays.

Layout of a store directory (all paths in the manifest are relative to its root)::

    STORE/
    ├── manifest.json          # this schema; format_version first
    ├── assignment.npy         # int32[n]   part of every vertex (global id -> part)
    ├── local_index.npy        # int32|int64[n]  row of every vertex inside its part
    └── part-00000/
        ├── nodes.npy          # int64[n_p]  global ids owned by the part, ascending
        ├── indptr.npy         # int64[n_p + 1]  CSR over owned vertices
        ├── indices.npy        # int32|int64[e_p]  neighbours, GLOBAL ids, ascending per row
        ├── features.npy       # float32|float16[n_p, F]   (if the graph has features; a typed store
        │                      #   has features_t{t}.npy [n_{p,t}, F_t] per featured type instead)
        ├── edge_weight.npy    # float32[e_p]  weight of each entry, aligned with indices (if weighted)
        ├── weighted_degree.npy  # float32[n_p]  sum of each row's edge weights (if weighted)
        ├── edge_type.npy      # int16|int32[e_p]  relation id of each entry, aligned with indices (if typed)
        ├── labels.npy         # int64[n_p]  -1 = unlabelled (if the graph has labels)
        └── {train,val,test}_mask.npy   # bool[n_p]

Arrays are plain ``.npy`` (never pickles) so any process can ``np.load(mmap_mode="r")`` them.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from argosy.shared.errors import StoreFormatError

__all__ = ["FORMAT_VERSION", "Manifest", "PartEntry", "MANIFEST_NAME", "edge_type_dtype"]

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"


def edge_type_dtype(num_relations: int):
    """``edge_type.npy``'s dtype: int16, or int32 from 32,768 relations on."""
    import numpy as np
    return np.dtype(np.int16) if num_relations < 2**15 else np.dtype(np.int32)


@dataclass
class PartEntry:
    """One partition's sizes and array files."""

    part: int
    num_nodes: int
    """Vertices owned by the part."""
    num_edges: int
    """Directed adjacency entries stored for those vertices (each undirected edge counts once per endpoint)."""
    num_train: int = 0
    cut_edges: int = 0
    """Adjacency entries that point to a vertex owned by another part."""
    path: str = ""


@dataclass
class Manifest:
    """Everything a reader needs to interpret a store, written as ``manifest.json``."""

    num_nodes: int
    num_edges: int
    """Undirected edges (arcs when ``directed``)."""
    num_parts: int
    index_dtype: str
    feature_dim: int = 0
    feature_dtype: str = ""
    num_classes: int = 0
    splits: dict = field(default_factory=dict)
    """Vertices per split: ``{"train": 140, "val": 500, "test": 1000}``."""
    partition: dict = field(default_factory=dict)
    """method, order, seed, seconds, edge_cut, edge_cut_fraction, balance, edge_balance (adjacency
    entries of the fullest part over the mean), part_sizes."""
    parts: list[PartEntry] = field(default_factory=list)
    name: str = "graph"
    format_version: int = FORMAT_VERSION
    directed: bool = False
    """The CSR holds arcs as given (``--directed``), not both directions of every edge."""
    edge_weights: bool = False
    """Every part has ``edge_weight.npy`` and ``weighted_degree.npy`` (written only when True, so an
    unweighted store's manifest is the same bytes as before weights existed)."""
    link: dict = field(default_factory=dict)
    """Link prediction's edge split, when the store has one (:mod:`shared.linkpred`): ``split``
    (how, seed, held-out counts) and per part ``train_edges``, ``val_pairs``, ``test_pairs``
    (written only when set)."""

    typed: dict = field(default_factory=dict)
    """A heterogeneous store (written only when set): ``node_types`` (names, in id-range order),
    ``type_offsets`` (type ``t`` owns global ids ``[off[t], off[t+1])``), ``relations`` (``[src_type,
    relation, dst_type]`` per relation id, reverse relations included), ``reverse`` (how many of the
    relations are added reverses), ``target`` (the labelled node type), ``feature_dims`` (per type;
    0 = featureless, a learned embedding), ``label_names``; with features, ``feature_files``
    (``per_type``) and ``part_type_counts`` (``[part][type]`` vertices; :mod:`shared.store.features`).  An entry ``(v, u)`` of relation ``r`` in
    ``v``'s row is the message ``u -> v`` along ``r``."""

    @property
    def num_relations(self) -> int:
        """Relation ids in ``edge_type.npy`` (0: an untyped store)."""
        return len(self.typed.get("relations", ()))

    def to_json(self) -> str:
        d = asdict(self)
        d = {"format_version": d.pop("format_version"), **d}
        if not d["edge_weights"]:
            del d["edge_weights"]
        if not d["link"]:                  # likewise a store without a link split
            del d["link"]
        if not d["typed"]:                 # and an untyped one
            del d["typed"]
        return json.dumps(d, indent=1)

    @classmethod
    def load(cls, root: str | Path) -> "Manifest":
        path = Path(root) / MANIFEST_NAME
        if not path.exists():
            raise StoreFormatError(f"{root}: not an Argosy store (no {MANIFEST_NAME})")
        try:
            d = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise StoreFormatError(f"{path}: corrupt manifest ({e})") from None
        version = d.get("format_version")
        if version != FORMAT_VERSION:
            raise StoreFormatError(
                f"{path}: store format version {version!r} is not supported by this Argosy "
                f"(reads version {FORMAT_VERSION}); re-partition the graph with this version")
        try:
            parts = [PartEntry(**p) for p in d.pop("parts")]
            return cls(parts=parts, **d)
        except (TypeError, KeyError) as e:
            raise StoreFormatError(f"{path}: manifest fields do not match format {FORMAT_VERSION} ({e})") from None
