"""Building the cluster graph in memory from the edge stream: the weighted graph between the
clusters of a vertex -> cluster map, three ways by size.

Why this module exists: GREM builds a cluster graph after every clustering step
(:mod:`.cluster_graph` decides which build and coarsens what does not fit).  Few clusters: a dense
matrix (:func:`build_cluster_graph`).  Many, while one id per entry between clusters fits the
memory budget: rows filled by one scatter pass and sorted (:func:`scatter_cluster_graph`).  The
sorted key runs of :func:`build_cluster_graph`'s sparse branch serve the callers that build a
graph whatever its size (the whole-graph start, the over-budget fallback), and
:func:`counted_runs` feeds the out-of-core buckets.
"""

from __future__ import annotations

from typing import Optional, Tuple

import numba
import numpy as np

from argosy.shared.graphio import csr_from_keys

from argosy.shared.intrinsics import prefetch

from .coarsening import THREAD_SCRATCH_BYTES
from .nbutil import atomic_add
from .stream import EdgeStream, max_group_size, read_groups, sort_range
from .threads import get_threads, map_chunks

__all__ = ["build_cluster_graph", "scatter_cluster_graph", "counted_runs", "merge_runs",
           "DENSE_CLUSTER_GRAPH_BYTES"]

# dense accumulation of the cluster graph up to this many bytes of nc x nc counters
DENSE_CLUSTER_GRAPH_BYTES = 64 << 20
# chunk entries keyed, sorted and counted at a time while building a sparse cluster graph
CLUSTER_KEY_BLOCK = 1 << 20
# entries whose clusters the kernels look up before using them (the random loads overlap)
GATHER = 4096


@numba.njit(cache=True)
def _merge_two(ak, aw, bk, bw):
    """Merge two sorted runs of distinct keys, adding the weights of keys in both."""
    ok = np.empty(ak.size + bk.size, np.int64)
    ow = np.empty(ak.size + bk.size, np.int64)
    i = j = m = 0
    while i < ak.size and j < bk.size:
        if ak[i] < bk[j]:
            ok[m] = ak[i]
            ow[m] = aw[i]
            i += 1
        elif ak[i] > bk[j]:
            ok[m] = bk[j]
            ow[m] = bw[j]
            j += 1
        else:
            ok[m] = ak[i]
            ow[m] = aw[i] + bw[j]
            i += 1
            j += 1
        m += 1
    while i < ak.size:
        ok[m] = ak[i]
        ow[m] = aw[i]
        i += 1
        m += 1
    while j < bk.size:
        ok[m] = bk[j]
        ow[m] = bw[j]
        j += 1
        m += 1
    return ok[:m].copy(), ow[:m].copy()


def merge_runs(runs) -> Tuple[np.ndarray, np.ndarray]:
    """Merge sorted runs of distinct (key, weight) pairs into one, pairwise like a merge sort
    (the first run is the accumulator; merging small runs first keeps the copies small)."""
    runs = [r for r in runs if r[0].size]
    if not runs:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    while len(runs) > 1:
        runs.sort(key=lambda r: r[0].size)  # the two smallest first
        (ak, aw), (bk, bw) = runs[0], runs[1]
        runs = runs[2:] + [_merge_two(ak, aw, bk, bw)]
        del ak, aw, bk, bw
    return runs[0]


@numba.njit(cache=True, nogil=True)
def _accumulate_dense(src, dst, cmap, w, nc, atomic):
    """Add one chunk's entries to the dense cluster adjacency ``w`` (``nc * nc``, flat); with
    ``atomic``, by atomic adds (chunks on several threads share ``w``)."""
    blk = np.empty(GATHER, np.int64)
    for i0 in range(0, src.size, GATHER):
        i1 = min(i0 + GATHER, src.size)
        for i in range(i0, i1):  # gather first: the random loads overlap
            blk[i - i0] = cmap[dst[i]]
        for i in range(i0, i1):
            a = cmap[src[i]]
            b = blk[i - i0]
            if a != b:
                if atomic:
                    atomic_add(w, a * nc + b, 1)
                else:
                    w[a * nc + b] += 1


@numba.njit(cache=True)
def _dense_to_csr(w, nc):
    nnz = 0
    for i in range(w.size):
        if w[i] != 0:
            nnz += 1
    xadj = np.zeros(nc + 1, np.int64)
    adj = np.empty(nnz, np.int64)
    ew = np.empty(nnz, np.int64)
    j = 0
    for a in range(nc):
        for b in range(nc):
            x = w[a * nc + b]
            if x != 0:
                adj[j] = b
                ew[j] = x
                j += 1
        xadj[a + 1] = j
    return xadj, adj, ew


@numba.njit(cache=True)
def _cluster_pair_keys(src, dst, cmap, nc, out):
    """Write ``cmap[u] * nc + cmap[v]`` of the chunk's entries between two different clusters
    to ``out`` and return how many (no per-chunk temporaries: the peak of building the
    cluster graph stays one int64 per chunk entry)."""
    blk = np.empty(GATHER, np.int64)
    j = 0
    for i0 in range(0, src.size, GATHER):
        i1 = min(i0 + GATHER, src.size)
        for i in range(i0, i1):  # gather first: the random loads overlap
            blk[i - i0] = cmap[dst[i]]
        for i in range(i0, i1):
            a = np.int64(cmap[src[i]])
            b = blk[i - i0]
            if a != b:
                out[j] = a * nc + b
                j += 1
    return j


@numba.njit(cache=True, nogil=True)
def _count_rows_of(src, dst, cmap, cnt, between, atomic):
    """``cnt[cmap[u] + 1] += 1`` for every entry ``(u, v)`` of a chunk (``between``: only those
    between two clusters; else ``cmap`` is read in order, sources being grouped).  ``atomic``:
    other threads count other chunks into ``cnt`` at the same time."""
    blk = np.empty(GATHER, np.int64)
    for i0 in range(0, src.size, GATHER):
        i1 = min(i0 + GATHER, src.size)
        if between:
            for i in range(i0, i1):  # gather first: the random loads overlap
                blk[i - i0] = cmap[dst[i]]
        for i in range(i0, i1):
            a = cmap[src[i]]
            if between and a == blk[i - i0]:
                continue
            if atomic:
                atomic_add(cnt, a + 1, 1)
            else:
                cnt[a + 1] += 1


@numba.njit(cache=True, nogil=True)
def _count_group_rows(src, starts, cmap, cnt, atomic):
    """``cnt[cmap[u] + 1] += deg(u)`` for every vertex group of a grouped chunk: the row sizes
    of :func:`_count_rows_of` without ``between``, one add per vertex instead of per entry."""
    for g in range(starts.size - 1):
        a = cmap[src[starts[g]]]
        d = starts[g + 1] - starts[g]
        if atomic:
            atomic_add(cnt, a + 1, d)
        else:
            cnt[a + 1] += d


# groups _between_groups prefetches ahead: each group's atomic add (a locked instruction)
# waits for the loads before it, so the random reads of the groups after it do not overlap
# with it unless they were requested earlier.  Only with more than AHEAD_MIN_CLUSTERS
# clusters (row slots beyond the caches): 20M road-like graph, 5M clusters, the build 1.12 ->
# 0.93 s on 2 threads; with 10k-90k clusters (DC-SBM, geometric) it cost ~0.05 s
AHEAD = 4
AHEAD_MIN_CLUSTERS = 1 << 20


@numba.njit(cache=True, nogil=True)
def _between_groups(src, dst, starts, cmap, pos, out, atomic):
    """Per vertex group of a grouped chunk, its entries between two clusters: with ``out``
    empty, counted into ``pos[cmap[u] + 1]``; else appended to row ``cmap[u]`` of ``out`` (next
    slot ``pos[cmap[u]]``).  Every entry of a group is in the same row, so a group takes its
    slots with one add (atomic with ``atomic``: other threads take slots of other chunks'
    groups), not one per entry (which on two threads cost more than the pass itself)."""
    scatter = out.size > 0
    blk = np.empty(max_group_size(starts), cmap.dtype)
    ng = starts.size - 1
    cbase, pbase = cmap.ctypes.data, pos.ctypes.data
    ahead = pos.size > AHEAD_MIN_CLUSTERS
    for g in range(ng):
        if ahead and g + AHEAD < ng:  # a few groups on: their cluster ids and row slots
            h0 = starts[g + AHEAD]
            for e in range(h0, min(starts[g + AHEAD + 1], h0 + 8)):
                prefetch(cbase + cmap.itemsize * dst[e])
            if g + 2 * AHEAD < ng:
                prefetch(cbase + cmap.itemsize * src[starts[g + 2 * AHEAD]])
            prefetch(pbase + 8 * (cmap[src[h0]] + (0 if scatter else 1)))
        a0, a1 = starts[g], starts[g + 1]
        c = cmap[src[a0]]
        m = 0
        for i in range(a0, a1):  # gather first: the random loads overlap
            blk[i - a0] = cmap[dst[i]]
        for i in range(a1 - a0):
            if blk[i] != c:
                blk[m] = blk[i]
                m += 1
        if m == 0:
            continue
        if not scatter:
            if atomic:
                atomic_add(pos, c + 1, m)
            else:
                pos[c + 1] += m
            continue
        if atomic:
            j = atomic_add(pos, c, m)
        else:
            j = pos[c]
            pos[c] = j + m
        for i in range(m):
            out[j + i] = blk[i]


@numba.njit(cache=True, nogil=True)
def _scatter_between(src, dst, cmap, pos, out, atomic):
    """Append ``cmap[v]`` to row ``cmap[u]`` of ``out`` (its next slot ``pos[cmap[u]]``) for
    every entry ``(u, v)`` of a chunk between two clusters (``atomic``: as other threads append
    other chunks' entries; a row's order then varies, and the rows are sorted after)."""
    blk = np.empty(GATHER, np.int64)
    for i0 in range(0, src.size, GATHER):
        i1 = min(i0 + GATHER, src.size)
        for i in range(i0, i1):  # gather first: the random loads overlap
            blk[i - i0] = cmap[dst[i]]
        for i in range(i0, i1):
            a = cmap[src[i]]
            b = blk[i - i0]
            if a != b:
                if atomic:
                    out[atomic_add(pos, a, 1)] = b
                else:
                    out[pos[a]] = b
                    pos[a] += 1


# rows of more entries than this are counted in a per-thread array indexed by cluster, and only
# their distinct ids sorted: sorting whole rows cost 0.10 s on the 20M geometric graph's first
# cluster graph (rows of ~128 entries, ~6 distinct) and 0.18 s on DC-SBM's (~435, ~110)
ROW_SORT_MAX = 32


@numba.njit(cache=True, nogil=True)
def _row_slice(start, end, adj, distinct, cadj, cew, r0, r1, acc, by_cluster):
    """Rows ``r0 .. r1 - 1`` of the scattered entries ``adj``: with ``cadj`` empty, each row's
    distinct ids counted into ``distinct[r + 1]`` (a row not counted by cluster is sorted in
    place on the way); else written, sorted, from ``cadj[distinct[r]]`` on with their counts in
    ``cew``.  With ``by_cluster`` the rows of more than :data:`ROW_SORT_MAX` are counted in
    ``acc`` (zeros, one per cluster, left zero) instead of sorted."""
    write = cadj.size > 0
    for r in range(r0, r1):
        a, b = start[r], end[r]
        if b - a <= ROW_SORT_MAX or not by_cluster:
            if not write:
                sort_range(adj, a, b)
                m = 0
                for i in range(a, b):
                    if i == a or adj[i] != adj[i - 1]:
                        m += 1
                distinct[r + 1] = m
                continue
            j = distinct[r] - 1
            for i in range(a, b):
                if i > a and adj[i] == adj[i - 1]:
                    cew[j] += 1
                else:
                    j += 1
                    cadj[j] = adj[i]
                    cew[j] = 1
            continue
        for i in range(a, b):
            acc[adj[i]] += 1
        if not write:
            m = 0
            for i in range(a, b):
                if acc[adj[i]] != 0:
                    acc[adj[i]] = 0
                    m += 1
            distinct[r + 1] = m
            continue
        j0 = distinct[r]
        j = j0
        for i in range(a, b):  # each id once (its count kept negated), then sorted
            c = acc[adj[i]]
            if c > 0:
                cadj[j] = adj[i]
                acc[adj[i]] = -c
                j += 1
        sort_range(cadj, j0, j)
        for i in range(j0, j):
            cew[i] = -acc[cadj[i]]
            acc[cadj[i]] = 0


def scatter_cluster_graph(stream: EdgeStream, cmap: np.ndarray, nc: int, dtype=np.int64,
                          limit: Optional[int] = None):
    """The cluster graph of ``cmap`` in memory: one pass scatters every entry between two
    clusters into its cluster's row, then the rows' distinct ids are counted on every core
    (short rows sorted, long ones counted by cluster: :data:`ROW_SORT_MAX`).

    The rows are sized by a first pass: with ``limit=None`` it counts each cluster's entries by
    source (``cmap`` read in order; one id per stream entry is held), else it counts the entries
    between clusters exactly (both ends looked up) and gives up (``None``) when they are more than
    ``limit``, before any allocation.

    Why: sorting 64-bit cluster-pair keys per block and merging the runs (the buckets' way)
    took 3.1 s of the 20M road-like graph's 19 s for a 15.8M-entry graph, 1.0 s here; the one
    pass that looks up both ends' clusters is the floor of any build (a random read per entry).

    Returns:
        tuple: ``(xadj int64, adj, ew)``, ``adj`` and ``ew`` of ``dtype``, or ``None``.
    """
    threads = get_threads() if stream.seekable and stream.num_chunks >= 2 else 1
    atomic = threads > 1

    def each_chunk(fn) -> None:  # on the worker threads, chunk by chunk
        if atomic:
            for _ in map_chunks(lambda i: fn(*stream.read_chunk(i)), range(stream.num_chunks)):
                pass
        else:
            for src, dst in stream:
                fn(src, dst)

    by_group = stream.grouped and stream.seekable  # one add per vertex, not per entry
    none = np.empty(0, dtype)

    def each_group(fn) -> None:
        for _ in map_chunks(lambda i: fn(*read_groups(stream, i)), range(stream.num_chunks),
                            threads):
            pass

    start = np.zeros(nc + 1, np.int64)
    if by_group and limit is None:
        each_group(lambda src, dst, starts: _count_group_rows(src, starts, cmap, start, atomic))
    elif by_group:
        each_group(lambda src, dst, starts: _between_groups(src, dst, starts, cmap, start, none,
                                                            atomic))
    else:
        each_chunk(lambda src, dst: _count_rows_of(src, dst, cmap, start, limit is not None,
                                                   atomic))
    np.cumsum(start, out=start)
    if limit is not None and start[-1] > limit:
        return None
    out = np.empty(int(start[-1]), dtype)
    end = start[:-1].copy()
    if by_group:
        each_group(lambda src, dst, starts: _between_groups(src, dst, starts, cmap, end, out,
                                                            atomic))
    else:
        each_chunk(lambda src, dst: _scatter_between(src, dst, cmap, end, out, atomic))
    # rows in slices of about equal entries, one a thread: first their distinct ids are counted,
    # then written.  A slice counts its long rows by cluster (ROW_SORT_MAX) only where they hold
    # at least a quarter as many entries as there are clusters; else its counters would cost
    # more memory than those rows (the 20M road-like graph: 5.1M clusters, short rows, at the
    # run's peak)
    parts = max(1, min(get_threads(), THREAD_SCRATCH_BYTES // (4 * nc + 4)))
    cut = np.searchsorted(start, np.arange(parts + 1) * (int(start[-1]) / parts), "right") - 1
    cut[0], cut[-1] = 0, nc
    cut = np.maximum.accumulate(np.clip(cut, 0, nc))
    lens = end - start[:-1]
    long_entries = np.concatenate(([0], np.cumsum(np.where(lens > ROW_SORT_MAX, lens, 0))))
    by_cluster = 4 * (long_entries[cut[1:]] - long_entries[cut[:-1]]) >= nc
    acc = [np.zeros(nc if by_cluster[t] else 1, np.int32) for t in range(parts)]
    distinct = np.zeros(nc + 1, np.int64)

    def rows(cadj, cew):
        for _ in map_chunks(lambda t: _row_slice(start, end, out, distinct, cadj, cew, cut[t],
                                                 cut[t + 1], acc[t], bool(by_cluster[t])),
                            range(parts), parts):
            pass

    rows(none, none)
    np.cumsum(distinct, out=distinct)
    adj = np.empty(int(distinct[-1]), dtype)
    ew = np.empty(adj.size, dtype)
    rows(adj, ew)
    return distinct, adj, ew


@numba.njit(cache=True)
def _count_sorted(key, counts):
    """Compact the sorted ``key`` to its distinct values in place, their counts in ``counts``;
    return how many."""
    m = 0
    for i in range(key.size):
        if m > 0 and key[m - 1] == key[i]:
            counts[m - 1] += 1
        else:
            key[m] = key[i]
            counts[m] = 1
            m += 1
    return m




def counted_runs(stream: EdgeStream, cmap: np.ndarray, nc: int):
    """Per chunk of the stream: ``(entries read, runs)``, one sorted run of distinct
    ``(cmap[u] * nc + cmap[v], count)`` pairs per block of :data:`CLUSTER_KEY_BLOCK` entries
    (keys written into one reused buffer, sorted and counted in place; the runs are copies)."""
    kbuf = np.empty(CLUSTER_KEY_BLOCK, np.int64)
    cbuf = np.empty(CLUSTER_KEY_BLOCK, np.int64)
    for src, dst in stream:
        runs = []
        for b0 in range(0, src.size, CLUSTER_KEY_BLOCK):
            b1 = min(b0 + CLUSTER_KEY_BLOCK, src.size)
            nk = _cluster_pair_keys(src[b0:b1], dst[b0:b1], cmap, nc, kbuf)
            if nk == 0:
                continue
            key = kbuf[:nk]
            key.sort()  # in place
            nu = _count_sorted(key, cbuf)
            runs.append((key[:nu].copy(), cbuf[:nu].copy()))
        yield src.size, runs


def build_cluster_graph(stream: EdgeStream, cmap: np.ndarray, nc: int, merge_every: int,
                        limit: Optional[int] = None):
    """Stream the edges once and build the weighted CSR of the cluster graph.

    With few clusters (``nc**2`` counters within :data:`DENSE_CLUSTER_GRAPH_BYTES`) the
    weights are accumulated in a dense matrix by one numba loop; otherwise each block of
    :data:`CLUSTER_KEY_BLOCK` entries gives a sorted run of distinct cluster pairs with counts,
    and the runs are merged into the accumulator once ``merge_every`` or half the accumulator's
    size of them are pending (memory: about twice the cluster graph plus ``merge_every``).

    With ``limit``, the build stops as soon as the accumulated graph holds more than ``limit``
    entries (it only grows, so the whole graph would too) and returns ``None``: the caller's
    memory bound holds even where its entry estimate was wrong.

    Returns:
        tuple: ``(xadj, adj, ew, total_entries)``, or ``None`` when over ``limit``.
    """
    total = 0
    if nc * nc * 8 <= DENSE_CLUSTER_GRAPH_BYTES:
        w = np.zeros(nc * nc, np.int64)
        threads = get_threads() if stream.seekable and stream.num_chunks >= 2 else 1
        if threads > 1:  # chunks on every core (1/4-scale papers100M: 765M entries, 13.6 s on one)
            def add(i):
                src, dst = stream.read_chunk(i)
                _accumulate_dense(src, dst, cmap, w, nc, True)
                return src.size
            total = sum(map_chunks(add, range(stream.num_chunks), threads))
        else:
            for src, dst in stream:
                total += src.size
                _accumulate_dense(src, dst, cmap, w, nc, False)
        xadj, adj, ew = _dense_to_csr(w, nc)
        if limit is not None and adj.size > limit:
            return None
        return xadj, adj, ew, total
    # sorted runs of (key, weight): each block of a chunk gives one; runs are merged linearly
    # (no argsort, no fancy-index copies) once pending entries reach half the accumulated
    # ones, so the accumulator is rewritten O(log) times and memory stays ~2x its size
    acc_k = np.empty(0, np.int64)
    acc_w = np.empty(0, np.int64)
    runs, pend = [], 0
    for size, chunk_runs in counted_runs(stream, cmap, nc):
        total += size
        runs += chunk_runs
        pend += sum(r[0].size for r in chunk_runs)
        if pend >= max(merge_every, acc_k.size // 2):
            acc_k, acc_w = merge_runs([(acc_k, acc_w)] + runs)
            runs, pend = [], 0
            if limit is not None and acc_k.size > limit:
                return None
    if runs:
        acc_k, acc_w = merge_runs([(acc_k, acc_w)] + runs)
        del runs
    if limit is not None and acc_k.size > limit:
        return None
    xadj, adj = csr_from_keys(acc_k, nc)
    return xadj, adj, acc_w, total
