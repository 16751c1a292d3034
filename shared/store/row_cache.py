"""A loader's resident copy of the hottest feature rows of the parts it holds (out-of-core parts).

When a host's parts do not fit its memory budget (:mod:`shared.store.residency`), feature rows
are read from the store's memory maps, page by page.  :class:`RowCache` keeps the rows of the
highest-degree vertices of the held parts (degree descending, ties by id: the ranking of
:func:`~argosy.shared.hot_rows.hottest`, which the trainer's device cache uses too) in one dense
array of at most ``budget`` bytes, so a batch's hot rows cost no fault: under neighbour sampling
a vertex is drawn about in proportion to its degree.  The set is fixed for the life of the held
parts (built once, in one forward pass over each part's rows).

Example:
    >>> cache = RowCache(store, {0: feats0, 1: feats1}, budget=256 << 20)    # doctest: +SKIP
    >>> slots = cache.lookup(parts, rows)          # int32 cache row, -1 = read from the map
"""
from __future__ import annotations

import numpy as np

from argosy.shared.hot_rows import hottest
from argosy.shared.store.gather import gather_feature_rows

__all__ = ["RowCache"]


class RowCache:
    """The hottest ``budget`` bytes of feature rows of the parts in ``feats``.

    Shapes:
        feats: part -> float[n_p, F] (memory-mapped); buf: float[C, F] in the store's dtype;
        lookup(parts int64[m], rows int64[m]) -> int32[m].
    """

    def __init__(self, store, feats: dict[int, np.ndarray], budget: int, pool=None):
        parts = sorted(feats)
        f0 = feats[parts[0]]
        self.row_bytes = int(f0.shape[1]) * f0.dtype.itemsize
        k = store.num_parts
        sizes = np.zeros(k, np.int64)
        for p in parts:
            sizes[p] = feats[p].shape[0]
        self._off = np.zeros(k, np.int64)
        np.cumsum(sizes[:-1], out=self._off[1:])
        total = int(sizes.sum())
        deg = np.zeros(total, np.int32)              # int32: this is the O(held vertices) peak of the build
        ids = np.zeros(total, np.int64)
        for p in parts:
            pd = store.part(p)
            o = int(self._off[p])
            deg[o:o + sizes[p]] = np.diff(np.asarray(pd.indptr))
            ids[o:o + sizes[p]] = np.asarray(pd.nodes)
        rows = int(min(total, max(0, budget) // max(self.row_bytes, 1)))
        pos = np.sort(hottest(deg, ids, rows)) if rows else np.empty(0, np.int64)
        del deg, ids
        self.slot = np.full(total, -1, np.int32)
        self.slot[pos] = np.arange(rows, dtype=np.int32)
        self.buf = np.empty((rows, f0.shape[1]), f0.dtype)
        owner = np.searchsorted(self._off, pos, side="right") - 1     # the part of each cached position
        # ascending rows: each map read forward, by the pool's threads at once when there is one
        gather_feature_rows(feats, owner, pos - self._off[owner], np.arange(rows, dtype=np.int64), self.buf, pool)

    @property
    def rows(self) -> int:
        return int(self.buf.shape[0])

    def lookup(self, parts: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Cache row of each (part, local row) of a held part; -1 = not cached."""
        return self.slot[self._off[parts] + rows]
