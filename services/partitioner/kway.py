"""k-way refinement of a weighted graph's partition under a hard block weight: label
propagation, FM with rollback, and rebalancing.

Why this module exists: every level of :func:`~.multilevel.multilevel_partition` on the way up
is refined by these kernels, and GREM's per-chunk FM (:func:`~.refine.chunk_fm`) is the same
FM run on a chunk's vertices with the rest of the graph fixed.

Graphs are weighted CSR: ``xadj`` int64 (n+1,), ``adj`` int64 (m,), ``ew`` int64 (m,) edge
weights (symmetric), ``vw`` int64 (n,) vertex weights.
"""

from __future__ import annotations

import numba
import numpy as np

from .nbutil import visit_order, heap_pop, heap_push_or_update, permutation
from .placement import block_weights

__all__ = ["refine_kway", "fm_rounds", "fm_kway", "rebalance"]


@numba.njit(cache=True)
def refine_kway(xadj, adj, ew, vw, part, k, maxbw, rounds, state):
    """Size-constrained LP refinement: move each vertex to its best block if that helps.

    Moves with positive gain, or zero gain that improves balance, are applied at once
    (Gauss-Seidel).  ``part`` is updated in place.

    Returns:
        int: total cut reduction.
    """
    n = vw.size
    bw = np.zeros(k, np.int64)
    for v in range(n):
        bw[part[v]] += vw[v]
    conn = np.zeros(k, np.int64)
    touched = np.empty(k, np.int64)
    total_gain = 0
    for _ in range(rounds):
        order = visit_order(n, state)
        moved = 0
        rgain = 0
        for idx in range(n):
            v = order[idx]
            p = part[v]
            nt = block_weights(adj, ew, xadj[v], xadj[v + 1], part, conn, touched)
            if nt == 0 or (nt == 1 and touched[0] == p):
                for t in range(nt):
                    conn[touched[t]] = 0
                continue
            cp = conn[p]
            best = p
            bestc = cp
            for t in range(nt):
                b = touched[t]
                if b == p or bw[b] + vw[v] > maxbw:
                    continue
                c = conn[b]
                if c > bestc or (c == bestc and best != p and bw[b] < bw[best]) or \
                        (c == bestc and best == p and bw[b] + vw[v] < bw[p]):
                    best = b
                    bestc = c
            if best != p:
                part[v] = best
                bw[p] -= vw[v]
                bw[best] += vw[v]
                moved += 1
                rgain += bestc - cp
            for t in range(nt):
                conn[touched[t]] = 0
        total_gain += rgain
        if moved == 0 or rgain <= 0 and moved < n // 1000 + 1:
            break
    return total_gain


@numba.njit(cache=True)
def _best_move(xadj, adj, ew, vw, part, bw, k, maxbw, i, v, conn, touched):
    """Best target block of vertex ``i`` (its entries ``xadj[i] .. xadj[i + 1] - 1``; ``v`` its
    index into ``part``), highest conn among the feasible ones; returns ``(gain, target)``,
    target -1 if none.  Empty ``ew`` / ``vw`` weigh 1."""
    p = part[v]
    nt = block_weights(adj, ew, xadj[i], xadj[i + 1], part, conn, touched)
    wv = vw[i] if vw.size else 1
    cp = conn[p]
    best = -1
    bestc = -1
    for t in range(nt):
        b = touched[t]
        if b == p or bw[b] + wv > maxbw:
            continue
        c = conn[b]
        if c > bestc or (c == bestc and bw[b] < bw[best]):
            bestc = c
            best = b
    for t in range(nt):
        conn[touched[t]] = 0
    if best < 0:
        return np.int64(0), np.int64(-1)
    return np.int64(bestc - cp), np.int64(best)


@numba.njit(cache=True)
def fm_rounds(xadj, adj, ew, vw, ids, local, part, bw, k, maxbw, rounds, stall, state, shuffle):
    """k-way FM with hill climbing over the vertices of a CSR: repeatedly move the vertex of
    highest gain (also negative gains), each vertex at most once per round, then roll back to
    the best prefix.  Gains are evaluated lazily (recomputed when popped).

    The CSR may be a part of a larger graph with the rest fixed (GREM's chunks): row ``i`` is
    vertex ``ids[i]`` of ``part``, and a neighbour ``u`` (an index into ``part``) is movable
    row ``local[u]`` (-1: fixed).  Empty ``ids`` / ``local`` mean the identity, empty ``ew`` /
    ``vw`` weight 1.  ``bw`` holds the block weights and is kept up to date, like ``part``.
    ``shuffle``: fill the heap in a random order each round (else in row order).

    Returns:
        tuple: ``(vertices moved, cut reduction)`` (the cut as the rows' entries count it).
    """
    n = xadj.size - 1
    has_ids = ids.size > 0
    has_local = local.size > 0
    conn = np.zeros(k, np.int64)
    touched = np.empty(k, np.int64)
    hv = np.empty(n, np.int64)
    hk = np.empty(n, np.int64)
    pos = np.full(n, -1, np.int64)
    locked = np.zeros(n, np.bool_)
    mv = np.empty(n, np.int64)
    mfrom = np.empty(n, np.int64)
    # neighbours of very high degree are not re-evaluated after each move (their heap key
    # stays stale and is fixed lazily when popped): keeps FM near-linear on hub-heavy graphs
    deg_cap = max(64, 8 * (adj.size // max(n, 1)))
    total = 0
    moved_total = 0
    for _ in range(rounds):
        size = 0
        order = visit_order(n, state) if shuffle else np.arange(n)
        for r in range(n):
            i = order[r]
            locked[i] = False
            g, t = _best_move(xadj, adj, ew, vw, part, bw, k, maxbw, i,
                              ids[i] if has_ids else i, conn, touched)
            if t >= 0:
                size = heap_push_or_update(hv, hk, pos, size, i, g)
        delta = 0
        best_delta = 0
        best_idx = 0
        nm = 0
        since = 0
        work = 0
        work_cap = 4 * adj.size + 1000  # bounds a round at O(m) even on dense graphs
        while size > 0:
            key = hk[0]
            i, size = heap_pop(hv, hk, pos, size)
            v = ids[i] if has_ids else i
            g, t = _best_move(xadj, adj, ew, vw, part, bw, k, maxbw, i, v, conn, touched)
            if t < 0:
                continue
            if g < key:
                size = heap_push_or_update(hv, hk, pos, size, i, g)
                continue
            p = part[v]
            wv = vw[i] if vw.size else 1
            part[v] = t
            bw[p] -= wv
            bw[t] += wv
            locked[i] = True
            mv[nm] = i
            mfrom[nm] = p
            nm += 1
            delta -= g
            if delta < best_delta:
                best_delta = delta
                best_idx = nm
                since = 0
            else:
                since += 1
                if since > stall:
                    break
            if work > work_cap:
                break
            for e in range(xadj[i], xadj[i + 1]):
                j = local[adj[e]] if has_local else adj[e]
                if j < 0 or locked[j] or xadj[j + 1] - xadj[j] > deg_cap:
                    continue
                work += xadj[j + 1] - xadj[j]
                gj, tj = _best_move(xadj, adj, ew, vw, part, bw, k, maxbw, j,
                                    ids[j] if has_ids else j, conn, touched)
                if tj >= 0:
                    size = heap_push_or_update(hv, hk, pos, size, j, gj)
        for h in range(size):
            pos[hv[h]] = -1
        for h in range(nm - 1, best_idx - 1, -1):
            i = mv[h]
            v = ids[i] if has_ids else i
            t = part[v]
            p = mfrom[h]
            wv = vw[i] if vw.size else 1
            part[v] = p
            bw[t] -= wv
            bw[p] += wv
        total -= best_delta
        moved_total += best_idx
        if best_delta == 0:
            break
    return moved_total, total


@numba.njit(cache=True)
def fm_kway(xadj, adj, ew, vw, part, k, maxbw, rounds, stall, state):
    """k-way FM over the whole graph (:func:`fm_rounds`, heap filled in a random order each
    round).  ``part`` is updated in place.

    Returns:
        int: total cut reduction.
    """
    bw = np.zeros(k, np.int64)
    for v in range(vw.size):
        bw[part[v]] += vw[v]
    none = np.empty(0, np.int64)
    return fm_rounds(xadj, adj, ew, vw, none, none, part, bw, k, maxbw, rounds, stall, state,
                     True)[1]


@numba.njit(cache=True)
def rebalance(xadj, adj, ew, vw, part, k, maxbw):
    """Move vertices out of overloaded blocks, cheapest cut increase first.

    Returns:
        bool: True if every block weight is ``<= maxbw`` afterwards.
    """
    n = vw.size
    bw = np.zeros(k, np.int64)
    for v in range(n):
        bw[part[v]] += vw[v]
    conn = np.zeros(k, np.int64)
    for _ in range(8):
        anyover = False
        for b in range(k):
            if bw[b] > maxbw:
                anyover = True
        if not anyover:
            return True
        cand = np.empty(n, np.int64)
        score = np.empty(n, np.float64)
        target = np.empty(n, np.int64)
        nc = 0
        for v in range(n):
            p = part[v]
            if bw[p] <= maxbw:
                continue
            for e in range(xadj[v], xadj[v + 1]):
                conn[part[adj[e]]] += ew[e]
            best = -1
            bestg = -(1 << 62)
            for b in range(k):
                if b == p or bw[b] + vw[v] > maxbw:
                    continue
                g = conn[b] - conn[p]
                if g > bestg or (g == bestg and best >= 0 and bw[b] < bw[best]):
                    bestg = g
                    best = b
            for e in range(xadj[v], xadj[v + 1]):
                conn[part[adj[e]]] = 0
            if best >= 0:
                cand[nc] = v
                target[nc] = best
                score[nc] = bestg / max(vw[v], 1) if bestg < 0 else bestg * max(vw[v], 1)
                nc += 1
        if nc == 0:
            break
        idx = np.argsort(-score[:nc], kind="mergesort")
        for i in idx:
            v = cand[i]
            p = part[v]
            b = target[i]
            if bw[p] <= maxbw or bw[b] + vw[v] > maxbw:
                continue
            part[v] = b
            bw[p] -= vw[v]
            bw[b] += vw[v]
    # last resort: any vertex to the lightest block
    for v in range(n):
        p = part[v]
        if bw[p] > maxbw:
            lb = 0
            for b in range(k):
                if bw[b] < bw[lb]:
                    lb = b
            if bw[lb] + vw[v] <= maxbw or bw[lb] + vw[v] < bw[p]:
                part[v] = lb
                bw[p] -= vw[v]
                bw[lb] += vw[v]
    for b in range(k):
        if bw[b] > maxbw:
            return False
    return True
