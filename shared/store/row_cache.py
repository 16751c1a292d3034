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
    >>> slots = cache.lookup(keys, rows)           # int32 cache row, -1 = read from the map
"""
from __future__ import annotations

import numpy as np

from argosy.shared.hot_rows import hottest
from argosy.shared.store.gather import gather_feature_rows

__all__ = ["RowCache"]


class RowCache:
    """The hottest ``budget`` bytes of feature rows of the arrays in ``feats``.

    Shapes:
        feats: key -> float[n_k, F_k] (memory-mapped; a key is a part, or a part and node type:
        :mod:`shared.store.features`); buf: float[C, F] in the store's dtype (a narrower type's rows
        zero-padded); lookup(keys int64[m], rows int64[m]) -> int32[m].
    """

    def __init__(self, store, feats: dict[int, np.ndarray], budget: int, pool=None):
        layout = store.features
        keys = sorted(feats)
        width, dtype = layout.width, layout.dtype
        self.row_bytes = int(width) * dtype.itemsize
        span = {key: (lo, hi) for p in sorted({k // layout.T for k in keys}) for key, _, lo, hi in layout.keys(p)}
        sizes = np.zeros(store.num_parts * layout.T, np.int64)
        for key in keys:
            sizes[key] = feats[key].shape[0]
        self._off = np.zeros(sizes.shape[0], np.int64)
        np.cumsum(sizes[:-1], out=self._off[1:])
        total = int(sizes.sum())
        deg = np.zeros(total, np.int32)              # int32: this is the O(held vertices) peak of the build
        ids = np.zeros(total, np.int64)
        for key in keys:
            pd = store.part(key // layout.T)
            lo, hi = span[key]
            o = int(self._off[key])
            deg[o:o + sizes[key]] = np.diff(np.asarray(pd.indptr[lo:hi + 1]))
            ids[o:o + sizes[key]] = np.asarray(pd.nodes[lo:hi])
        rows = int(min(total, max(0, budget) // max(self.row_bytes, 1)))
        pos = np.sort(hottest(deg, ids, rows)) if rows else np.empty(0, np.int64)
        del deg, ids
        self.slot = np.full(total, -1, np.int32)
        self.slot[pos] = np.arange(rows, dtype=np.int32)
        self.buf = np.empty((rows, width), dtype)
        owner = np.searchsorted(self._off, pos, side="right") - 1     # the array (key) of each cached position
        # ascending rows: each map read forward, by the pool's threads at once when there is one
        gather_feature_rows(feats, owner, pos - self._off[owner], np.arange(rows, dtype=np.int64), self.buf, pool)

    @property
    def rows(self) -> int:
        return int(self.buf.shape[0])

    def lookup(self, keys: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Cache row of each (key, row) of a held array; -1 = not cached."""
        return self.slot[self._off[keys] + rows]
