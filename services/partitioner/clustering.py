"""GREM step 1: streaming size-constrained label propagation (the first clustering level),
with the one-pass Fennel start computed in the same loop.

Why this module exists: the clustering pass is GREM's way of shrinking a graph it cannot hold
to a cluster graph it can: O(n) state (a label and a cluster size per vertex), each chunk
visited by one numba kernel.  See :mod:`.grem` for where it sits in the algorithm.
"""

from __future__ import annotations

import logging
import threading
from types import SimpleNamespace
from typing import Tuple

import numba
import numpy as np

from argosy.shared.intrinsics import prefetch

from .nbutil import compact_labels, rand_below, rng_state
from .placement import chunk_order, greedy_place, group_order, penalties
from .sampled_cut import sampled_shares
from .stream import read_groups, sort_range
from .threads import get_threads, map_chunks

logger = logging.getLogger("argosy.partitioner")

__all__ = ["stream_cluster", "singleton_clusters", "LP_STOP_MOVED", "FENNEL_MIN_PASS1_SHARE"]


# streaming LP clustering stops once a pass moves fewer than this share of the vertices: later
# passes polish clusters the cluster graph's partitioner and the refinement see through anyway
# (20M R-MAT: passes 3-4 moved 0.2 % and 0.1 % for 1.3 s each; stopping at 1 % cut 10 % of the
# time for +0.05 % cut; the 7 real graphs' geometric mean went 0.936 -> 0.932)
LP_STOP_MOVED = 0.01

# the clustering kernel prefetches the labels of the neighbours of the vertex this many places
# ahead in its visiting order (at most LP_AHEAD_ENTRIES of them): each vertex's label sort and
# run counting mispredict branches, which flushes the loads the CPU would otherwise have
# started early (20M road-like graph, 15.4M shuffled ids: the first pass 2.4 -> 1.7-2.1 s)
LP_AHEAD = 6
LP_AHEAD_ENTRIES = 8

# a vertex of LP_HASH_MIN to LP_HASH_MAX neighbours counts their labels in an open-addressing
# table of at least 2**LP_HASH_BITS slots and twice its degree (cleared after each vertex) instead
# of sorting them: insertion sorts of ~20 distinct labels mispredict most of their branches (20M
# geometric graph, two passes on 2 threads: 0.78 -> 0.57 s; DC-SBM on one: 1.61 -> 1.44 s), and
# numpy's sort of a hub's labels is O(d log d) where counting is O(d) (20M R-MAT, 77 % of its
# entries in lists of more than 64: one pass on 2 threads 0.65-0.71 -> 0.38-0.40 s;
# DC-SBM 0.45-0.47 -> 0.34-0.38 s); a few labels (road networks, mean degree 2.6)
# sort faster than they hash
LP_HASH_MIN = 8
LP_HASH_MAX = 1 << 14
LP_HASH_BITS = 7


@numba.njit(cache=True, nogil=True)
def _stream_lp_chunk(src, dst, starts, gorder, label, csize, seen, maxw, labs, first, state,
                     part, cpart, use_part, active, p, greedy, gpart, gsize, k, gcap, galpha,
                     gconn, gtouch, lp):
    """One chunk of size-constrained label propagation (pass ``p``; ``lp`` False: only the
    Fennel placement below, no label is rated).

    Each vertex gathers its neighbours' labels into ``labs`` (independent loads, so the CPU
    overlaps the cache misses; those of the vertex :data:`LP_AHEAD` places on are prefetched)
    and counts them in cache: in a small hash table for :data:`LP_HASH_MIN` to
    :data:`LP_HASH_MAX` of them, else by sorting the list and counting runs.  No counter array
    indexed by label, which on a large graph would cost one more random memory access per edge.
    Only a label that could win is checked against the size limit.  From pass 2
    on, only vertices that moved or had a neighbour move in the previous pass
    (``active[v] >= p - 1``) are rated again; the rest keep their label without reading their
    neighbours' labels, which makes the converging passes cheap.  (Passes 0 and 1 move most
    vertices, so tracking activity there costs more than it saves.)  ``cpart`` is the block
    of each cluster id (labels are compacted after pass 0), ``part`` that of each vertex.

    With ``greedy`` the same loop also places each vertex by one-pass Fennel (``gpart``,
    ``gsize``) just before rating it: when ``label`` and ``gpart`` are the two columns of one
    (n, 2) array, Fennel's loads bring in the cache lines the label gather then hits.
    """
    moved = 0
    if greedy:
        pen = penalties(gsize, k, galpha, 1.5)
        qs = np.empty(labs.size, np.int32)
    else:
        pen = np.zeros(1, np.float64)
        qs = np.zeros(1, np.int32)
    lbase = label.ctypes.data
    top = LP_HASH_BITS
    while (1 << top) < 2 * LP_HASH_MAX:
        top += 1
    hk = np.full(1 << top, -1, label.dtype)
    hc = np.zeros(1 << top, np.int32)
    ht = np.empty(LP_HASH_MAX, np.int64)
    for gi in range(gorder.size):
        if gi + LP_AHEAD < gorder.size:  # the labels a few vertices on: see LP_AHEAD
            g2 = gorder[gi + LP_AHEAD]
            for e in range(starts[g2], min(starts[g2 + 1], starts[g2] + LP_AHEAD_ENTRIES)):
                prefetch(lbase + label.itemsize * dst[e])
        g = gorder[gi]
        a = starts[g]
        b = starts[g + 1]
        v = src[a]
        if first:
            seen[v] = True
        if greedy and gpart[v] < 0:
            greedy_place(v, a, b, dst, gpart, gsize, k, gcap, 1, galpha, 1.5, gconn, gtouch,
                          pen, qs)
        if not lp or (p >= 2 and active[v] < p - 1):
            continue
        cur = label[v]
        d = b - a
        for e in range(a, b):
            labs[e - a] = label[dst[e]]
        short = LP_HASH_MIN <= d <= LP_HASH_MAX
        if short:  # count the labels in a hash table of >= 2d slots, in cache (see LP_HASH_MAX)
            bits = LP_HASH_BITS
            while (1 << bits) < 2 * d:
                bits += 1
            hmask = (1 << bits) - 1
            nt = 0
            for i in range(d):
                c = labs[i]
                h = ((np.int64(c) * 2654435769) & 0xFFFFFFFF) >> (32 - bits)
                while hk[h] != -1 and hk[h] != c:
                    h = (h + 1) & hmask
                if hk[h] == -1:
                    hk[h] = c
                    hc[h] = 1
                    ht[nt] = h
                    nt += 1
                else:
                    hc[h] += 1
            bestr = 0
            for t in range(nt):
                if hk[ht[t]] == cur:
                    bestr = hc[ht[t]]
            nruns = nt
        else:
            sort_range(labs, 0, d)
            bestr = 0
            for i in range(d):
                if labs[i] == cur:
                    bestr += 1
            nruns = d
        best = cur
        nties = 1
        i = 0
        t = 0
        while (short and t < nruns) or (not short and i < d):
            if short:
                c = hk[ht[t]]
                r = hc[ht[t]]
                t += 1
            else:
                c = labs[i]
                j = i + 1
                while j < d and labs[j] == c:
                    j += 1
                r = j - i
                i = j
            if c == cur or r < bestr or (r == bestr and best == cur):
                continue
            if csize[c] + 1 > maxw:
                continue
            if use_part and cpart[c] != part[v]:
                continue
            if r > bestr:
                best = c
                bestr = r
                nties = 1
            else:
                nties += 1
                if rand_below(state, nties) == 0:
                    best = c
        if short:
            for t in range(nt):
                hk[ht[t]] = -1
        if best != cur:
            csize[cur] -= 1
            csize[best] += 1
            label[v] = best
            moved += 1
            if p >= 1:
                active[v] = p
                for e in range(a, b):
                    active[dst[e]] = p
    return moved


@numba.njit(cache=True)
def _pack_isolated(label, csize, seen, maxw, part, nblocks):
    """Group vertices that never appeared with a neighbour into shared clusters (per block)."""
    n = label.size
    open_c = np.full(nblocks, -1, np.int64)
    for v in range(n):
        c = label[v]
        if not seen[v] and csize[c] == 1:
            b = part[v] if nblocks > 1 else 0
            o = open_c[b]
            if o >= 0 and csize[o] + 1 <= maxw:
                csize[o] += 1
                csize[c] -= 1
                label[v] = o
            else:
                open_c[b] = c


def _compact(label):
    """Cluster ids ``0 .. nc - 1`` (int32) for the labels; returns ``(cmap, nc)``."""
    cmap = np.empty(label.size, np.int32)
    return cmap, compact_labels(label, cmap)


def stream_cluster(stream, n, k, eps, order, state, passes, seen, part, shrink=1,
                    greedy=None, stats=None, stop_moved=LP_STOP_MOVED, early=None,
                    fennel_first=False):
    """Streaming LP clustering.

    If ``greedy`` = ``(size, cap, alpha)``, one pass also places every vertex by one-pass
    Fennel in the same loop (its block array is returned as the last value, else ``None``):
    the first pass when only one runs; with more, the second, and only if the first pass's
    clusters leave at least :data:`FENNEL_MIN_PASS1_SHARE` of the entries between them (sampled;
    ``stats["pass1_cluster_share"]``), else Fennel is not run and ``None`` is returned.

    ``early`` = ``(share, take)``: where the first pass's clusters leave at least ``share`` of
    the entries between them, Fennel places every vertex in a pass of its own before the
    second LP pass, and ``take(label, gpart)`` True ends the clustering there (GREM's early
    Fennel start: its clusters are not used).  With ``fennel_first`` Fennel runs in the first
    pass itself, in the same loop as LP, and ``take`` is asked right after it.

    Passes stop once one moves fewer than ``stop_moved`` of the vertices, or, from the second
    on, fewer than that share of the vertices it rated in its first eighth (the rest of such a
    pass would cost a read with random accesses for clusters the cluster graph's partitioner
    sees through anyway).

    Returns:
        tuple: ``(cmap, nc, passes, maxw, greedy_part)``.
    """
    kk = min(k, max(2, n // 160))
    maxw = max(1, int(eps * n / kk) // shrink)
    # the pass that runs Fennel (the second waits for a sampled share: seekable streams only)
    gp = -1 if greedy is None else (1 if passes > 1 and stream.seekable and not fennel_first
                                    else 0)
    lg = None
    if greedy is not None and gp == 0:
        # labels and Fennel blocks side by side: one cache line serves both gathers
        lg = np.empty((n, 2), np.int32)
        lg[:, 0] = np.arange(n, dtype=np.int32)
        lg[:, 1] = -1
        label, gpart = lg[:, 0], lg[:, 1]
        gsize, gcap, galpha = greedy
    elif greedy is not None:
        # Fennel in a later pass, if at all: the labels the first pass gathers stay contiguous
        # (side by side with the blocks they took twice the cache: 20M DC-SBM, pass 1 0.62 s ->
        # 0.45 s); from pass 2 on they are a compacted array of their own anyway
        label = np.arange(n, dtype=np.int32)
        gpart = np.full(n, -1, np.int32)
        gsize, gcap, galpha = greedy
    else:
        label = np.arange(n, dtype=np.int32)
        gpart, gsize, gcap, galpha = np.zeros(1, np.int32), np.zeros(1, np.int64), 0, 0.0
    gconn = np.zeros(k, np.int64)
    gtouch = np.empty(k, np.int64)
    csize = np.ones(n, dtype=np.int32)
    labs = np.empty(0, np.int32)
    first = not seen.any()
    active = np.full(n, -1, np.int16)
    use_part = part is not None
    partarr = part if use_part else np.zeros(1, np.int32)
    cpart = partarr  # block of each cluster id; labels are vertex ids until compacted
    done = 0
    nthreads = get_threads() if stream.seekable and stream.num_chunks >= 4 else 1
    probe = stream.num_chunks >= 8  # an eighth of the stream is at least a chunk
    if stats is not None and gp == 0 and passes > 1:
        stats["fennel_first"] = True

    def sweep(p, fennel, lp, stop):
        """One pass over the stream (``fennel``: with the Fennel placement; ``lp``: rating
        labels).  ``stop`` > 0: the pass ends after its first eighth of the entries if it moved
        fewer than that share of the vertices it rated there.  Returns ``(moved, stopped)``."""
        nonlocal labs
        co = chunk_order(stream, order, state)
        halt = threading.Event()
        first_p = first and p == 0

        def work(chunk, st, scratch):
            src, dst, starts = chunk
            if scratch.labs.size < src.size + 1:
                scratch.labs = np.empty(src.size + 1, np.int32)
            go = group_order(starts, order, st)
            mv = _stream_lp_chunk(src, dst, starts, go, label, csize, seen, maxw, scratch.labs,
                                  first_p, st, partarr, cpart, use_part, active, p, fennel,
                                  gpart, gsize, k, gcap, galpha, scratch.gconn, scratch.gtouch,
                                  lp)
            return mv, starts.size - 1, src.size

        if nthreads > 1:
            # chunks on several threads at once, each with its own scratch and random state;
            # they share the labels (a vertex sees the latest label its neighbours got in any
            # thread), and the cluster and block sizes they race on are recounted below
            local = threading.local()
            seeds = rng_state(int(state[0] % (1 << 62)) + p)

            def run(i):
                if halt.is_set():
                    return 0, 0, 0
                if not hasattr(local, "labs"):
                    local.labs = np.empty(0, np.int32)
                    local.state = rng_state(int(seeds[0] % (1 << 62)) + threading.get_ident())
                    local.gconn = np.zeros(k, np.int64)
                    local.gtouch = np.empty(k, np.int64)
                return work(read_groups(stream, i), local.state, local)

            idx = range(stream.num_chunks) if co is None else [int(i) for i in co]
            results = map_chunks(run, idx, nthreads)
        else:
            scratch = SimpleNamespace(labs=labs, gconn=gconn, gtouch=gtouch)
            results = (work(c, state, scratch) for c in stream.iter_groups(co))
        moved = rated = entries = 0
        for mv, nv, ne in results:
            moved, rated, entries = moved + mv, rated + nv, entries + ne
            if stop > 0 and probe and not halt.is_set() and \
                    entries >= 0.125 * stream.stream_entries and moved < stop * rated:
                halt.set()  # the chunks still queued return at once
                if nthreads == 1:
                    break
        if nthreads > 1:
            csize[:] = np.bincount(label, minlength=csize.size)[:csize.size]
            if fennel:
                gsize[:] = np.bincount(gpart[gpart >= 0], minlength=k)
        else:
            labs = scratch.labs
        return moved, halt.is_set()

    for p in range(max(1, passes)):
        # a pass that places by Fennel runs to its end: every vertex needs its block
        moved, stopped = sweep(p, p == gp, True, stop_moved if p >= 1 and p != gp else 0.0)
        done += 1
        logger.info("GREM clustering pass %d: %d vertices moved (%.1f%%)%s", p + 1, moved,
                    100.0 * moved / max(n, 1),
                    " (stopped after the first eighth of the stream)" if stopped else "")
        if stopped:
            if stats is not None:
                stats["cluster_pass_stopped"] = p + 1
            break
        if p == 0 and gp == 1:  # Fennel in pass 2 only where its start can win
            share = sampled_shares(stream, label, label, 1 << 20)[1]
            if stats is not None:
                stats["pass1_cluster_share"] = round(share, 4)
            if share < FENNEL_MIN_PASS1_SHARE:
                gp, greedy = -1, None
                logger.info("GREM: no Fennel start (the first pass's clusters leave %.2f of "
                            "the entries between them, under %.2f)", share,
                            FENNEL_MIN_PASS1_SHARE)
            elif early is not None and share >= early[0]:
                # clusters this poor may leave the multilevel start nothing to win with: place
                # by Fennel alone first, and stop clustering if ``early`` takes that start
                sweep(1, True, False, 0.0)
                gp = -1
                if stats is not None:
                    stats["fennel_alone"] = True
                if early[1](label, gpart):
                    logger.info("GREM clustering: Fennel's start taken after pass 1")
                    break
        elif p == 0 and gp == 0 and early is not None and passes > 1 and early[1](label, gpart):
            logger.info("GREM clustering: Fennel's start taken after pass 1")
            break
        if moved <= stop_moved * n and gp <= p:
            break
        if p == 0:
            # renumber the surviving clusters 0..nc-1: the per-cluster arrays shrink from n
            # to nc entries and stay in cache in the later passes
            label, nc0 = _compact(label)
            csize = np.bincount(label, minlength=nc0).astype(np.int32)
            if use_part:
                cpart = np.empty(nc0, np.int32)
                cpart[label] = part
            logger.info("GREM clustering: %d clusters after pass 1", nc0)
    del active
    _pack_isolated(label, csize, seen, maxw, partarr if use_part else label, k if use_part else 1)
    cmap, nc = _compact(label)
    if greedy is not None:
        gpart = np.ascontiguousarray(gpart)
        del lg
        return cmap, nc, done, maxw, gpart
    return cmap, nc, done, maxw, None


FENNEL_MIN_PASS1_SHARE = 0.65
"""With two or more clustering passes, Fennel runs in the second only when the first pass's clusters
leave at least this share of the entries between them.  Its start won where they left 0.72-0.93
(soc-slashdot 0.85, Chung-Lu 0.90, R-MAT 0.93; email-enron 0.72, only with one clustering pass) and
never where they left less (DC-SBM 0.54, road-ny 0.46, Pubmed 0.58-0.61; 2M-edge graphs, k = 8-32):
there clusters hold the structure a multilevel partition is built from, and Fennel cost 16 % of
the 20M-edge DC-SBM's CPU time for a start that was dropped."""


def singleton_clusters(cmap: np.ndarray, nc: int, seen: np.ndarray) -> Tuple[np.ndarray, int]:
    """Every vertex with an edge its own cluster; isolated vertices keep their packed clusters
    (so the coarsening of the in-memory partitioner is not stalled by them)."""
    label = np.arange(cmap.size, dtype=np.int32)
    unseen = np.flatnonzero(~seen)
    rep = np.zeros(nc, np.int32)
    rep[cmap[unseen]] = unseen
    label[unseen] = rep[cmap[unseen]]
    return _compact(label)
