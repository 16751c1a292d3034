"""GREM step 4: streaming refinement of a vertex assignment (label-propagation moves with
pairwise swaps, then buffered k-way FM on each vertex-aligned chunk).

Why this module exists: GREM's "keep refining earlier assignments while streaming" is these
kernels: every vertex met in a chunk may move to the block (or group of blocks, for the tree
refinement of :mod:`.tree`) holding most of its neighbours, under the hard capacity.
"""

from __future__ import annotations

import logging

import numba
import numpy as np

from argosy.shared.intrinsics import prefetch

from .kway import fm_rounds
from .nbutil import atomic_add, rng_state
from .placement import chunk_order, group_order
from .stream import max_group_size, read_groups
from .threads import get_threads, map_chunks

logger = logging.getLogger("argosy.partitioner")

__all__ = ["stream_refine", "stream_refine_chunk", "chunk_fm"]


# the LP refinement prefetches the blocks of the neighbours of the vertex this many places
# ahead (as the clustering does: clustering.LP_AHEAD)
REFINE_AHEAD = 6


@numba.njit(cache=True)
def _move_gain(dst, a, b, part, gmap, p, q):
    """Cut edges (between groups ``gmap[block]``) saved by moving the vertex with adjacency
    ``dst[a:b]`` from group p to group q."""
    d = 0
    for e in range(a, b):
        x = gmap[part[dst[e]]]
        if x == q:
            d += 1
        elif x == p:
            d -= 1
    return d


@numba.njit(cache=True)
def _best_block_in(dst, a, b, part, lo, hi, lsize, lcap, lconn):
    """Block of ``[lo, hi)`` holding most of the vertex's neighbours among those with room
    (the emptiest one if none has room)."""
    for e in range(a, b):
        x = part[dst[e]]
        if lo <= x < hi:
            lconn[x - lo] += 1
    best = -1
    emptiest = lo
    for x in range(lo, hi):
        if lsize[x] < lsize[emptiest]:
            emptiest = x
        if lsize[x] + 1 <= lcap and (best < 0 or lconn[x - lo] > lconn[best - lo]):
            best = x
    for x in range(lo, hi):
        lconn[x - lo] = 0
    return best if best >= 0 else emptiest


@numba.njit(cache=True, inline="always")
def _mark(dst, a, b, v, active, cur):
    """Mark ``v`` and its neighbours ``dst[a:b]`` to be rated again (``active = cur``)."""
    active[v] = cur
    for e in range(a, b):
        active[dst[e]] = cur


@numba.njit(cache=True, nogil=True)
def stream_refine_chunk(src, dst, starts, gorder, part, size, cap, conn, touched, k,
                         gmap, glo, ghi, lsize, lcap, active, cur, need, atomic):
    """One LP refinement sweep over a vertex-aligned chunk, then pairwise swaps.

    Moves are between *groups* of blocks: vertex v is in group ``gmap[part[v]]``, group ``g``
    is the blocks ``glo[g] .. ghi[g] - 1``, ``size``/``cap`` count vertices per group, and
    ``lsize``/``lcap`` per block.  For the k-way refinement every block is its own group; the
    tree refinement passes the groups of the recursive-bisection tree.  A vertex that changes
    group takes the block of its new group that holds most of its neighbours.

    Each vertex moves to the group holding most of its neighbours if that group has room.
    When the best group is full, the wish is recorded; after the sweep, wishes ``p -> q`` and
    ``q -> p`` are paired (best gains first) and swapped when the exact gain of the pair is
    positive (the two vertices trade blocks, so no size changes).  Swaps get past the capacity
    wall that stops plain LP when groups are full: with equal planted blocks, LP alone stalls
    with two blocks' vertices mixed and only FM's slower move sequences got them apart.

    ``active`` (uint8 per vertex) skips the vertices nothing happened to: a vertex that moved,
    had a neighbour move or wished for a full group is marked ``cur`` (the pass number + 1),
    and only vertices marked at least ``need`` are rated (``need`` 0: all of them).  A vertex
    none of whose neighbours moved sees the same counts as in the pass before, so it decides
    the same; after the first pass most of a converging partition is skipped without its
    neighbours' blocks being read (20M road-like graph: ~2.7 s a pass).

    ``atomic``: other threads refine other chunks at once (k-way only: every block its own
    group).  A vertex is in one chunk, so only its own thread moves it; the group sizes they
    share move by atomic adds, and a move whose target filled up meanwhile is undone (the
    vertex is rated again next pass), so no group passes ``cap``.
    """
    moved = 0
    gain = 0
    qs = np.empty(max_group_size(starts), np.int32)  # neighbours' groups, gathered first
    wg = np.empty(gorder.size, np.int64)             # blocked wishes: group, target, gain
    wq = np.empty(gorder.size, np.int64)
    wgain = np.empty(gorder.size, np.int64)
    lconn = np.zeros(lsize.size, np.int64)
    nw = 0
    pbase = part.ctypes.data
    for gi in range(gorder.size):
        if gi + REFINE_AHEAD < gorder.size:  # the blocks of a vertex's neighbours, 6 ahead
            g2 = gorder[gi + REFINE_AHEAD]
            if active[src[starts[g2]]] >= need:
                for e in range(starts[g2], min(starts[g2 + 1], starts[g2] + 8)):
                    prefetch(pbase + part.itemsize * dst[e])
        g = gorder[gi]
        a = starts[g]
        b = starts[g + 1]
        v = src[a]
        if active[v] < need:
            continue
        p = gmap[part[v]]
        for e in range(a, b):
            qs[e - a] = gmap[part[dst[e]]]
        nt = 0
        for i in range(b - a):
            q = qs[i]
            if conn[q] == 0:
                touched[nt] = q
                nt += 1
            conn[q] += 1
        if nt == 0 or (nt == 1 and touched[0] == p):
            for t in range(nt):
                conn[touched[t]] = 0
            continue
        cp = conn[p]
        best = p
        bestc = cp
        full = -1
        fullc = cp
        for t in range(nt):
            q = touched[t]
            if q == p:
                continue
            c = conn[q]
            if size[q] + 1 > cap:
                if c > fullc:
                    full = q
                    fullc = c
                continue
            if c > bestc or (c == bestc and best != p and size[q] < size[best]) or \
                    (c == bestc and best == p and size[q] + 1 < size[p]):
                best = q
                bestc = c
        if best != p and atomic:
            if atomic_add(size, best, 1) + 1 > cap:  # filled by another thread since
                atomic_add(size, best, -1)
                active[v] = cur
                best = p
            else:
                atomic_add(size, p, -1)
                part[v] = glo[best]
                moved += 1
                gain += bestc - cp
                _mark(dst, a, b, v, active, cur)
        elif best != p:
            old = part[v]
            nb = glo[best] if ghi[best] - glo[best] == 1 else \
                _best_block_in(dst, a, b, part, glo[best], ghi[best], lsize, lcap, lconn)
            part[v] = nb
            size[p] -= 1
            size[best] += 1
            lsize[old] -= 1
            lsize[nb] += 1
            moved += 1
            gain += bestc - cp
            _mark(dst, a, b, v, active, cur)
        elif full >= 0:
            active[v] = cur          # its full group may have room next pass
            wg[nw] = g
            wq[nw] = full
            wgain[nw] = fullc - cp
            nw += 1
        for t in range(nt):
            conn[touched[t]] = 0
    if nw < 2:
        return moved, gain
    # pair the wishes: sort by (from-group, to-group, -gain), then walk p->q against q->p
    wp = np.empty(nw, np.int64)
    for i in range(nw):
        wp[i] = gmap[part[src[starts[wg[i]]]]]
    key = np.empty(nw, np.int64)
    span = np.int64(1) << 40
    for i in range(nw):
        key[i] = (wp[i] * k + wq[i]) * span + (span - 1 - min(wgain[i], span - 1))
    o = np.argsort(key)
    head = np.full(k * k + 1, nw, np.int64)          # first wish of each (from, to) pair
    for j in range(nw - 1, -1, -1):
        i = o[j]
        head[wp[i] * k + wq[i]] = j
    for c in range(k * k - 1, -1, -1):
        if head[c] > head[c + 1]:
            head[c] = head[c + 1]
    for p in range(k):
        for q in range(p + 1, k):
            i, ie = head[p * k + q], head[p * k + q + 1]
            j, je = head[q * k + p], head[q * k + p + 1]
            while i < ie and j < je:
                gv, gu = o[i], o[j]
                av, bv = starts[wg[gv]], starts[wg[gv] + 1]
                au, bu = starts[wg[gu]], starts[wg[gu] + 1]
                v, u = src[av], src[au]
                if gmap[part[v]] != p:
                    i += 1
                    continue
                if gmap[part[u]] != q:
                    j += 1
                    continue
                bv0, bu0 = part[v], part[u]
                dv = _move_gain(dst, av, bv, part, gmap, p, q)
                part[v] = bu0                          # v first, then u's exact gain
                du = _move_gain(dst, au, bu, part, gmap, q, p)
                if dv + du > 0:
                    part[u] = bv0                      # the two trade blocks
                    _mark(dst, av, bv, v, active, cur)
                    _mark(dst, au, bu, u, active, cur)
                    moved += 2
                    gain += dv + du
                    i += 1
                    j += 1
                else:
                    part[v] = bv0
                    break
    return moved, gain


@numba.njit(cache=True)
def chunk_fm(src, dst, starts, part, size, k, cap, local, rounds, stall, state):
    """Buffered k-way FM (:func:`~.kway.fm_rounds`) on the vertices of one vertex-aligned chunk.

    Vertices outside the chunk stay fixed; gains use each chunk vertex's full adjacency, so
    they are exact.  Moves (also negative ones) are applied greedily by gain from a heap, each
    vertex at most once per round, and rolled back to the best prefix.  ``local`` is an all -1
    int32 (n,) scratch array (left so); ``size`` (vertices per block) is kept up to date.

    Returns:
        tuple: (vertices moved, cut reduction counted over the chunk's adjacency lists).
    """
    ng = starts.size - 1
    ids = np.empty(ng, np.int64)
    for i in range(ng):
        ids[i] = src[starts[i]]
        local[ids[i]] = i
    none = np.empty(0, np.int64)
    moved, gain = fm_rounds(starts, dst, none, none, ids, local, part, size, k, cap, rounds,
                            stall, state, False)
    for i in range(ng):
        local[ids[i]] = -1
    return moved, gain


def _lp_pass(stream, part, size, cap, k, groups, active, cur, need, order, state, conn,
             ktouch, fm_rounds, local):
    """One refinement pass on this thread, chunk by chunk (LP, then ``fm_rounds`` of FM per
    chunk): yields ``(moves, gain, entries)`` per chunk."""
    gmap, glo, ghi, lsize, lcap = groups
    for src, dst, starts in stream.iter_groups(chunk_order(stream, order, state)):
        go = group_order(starts, order, state)
        m_, g_ = stream_refine_chunk(src, dst, starts, go, part, size, cap, conn, ktouch, k,
                                      gmap, glo, ghi, lsize, lcap, active, cur, need, False)
        if fm_rounds:
            stall = max(50, (starts.size - 1) // 50)
            m2, g2 = chunk_fm(src, dst, starts, part, size, k, cap, local, fm_rounds, stall,
                              state)
            m_, g_ = m_ + m2, g_ + g2
        yield m_, g_, src.size


def _lp_pass_threaded(stream, part, size, cap, k, groups, active, cur, need, order, state,
                      threads):
    """One k-way LP pass with ``threads`` chunks at once (each with its own scratch and random
    state; sizes by atomic adds): yields ``(moves, gain, entries)`` per chunk, in chunk order.
    Closing the generator early lets the chunks not yet started return unread."""
    import threading

    gmap, glo, ghi, lsize, lcap = groups
    local = threading.local()
    seeds = rng_state(int(state[0] % (1 << 62)) + cur)
    halt = threading.Event()

    def one(i):
        if halt.is_set():
            return 0, 0, 0
        if not hasattr(local, "conn"):
            local.conn = np.zeros(k, np.int64)
            local.ktouch = np.empty(k, np.int64)
            local.state = rng_state(int(seeds[0] % (1 << 62)) + threading.get_ident())
        src, dst, starts = read_groups(stream, i)
        go = group_order(starts, order, local.state)
        m_, g_ = stream_refine_chunk(src, dst, starts, go, part, size, cap, local.conn,
                                      local.ktouch, k, gmap, glo, ghi, lsize, lcap, active, cur,
                                      need, True)
        return m_, g_, src.size

    co = chunk_order(stream, order, state)
    results = map_chunks(one, range(stream.num_chunks) if co is None else [int(i) for i in co],
                         threads)
    try:
        yield from results
    finally:
        halt.set()
        for _ in results:  # let the pool finish (the rest return at once)
            pass


# a refinement pass is cut short after its first eighth when it is on pace to remove less than
# this share of the cut (``stream_refine``'s ``probe_gain``; ``fast`` stops at 10x this)
PROBE_GAIN = 0.0005


def stream_refine(stream, part, size, k, cap, order, state, passes, ref_cut, fm_rounds,
                   min_gain=0.001, groups=None, fm_min_lp_gain=0.0, stats=None, probe_gain=PROBE_GAIN):
    """Streaming refinement passes: label-propagation moves, then buffered FM per chunk.

    FM costs ~4x an LP pass and only pays once LP has converged: while an LP pass still
    removes more than 2 % of the cut (a poor start, e.g. the projection of a coarse partition
    of a graph without local structure, where LP recovers the blocks over many passes) the
    passes are LP only, and they do not count against ``passes`` (at most ``4 * passes`` of
    them run).  Without FM (ungrouped streams) every pass counts.

    ``fm_min_lp_gain`` (``default`` effort: :data:`~.effort.FM_MIN_LP_GAIN`, 0.01; 0 = never
    skip) skips the FM passes altogether: when the LP pass that ends the LP-only phase (the
    pass right before FM would start) removed less than this share of the cut it started from
    (``2 * gain < fm_min_lp_gain * cut``, the cut being ``ref_cut`` less what the passes before
    removed), the loop ends there.  LP has then converged on a partition that FM barely moves
    (20M-edge geometric graph: the FM pass found 4 of 54k cut edges, after an LP pass that found
    76, and ``default``'s refinement took ~15 s against ``fast``'s 4-6 s).  It does not apply
    when FM runs from the first pass (``ref_cut <= 0``).
    ``stats`` (a dict, optional) receives ``fm`` (``"ran"``, ``"skipped"`` or ``"off"``) and
    ``lp_gain_before_fm`` (that pass's share of the cut).

    ``groups`` = ``(gmap, glo, ghi, block_size, block_cap)`` refines between groups of blocks
    (see :func:`stream_refine_chunk`; ``k``, ``size`` and ``cap`` are then per group and
    ``fm_rounds`` must be 0); a pass stops the loop once it gains less than ``min_gain`` of
    ``ref_cut``.
    """
    # k-way LP passes run on several threads (chunks at once; stream_refine_chunk's atomic
    # sizes); FM passes and the tree's groups of blocks (their block sizes) on one
    threads = get_threads() if groups is None and stream.seekable and stream.num_chunks >= 4 \
        else 1
    if groups is None:
        ident = np.arange(k, dtype=np.int64)
        groups = (ident.astype(np.int32), ident, ident + 1, np.zeros(k, np.int64), 0)
    gmap, glo, ghi, lsize, lcap = groups
    conn = np.zeros(k, np.int64)
    ktouch = np.empty(k, np.int64)
    can_fm = fm_rounds > 0 and stream.grouped
    local = np.full(part.size, -1, np.int32) if can_fm else None
    total_gain, rp, lp_only = 0, 0, 0
    cut_est = ref_cut
    use_fm = can_fm and ref_cut <= 0
    # a pass over a long stream is cut short once its first eighth shows (almost) no gain (on
    # pace to remove less than ``probe_gain`` of the cut):
    # the partition is then already locally optimal for these moves, and the rest of the pass
    # would cost a full read with random accesses for nothing
    probe = stream.num_chunks >= 16 and ref_cut > 0 and stream.stream_entries > 0
    fm_state = "ran" if use_fm else "off"
    # who is rated again (stream_refine_chunk): after an LP-only pass only the vertices it
    # touched; after a pass with FM (whose moves are not tracked) and on the first, every one
    active = np.zeros(part.size, np.uint8)
    was_fm = True
    while rp - (lp_only if can_fm else 0) < passes:
        pg, pm, seen_entries, short = 0, 0, 0, False
        cur = min(rp + 1, 255)
        need = 0 if was_fm or cur == 255 else cur - 1
        if threads > 1 and not use_fm:
            chunks = _lp_pass_threaded(stream, part, size, cap, k, groups, active, cur, need,
                                       order, state, threads)
        else:
            chunks = _lp_pass(stream, part, size, cap, k, groups, active, cur, need, order,
                              state, conn, ktouch, fm_rounds if use_fm else 0, local)
        for m_, g_, e_ in chunks:
            pm += m_
            pg += g_
            seen_entries += e_
            frac = seen_entries / stream.stream_entries
            if probe and frac >= 0.125 and pg * 2 < probe_gain * cut_est * frac:
                short = True
                chunks.close()  # the chunks not started are not read
                break
        rp += 1
        total_gain += pg
        was_fm = use_fm
        if not use_fm:
            lp_only += 1
        logger.info("GREM refinement pass %d%s: %d moves, %d fewer cut edges%s", rp,
                    "" if was_fm else " (LP)", pm, pg,
                    f" (stopped after {100 * frac:.0f}% of the stream: no gain)" if short else "")
        big = cut_est > 0 and pg * 2 > 0.02 * cut_est
        share = 2 * pg / cut_est if cut_est > 0 else 0.0
        cut_est = max(cut_est - 2 * pg, 0)
        if can_fm and not use_fm and (not big or lp_only >= 4 * passes):
            if stats is not None:
                stats["lp_gain_before_fm"] = round(share, 6)
            if fm_min_lp_gain > 0 and share < fm_min_lp_gain:
                fm_state = "skipped"  # LP converged with (almost) nothing left for FM
                logger.info("GREM refinement: FM skipped (the last LP pass removed %.2f %% of "
                            "the cut, under %.2f %%)", 100 * share, 100 * fm_min_lp_gain)
                break
            use_fm = True  # LP has converged: switch FM on (this pass does not end the loop)
            fm_state = "ran"
            continue
        if short or pm == 0 or pg <= 0 or (ref_cut > 0 and pg * 2 < min_gain * ref_cut):
            break
    if stats is not None:
        stats["fm"] = fm_state
    return rp, total_gain
