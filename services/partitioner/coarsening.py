"""Coarsening of a weighted graph: size-constrained label propagation (or heavy-edge matching)
and contraction of the clusters into the next level.

Why this module exists: the multilevel partitioner (:mod:`.multilevel`), its bisection
(:mod:`.bisection`) and the out-of-core cluster-graph coarsening (:mod:`.cluster_graph`) all
shrink graphs by the same label-propagation step.

Graphs are weighted CSR: ``xadj`` int64 (n+1,), ``adj`` int64 (m,), ``ew`` int64 (m,) edge
weights (symmetric), ``vw`` int64 (n,) vertex weights.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from argosy.shared.intrinsics import prefetch

from .nbutil import atomic_add, visit_order, compact_labels, permutation, rand_below, xorshift
from .placement import block_weights

__all__ = ["lp_best_label", "lp_cluster", "hem_cluster", "contract"]


@numba.njit(cache=True)
def lp_best_label(adj, ew, e0, e1, v, label, lw, wv, maxw, rating, touched, part, use_part,
                  state):
    """The label vertex ``v`` (weight ``wv``; its entries ``e0 .. e1 - 1``) takes in one step of
    size-constrained label propagation: the neighbouring label with the most edge weight
    whose weight ``lw`` stays within ``maxw`` with ``v`` added (and, with ``use_part``, of
    ``v``'s block in ``part``, indexed like ``label``), else its own; ties at random.
    ``rating`` is all zeros and left so; ``touched`` holds at least ``e1 - e0`` entries."""
    cur = label[v]
    nt = block_weights(adj, ew, e0, e1, label, rating, touched)  # labels as the "blocks"
    best = cur
    bestr = rating[cur]
    nties = 1
    for t in range(nt):
        c = touched[t]
        if c == cur:
            continue
        r = rating[c]
        if lw[c] + wv > maxw or (use_part and part[c] != part[v]):
            continue
        if r > bestr:
            best = c
            bestr = r
            nties = 1
        elif r == bestr and best != cur:
            nties += 1
            if rand_below(state, nties) == 0:
                best = c
    for t in range(nt):
        rating[touched[t]] = 0
    return best


# per-thread scratch arrays as long as the graph (lp_cluster's rating array, contract's
# accumulators) take at most this many bytes in all: fewer threads otherwise
THREAD_SCRATCH_BYTES = 256 << 20

# lp_cluster rates a vertex of at most this many entries in a short list instead of the rating
# array indexed by label: on the 15M-vertex road-like graph's first cluster graph (5.0M
# clusters, mean degree 3.2) two LP rounds took 5.4-7.0 s through lp_best_label and its rating
# array, 3.5-3.8 s with the list (same labels, same random draws)
LP_SHORT_LIST = 32


@numba.njit(cache=True, inline="always")
def _short_list_best(adj, ew, e0, e1, v, label, lw, wv, maxw, part, state, ll, lr):
    """:func:`lp_best_label` for a vertex of at most :data:`LP_SHORT_LIST` entries: its
    neighbours' labels are summed in the short lists ``ll`` (labels) and ``lr`` (weights), in
    cache, where the rating array costs two more random accesses per entry on a large graph.
    The labels are met in the same order (first appearance), so both choose the same label
    and draw the same random numbers (``part`` is always checked)."""
    cur = label[v]
    nt = 0
    for e in range(e0, e1):
        c = label[adj[e]]
        w = ew[e]
        f = -1
        for t in range(nt):
            if ll[t] == c:
                f = t
                break
        if f < 0:
            ll[nt] = c
            lr[nt] = w
            nt += 1
        else:
            lr[f] += w
    bestr = 0
    for t in range(nt):
        if ll[t] == cur:
            bestr = lr[t]
    best = cur
    nties = 1
    for t in range(nt):
        c = ll[t]
        r = lr[t]
        if c == cur or r < bestr or (r == bestr and best == cur):
            continue
        if lw[c] + wv > maxw or part[c] != part[v]:
            continue
        if r > bestr:
            best = c
            bestr = r
            nties = 1
        else:
            nties += 1
            if rand_below(state, nties) == 0:
                best = c
    return best


# the LP rounds prefetch the labels of the neighbours of the vertex this many visits ahead (as
# the streamed clustering does, clustering.LP_AHEAD)
LP_AHEAD = 6


# the contraction's members prefetched ahead, per stage (see _contract_slice)
CONTRACT_AHEAD = 4


# graphs below this many vertices are clustered and contracted on one thread whatever ``threads``
# says: waking the pool for them cost more than it saved (Cora to email-enron, 2.7k-37k vertices:
# GREM 1.3-1.9x slower with every small level on two threads)
PARALLEL_MIN_VERTICES = 1 << 16


@numba.njit(cache=True, nogil=True)
def _lp_slice(xadj, adj, ew, vw, maxw, order, lo, hi, label, cw, part, state, ll, lr, rating,
              touched, atomic):
    """One LP round over ``order[lo:hi]``; returns the moves.  ``atomic``: other threads run
    other slices at once, so a cluster's weight moves by atomic adds (a move that would pass
    ``maxw`` after all is undone)."""
    moved = 0
    lbase = label.ctypes.data
    for idx in range(lo, hi):
        if idx + LP_AHEAD < hi:  # the labels of a vertex a few visits on (see LP_AHEAD)
            v2 = order[idx + LP_AHEAD]
            for e in range(xadj[v2], min(xadj[v2 + 1], xadj[v2] + 8)):
                prefetch(lbase + label.itemsize * adj[e])
        v = order[idx]
        cur = label[v]
        if xadj[v + 1] - xadj[v] <= LP_SHORT_LIST and ew.size:
            best = _short_list_best(adj, ew, xadj[v], xadj[v + 1], v, label, cw, vw[v], maxw,
                                    part, state, ll, lr)
        else:
            best = lp_best_label(adj, ew, xadj[v], xadj[v + 1], v, label, cw, vw[v], maxw,
                                 rating, touched, part, True, state)
        if best == cur:
            continue
        if atomic:  # another thread may have filled the cluster since the rating
            if atomic_add(cw, best, vw[v]) + vw[v] > maxw:
                atomic_add(cw, best, -vw[v])
                continue
            atomic_add(cw, cur, -vw[v])
        else:
            cw[cur] -= vw[v]
            cw[best] += vw[v]
        label[v] = best
        moved += 1
    return moved


@numba.njit(cache=True, parallel=True)
def _lp_round_threads(xadj, adj, ew, vw, maxw, order, label, cw, part, states, ll, lr, rating,
                      touched):
    """One LP round on ``states.shape[0]`` threads, a slice of ``order`` each."""
    threads = states.shape[0]
    n = order.size
    moved_by = np.zeros(threads, np.int64)
    for t in numba.prange(threads):
        moved_by[t] = _lp_slice(xadj, adj, ew, vw, maxw, order, n * t // threads,
                                n * (t + 1) // threads, label, cw, part, states[t], ll[t], lr[t],
                                rating[t], touched[t], True)
    return moved_by.sum()


@numba.njit(cache=True)
def lp_cluster(xadj, adj, ew, vw, maxw, rounds, seed_state, part, nblocks, threads):
    """Size-constrained label propagation clustering.

    Args:
        xadj, adj, ew, vw: weighted CSR.
        maxw (int): maximum cluster weight.
        rounds (int): maximum LP rounds.
        seed_state (np.ndarray): uint64 (1,) RNG state (advanced in place).
        part (np.ndarray): int64 (n,) block per vertex; clusters never span two blocks
            (pass zeros and ``nblocks=1`` for unconstrained clustering).
        nblocks (int): number of distinct values in ``part``.
        threads (int): slices of each round's visiting order run at once (graphs of at least
            :data:`PARALLEL_MIN_VERTICES`), each with its own random stream, reading the labels
            the others write as they go (as the streamed passes do); cluster weights move
            atomically, so none passes ``maxw``.  One thread: the same labels for the same seed
            every time.

    Returns:
        np.ndarray: int32 (n,) cluster label per vertex (a vertex id of the cluster; not widened
        to int64: 40 MB at the 20M road-like graph's peak, its first level's contraction).
    """
    n = vw.size
    label = np.arange(n).astype(np.int32)  # int32: half the cache lines of the random reads
    cw = vw.copy()
    maxdeg = 0
    for v in range(n):
        d = xadj[v + 1] - xadj[v]
        if d > maxdeg:
            maxdeg = d
    # the rating array only for rows too long for the short list (n int64s: 40 MB on the 20M
    # road-like graph's first cluster graph, whose rows all fit the list)
    nr = n if maxdeg > LP_SHORT_LIST or not ew.size else 1
    if n < PARALLEL_MIN_VERTICES:
        threads = 1
    threads = max(1, min(threads, THREAD_SCRATCH_BYTES // (8 * nr + 8)))
    rating = np.zeros((threads, nr), np.int64)
    touched = np.empty((threads, maxdeg + 1), np.int64)
    ll = np.empty((threads, LP_SHORT_LIST), np.int32)
    lr = np.empty((threads, LP_SHORT_LIST), np.int64)
    states = np.empty((threads, 1), np.uint64)
    states[0, 0] = seed_state[0]
    for t in range(1, threads):  # the other threads' streams: drawn from the first
        states[t, 0] = xorshift(seed_state) | np.uint64(1)
    order = visit_order(n, states[0])
    for _ in range(rounds):
        if threads == 1:
            moved = _lp_slice(xadj, adj, ew, vw, maxw, order, 0, n, label, cw, part, states[0],
                              ll[0], lr[0], rating[0], touched[0], False)
        else:
            moved = _lp_round_threads(xadj, adj, ew, vw, maxw, order, label, cw, part, states,
                                      ll, lr, rating, touched)
        if moved <= n // 1000:
            break
    seed_state[0] = states[0, 0]
    # pack isolated / leftover singleton vertices whose cluster is themselves and which have no
    # neighbours into shared clusters so coarsening does not stall on them
    open_c = np.full(nblocks, -1, np.int64)
    for v in range(n):
        if xadj[v + 1] == xadj[v] and label[v] == v and cw[v] == vw[v]:
            o = open_c[part[v]]
            if o >= 0 and cw[o] + vw[v] <= maxw:
                cw[o] += vw[v]
                cw[v] -= vw[v]
                label[v] = o
            else:
                open_c[part[v]] = v
    return label


@numba.njit(cache=True)
def hem_cluster(xadj, adj, ew, vw, maxw, state, part):
    """Heavy-edge matching: every vertex (random order) pairs with the unmatched neighbour of
    the same block with the heaviest edge, scaled by ``1 / sqrt(vw[u] vw[v])`` so that light
    vertices pair first.  Shrinks a level by up to 2x, evenly, also on dense graphs where
    label propagation forms a few big arbitrary clusters.

    Returns:
        np.ndarray: int64 (n,) cluster label per vertex (as :func:`lp_cluster`).
    """
    n = vw.size
    label = np.arange(n)
    matched = np.zeros(n, np.bool_)
    order = permutation(n, state)
    for i in range(n):
        v = order[i]
        if matched[v]:
            continue
        best = -1
        bs = -1.0
        for e in range(xadj[v], xadj[v + 1]):
            u = adj[e]
            if matched[u] or u == v or vw[u] + vw[v] > maxw or part[u] != part[v]:
                continue
            sc = ew[e] / math.sqrt(vw[u] * vw[v])
            if sc > bs:
                bs = sc
                best = u
        matched[v] = True
        if best >= 0:
            matched[best] = True
            label[best] = v
    return label


@numba.njit(cache=True, nogil=True)
def _contract_slice(c0, c1, pos, start, members, xadj, adj, ew, cmap, acc, touched, cadj, cew,
                    rowlen):
    """Rows ``c0 .. c1 - 1`` of the coarse graph, written from ``cadj[pos]`` on; each row's
    neighbours in the order met, their length in ``rowlen[c + 1]``.  ``acc`` (zeros, left
    zero) and ``touched``: one entry per coarse vertex."""
    end = start[c1]
    xb, ab, cb = xadj.ctypes.data, adj.ctypes.data, cmap.ctypes.data
    for c in range(c0, c1):
        nt = 0
        for i in range(start[c], start[c + 1]):
            # members are random vertices: three dependent reads each (their row start, their
            # row, their neighbours' coarse ids), requested 3, 2 and 1 steps of CONTRACT_AHEAD
            # members ahead
            if i + 3 * CONTRACT_AHEAD < end:
                prefetch(xb + xadj.itemsize * members[i + 3 * CONTRACT_AHEAD])
            if i + 2 * CONTRACT_AHEAD < end:
                prefetch(ab + adj.itemsize * xadj[members[i + 2 * CONTRACT_AHEAD]])
            if i + CONTRACT_AHEAD < end:
                u = members[i + CONTRACT_AHEAD]
                for e in range(xadj[u], min(xadj[u + 1], xadj[u] + 8)):
                    prefetch(cb + cmap.itemsize * adj[e])
            v = members[i]
            for e in range(xadj[v], xadj[v + 1]):
                d = cmap[adj[e]]
                if d == c:
                    continue
                if acc[d] == 0:
                    touched[nt] = d
                    nt += 1
                acc[d] += ew[e]
        for j in range(nt):
            d = touched[j]
            cadj[pos] = d
            cew[pos] = acc[d]
            acc[d] = 0
            pos += 1
        rowlen[c + 1] = nt


@numba.njit(cache=True, parallel=True)
def _contract_threads(cut, bound, start, members, xadj, adj, ew, cmap, cadj, cew, rowlen, nc,
                      longest):
    """:func:`_contract_slice` of slice ``t`` (coarse vertices ``cut[t] .. cut[t + 1] - 1``,
    written from ``bound[cut[t]]``) on thread ``t``."""
    for t in numba.prange(cut.size - 1):
        _contract_slice(cut[t], cut[t + 1], bound[cut[t]], start, members, xadj, adj, ew, cmap,
                        np.zeros(nc, ew.dtype), np.empty(longest + 1, np.int64), cadj, cew,
                        rowlen)


@numba.njit(cache=True, parallel=True)
def _pack_slices(cut, bound, cxadj, cadj, cew, out_adj, out_ew):
    for t in numba.prange(cut.size - 1):
        a = bound[cut[t]]
        b = cxadj[cut[t]]
        for i in range(cxadj[cut[t + 1]] - b):
            out_adj[b + i] = cadj[a + i]
            out_ew[b + i] = cew[a + i]


@numba.njit(cache=True)
def contract(xadj, adj, ew, vw, label, threads):
    """Contract clusters into a coarse weighted graph.

    With ``threads > 1`` (graphs of at least :data:`PARALLEL_MIN_VERTICES`, and per-thread
    scratch, two coarse-vertex arrays each, within :data:`THREAD_SCRATCH_BYTES`) slices of the
    coarse vertices of about equal entries are contracted at once, each into its own stretch of
    the output, then packed: the same graph as one thread gives, row for row (each row lists its
    neighbours in the order met).

    Returns:
        tuple: ``(cmap, cxadj, cadj, cew, cvw)`` where ``cmap`` (n,) maps each vertex to its
        coarse vertex ``0..nc-1``.
    """
    n = vw.size
    cmap = np.empty(n, adj.dtype)  # coarse ids below n: int32 with int32 ids
    nc = compact_labels(label, cmap)
    cvw = np.zeros(nc, np.int64)
    start = np.zeros(nc + 1, np.int64)
    bound = np.zeros(nc + 1, np.int64)  # entries of each coarse vertex's members (its most)
    for v in range(n):
        cvw[cmap[v]] += vw[v]
        start[cmap[v] + 1] += 1
        bound[cmap[v] + 1] += xadj[v + 1] - xadj[v]
    for c in range(nc):
        start[c + 1] += start[c]
        bound[c + 1] += bound[c]
    members = np.empty(n, adj.dtype)  # vertex ids: int32 with int32 ids
    fill = start[:-1].copy()
    for v in range(n):
        c = cmap[v]
        members[fill[c]] = v
        fill[c] += 1
    m = adj.size
    if n < PARALLEL_MIN_VERTICES:
        threads = 1
    threads = max(1, min(threads, THREAD_SCRATCH_BYTES // (8 * nc + 8)))
    cut = np.zeros(threads + 1, np.int64)  # slice t: coarse vertices cut[t] .. cut[t + 1] - 1
    for t in range(1, threads):
        cut[t] = np.searchsorted(bound, m * t // threads)
    cut[threads] = nc
    rowlen = np.zeros(nc + 1, np.int64)
    cadj = np.empty(m, adj.dtype)  # int32 ids and weights stay int32 (the caller checks they fit)
    cew = np.empty(m, ew.dtype)
    # scratch per thread: an accumulator per coarse vertex in the weights' dtype (their sum is
    # below the stream's entries, which the caller fits into it) and a list as long as the
    # longest row (at most its members' entries): not two n-long int64 arrays a thread (the 20M
    # road-like graph's first level: -35 MB at the partitioner's peak)
    longest = 0
    for c in range(nc):
        longest = max(longest, bound[c + 1] - bound[c])
    if threads == 1:
        _contract_slice(0, nc, 0, start, members, xadj, adj, ew, cmap, np.zeros(nc, ew.dtype),
                        np.empty(longest + 1, np.int64), cadj, cew, rowlen)
        cxadj = np.cumsum(rowlen)
        return cmap, cxadj, cadj[:cxadj[nc]].copy(), cew[:cxadj[nc]].copy(), cvw
    _contract_threads(cut, bound, start, members, xadj, adj, ew, cmap, cadj, cew, rowlen, nc,
                      longest)
    cxadj = np.cumsum(rowlen)
    out_adj = np.empty(cxadj[nc], adj.dtype)
    out_ew = np.empty(cxadj[nc], ew.dtype)
    _pack_slices(cut, bound, cxadj, cadj, cew, out_adj, out_ew)
    return cmap, cxadj, out_adj, out_ew, cvw
