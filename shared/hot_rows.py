"""The trainer's feature cache: which rows it keeps on its device, as a pure function of the store.

With ``--gpu-cache BYTES`` a trainer keeps the feature rows of the highest-degree vertices (ties
by id, ascending) on its device, as many as ``BYTES`` holds, and loaders leave those rows out of
the batches they send it (``FeatureBatch.feature_cache`` names the cache; the trainer fills the
left-out rows from its copy).  The cached set depends only on the store and the row count, so a
loader derives the same set from the count the trainer publishes in its registration
(:meth:`HotRows.published`), and refuses to leave rows out when its own digest differs
(:meth:`HotRows.matching`): a trainer never receives a batch built for another cache.

Example:
    >>> hot = HotRows.build(store, rows=1000)              # doctest: +SKIP
    >>> slots, miss = hot.lookup(batch.nodes)              # doctest: +SKIP
"""
from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

import numpy as np

from argosy.shared.errors import ConfigError
from argosy.shared.store import PartitionStore
from argosy.shared.store.gather import gather_feature_rows

__all__ = ["HotRows", "hottest", "cache_rows", "AUTO_FRACTION"]

logger = logging.getLogger(__name__)

AUTO_FRACTION = 0.5
"""``--gpu-cache auto`` on CUDA: at most this fraction of the device memory free after the model is built."""


def _degrees(store: PartitionStore) -> np.ndarray:
    """int64[n]: every vertex's stored degree (its adjacency row length)."""
    n = int(store.manifest.num_nodes)
    deg = np.zeros(n, np.int64)
    for p in range(store.num_parts):
        pd = store.part(p)
        deg[np.asarray(pd.nodes)] = np.diff(np.asarray(pd.indptr))
    return deg


def hottest(deg: np.ndarray, ids: np.ndarray | None, rows: int) -> np.ndarray:
    """Positions of the ``rows`` highest ``deg``, degree descending, ties by ``ids`` ascending
    (``None``: the positions are the ids).  The one ranking every feature cache uses.

    Shapes: deg int[m]; ids int[m] | None -> int64[min(rows, m)]."""
    m = deg.shape[0]
    key = np.arange(m) if ids is None else ids
    if rows >= m:
        return np.lexsort((key, -deg)).astype(np.int64)
    neg = -deg
    kth = np.partition(neg, rows - 1)[rows - 1]     # top `rows` by degree: a partition, then one sort of those
    cand = np.flatnonzero(neg <= kth)                # every position at least as hot as the rows-th
    return cand[np.lexsort((key[cand], neg[cand]))][:rows].astype(np.int64)


def cache_rows(store: PartitionStore, budget: int) -> int:
    """Rows a cache of ``budget`` bytes holds (in the store's dtype), at most every vertex."""
    m = store.manifest
    row = int(m.feature_dim) * np.dtype(m.feature_dtype or "float32").itemsize
    if budget < 0:
        raise ConfigError(f"--gpu-cache must be >= 0 bytes or auto (got {budget})")
    return int(min(int(m.num_nodes), budget // max(row, 1)))


@dataclass(frozen=True, eq=False)
class HotRows:
    """The cached set: ``ids`` in slot order and the slot of every vertex.

    Shapes:
        ids: int64[C] global ids, degree descending, ties by id ascending; slot: int32[n] the row of
        each global id in the cache, -1 = not cached.
    """

    ids: np.ndarray
    slot: np.ndarray
    digest: str
    """16 hex digits over the store's shape and ``ids``: what the wire and the registry carry."""
    row_bytes: int

    @property
    def rows(self) -> int:
        return int(self.ids.shape[0])

    @classmethod
    def build(cls, store: PartitionStore, rows: int) -> "HotRows":
        m = store.manifest
        n = int(m.num_nodes)
        if not 1 <= rows <= n:
            raise ConfigError(f"a feature cache holds 1..{n} rows of this store (got {rows})")
        deg = _degrees(store)
        featured = store.features.featured(np.arange(n))
        if featured is not None:             # a featureless node type's vertices have no row to cache
            deg[~featured] = -1
            rows = min(rows, int(np.count_nonzero(featured)))
        ids = hottest(deg, None, rows).astype(np.int64)
        slot = np.full(n, -1, np.int32)
        slot[ids] = np.arange(rows, dtype=np.int32)
        dtype = np.dtype(m.feature_dtype or "float32")
        h = hashlib.sha256(f"{n}:{m.feature_dim}:{dtype.name}:{rows}:".encode())
        h.update(ids.tobytes())
        return cls(ids=ids, slot=slot, digest=h.hexdigest()[:16], row_bytes=int(m.feature_dim) * dtype.itemsize)

    def lookup(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(slots, miss)`` of a batch's nodes: int32[N] cache rows (-1 = not cached) and
        int64[M] positions of the rows the wire carries, ascending."""
        slots = self.slot[nodes]
        return slots, np.flatnonzero(slots < 0)

    def gather(self, store: PartitionStore) -> np.ndarray:
        """The cached rows from the store, in slot order: float[C, F] in the store's dtype."""
        m, layout = store.manifest, store.features
        out = np.empty((self.rows, int(m.feature_dim)), np.dtype(m.feature_dtype or "float32"))
        parts = np.asarray(store.assignment)[self.ids]
        for p in np.unique(parts).tolist():
            sel = np.flatnonzero(parts == p)
            ids = self.ids[sel]
            keys, rows = layout.locate(ids, parts[sel], np.asarray(store.local_index)[ids])
            order = np.argsort(rows, kind="stable")        # ascending rows: one forward pass over each map
            gather_feature_rows(layout.read(p), keys[order], rows[order], sel[order].astype(np.int64), out)
        if out.size and not np.isfinite(out).all():
            raise ConfigError(f"store {store.root} holds NaN/inf feature values among the {self.rows} cached rows")
        return out

    def published(self, budget: int) -> dict:
        """What a trainer registers, so loaders can derive and check the same set."""
        return {"rows": self.rows, "digest": self.digest, "bytes": self.rows * self.row_bytes, "budget": int(budget)}

    @staticmethod
    def matching(store: PartitionStore, published: dict | None, known: dict[int, "HotRows"] | None = None,
                 who: str = "the trainer") -> "HotRows | None":
        """The cache a trainer published, derived here; None when it has none.

        Raises:
            ConfigError: this store gives another set for the same row count (another store or
                store version): the caller must send every row.
        """
        if not published or not int(published.get("rows", 0)):
            return None
        rows = int(published["rows"])
        hot = (known or {}).get(rows)
        if hot is None:
            hot = HotRows.build(store, rows)
            if known is not None:
                known[rows] = hot
        if hot.digest != published.get("digest"):
            raise ConfigError(f"{who} caches {rows} feature rows as {published.get('digest')!r}, but this store's "
                              f"{rows} hottest rows are {hot.digest!r} (another store or store version): "
                              "every row will be sent")
        return hot
