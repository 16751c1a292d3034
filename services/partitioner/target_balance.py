"""Target balance: spread a typed graph's labelled training vertices evenly over the parts.

Why this module exists: a min-cut partition of a typed graph balances *vertices*, and the target
type's training vertices can pile into a few parts (AIFB over 4 GREM parts: 38/42/12/20 of the
112 training persons).  Batches come from each part's own seeds, so a part with twice the seeds
gives its samplers and its host twice the work of an epoch.  After the partitioner, this phase
moves marked (training) vertices out of parts holding more than ``(1 + eps) T / k`` of them, each
to the part with room where it has the most neighbours (the least added cut), then moves
unmarked vertices out of parts the first step pushed over the vertex capacity, again by the least
added cut.  It runs on the in-memory CSR the typed path already holds: O(n + m) time, O(n + k)
state beyond it, no Python per vertex or edge.
"""
from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["balance_marked"]


@numba.njit(cache=True)
def _best_moves(indptr, indices, part, cand, k, room):
    """For each candidate vertex: the part with room (``room[q]``) where it has the most neighbours,
    and the cut change of moving it there (neighbours in its part minus neighbours there)."""
    conn = np.zeros(k, np.int64)
    best = np.full(cand.shape[0], -1, np.int64)
    gain = np.zeros(cand.shape[0], np.int64)
    for i in range(cand.shape[0]):
        v = cand[i]
        for e in range(indptr[v], indptr[v + 1]):
            conn[part[indices[e]]] += 1
        p = part[v]
        bq, bc = -1, -1
        for q in range(k):
            if q != p and room[q] and conn[q] > bc:
                bq, bc = q, conn[q]
        best[i] = bq
        gain[i] = (bc - conn[p]) if bq >= 0 else -(2 ** 62)
        for e in range(indptr[v], indptr[v + 1]):
            conn[part[indices[e]]] = 0
    return best, gain


@numba.njit(cache=True)
def _apply(indptr, indices, part, cand, order, best, count, limit_from, cap_to, size, vcap, use_vcap):
    """Move ``cand[order[i]]`` to ``best[...]`` while its part's ``count`` is over ``limit_from`` and
    the destination's is under ``cap_to`` (and, with ``use_vcap``, its ``size`` under ``vcap``).
    ``count``/``size`` are updated in place.  Returns (moved, cut change)."""
    moved = 0
    delta = 0
    for i in order:
        v = cand[i]
        p, q = part[v], best[i]
        if q < 0 or count[p] <= limit_from or count[q] >= cap_to or (use_vcap and size[q] >= vcap):
            continue
        d = 0                                  # the cut change, recounted: earlier moves changed it
        for e in range(indptr[v], indptr[v + 1]):
            b = part[indices[e]]
            d += (b == p) - (b == q)
        part[v] = q
        count[p] -= 1
        count[q] += 1
        size[p] -= 1
        size[q] += 1
        moved += 1
        delta += d
    return moved, delta


def balance_marked(indptr: np.ndarray, indices: np.ndarray, part: np.ndarray, marked: np.ndarray, k: int,
                   eps: float = 0.05, vertex_eps: float = 0.03, rounds: int = 3) -> dict:
    """Bring every part's marked vertices to at most ``ceil((1 + eps) T / k)`` (T marked in all),
    keeping every part's vertices at most ``max(ceil((1 + vertex_eps) n / k), largest part)``.

    ``part`` (int[n]) is changed in place.  Shapes: indptr int64[n + 1], indices int[m] (a symmetric
    CSR), marked bool[n].  Returns ``{"marked_max_over_mean_before", "..._after", "moved",
    "cut_edges_added", ...}`` (undirected edges newly cut, net).
    """
    n = part.shape[0]
    T = int(marked.sum())
    out = {"marked": T, "moved": 0, "cut_edges_added": 0}
    if k < 2 or T == 0:
        out["marked_max_over_mean_before"] = out["marked_max_over_mean_after"] = 1.0
        return out
    ip = np.asarray(indptr, np.int64)
    ind = np.asarray(indices)
    part64 = part.astype(np.int64)
    count = np.bincount(part64[marked], minlength=k).astype(np.int64)
    size = np.bincount(part64, minlength=k).astype(np.int64)
    mcap = max(math.ceil((1 + eps) * T / k), math.ceil(T / k))
    vcap = max(math.ceil((1 + vertex_eps) * n / k), int(size.max()))
    out["marked_max_over_mean_before"] = float(count.max() / (T / k))
    marked_ids = np.flatnonzero(marked)
    for _ in range(rounds):
        over = count[part64[marked_ids]] > mcap
        if not over.any():
            break
        cand = marked_ids[over]
        best, gain = _best_moves(ip, ind, part64, cand, k, count < mcap)
        order = np.argsort(-gain, kind="stable")
        moved, delta = _apply(ip, ind, part64, cand, order, best, count, mcap, mcap, size, vcap, False)
        out["moved"] += int(moved)
        out["cut_edges_added"] += int(delta)
        if moved == 0:
            break
    for _ in range(rounds):                    # parts pushed over the vertex capacity shed unmarked ones
        if size.max() <= vcap:
            break
        unmarked = np.flatnonzero(~marked & (size[part64] > vcap))
        best, gain = _best_moves(ip, ind, part64, unmarked, k, size < vcap)
        order = np.argsort(-gain, kind="stable")
        moved, delta = _apply(ip, ind, part64, unmarked, order, best, size.copy(), vcap, vcap, size, vcap, False)
        out["moved"] += int(moved)
        out["cut_edges_added"] += int(delta)
        if moved == 0:
            break
    part[:] = part64.astype(part.dtype, copy=False)
    out["marked_max_over_mean_after"] = float(count.max() / (T / k))
    out["vertex_max_over_mean_after"] = float(size.max() / (n / k))
    return out
