"""Byte-budgeted caches of halo rows (rows of vertices held on another host).

A sampler caches adjacency rows (:class:`AdjacencyCache`), a loader feature rows
(:class:`FeatureCache`).  Both share one policy (:class:`_Policy`), which depends only on what this
process actually requests, never on how the graph is partitioned:

* **Admission.** Every fetched row is admitted while the budget has room.  A full cache replaces
  its least-requested rows by a fetched row only if that row has been requested more often than
  each row it evicts, by a margin (``MARGIN``): a scan over more rows than fit (e.g. an epoch whose
  halo exceeds the budget) leaves the cache as it is instead of flushing it, so a cyclic access
  pattern keeps hitting on the rows already cached.
* **Frequency.** A saturating per-vertex counter of requests (hits and misses), halved after every
  ``AGING x capacity`` requests so that the hot set can move (parts moving, a new phase).
* **Budget.** Only row bytes count (ids, and a weighted adjacency cache's float32 edge weights):
  ``nbytes <= budget`` at all times (tested).  The per-vertex
  maps (int32 slot + uint8 count) are allocated zeroed and touched only at requested vertices.

With a budget at least the working set, every row is fetched once and then always hits: with full
neighbourhoods (the same boundary rows every epoch) the second epoch hits 100 % (tested).  The
previous policy admitted only the remote vertices adjacent to the held parts (a "hot set" ranked
once); with a min-cut partition most remote rows a 2-hop batch needs are 2 hops away, outside that
set, so GREM missed them every epoch (docs/distributed.md, "Halo cache").
"""
from __future__ import annotations

import numpy as np

__all__ = ["AdjacencyCache", "FeatureCache"]

MARGIN = 1
"""A fetched row replaces a cached one only if requested more than ``MARGIN`` times more often."""
AGING = 8
"""Counters halve after ``AGING x capacity`` requests (at least 4096)."""


def _row_index(starts: np.ndarray, lens: np.ndarray):
    """Rows given by (start, length) of a flat buffer: their new CSR offsets (int64[m+1]) and the
    buffer positions of their entries (int64[sum(lens)]), to take values and weights alike."""
    out_ptr = np.zeros(lens.shape[0] + 1, np.int64)
    np.cumsum(lens, out=out_ptr[1:])
    return out_ptr, np.repeat(starts - out_ptr[:-1], lens) + np.arange(out_ptr[-1])


class _Policy:
    """Entry slots keyed by vertex id, request counters, and the replacement decision.

    Args:
        num_nodes: ids lie in ``[0, num_nodes)``.
        capacity: most entries the cache may hold (row count for features; an upper bound for adjacency).
    """

    def __init__(self, num_nodes: int, capacity: int, initial: int | None = None):
        self.capacity = int(capacity)
        self.slot1 = np.zeros(num_nodes, np.int32)          # entry + 1; 0 = not cached
        self.freq = np.zeros(num_nodes, np.uint8)
        n0 = self.capacity if initial is None else min(int(initial), self.capacity)
        self.keys = np.full(n0, -1, np.int64)               # vertex of each entry, -1 = free
        self._touches = 0
        self._age_every = max(AGING * self.capacity, 4096)

    def reserve(self, free: int) -> int:
        """Grow the entry table (up to ``capacity``) so at least ``free`` entries are free; returns the size."""
        have = int(np.count_nonzero(self.keys < 0))
        if have < free and self.keys.shape[0] < self.capacity:
            size = min(max(2 * self.keys.shape[0], self.keys.shape[0] + free - have), self.capacity)
            self.keys = np.concatenate([self.keys, np.full(size - self.keys.shape[0], -1, np.int64)])
        return self.keys.shape[0]

    @property
    def entries(self) -> int:
        return int(np.count_nonzero(self.keys >= 0))

    def record(self, ids: np.ndarray) -> np.ndarray:
        """Count a request for ``ids``; returns their entries (-1 where not cached)."""
        f = self.freq[ids]
        self.freq[ids] = np.where(f < 255, f + 1, f)
        self._touches += ids.shape[0]
        if self._touches >= self._age_every:
            self.freq >>= 1
            self._touches = 0
        return self.slot1[ids].astype(np.int64) - 1

    def candidates(self, ids: np.ndarray) -> np.ndarray:
        """Positions in ``ids`` of distinct vertices not cached, most requested first."""
        _, first = np.unique(ids, return_index=True)
        first = first[self.slot1[ids[first]] == 0]
        return first[np.argsort(-self.freq[ids[first]].astype(np.int64), kind="stable")]

    def victims(self) -> np.ndarray:
        """Cached entries, least requested first."""
        live = np.flatnonzero(self.keys >= 0)
        return live[np.argsort(self.freq[self.keys[live]], kind="stable")]

    def admit(self, cand_freq: np.ndarray, victim_freq_needed: np.ndarray) -> int:
        """How many of the candidates (most requested first) beat the costliest victim they need."""
        ok = cand_freq.astype(np.int64) > victim_freq_needed.astype(np.int64) + MARGIN
        return int(np.argmin(ok)) if not ok.all() else int(ok.shape[0])

    def evict(self, entries: np.ndarray) -> None:
        self.slot1[self.keys[entries]] = 0
        self.keys[entries] = -1

    def bind(self, entries: np.ndarray, vertices: np.ndarray) -> None:
        self.keys[entries] = vertices
        self.slot1[vertices] = (entries + 1).astype(np.int32)


class FeatureCache:
    """Feature rows of remote vertices, at most ``budget`` bytes (``budget // row bytes`` rows).

    Shapes: get(ids int64[m]) -> (hit bool[m], rows float[h, F]); lookup(ids int64[m]) -> int64[m]
    rows of ``buf`` (-1 = miss); put(ids int64[k], rows float[k, F]).
    """

    def __init__(self, num_nodes: int, dim: int, dtype, budget: int):
        row = max(int(dim), 1) * np.dtype(dtype).itemsize
        self.budget = int(budget)
        self.policy = _Policy(num_nodes, max(self.budget, 0) // row)
        self.buf = np.empty((self.policy.capacity, dim), dtype)      # pages touched only as filled
        self._free = self.policy.capacity                            # entries [capacity - free, capacity) never used

    @property
    def nbytes(self) -> int:
        """Bytes of rows held now (never above ``budget``)."""
        return self.policy.entries * self.buf.shape[1] * self.buf.itemsize

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """Count a request for ``ids``; their rows of :attr:`buf` (-1 where not cached), for a
        caller that copies the hits straight to where they go."""
        return self.policy.record(ids)

    def get(self, ids: np.ndarray):
        s = self.lookup(ids)
        hit = s >= 0
        return hit, self.buf[s[hit]]

    def put(self, ids: np.ndarray, rows: np.ndarray) -> None:
        """Offer fetched rows (``ids`` not cached) to the cache."""
        pol = self.policy
        if pol.capacity == 0 or ids.shape[0] == 0:
            return
        cand = pol.candidates(ids)
        n_new = min(self._free, cand.shape[0])
        if n_new:
            start = pol.capacity - self._free
            ent = np.arange(start, start + n_new)
            pol.bind(ent, ids[cand[:n_new]])
            self.buf[ent] = rows[cand[:n_new]]
            self._free -= n_new
            cand = cand[n_new:]
        if cand.shape[0] == 0:
            return
        vic = pol.victims()[:cand.shape[0]]
        k = pol.admit(pol.freq[ids[cand[:vic.shape[0]]]], pol.freq[pol.keys[vic]])
        if k:
            ent = vic[:k]
            pol.evict(ent)
            pol.bind(ent, ids[cand[:k]])
            self.buf[ent] = rows[cand[:k]]


class AdjacencyCache:
    """Adjacency rows of remote vertices, at most ``budget`` bytes of neighbour ids (and, with
    ``weighted``, of their float32 edge weights, with ``typed`` of their int32 relations: an entry
    then costs its id's bytes + 4 for each).

    Rows are packed in one buffer (weights and relations in parallel ones, same positions); space
    freed by evictions is reclaimed by compacting when the buffer's tail is full.  Shapes: get(ids
    int64[m]) -> (hit bool[m], indptr int64[h+1], indices, weights float32[indptr[-1]] (empty
    unweighted), relations int32[indptr[-1]] (empty untyped)) of the hit rows in ``ids[hit]``
    order; put(ids int64[k], indptr int64[k+1], indices, weights float32[indptr[-1]] | None,
    types int32[indptr[-1]] | None).
    """

    def __init__(self, num_nodes: int, budget: int, dtype, weighted: bool = False, typed: bool = False):
        self.budget = int(budget)
        self.weighted = bool(weighted)
        self.typed = bool(typed)
        self.entry_bytes = np.dtype(dtype).itemsize + (4 if self.weighted else 0) + (4 if self.typed else 0)
        self.buf = np.empty(max(self.budget, 0) // self.entry_bytes, dtype)   # pages touched only as filled
        self.wbuf = np.empty(self.buf.shape[0] if self.weighted else 0, np.float32)
        self.tbuf = np.empty(self.buf.shape[0] if self.typed else 0, np.int32)
        # an entry holds at least one id, except degree-0 rows (rare): the buffer bounds the entry
        # table, which grows as rows arrive
        self.policy = _Policy(num_nodes, self.buf.shape[0], initial=1024)
        self.start = np.zeros(self.policy.keys.shape[0], np.int64)
        self.length = np.zeros(self.policy.keys.shape[0], np.int64)
        self.tail = 0

    @property
    def used(self) -> int:
        """Neighbour ids held now."""
        return int(self.length[self.policy.keys >= 0].sum())

    @property
    def nbytes(self) -> int:
        """Bytes of rows held now, weights and relations included (never above ``budget``)."""
        return self.used * self.entry_bytes

    def get(self, ids: np.ndarray):
        """(hit mask, CSR of the hit rows in ``ids[hit]`` order, their weights, their relations)."""
        s = self.policy.record(ids)
        hit = s >= 0
        sh = s[hit]
        ptr, idx = _row_index(self.start[sh], self.length[sh])
        return (hit, ptr, self.buf[idx], self.wbuf[idx] if self.weighted else self.wbuf,
                self.tbuf[idx] if self.typed else self.tbuf)

    def _compact(self) -> None:
        live = np.flatnonzero(self.policy.keys >= 0)
        live = live[np.argsort(self.start[live], kind="stable")]
        ptr, idx = _row_index(self.start[live], self.length[live])
        self.buf[:idx.shape[0]] = self.buf[idx]
        if self.weighted:
            self.wbuf[:idx.shape[0]] = self.wbuf[idx]
        if self.typed:
            self.tbuf[:idx.shape[0]] = self.tbuf[idx]
        self.start[live] = ptr[:-1]
        self.tail = int(idx.shape[0])

    def put(self, ids: np.ndarray, indptr: np.ndarray, indices: np.ndarray, weights: np.ndarray | None = None,
            types: np.ndarray | None = None) -> None:
        """Offer fetched rows (``ids`` not cached, rows ``indptr``/``indices`` in ``ids`` order, and
        a weighted cache's ``weights``, a typed cache's ``types``, aligned with ``indices``)."""
        if self.weighted and (weights is None or weights.shape != indices.shape):
            raise ValueError(f"a weighted adjacency cache needs one weight per entry, float32[{indices.shape[0]}] "
                             f"(got {None if weights is None else f'{weights.dtype}{list(weights.shape)}'})")
        if self.typed and (types is None or types.shape != indices.shape):
            raise ValueError(f"a typed adjacency cache needs one relation per entry, int32[{indices.shape[0]}] "
                             f"(got {None if types is None else f'{types.dtype}{list(types.shape)}'})")
        pol = self.policy
        if pol.capacity == 0 or ids.shape[0] == 0:
            return
        cand = pol.candidates(ids)
        lens = (indptr[cand + 1] - indptr[cand]).astype(np.int64)
        fits = lens <= self.buf.shape[0]
        cand, lens = cand[fits], lens[fits]
        if cand.shape[0] == 0:
            return
        size = pol.reserve(cand.shape[0])
        if size > self.start.shape[0]:
            self.start = np.concatenate([self.start, np.zeros(size - self.start.shape[0], np.int64)])
            self.length = np.concatenate([self.length, np.zeros(size - self.length.shape[0], np.int64)])
        free_ent = np.flatnonzero(pol.keys < 0)
        room = self.buf.shape[0] - self.used
        need = np.cumsum(lens)
        k_free = min(int(np.searchsorted(need, room, side="right")), free_ent.shape[0])
        k = k_free
        evict = np.empty(0, np.int64)
        if k < cand.shape[0]:                                    # the rest only by replacing colder rows
            vic = pol.victims()
            vcum = np.cumsum(self.length[vic])
            # victims needed by each longer prefix of candidates: enough ids and enough entries
            short = need[k:] - room
            by_bytes = np.where(short > 0, np.searchsorted(vcum, short, side="left") + 1, 0)
            by_entries = np.arange(k + 1, cand.shape[0] + 1) - free_ent.shape[0]
            j = np.maximum(np.maximum(by_bytes, by_entries), 1)
            possible = j <= vic.shape[0]
            j, cf = j[possible], pol.freq[ids[cand[k:k + possible.sum()]]]
            if j.shape[0]:
                extra = pol.admit(cf, pol.freq[pol.keys[vic[j - 1]]])
                if extra:
                    k += extra
                    evict = vic[:int(j[extra - 1])]
        if k == 0:
            return
        if evict.shape[0]:
            pol.evict(evict)
        cand, lens = cand[:k], lens[:k]
        total = int(lens.sum())
        if self.tail + total > self.buf.shape[0]:
            self._compact()
        ent = np.flatnonzero(pol.keys < 0)[:k]
        ptr, idx = _row_index(indptr[cand], lens)
        self.buf[self.tail:self.tail + total] = indices[idx]
        if self.weighted:
            self.wbuf[self.tail:self.tail + total] = weights[idx]
        if self.typed:
            self.tbuf[self.tail:self.tail + total] = types[idx]
        self.start[ent] = self.tail + ptr[:-1]
        self.length[ent] = lens
        self.tail += total
        pol.bind(ent, ids[cand])
