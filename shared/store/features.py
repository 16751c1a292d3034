"""Where a vertex's feature row lives in a store: one file per part, or one per part and node type.

Why this module exists: every reader of feature rows (the loader's gather and halo server, the
out-of-core row cache, the trainer's device cache, full-graph training, the validator) asks the
same two questions, which vertices have a row and where it is, and answers them here only.

Two layouts:

* **one file per part** (a homogeneous store, and typed stores written before per-type files):
  ``part-N/features.npy`` ``float[n_p, F]``; the row of vertex ``v`` is ``local_index[v]``.
* **one file per part and featured node type** (``typed.feature_files == "per_type"``):
  ``part-N/features_t{t}.npy`` ``float[n_{p,t}, F_t]``, each type in its own width, and no file
  for a featureless type.  A part's vertices are stored in global id order and a type owns one id
  range, so the part's vertices of type ``t`` are the local rows ``[lo, lo + n_{p,t})`` with
  ``lo`` the part's vertices of the types before ``t`` (``typed.part_type_counts``); the row of
  ``v`` in its type's file is ``local_index[v] - lo``.

The wire and the caches carry rows of the store's ``feature_dim`` (the widest type): a narrower
type's rows are zero beyond its width, and a featureless type's vertices carry no row at all
(:meth:`FeatureLayout.featured`): the trainer's input row of such a vertex is zero, as it was when
it was stored as zeros, and its learned embedding is its input.

A *key* names one feature array: ``part * T + type`` (``T`` = 1 in the one-file layout, so a
key is the part).  :func:`~argosy.shared.store.gather.gather_feature_rows` groups rows by key.
"""
from __future__ import annotations

import numpy as np

from argosy.shared.errors import StoreFormatError

__all__ = ["FeatureLayout", "PER_TYPE", "type_file", "sent_rows"]

PER_TYPE = "per_type"
"""``manifest.typed["feature_files"]`` of a store with one feature file per part and type."""


def type_file(t: int) -> str:
    """The part file holding type ``t``'s feature rows (without ``.npy``)."""
    return f"features_t{int(t)}"


class FeatureLayout:
    """The feature files of a store and the row of every vertex in them (see the module docstring).

    Shapes: ``counts`` int64[k, T] vertices of each type per part; ``lo`` int64[k, T] each type's
    first local row per part; ``dims`` int64[T] each type's width (0: featureless).
    """

    def __init__(self, store):
        m = store.manifest
        self.store = store
        self.width = int(m.feature_dim)
        self.dtype = np.dtype(m.feature_dtype or "float32")
        t = m.typed or {}
        self.per_type = t.get("feature_files") == PER_TYPE
        k = m.num_parts
        if self.per_type:
            self.type_offsets = np.asarray(t["type_offsets"], np.int64)
            self.dims = np.asarray([int(t["feature_dims"].get(name, 0)) for name in t["node_types"]], np.int64)
            self.counts = np.asarray(t["part_type_counts"], np.int64).reshape(k, len(self.dims))
        else:
            self.type_offsets = np.asarray([0, m.num_nodes], np.int64)
            self.dims = np.asarray([self.width], np.int64)
            self.counts = np.asarray([[e.num_nodes] for e in m.parts], np.int64).reshape(k, 1)
        self.T = int(self.dims.shape[0])
        self.lo = np.zeros_like(self.counts)
        np.cumsum(self.counts[:, :-1], axis=1, out=self.lo[:, 1:])
        self.all_featured = bool((self.dims > 0).all()) or not self.width
        """Every vertex has a row (or none has: a featureless store's rows are zero-width)."""
        self._featured_type = self.dims > 0

    def keys(self, p: int) -> list[tuple[int, int, int, int]]:
        """``(key, type, lo, hi)`` of part ``p``'s feature arrays: its local rows ``[lo, hi)``."""
        return [(p * self.T + t, t, int(self.lo[p, t]), int(self.lo[p, t] + self.counts[p, t]))
                for t in range(self.T) if self.dims[t] > 0 and (self.counts[p, t] or not self.per_type)]

    def file(self, key: int) -> str:
        return "features" if not self.per_type else type_file(key % self.T)

    def types_of(self, ids: np.ndarray) -> np.ndarray:
        """Node type of each global id (all 0 in the one-file layout)."""
        if self.T == 1:
            return np.zeros(ids.shape[0], np.int64)
        return np.searchsorted(self.type_offsets, ids, "right") - 1

    def featured(self, ids: np.ndarray) -> np.ndarray | None:
        """bool[N]: which of ``ids`` have a feature row; None when all have (the common case)."""
        if self.all_featured:
            return None
        return self._featured_type[self.types_of(np.asarray(ids, np.int64))]

    def locate(self, ids: np.ndarray, parts: np.ndarray, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(keys, rows)`` int64 of featured ``ids`` whose parts and local rows are given."""
        parts = parts.astype(np.int64, copy=False)
        local = local.astype(np.int64, copy=False)
        if not self.per_type:
            return parts, local
        t = self.types_of(ids)
        return parts * self.T + t, local - self.lo[parts, t]

    def read(self, p: int, advice: str | None = "willneed") -> dict[int, np.ndarray]:
        """Part ``p``'s feature arrays by key, memory-mapped, checked against the manifest."""
        out = {}
        names = tuple(self.file(key) for key, *_ in self.keys(p))
        arrays = self.store.read_part(p, names, advice=advice)
        for key, t, lo, hi in self.keys(p):
            a = arrays[self.file(key)]
            want = (hi - lo, int(self.dims[t]))
            if a is None:
                raise StoreFormatError(f"{self.store.root}: part {p} has no {self.file(key)}.npy; its "
                                       f"{want[0]} vertices of that type need their feature rows")
            if a.dtype != self.dtype or a.shape != want:
                raise StoreFormatError(f"{self.store.root}: part {p} {self.file(key)}.npy is {a.dtype}{list(a.shape)}, "
                                       f"expected {self.dtype}{list(want)} (the manifest's)")
            out[key] = a
        return out

    def dense(self, p: int, out: np.ndarray | None = None) -> np.ndarray:
        """Part ``p``'s rows as one ``float[n_p, F]`` array, narrower and featureless types zero-padded
        (full-graph training holds the whole matrix anyway)."""
        n = int(self.store.manifest.parts[p].num_nodes)
        if out is None:
            out = np.empty((n, self.width), np.float32)
        arrays = self.read(p)
        if not self.per_type:
            out[...] = arrays[p] if arrays else 0
            return out
        out[...] = 0
        for key, t, lo, hi in self.keys(p):
            out[lo:hi, :self.dims[t]] = arrays[key]
        return out

    def file_bytes(self, p: int) -> int:
        """Bytes of part ``p``'s feature files on disk."""
        d = self.store.root / self.store.manifest.parts[p].path
        total = 0
        for key, *_ in self.keys(p):
            f = d / f"{self.file(key)}.npy"
            if f.exists():
                total += f.stat().st_size
        return total


def sent_rows(layout: FeatureLayout | None, nodes: np.ndarray, hot=None) -> np.ndarray | None:
    """Positions (int64, ascending) of a batch's rows that travel on the wire: nodes with a feature
    row (``layout``; None: all have) that the receiving trainer's cache ``hot`` lacks (None: no
    cache); None when every row travels.  The loader sends these rows, the validator counts them and
    the trainer scatters them, so all three use this one function."""
    keep = layout.featured(nodes) if layout is not None else None
    if hot is not None:
        miss = hot.slot[nodes] < 0
        keep = miss if keep is None else keep & miss
    return None if keep is None else np.flatnonzero(keep)
