"""In-memory multilevel k-way partitioning of a (small) weighted graph, in numba.

Why this module exists: GREM's first clustering level is streamed over the edge file, which
shrinks the graph to a *cluster graph* that is far smaller than the input.  That cluster graph
is then partitioned "strongly" here, with no dependency on METIS: size-constrained label
propagation (LP) coarsening, recursive bisection by greedy graph growing + 2-way FM at the
coarsest level, and k-way LP refinement plus rebalancing on the way back up.

Graphs are weighted CSR: ``xadj`` int64 (n+1,), ``adj`` int64 (m,), ``ew`` int64 (m,) edge
weights (symmetric), ``vw`` int64 (n,) vertex weights.  No per-vertex Python loops: every pass is
a ``@njit(cache=True)`` kernel; Python only loops over levels and over the k-1 bisections.
"""

from __future__ import annotations

import math
from typing import List, Tuple

import numba
import numpy as np

from .nbutil import heap_pop, heap_push_or_update, permutation, rand_below, rng_state

__all__ = [
    "lp_cluster",
    "contract",
    "bisect",
    "refine_kway",
    "fm_kway",
    "rebalance",
    "edge_cut_csr",
    "ml_bisect",
    "recursive_bisection",
    "multilevel_partition",
    "improve_partition",
]


@numba.njit(cache=True)
def edge_cut_csr(xadj, adj, ew, part):
    """Weighted cut of a symmetric CSR (each undirected edge counted once)."""
    n = xadj.size - 1
    cut = 0
    for v in range(n):
        pv = part[v]
        for e in range(xadj[v], xadj[v + 1]):
            if part[adj[e]] != pv:
                cut += ew[e]
    return cut // 2


# --------------------------------------------------------------------------------------------
# coarsening
# --------------------------------------------------------------------------------------------
@numba.njit(cache=True)
def lp_best_label(adj, ew, e0, e1, v, label, lw, wv, maxw, rating, touched, part, use_part,
                  state):
    """The label vertex ``v`` (weight ``wv``; its entries ``e0 .. e1 - 1``) takes in one step of
    size-constrained label propagation: the neighbouring label with the most edge weight
    whose weight ``lw`` stays within ``maxw`` with ``v`` added (and, with ``use_part``, of
    ``v``'s block in ``part``, indexed like ``label``), else its own; ties at random.
    ``rating`` is all zeros and left so; ``touched`` holds at least ``e1 - e0`` entries."""
    cur = label[v]
    nt = 0
    for e in range(e0, e1):
        c = label[adj[e]]
        if rating[c] == 0:
            touched[nt] = c
            nt += 1
        rating[c] += ew[e]
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


@numba.njit(cache=True)
def lp_cluster(xadj, adj, ew, vw, maxw, rounds, seed_state, part, nblocks):
    """Size-constrained label propagation clustering.

    Args:
        xadj, adj, ew, vw: weighted CSR.
        maxw (int): maximum cluster weight.
        rounds (int): maximum LP rounds.
        seed_state (np.ndarray): uint64 (1,) RNG state (advanced in place).
        part (np.ndarray): int64 (n,) block per vertex; clusters never span two blocks
            (pass zeros and ``nblocks=1`` for unconstrained clustering).
        nblocks (int): number of distinct values in ``part``.

    Returns:
        np.ndarray: int64 (n,) cluster label per vertex (a vertex id of the cluster).
    """
    n = vw.size
    label = np.arange(n)
    cw = vw.copy()
    rating = np.zeros(n, np.int64)
    maxdeg = 0
    for v in range(n):
        d = xadj[v + 1] - xadj[v]
        if d > maxdeg:
            maxdeg = d
    touched = np.empty(maxdeg + 1, np.int64)
    order = permutation(n, seed_state)
    for _ in range(rounds):
        moved = 0
        for idx in range(n):
            v = order[idx]
            cur = label[v]
            best = lp_best_label(adj, ew, xadj[v], xadj[v + 1], v, label, cw, vw[v], maxw,
                                 rating, touched, part, True, seed_state)
            if best != cur:
                cw[cur] -= vw[v]
                cw[best] += vw[v]
                label[v] = best
                moved += 1
        if moved <= n // 1000:
            break
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


@numba.njit(cache=True)
def contract(xadj, adj, ew, vw, label):
    """Contract clusters into a coarse weighted graph.

    Returns:
        tuple: ``(cmap, cxadj, cadj, cew, cvw)`` where ``cmap`` (n,) maps each vertex to its
        coarse vertex ``0..nc-1``.
    """
    n = vw.size
    mapping = np.full(n, -1, np.int64)
    nc = 0
    cmap = np.empty(n, np.int64)
    for v in range(n):
        c = label[v]
        if mapping[c] < 0:
            mapping[c] = nc
            nc += 1
        cmap[v] = mapping[c]
    cvw = np.zeros(nc, np.int64)
    start = np.zeros(nc + 1, np.int64)
    for v in range(n):
        cvw[cmap[v]] += vw[v]
        start[cmap[v] + 1] += 1
    for c in range(nc):
        start[c + 1] += start[c]
    members = np.empty(n, np.int64)
    fill = start[:-1].copy()
    for v in range(n):
        c = cmap[v]
        members[fill[c]] = v
        fill[c] += 1
    m = adj.size
    cxadj = np.zeros(nc + 1, np.int64)
    cadj = np.empty(m, np.int64)
    cew = np.empty(m, np.int64)
    acc = np.zeros(nc, np.int64)
    touched = np.empty(nc, np.int64)
    pos = 0
    for c in range(nc):
        nt = 0
        for i in range(start[c], start[c + 1]):
            v = members[i]
            for e in range(xadj[v], xadj[v + 1]):
                d = cmap[adj[e]]
                if d == c:
                    continue
                if acc[d] == 0:
                    touched[nt] = d
                    nt += 1
                acc[d] += ew[e]
        for t in range(nt):
            d = touched[t]
            cadj[pos] = d
            cew[pos] = acc[d]
            acc[d] = 0
            pos += 1
        cxadj[c + 1] = pos
    return cmap, cxadj, cadj[:pos].copy(), cew[:pos].copy(), cvw


# --------------------------------------------------------------------------------------------
# 2-way: greedy graph growing + FM
# --------------------------------------------------------------------------------------------
@numba.njit(cache=True)
def _fm_2way(xadj, adj, ew, vw, side, maxw0, maxw1, max_passes, state):
    """Boundary FM with rollback; objective = (overload, cut) lexicographically.

    One gain heap per side: when one side is full, the best vertices of the other side are
    moved first (freeing room) instead of being popped and locked unmoved, which a single
    heap does under a tight balance constraint and which costs most of FM's power there.
    """
    n = vw.size
    gain = np.zeros(n, np.int64)
    hv = np.empty((2, n), np.int64)
    hk = np.empty((2, n), np.int64)
    pos = np.full(n, -1, np.int64)
    hs = np.zeros(2, np.int64)
    locked = np.zeros(n, np.bool_)
    moves = np.empty(n, np.int64)
    w = np.zeros(2, np.int64)
    for v in range(n):
        w[side[v]] += vw[v]
    cut = 0
    for v in range(n):
        for e in range(xadj[v], xadj[v + 1]):
            if side[adj[e]] != side[v]:
                cut += ew[e]
    cut //= 2
    maxw = np.array([maxw0, maxw1], np.int64)
    stall_limit = max(50, n // 20)
    for _ in range(max_passes):
        hs[0] = 0
        hs[1] = 0
        perm = permutation(n, state)
        over0 = max(0, w[0] - maxw[0]) + max(0, w[1] - maxw[1])
        for i in range(n):
            v = perm[i]
            g = 0
            boundary = False
            for e in range(xadj[v], xadj[v + 1]):
                if side[adj[e]] != side[v]:
                    g += ew[e]
                    boundary = True
                else:
                    g -= ew[e]
            gain[v] = g
            locked[v] = False
            pos[v] = -1
            if boundary or over0 > 0:
                s = side[v]
                hs[s] = heap_push_or_update(hv[s], hk[s], pos, hs[s], v, g)
        start_over = over0
        best_over = start_over
        best_cut = cut
        best_idx = 0
        nm = 0
        cur_cut = cut
        since = 0
        while hs[0] + hs[1] > 0:
            over_before = max(0, w[0] - maxw[0]) + max(0, w[1] - maxw[1])
            pick = -1
            pick_over = 0
            for s in range(2):
                if hs[s] == 0:
                    continue
                v = hv[s, 0]
                t = 1 - s
                oa = max(0, w[s] - vw[v] - maxw[s]) + max(0, w[t] + vw[v] - maxw[t])
                if oa > over_before or (oa > 0 and oa == over_before):
                    continue
                if pick < 0 or hk[s, 0] > hk[pick, 0] or \
                        (hk[s, 0] == hk[pick, 0] and w[s] > w[pick]):
                    pick = s
                    pick_over = oa
            if pick < 0:
                # neither top move keeps balance: drop the heavier side's top vertex
                s = 0 if (hs[1] == 0 or (hs[0] > 0 and w[0] >= w[1])) else 1
                v, hs[s] = heap_pop(hv[s], hk[s], pos, hs[s])
                locked[v] = True
                continue
            s = pick
            t = 1 - s
            v, hs[s] = heap_pop(hv[s], hk[s], pos, hs[s])
            side[v] = t
            w[s] -= vw[v]
            w[t] += vw[v]
            locked[v] = True
            cur_cut -= gain[v]
            moves[nm] = v
            nm += 1
            for e in range(xadj[v], xadj[v + 1]):
                u = adj[e]
                if locked[u]:
                    continue
                if side[u] == t:
                    gain[u] -= 2 * ew[e]
                else:
                    gain[u] += 2 * ew[e]
                su = side[u]
                hs[su] = heap_push_or_update(hv[su], hk[su], pos, hs[su], u, gain[u])
            if pick_over < best_over or (pick_over == best_over and cur_cut < best_cut):
                best_over = pick_over
                best_cut = cur_cut
                best_idx = nm
                since = 0
            else:
                since += 1
                if since > stall_limit:
                    break
        for s in range(2):
            for i in range(hs[s]):
                pos[hv[s, i]] = -1
        for i in range(nm - 1, best_idx - 1, -1):
            v = moves[i]
            s = side[v]
            side[v] = 1 - s
            w[s] -= vw[v]
            w[1 - s] += vw[v]
        improved = best_over < start_over or best_cut < cut
        cut = best_cut
        if not improved:
            break
    return cut


@numba.njit(cache=True)
def _grow(xadj, adj, ew, vw, target0, state):
    """Greedy graph growing: grow side 0 from a random seed by max gain until target0."""
    n = vw.size
    side = np.ones(n, np.int64)
    gain = np.zeros(n, np.int64)
    for v in range(n):
        g = 0
        for e in range(xadj[v], xadj[v + 1]):
            g -= ew[e]
        gain[v] = g
    hv = np.empty(n, np.int64)
    hk = np.empty(n, np.int64)
    pos = np.full(n, -1, np.int64)
    size = 0
    w0 = 0
    while w0 < target0:
        if size == 0:
            # (re)seed from a random vertex still on side 1
            v = rand_below(state, n)
            tries = 0
            while side[v] == 0 and tries < n:
                v = (v + 1) % n
                tries += 1
            if side[v] == 0:
                break
        else:
            v, size = heap_pop(hv, hk, pos, size)
        if w0 + vw[v] > target0 and w0 > 0 and (w0 + vw[v] - target0) > (target0 - w0):
            break
        side[v] = 0
        w0 += vw[v]
        for e in range(xadj[v], xadj[v + 1]):
            u = adj[e]
            if side[u] == 0:
                continue
            gain[u] += 2 * ew[e]
            size = heap_push_or_update(hv, hk, pos, size, u, gain[u])
    return side


@numba.njit(cache=True)
def bisect(xadj, adj, ew, vw, target0, maxw0, maxw1, tries, state):
    """Best of ``tries`` greedy-graph-growing + FM bisections.

    Args:
        target0 (int): desired weight of side 0.
        maxw0, maxw1 (int): weight limits of the two sides.

    Returns:
        np.ndarray: int64 (n,) side (0/1) per vertex.
    """
    n = vw.size
    best = np.zeros(n, np.int64)
    best_key_over = np.int64(-1)
    best_cut = np.int64(0)
    for t in range(tries):
        side = _grow(xadj, adj, ew, vw, target0, state)
        cut = _fm_2way(xadj, adj, ew, vw, side, maxw0, maxw1, 8, state)
        w0 = 0
        for v in range(n):
            if side[v] == 0:
                w0 += vw[v]
        w1 = vw.sum() - w0
        over = max(0, w0 - maxw0) + max(0, w1 - maxw1)
        if best_key_over < 0 or over < best_key_over or (over == best_key_over and cut < best_cut):
            best_key_over = over
            best_cut = cut
            best[:] = side
    return best


@numba.njit(cache=True)
def _subgraph(xadj, adj, ew, vw, verts):
    """Induced subgraph on ``verts`` (sorted or not); returns CSR with local ids."""
    n = vw.size
    local = np.full(n, -1, np.int64)
    for i in range(verts.size):
        local[verts[i]] = i
    ns = verts.size
    sx = np.zeros(ns + 1, np.int64)
    cnt = 0
    for i in range(ns):
        v = verts[i]
        for e in range(xadj[v], xadj[v + 1]):
            if local[adj[e]] >= 0:
                cnt += 1
        sx[i + 1] = cnt
    sa = np.empty(cnt, np.int64)
    se = np.empty(cnt, np.int64)
    p = 0
    for i in range(ns):
        v = verts[i]
        for e in range(xadj[v], xadj[v + 1]):
            l = local[adj[e]]
            if l >= 0:
                sa[p] = l
                se[p] = ew[e]
                p += 1
    svw = vw[verts].copy()
    return sx, sa, se, svw


BISECT_GROWTH = 0.0
BISECT_HEM = False


def ml_bisect(xadj, adj, ew, vw, target0: int, maxw0: int, maxw1: int, tries: int,
              state: np.ndarray, coarsest: int = 120) -> np.ndarray:
    """Multilevel bisection: LP-coarsen to ~``coarsest`` vertices, best-of-``tries`` growing +
    FM there, then 2-way FM on every level on the way back.

    Returns:
        np.ndarray: int64 (n,) side per vertex.
    """
    levels = [(xadj, adj, ew, vw, None)]
    wt = int(vw.sum())
    while levels[-1][3].size > coarsest:
        gx, ga, ge, gv, _ = levels[-1]
        maxw = max(int(gv.max()), wt // max(coarsest // 2, 2))
        if BISECT_GROWTH > 0:  # gradual coarsening: FM gets a level every few-fold shrink
            maxw = max(int(gv.max()), min(maxw, int(BISECT_GROWTH * wt / gv.size)))
        if BISECT_HEM:
            label = hem_cluster(gx, ga, ge, gv, maxw, state, np.zeros(gv.size, np.int64))
        else:
            label = lp_cluster(gx, ga, ge, gv, maxw, 5, state, np.zeros(gv.size, np.int64), 1)
        cmap, cx, ca, ce, cv = contract(gx, ga, ge, gv, label)
        if cv.size > 0.9 * gv.size:
            break
        levels.append((cx, ca, ce, cv, cmap))
    gx, ga, ge, gv, _ = levels[-1]
    side = bisect(gx, ga, ge, gv, target0, maxw0, maxw1, tries, state)
    for li in range(len(levels) - 2, -1, -1):
        side = side[levels[li + 1][4]]
        gx, ga, ge, gv, _ = levels[li]
        _fm_2way(gx, ga, ge, gv, side, maxw0, maxw1, 8, state)
    return side


def recursive_bisection(xadj, adj, ew, vw, k: int, eps: float, state: np.ndarray,
                        tries: int = 8) -> np.ndarray:
    """k-way partition by recursive bisection (Python recursion over k-1 blocks only).

    Args:
        xadj, adj, ew, vw: weighted CSR.
        k (int): number of blocks.
        eps (float): allowed imbalance of the final blocks.
        state (np.ndarray): RNG state.
        tries (int): bisection attempts per split.

    Returns:
        np.ndarray: int64 (n,) block per vertex.
    """
    n = vw.size
    part = np.zeros(n, np.int64)
    depth = max(1, math.ceil(math.log2(max(k, 2))))
    eps_level = (1.0 + eps) ** (1.0 / depth) - 1.0

    def rec(verts: np.ndarray, sx, sa, se, svw, k_lo: int, kk: int):
        if kk == 1 or verts.size == 0:
            part[verts] = k_lo
            return
        k0 = kk // 2
        k1 = kk - k0
        wt = int(svw.sum())
        target0 = int(round(wt * k0 / kk))
        maxw0 = int(math.floor((1.0 + eps_level) * wt * k0 / kk))
        maxw1 = int(math.floor((1.0 + eps_level) * wt * k1 / kk))
        side = ml_bisect(sx, sa, se, svw, target0, maxw0, maxw1, tries, state)
        for s, (lo, kb) in enumerate(((k_lo, k0), (k_lo + k0, k1))):
            loc = np.nonzero(side == s)[0]
            g = _subgraph(sx, sa, se, svw, loc)
            rec(verts[loc], *g, lo, kb)

    rec(np.arange(n), xadj, adj, ew, vw, 0, k)
    return part


# --------------------------------------------------------------------------------------------
# k-way refinement and balancing
# --------------------------------------------------------------------------------------------
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
        order = permutation(n, state)
        moved = 0
        rgain = 0
        for idx in range(n):
            v = order[idx]
            p = part[v]
            nt = 0
            for e in range(xadj[v], xadj[v + 1]):
                b = part[adj[e]]
                if conn[b] == 0:
                    touched[nt] = b
                    nt += 1
                conn[b] += ew[e]
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
def _best_move(xadj, adj, ew, vw, part, bw, k, maxbw, v, conn, touched):
    """Best target block of ``v`` (highest conn, feasible); returns (gain, target, boundary)."""
    p = part[v]
    nt = 0
    for e in range(xadj[v], xadj[v + 1]):
        b = part[adj[e]]
        if conn[b] == 0:
            touched[nt] = b
            nt += 1
        conn[b] += ew[e]
    cp = conn[p]
    best = -1
    bestc = -1
    boundary = False
    for t in range(nt):
        b = touched[t]
        if b == p:
            continue
        boundary = True
        if bw[b] + vw[v] > maxbw:
            continue
        c = conn[b]
        if c > bestc or (c == bestc and bw[b] < bw[best]):
            bestc = c
            best = b
    for t in range(nt):
        conn[touched[t]] = 0
    if best < 0:
        return np.int64(0), np.int64(-1), boundary
    return np.int64(bestc - cp), np.int64(best), boundary


@numba.njit(cache=True)
def fm_kway(xadj, adj, ew, vw, part, k, maxbw, rounds, stall, state):
    """k-way FM with hill climbing: repeatedly move the boundary vertex of highest gain
    (also negative gains), each vertex at most once per round, then roll back to the best
    prefix.  Gains are evaluated lazily (recomputed when popped).  ``part`` is updated in place.

    Returns:
        int: total cut reduction.
    """
    n = vw.size
    bw = np.zeros(k, np.int64)
    for v in range(n):
        bw[part[v]] += vw[v]
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
    for _ in range(rounds):
        size = 0
        order = permutation(n, state)
        for i in range(n):
            v = order[i]
            locked[v] = False
            g, t, bnd = _best_move(xadj, adj, ew, vw, part, bw, k, maxbw, v, conn, touched)
            if t >= 0:
                size = heap_push_or_update(hv, hk, pos, size, v, g)
        delta = 0
        best_delta = 0
        best_idx = 0
        nm = 0
        since = 0
        work = 0
        work_cap = 4 * adj.size + 1000  # bounds a round at O(m) even on dense graphs
        while size > 0:
            key = hk[0]
            v, size = heap_pop(hv, hk, pos, size)
            g, t, bnd = _best_move(xadj, adj, ew, vw, part, bw, k, maxbw, v, conn, touched)
            if t < 0:
                continue
            if g < key:
                size = heap_push_or_update(hv, hk, pos, size, v, g)
                continue
            p = part[v]
            part[v] = t
            bw[p] -= vw[v]
            bw[t] += vw[v]
            locked[v] = True
            mv[nm] = v
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
            for e in range(xadj[v], xadj[v + 1]):
                u = adj[e]
                if locked[u] or xadj[u + 1] - xadj[u] > deg_cap:
                    continue
                work += xadj[u + 1] - xadj[u]
                gu, tu, bu = _best_move(xadj, adj, ew, vw, part, bw, k, maxbw, u, conn, touched)
                if tu >= 0:
                    size = heap_push_or_update(hv, hk, pos, size, u, gu)
        for i in range(size):
            pos[hv[i]] = -1
        for i in range(nm - 1, best_idx - 1, -1):
            v = mv[i]
            t = part[v]
            p = mfrom[i]
            part[v] = p
            bw[t] -= vw[v]
            bw[p] += vw[v]
        total -= best_delta
        if best_delta == 0:
            break
    return total


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


# --------------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------------
FM_ROUNDS = 3


def _coarsen(xadj, adj, ew, vw, k, eps, total, coarsen_to, lp_rounds, state, part=None):
    levels: List[Tuple] = [(xadj, adj, ew, vw, None)]
    cpart = part
    while True:
        gx, ga, ge, gv, _ = levels[-1]
        n = gv.size
        if n <= coarsen_to:
            break
        kk = min(k, max(2, n // 160))
        maxw = max(int(eps * total / kk), int(gv.max()), 1)
        if cpart is None:
            label = lp_cluster(gx, ga, ge, gv, maxw, lp_rounds, state, np.zeros(n, np.int64), 1)
        else:
            label = lp_cluster(gx, ga, ge, gv, maxw, lp_rounds, state, cpart, k)
        cmap, cx, ca, ce, cv = contract(gx, ga, ge, gv, label)
        if cv.size > 0.95 * n:
            break
        if cpart is not None:
            newp = np.empty(cv.size, np.int64)
            newp[cmap] = cpart
            cpart = newp
        levels.append((cx, ca, ce, cv, cmap))
    return levels, cpart


def _uncoarsen(levels, part, k, maxbw, refine_rounds, state):
    for li in range(len(levels) - 1, -1, -1):
        gx, ga, ge, gv, _ = levels[li]
        if li < len(levels) - 1:
            part = part[levels[li + 1][4]]
        rebalance(gx, ga, ge, gv, part, k, maxbw)
        refine_kway(gx, ga, ge, gv, part, k, maxbw, refine_rounds, state)
        if FM_ROUNDS > 0:
            fm_kway(gx, ga, ge, gv, part, k, maxbw, FM_ROUNDS, max(100, gv.size // 50), state)
    return part


def multilevel_partition(xadj, adj, ew, vw, k: int, maxbw: int, eps: float, seed: int = 0,
                         coarsen_to: int | None = None, lp_rounds: int = 5,
                         refine_rounds: int = 8, ip_tries: int = 8, vcycles: int = 2,
                         initial: str = "rb") -> np.ndarray:
    """Multilevel k-way partition of a weighted graph with hard block weight ``maxbw``.

    One full multilevel cycle (LP coarsening, recursive bisection, LP refinement), then
    ``vcycles`` iterated V-cycles that coarsen *inside* the current blocks (so the partition
    carries over unchanged to the coarsest level) and refine again; the best cut is kept.

    Args:
        xadj, adj, ew, vw: weighted CSR (int64 arrays).
        k (int): number of blocks.
        maxbw (int): hard block weight limit.
        eps (float): imbalance used for cluster-size limits and bisection targets.
        seed (int): RNG seed.
        coarsen_to (int, optional): stop coarsening below this many vertices (default 40*k).
        lp_rounds, refine_rounds (int): LP rounds for coarsening / refinement.
        ip_tries (int): bisection attempts per split at the coarsest level.
        vcycles (int): extra partition-preserving V-cycles.
        initial (str): ``"rb"`` (own multilevel recursive bisection) or ``"metis"`` (pymetis on
            the coarsest graph, if installed).

    Returns:
        np.ndarray: int64 (n,) block per vertex.
    """
    state = rng_state(seed)
    xadj = np.ascontiguousarray(xadj, np.int64)
    adj = np.ascontiguousarray(adj, np.int64)
    ew = np.ascontiguousarray(ew, np.int64)
    vw = np.ascontiguousarray(vw, np.int64)
    total = int(vw.sum())
    if coarsen_to is None:
        coarsen_to = max(40 * k, 200)
    levels, _ = _coarsen(xadj, adj, ew, vw, k, eps, total, coarsen_to, lp_rounds, state)
    gx, ga, ge, gv, _ = levels[-1]
    if initial == "metis":
        part = _metis_initial(gx, ga, ge, gv, k, eps, seed)
    else:
        part = recursive_bisection(gx, ga, ge, gv, k, eps, state, tries=ip_tries)
    part = _uncoarsen(levels, part, k, maxbw, refine_rounds, state)
    best_cut = edge_cut_csr(xadj, adj, ew, part)
    for _ in range(vcycles):
        levels, cpart = _coarsen(xadj, adj, ew, vw, k, eps, total, coarsen_to, lp_rounds, state,
                                 part=part)
        p2 = _uncoarsen(levels, cpart, k, maxbw, refine_rounds, state)
        c2 = edge_cut_csr(xadj, adj, ew, p2)
        if c2 <= best_cut and np.bincount(p2, weights=vw, minlength=k).max() <= maxbw:
            part, best_cut = p2, c2
    return part


def improve_partition(xadj, adj, ew, vw, part, k: int, maxbw: int, eps: float, seed: int = 0,
                      coarsen_to: int | None = None, lp_rounds: int = 5, refine_rounds: int = 8,
                      vcycles: int = 2) -> np.ndarray:
    """Improve a given partition: rebalance + k-way refinement, then ``vcycles``
    partition-preserving V-cycles; never returns a worse (feasible) cut.

    Args:
        part (np.ndarray): int64 (n,) starting block per vertex (not modified).
        Other arguments as :func:`multilevel_partition`.

    Returns:
        np.ndarray: int64 (n,) improved block per vertex.
    """
    state = rng_state(seed)
    xadj = np.ascontiguousarray(xadj, np.int64)
    adj = np.ascontiguousarray(adj, np.int64)
    ew = np.ascontiguousarray(ew, np.int64)
    vw = np.ascontiguousarray(vw, np.int64)
    total = int(vw.sum())
    if coarsen_to is None:
        coarsen_to = max(40 * k, 200)
    part = np.array(part, dtype=np.int64)
    rebalance(xadj, adj, ew, vw, part, k, maxbw)
    refine_kway(xadj, adj, ew, vw, part, k, maxbw, refine_rounds, state)
    if FM_ROUNDS > 0:
        fm_kway(xadj, adj, ew, vw, part, k, maxbw, FM_ROUNDS, max(100, vw.size // 50), state)
    best_cut = edge_cut_csr(xadj, adj, ew, part)
    for _ in range(vcycles):
        levels, cpart = _coarsen(xadj, adj, ew, vw, k, eps, total, coarsen_to, lp_rounds, state,
                                 part=part)
        p2 = _uncoarsen(levels, cpart, k, maxbw, refine_rounds, state)
        c2 = edge_cut_csr(xadj, adj, ew, p2)
        if c2 <= best_cut and np.bincount(p2, weights=vw, minlength=k).max() <= maxbw:
            part, best_cut = p2, c2
    return part


def _metis_initial(xadj, adj, ew, vw, k, eps, seed):
    try:
        import pymetis
    except ImportError:  # pragma: no cover - fallback
        return recursive_bisection(xadj, adj, ew, vw, k, eps, rng_state(seed))
    opts = pymetis.Options(ufactor=max(1, int(eps * 1000)), seed=int(seed))
    _, memb = pymetis.part_graph(k, xadj=xadj, adjncy=adj, vweights=vw, eweights=ew,
                                 recursive=False, options=opts)
    return np.asarray(memb, dtype=np.int64)
