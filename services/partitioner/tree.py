"""Refinement down the recursive-bisection tree (halves, quarters, ...) before GREM's k-way
streaming refinement.

Why this module exists: on graphs made of a few large blocks with no local structure inside,
k-way label propagation settles where every block mixes all of the graph's blocks; between two
groups of blocks the block signal is strong enough to be amplified (see
:func:`refine_down_tree`).
"""

from __future__ import annotations

import logging
import math

import numba
import numpy as np

from .placement import capacity
from .refine import stream_refine

logger = logging.getLogger("argosy.partitioner")

__all__ = ["bisection_tree_levels", "refine_down_tree"]


def bisection_tree_levels(k: int):
    """Groups of blocks at each inner depth of the recursive-bisection tree over ``k`` blocks.

    :func:`~.bisection.recursive_bisection` numbers blocks so that every tree node is a
    contiguous range: node ``(lo, kk)`` splits into ``(lo, kk // 2)`` and
    ``(lo + kk // 2, kk - kk // 2)``.  Depths are listed from the root's two children down to
    the last one above the leaves, and only while all groups of a depth hold the same number
    of blocks (so one capacity serves them all); for k = 16: 2, 4 and 8 groups.

    Returns:
        list: ``(group_of_block int32 (k,), first_block int64 (g,), end_block int64 (g,))``.
    """
    out = []
    nodes = [(0, int(k))]
    while True:
        kids = []
        for lo, kk in nodes:
            kids += [(lo, kk // 2), (lo + kk // 2, kk - kk // 2)] if kk > 1 else [(lo, 1)]
        if all(kk == 1 for _, kk in kids) or len({kk for _, kk in kids}) != 1:
            return out
        gmap = np.empty(k, np.int32)
        for gi, (lo, kk) in enumerate(kids):
            gmap[lo:lo + kk] = gi
        out.append((gmap, np.array([lo for lo, _ in kids], np.int64),
                    np.array([lo + kk for lo, kk in kids], np.int64)))
        nodes = kids


@numba.njit(cache=True)
def _count_group_cuts(src, dst, part, gmaps, out):
    """Entries of a chunk cut between the groups of each row of ``gmaps`` (block -> group)."""
    for i in range(src.size):
        a = part[src[i]]
        b = part[dst[i]]
        if a != b:
            for lv in range(gmaps.shape[0]):
                if gmaps[lv, a] != gmaps[lv, b]:
                    out[lv] += 1


# the tree stops after its first depth (the two halves of the blocks) when that depth removed
# less than this share of the cut between the halves
TREE_FIRST_DEPTH_MIN_GAIN = 0.01


def refine_down_tree(stream, part, k, eps, order, state, passes):
    """Streaming LP refinement down the recursive-bisection tree: first between the two
    halves of the blocks, then between quarters, ..., before the k-way refinement.

    Why: on graphs whose structure is a few large blocks with no local structure inside
    (e.g. 4 random-graph blocks cut 16 ways), the clusters carry no block signal and the
    k-way LP refinement settles in the nearest local optimum, where every block of the
    partition mixes all of the graph's blocks: with 16 blocks each vertex sees ~1 neighbour
    per block and the block signal drowns in that noise.  Between 2 groups it sees ~half its
    neighbours in each and a weak correlation with the graph's blocks is amplified pass by
    pass (on the 20M-edge 4-block graph, 2-way LP goes from a random-like split to the exact
    block bisection in 5 passes); each depth then starts from the one above.  Each depth keeps
    a share of the imbalance (``(1 + eps) ** (d / D)``) so the levels below stay feasible.
    A vertex that changes group takes the block of its new group holding most of its
    neighbours (among blocks with room), so the next depth starts close to converged.

    It stops after the first depth if that removed less than
    :data:`TREE_FIRST_DEPTH_MIN_GAIN` of the halves' cut (the caller then keeps its k-way result).

    Returns:
        list: per depth run ``(groups, passes, gain)``, then ``(0, 0, 0)`` if it stopped early.
    """
    levels = bisection_tree_levels(k)
    n = part.size
    lcap = capacity(n, k, eps)
    gmaps = np.stack([lv[0] for lv in levels])
    group_cuts = np.zeros(len(levels), np.int64)   # each depth's cut, for its stopping rule
    for src, dst in stream:
        _count_group_cuts(src, dst, part, gmaps, group_cuts)
    depth_total = len(levels) + 1
    done = []
    for d, (gmap, glo, ghi) in enumerate(levels, start=1):
        ng = glo.size
        per = k // ng
        gcap = max(int(math.floor(n * per / k * (1.0 + eps) ** (d / depth_total))),
                   -(-n * per // k))
        lsize = np.bincount(part, minlength=k).astype(np.int64)
        gsize = np.add.reduceat(lsize, glo)
        rp, gain = stream_refine(stream, part, gsize, ng, gcap, order, state, passes,
                                  int(group_cuts[d - 1]), 0, min_gain=0.01,
                                  groups=(gmap, glo, ghi, lsize, lcap))
        logger.info("GREM tree refinement, %d groups: %d passes, %d fewer cut edges", ng, rp,
                    gain)
        done.append((ng, rp, int(gain)))
        if d == 1 and gain < TREE_FIRST_DEPTH_MIN_GAIN * max(int(group_cuts[0]), 1):
            # the halves found (almost) nothing: the partition is not the mixed-blocks case the
            # tree is for (geometric 20M: 34 of 56k cut edges at the first depth, 0.2 % after
            # every depth and the k-way passes that follow, for ~7 passes over the stream)
            logger.info("GREM tree refinement: the first depth gained %d of %d cut edges; "
                        "stopping", gain, int(group_cuts[0]))
            done.append((0, 0, 0))  # marks the stop
            break
    return done
