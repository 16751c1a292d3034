"""Multilevel recursive bisection: greedy graph growing and 2-way FM at the coarsest level of
each split, 2-way FM on the way back up.

Why this module exists: it is the initial partitioner of :func:`~.multilevel.multilevel_partition`
(the coarsest graph is split in two, each side again, until k blocks); the block numbering it
produces is the tree :mod:`.tree` refines along.

Graphs are weighted CSR: ``xadj`` int64 (n+1,), ``adj`` int64 (m,), ``ew`` int64 (m,) edge
weights (symmetric), ``vw`` int64 (n,) vertex weights.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from .coarsening import contract, hem_cluster, lp_cluster
from .nbutil import heap_pop, heap_push_or_update, permutation, rand_below

__all__ = ["bisect", "ml_bisect", "recursive_bisection"]


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
            label = lp_cluster(gx, ga, ge, gv, maxw, 5, state, np.zeros(gv.size, np.int64), 1, 1)
        cmap, cx, ca, ce, cv = contract(gx, ga, ge, gv, label, 1)
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
