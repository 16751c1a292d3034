"""The edge-balance phase: bring every block's adjacency entries under a multiple of the mean
while keeping the vertex capacity, then refine the cut under both limits.

Why this module exists: vertex-balanced partitions of heavy-tailed graphs pack the hubs into
a few blocks; ``--max-edge-balance`` runs :func:`edge_balance_phase` after any method, and
GREM's edge-weighted run refines with :func:`edge_weighted_refine` (see docs/partitioning.md,
"GREM under both limits").
"""

from __future__ import annotations

import logging
import math
from typing import Dict, Optional

import numba
import numpy as np

from .nbutil import rng_state
from .placement import block_weights, capacity, chunk_order, count_degrees, force_balance, group_order
from .stream import EdgeStream

logger = logging.getLogger("argosy.partitioner")

__all__ = ["edge_balance_phase", "edge_weighted_refine", "move_isolated", "warn_edge_limit",
           "EDGE_BALANCE_THRESHOLDS", "EDGE_BALANCE_ROUNDS", "EDGE_BALANCE_VERTEX_THRESHOLDS"]


@numba.njit(cache=True)
def _edge_balance_chunk(src, dst, starts, gorder, part, size, vol, conn, touched, k, deg, mode,
                        thr, vcap, ecap, dmax):
    """One sweep of the edge-balance phase over a vertex-aligned chunk (``deg[v]``: v's
    adjacency entries; ``vol[b]``: block b's; ``size[b]``: its vertices).

    ``mode`` 1 (edge push): a vertex of degree > ``dmax`` in a block over ``ecap`` entries
    (a light one would shed a slot, not edges) moves to the block with
    most of its neighbours among those with room (``size + 1 <= vcap``, ``vol + deg <= ecap``)
    if the cut changes by at least ``thr * deg`` (``thr <= 0``: cheapest cut per entry first).
    ``mode`` 2 (vertex push): a vertex of degree <= ``dmax`` in a block over ``vcap`` vertices
    moves to the best block with vertex room if the cut changes by at least ``thr``; light
    vertices go back where the pushed-out edges came from, often next to their hub.  ``mode``
    0 (refinement): any vertex moves to the best block with room on both counts if that
    strictly lowers the cut.  Returns ``(moved, cut edges saved)``."""
    unit = np.empty(0, np.int64)  # every entry weighs 1
    moved = 0
    gain = 0
    for gi in range(gorder.size):
        g = gorder[gi]
        a = starts[g]
        b = starts[g + 1]
        v = src[a]
        p = part[v]
        dv = deg[v]
        if (mode == 1 and (vol[p] <= ecap or dv <= dmax)) or \
                (mode == 2 and (size[p] <= vcap or dv > dmax)):
            continue
        nt = block_weights(dst, unit, a, b, part, conn, touched)
        cp = conn[p]
        best = -1
        bestc = -1
        if mode == 0:
            for t in range(nt):
                q = touched[t]
                if q != p and conn[q] > bestc and size[q] + 1 <= vcap and vol[q] + dv <= ecap:
                    best = q
                    bestc = conn[q]
        else:  # blocks without neighbours of v are candidates too
            for q in range(k):
                if q == p or conn[q] <= bestc or size[q] + 1 > vcap:
                    continue
                if mode == 1 and vol[q] + dv > ecap:
                    continue
                best = q
                bestc = conn[q]
        for t in range(nt):
            conn[touched[t]] = 0
        if best < 0:
            continue
        d = bestc - cp
        if (mode == 0 and d > 0) or (mode == 1 and d >= thr * dv) or (mode == 2 and d >= thr):
            part[v] = best
            size[p] -= 1
            size[best] += 1
            vol[p] -= dv
            vol[best] += dv
            moved += 1
            gain += d
    return moved, gain


def move_isolated(part, deg, k, cap):
    """Move vertices without edges out of blocks over the vertex capacity ``cap`` into blocks
    with room: they cost no cut anywhere, and no stream sweep meets them.  Returns the count."""
    size = np.bincount(part, minlength=k).astype(np.int64)
    over = np.maximum(size - cap, 0)
    if not over.any():
        return 0
    iso = np.flatnonzero(deg == 0)
    moving = np.concatenate([iso[part[iso] == b][:over[b]] for b in np.flatnonzero(over)])
    room = np.maximum(cap - size, 0)
    targets = np.repeat(np.arange(k, dtype=part.dtype), room)[:moving.size]
    part[moving[:targets.size]] = targets
    return int(targets.size)


def _edge_balance_sweep(stream, part, size, vol, conn, touched, k, deg, mode, thr, vcap, ecap,
                        dmax, order, state):
    """One pass of :func:`_edge_balance_chunk` over the stream; returns ``(moved, gain)``."""
    moved = gain = 0
    for src, dst, starts in stream.iter_groups(chunk_order(stream, order, state)):
        go = group_order(starts, order, state)
        m, g = _edge_balance_chunk(src, dst, starts, go, part, size, vol, conn, touched, k, deg,
                                   mode, thr, vcap, ecap, dmax)
        moved += m
        gain += g
    return moved, gain


def edge_weighted_refine(stream, part, k, deg, ecap, order, state, passes):
    """Label-propagation refinement with blocks limited by adjacency entries (``ecap``, or the
    fullest block's count if that is higher) and not by vertices: step 4 of an edge-weighted
    GREM run.  Returns ``(passes run, cut edges saved)``."""
    size = np.bincount(part, minlength=k).astype(np.int64)
    vol = np.bincount(part, weights=deg, minlength=k).astype(np.int64)
    conn = np.zeros(k, np.int64)
    touched = np.empty(k, np.int64)
    ec = max(int(ecap), int(vol.max()))
    total, rp = 0, 0
    for rp in range(1, max(1, passes) + 1):
        moved, gain = _edge_balance_sweep(stream, part, size, vol, conn, touched, k, deg, 0, 0.0,
                                          part.size + 1, ec, 0, order, state)
        total += gain
        logger.info("GREM edge-weighted refinement pass %d: %d moves, %d fewer cut edges", rp,
                    moved, gain)
        if moved == 0 or gain <= 0.0005 * max(int(vol.sum()), 1):
            break
    return rp, total


EDGE_BALANCE_THRESHOLDS = (0.0, -0.25, -0.5, -0.75, -1.0)


EDGE_BALANCE_ROUNDS = 12


EDGE_BALANCE_VERTEX_THRESHOLDS = (0.0, -1.0, -2.0, -4.0)


def edge_balance_phase(stream: EdgeStream, part: np.ndarray, k: int, eps: float,
                       max_edge_balance: float, order: str = "file", state=None,
                       refine_passes: int = 4, warn: bool = True,
                       degrees: Optional[np.ndarray] = None) -> Dict:
    """Bring every block's adjacency entries to at most ``max_edge_balance`` times the mean,
    keeping the vertex capacity, then refine the cut under both limits.  ``part`` is changed
    in place.

    Why: GREM (like METIS and KaMinPar) balances vertex counts only, and on heavy-tailed graphs
    its lowest cuts pack the hubs into few blocks (R-MAT: 8x the mean edge count in one of 16
    blocks), the work and memory a GNN job spreads over hosts.  Blocks are full of vertices,
    so edges leave a heavy block in rounds: an edge push moves vertices out of blocks over the
    edge limit (into blocks up to 2 % over the vertex capacity; the allowed cut increase per
    entry moved grows over ``EDGE_BALANCE_THRESHOLDS``), then a vertex push sends light
    vertices (at most the median degree) from blocks over the vertex capacity to blocks with
    room, which are the heavy blocks that just shed vertices.  Then label propagation passes
    lower the cut with both limits as hard capacities.  ``degrees``: the entries per vertex if
    already counted (:func:`~.placement.count_degrees`; otherwise one pass counts them).

    Returns:
        dict: ``edge_balance_before`` / ``_after``, ``ecap``, rounds, moves; ``reached`` is
        False if the limit could not be met (warned unless ``warn`` is False).
    """
    n = part.size
    cap = capacity(n, k, eps)
    if state is None:
        state = rng_state(0)
    deg = count_degrees(stream) if degrees is None else degrees
    entries = int(deg.sum(dtype=np.int64))
    moved_isolated = move_isolated(part, deg, k, cap)  # free moves first
    vol = np.bincount(part, weights=deg, minlength=k).astype(np.int64)
    size = np.bincount(part, minlength=k).astype(np.int64)
    ecap = int(math.ceil(max_edge_balance * entries / k))
    vcap = cap + max(1, int(math.ceil(0.02 * n / k)))
    dmax = max(1, int(np.partition(deg, n // 2)[n // 2]))
    info = {"ecap": ecap, "edge_balance_before": float(vol.max() * k / max(entries, 1)),
            "push_moves": 0, "refine_moves": 0, "rounds": 0, "isolated_moves": moved_isolated}
    conn = np.zeros(k, np.int64)
    touched = np.empty(k, np.int64)

    def sweep(mode, thr, vc, ec):
        return _edge_balance_sweep(stream, part, size, vol, conn, touched, k, deg, mode, thr,
                                   vc, ec, dmax, order, state)

    for r in range(EDGE_BALANCE_ROUNDS):
        if vol.max() <= ecap and size.max() <= cap:
            break
        thr = EDGE_BALANCE_THRESHOLDS[min(r, len(EDGE_BALANCE_THRESHOLDS) - 1)]
        m1, _ = sweep(1, thr, vcap, ecap) if vol.max() > ecap else (0, 0)
        m2 = 0
        for thr2 in EDGE_BALANCE_VERTEX_THRESHOLDS:
            if size.max() <= cap:
                break
            m2 += sweep(2, thr2, cap, ecap)[0]
        info["push_moves"] += m1 + m2
        info["rounds"] += 1
        logger.info("GREM edge balance, round %d: %d vertices out of heavy blocks (cut change "
                    ">= %.2f per entry), %d light vertices back; largest block %.2fx the mean "
                    "edge count", r + 1, m1, thr, m2, vol.max() * k / max(entries, 1))
        if m1 + m2 == 0 and r >= len(EDGE_BALANCE_THRESHOLDS) - 1:
            break  # nothing moves even at the loosest threshold
    if size.max() > cap:  # the vertex capacity is the hard guarantee
        info["isolated_moves"] += move_isolated(part, deg, k, cap)
        force_balance(part, k, cap)
        size = np.bincount(part, minlength=k).astype(np.int64)
        vol = np.bincount(part, weights=deg, minlength=k).astype(np.int64)
    info["reached"] = bool(vol.max() <= ecap)
    for _ in range(refine_passes):
        moved, gain = sweep(0, 0.0, cap, max(ecap, int(vol.max())))
        info["refine_moves"] += moved
        if moved == 0 or gain <= 0.0005 * entries:
            break
    info["edge_balance_after"] = float(vol.max() * k / max(entries, 1))
    info["heaviest_vertex"] = float(deg.max() * k / max(entries, 1)) if n else 0.0
    if not info["reached"] and warn:
        warn_edge_limit(max_edge_balance, info)
    return info


def warn_edge_limit(limit: float, info: Dict) -> None:
    logger.warning("GREM edge balance: asked for %.2fx the mean edge count per block, reached "
                   "%.3fx (the heaviest vertex alone holds %.2fx the mean; the rest is too few "
                   "light vertices to trade)", limit, info["edge_balance_after"],
                   info["heaviest_vertex"])
