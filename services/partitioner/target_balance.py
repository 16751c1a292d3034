"""Target balance: spread a typed graph's labelled training vertices evenly over the parts.

Why this module exists: a min-cut partition of a typed graph balances *vertices*, and the target
type's training vertices can pile into a few parts (AIFB over 4 GREM parts: 38/42/12/20 of the
112 training persons).  Batches come from each part's own seeds, so a part with twice the seeds
gives its samplers and its host twice the work of an epoch.  After the partitioner, this phase
moves marked (training) vertices out of parts holding more than ``(1 + eps) T / k`` of them, each
to the part with room where it has the most neighbours (the least added cut), then moves
unmarked vertices out of parts the first step pushed over the vertex capacity, again by the least
added cut.  It reads the graph as a grouped edge stream (the partitioner's on-disk regrouped view,
so it adds no O(m) memory): a pass per round, O(n + k) state, no Python per vertex or edge.
"""
from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["balance_marked"]


@numba.njit(cache=True)
def _init_moves(cand, part, k, room, best, gain):
    """A candidate with no neighbour: the first other part with room, at no cut change."""
    for i in range(cand.shape[0]):
        p = part[cand[i]]
        best[i], gain[i] = -1, -(2 ** 62)
        for q in range(k):
            if q != p and room[q]:
                best[i], gain[i] = q, 0
                break


@numba.njit(cache=True)
def _best_moves(src, dst, starts, part, pos, k, room, best, gain):
    """For each candidate vertex of one grouped chunk (``pos[v]`` its candidate index, or -1): the
    part with room (``room[q]``) where it has the most neighbours, and the cut change of moving it
    there (neighbours in its part minus neighbours there)."""
    conn = np.zeros(k, np.int64)
    for g in range(starts.shape[0] - 1):
        a, b = starts[g], starts[g + 1]
        if a == b:
            continue
        i = pos[src[a]]
        if i < 0:
            continue
        for e in range(a, b):
            conn[part[dst[e]]] += 1
        p = part[src[a]]
        bq, bc = -1, -1
        for q in range(k):
            if q != p and room[q] and conn[q] > bc:
                bq, bc = q, conn[q]
        best[i] = bq
        gain[i] = (bc - conn[p]) if bq >= 0 else -(2 ** 62)
        for e in range(a, b):
            conn[part[dst[e]]] = 0


@numba.njit(cache=True)
def _apply(part, cand, order, best, count, limit_from, cap_to, size):
    """Move ``cand[order[i]]`` to ``best[...]`` while its part's ``count`` is over ``limit_from`` and
    the destination's is under ``cap_to``; ``count``/``size`` are updated in place.  Returns moves."""
    moved = 0
    for i in order:
        v = cand[i]
        p, q = part[v], best[i]
        if q < 0 or count[p] <= limit_from or count[q] >= cap_to:
            continue
        part[v] = q
        count[p] -= 1
        count[q] += 1
        size[p] -= 1
        size[q] += 1
        moved += 1
    return moved


@numba.njit(cache=True)
def _cut_entries(src, dst, part):
    c = 0
    for e in range(src.shape[0]):
        c += part[src[e]] != part[dst[e]]
    return c


def _cut(stream, part) -> int:
    """Undirected cut edges (one pass; the stream is symmetric)."""
    return sum(int(_cut_entries(s, d, part)) for s, d, _ in stream.iter_groups()) // 2


def _moves(stream, part, cand, k, room):
    best = np.empty(cand.shape[0], np.int64)
    gain = np.empty(cand.shape[0], np.int64)
    _init_moves(cand, part, k, room, best, gain)
    pos = np.full(part.shape[0], -1, np.int64)
    pos[cand] = np.arange(cand.shape[0])
    for s, d, st in stream.iter_groups():
        _best_moves(s, d, st, part, pos, k, room, best, gain)
    return best, gain


def balance_marked(stream, part: np.ndarray, marked: np.ndarray, k: int,
                   eps: float = 0.05, vertex_eps: float = 0.03, rounds: int = 3) -> dict:
    """Bring every part's marked vertices to at most ``ceil((1 + eps) T / k)`` (T marked in all),
    keeping every part's vertices at most ``max(ceil((1 + vertex_eps) n / k), largest part)``.

    ``stream``: the graph as a grouped symmetric edge stream (every vertex's adjacency in one
    group: the on-disk regrouped view, or a :class:`~.stream.CSRArrayStream`), read once per round
    and twice for the cut.  ``part`` (int[n]) is changed in place; marked bool[n].  Returns
    ``{"marked_max_over_mean_before", "..._after", "moved", "cut_edges_added", ...}`` (undirected
    edges newly cut, net).
    """
    n = part.shape[0]
    T = int(marked.sum())
    out = {"marked": T, "moved": 0, "cut_edges_added": 0}
    if k < 2 or T == 0:
        out["marked_max_over_mean_before"] = out["marked_max_over_mean_after"] = 1.0
        return out
    part64 = part.astype(np.int64)
    count = np.bincount(part64[marked], minlength=k).astype(np.int64)
    size = np.bincount(part64, minlength=k).astype(np.int64)
    mcap = max(math.ceil((1 + eps) * T / k), math.ceil(T / k))
    vcap = max(math.ceil((1 + vertex_eps) * n / k), int(size.max()))
    out["marked_max_over_mean_before"] = float(count.max() / (T / k))
    marked_ids = np.flatnonzero(marked)
    cut_before = _cut(stream, part64) if count.max() > mcap else 0
    for _ in range(rounds):
        over = count[part64[marked_ids]] > mcap
        if not over.any():
            break
        cand = marked_ids[over]
        best, gain = _moves(stream, part64, cand, k, count < mcap)
        moved = _apply(part64, cand, np.argsort(-gain, kind="stable"), best, count, mcap, mcap, size)
        out["moved"] += int(moved)
        if moved == 0:
            break
    for _ in range(rounds):                    # parts pushed over the vertex capacity shed unmarked ones
        if size.max() <= vcap:
            break
        unmarked = np.flatnonzero(~marked & (size[part64] > vcap))
        best, gain = _moves(stream, part64, unmarked, k, size < vcap)
        moved = _apply(part64, unmarked, np.argsort(-gain, kind="stable"), best, size.copy(), vcap, vcap, size)
        out["moved"] += int(moved)
        if moved == 0:
            break
    if out["moved"]:
        out["cut_edges_added"] = _cut(stream, part64) - cut_before
    part[:] = part64.astype(part.dtype, copy=False)
    out["marked_max_over_mean_after"] = float(count.max() / (T / k))
    out["vertex_max_over_mean_after"] = float(size.max() / (n / k))
    return out
