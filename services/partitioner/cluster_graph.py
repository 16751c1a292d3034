"""The cluster graph GREM partitions in memory: built from the stream, and coarsened out of
core when the stream's clusters leave it over its memory budget.

Why this module exists: GREM's streaming label propagation (``clustering.stream_cluster``) gives
first-level clusters whose weighted graph must fit an in-memory budget before the multilevel
partitioner sees it.  When it does not (skewed community sizes, many blocks, weak structure),
the clusters have to be coarsened further.  Merging them by per-cluster summaries read from the
stream (a former ``_stream_merge``) mixes communities: on a skewed-community SBM the clusters went
from 98 % to 78 % pure and the best cut on the cluster graph from 12.7 % to 31.1 %, where one
level of size-constrained label propagation on the cluster graph's *true* weights gave 15.4 %.
So the clusters are coarsened by label propagation on the true weights and contracted, level
by level, until the graph fits the budget (:func:`coarsen_cluster_graph`): in memory while the
level-1 graph fits the O(n) memory budget (built by :mod:`.cluster_build`), else on disk in
buckets of clusters (:class:`BucketedGraph`), bucket by bucket with O(clusters) state in memory
(memory: O(clusters) plus one bucket and the spill buffer; disk: about 16 bytes per level-1
cluster-graph entry).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from typing import List, Optional, Tuple

import numba
import numpy as np

from argosy.shared.graphio import csr_from_keys

from .cluster_build import (DENSE_CLUSTER_GRAPH_BYTES, build_cluster_graph, counted_runs,
                            merge_runs, scatter_cluster_graph)
from .coarsening import contract, lp_best_label, lp_cluster
from .nbutil import cluster_sizes, permutation, visit_order
from .sampled_cut import sampled_shares
from .stream import EdgeStream
from .threads import get_threads

logger = logging.getLogger("argosy.partitioner")

# --------------------------------------------------------------------------------------------
# out-of-core coarsening
# --------------------------------------------------------------------------------------------
# label-propagation rounds per level on the bucketed cluster graph (stops earlier once a round
# moves < 1 % of the clusters)
COARSEN_LP_ROUNDS = 5
# LP rounds per level of the in-memory coarsening: on a mesh LP never gets below the 0.1 %
# moved that stops it early, and rounds 3-5 barely shrink the level (3M-vertex road-like
# graph: 1.00M clusters after 2 rounds, 0.99M after 5); 20M road-like graph, default: 62 s ->
# 15.5 s for the two levels, cut 0.0346 % -> 0.0339 %
IN_MEMORY_LP_ROUNDS = 2
# a level that keeps more than this share of its clusters has stalled: the size limit doubles
COARSEN_STALL = 0.9


def _hash_ids(nc: int, nb: int) -> Tuple[np.ndarray, np.ndarray]:
    """Renumber ``nc`` clusters so that bucket ``b`` holds the ids ``c`` with ``c % nb == b``
    as one contiguous range (clusters are numbered by first appearance, so this spreads large
    and small ones evenly).  Returns ``(new_id (nc,), bounds (nb + 1,))``."""
    counts = (nc - np.arange(nb) + nb - 1) // nb
    bounds = np.zeros(nb + 1, np.int64)
    np.cumsum(counts, out=bounds[1:])
    c = np.arange(nc, dtype=np.int64)
    return (bounds[c % nb] + c // nb).astype(np.int32), bounds


class BucketedGraph:
    """A weighted graph over ``nc`` vertices stored as ``nb`` bucket files; bucket ``b`` holds
    the rows of vertices ``bounds[b] .. bounds[b + 1] - 1`` as a local CSR (``xadj`` int64,
    ``adj`` int32 global ids, ``ew`` int64), each row sorted and free of self loops."""

    def __init__(self, directory: str, nc: int, bounds: np.ndarray, files: List[str],
                 entries: int, max_degree: int):
        self.dir, self.nc, self.bounds, self.files = directory, int(nc), bounds, files
        self.entries, self.max_degree = int(entries), int(max_degree)

    @property
    def nb(self) -> int:
        return len(self.files)

    def load(self, b: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        return _load_arrays(self.files[b], 3)

    def to_csr(self, dtype=np.int64) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The whole graph in memory (rows of consecutive buckets are consecutive); ``adj`` and
        ``ew`` as ``dtype`` (the caller checks that ids and weights fit)."""
        xadj = np.zeros(self.nc + 1, np.int64)
        adj = np.empty(self.entries, dtype)
        ew = np.empty(self.entries, dtype)
        pos = 0
        for b in range(self.nb):
            bx, ba, be = self.load(b)
            lo, hi = int(self.bounds[b]), int(self.bounds[b + 1])
            xadj[lo + 1:hi + 1] = pos + bx[1:]
            adj[pos:pos + ba.size] = ba
            ew[pos:pos + ba.size] = be
            pos += ba.size
        return xadj, adj, ew

    def remove(self) -> None:
        for f in self.files:
            try:
                os.remove(f)
            except FileNotFoundError:
                pass


def _save_arrays(path: str, *arrays: np.ndarray) -> None:
    """Arrays one after another in one ``.npy``-framed file (no zip: read back at disk speed)."""
    with open(path, "wb") as f:
        for a in arrays:
            np.save(f, a)


def _load_arrays(path: str, count: int) -> Tuple[np.ndarray, ...]:
    with open(path, "rb") as f:
        return tuple(np.load(f) for _ in range(count))


class _BucketWriter:
    """Routes sorted runs of distinct ``(key = row * nc + col, weight)`` pairs into buckets of
    rows.  As :func:`build_cluster_graph` does, pending runs are merged into per-bucket
    accumulators once they reach half the accumulated entries (at least ``merge_every``);
    when the accumulators exceed ``spill`` entries they are written to disk as one run per
    bucket, and :meth:`finish` merges each bucket's runs into its CSR file.  Memory: about
    twice ``spill`` plus the pending runs."""

    def __init__(self, directory: str, tag: str, nc: int, bounds: np.ndarray, spill: int,
                 merge_every: int = 1 << 20):
        self.dir, self.tag, self.nc, self.bounds = directory, tag, int(nc), bounds
        self.spill, self.merge_every = max(int(spill), 1), int(merge_every)
        nb = bounds.size - 1
        self.pending: List[list] = [[] for _ in range(nb)]
        self.acc: List[tuple] = [(np.empty(0, np.int64), np.empty(0, np.int64))] * nb
        self.spilled: List[List[str]] = [[] for _ in range(nb)]
        self.npend = self.nacc = 0
        self.cut_keys = bounds[1:-1].astype(np.int64) * self.nc

    def add(self, keys: np.ndarray, w: np.ndarray) -> None:
        cuts = np.searchsorted(keys, self.cut_keys)
        lo = 0
        for b, hi in enumerate(list(cuts) + [keys.size]):
            if hi > lo:
                self.pending[b].append((keys[lo:hi], w[lo:hi]))
            lo = hi
        self.npend += keys.size
        if self.npend >= max(self.merge_every, self.nacc // 2):
            self._merge()
            if self.nacc > self.spill:
                self._spill()

    def _merge(self) -> None:
        for b, runs in enumerate(self.pending):
            if runs:
                self.acc[b] = merge_runs([self.acc[b]] + runs)
                self.pending[b] = []
        self.npend = 0
        self.nacc = sum(a[0].size for a in self.acc)

    def _spill(self) -> None:
        for b, (k, w) in enumerate(self.acc):
            if k.size:
                f = os.path.join(self.dir, f"{self.tag}-run{b}-{len(self.spilled[b])}.bin")
                _save_arrays(f, k, w)
                self.spilled[b].append(f)
        self.acc = [(np.empty(0, np.int64), np.empty(0, np.int64))] * len(self.acc)
        self.nacc = 0

    def finish(self) -> BucketedGraph:
        files, entries, maxdeg = [], 0, 0
        for b in range(self.bounds.size - 1):
            runs = [self.acc[b]] + self.pending[b]
            self.pending[b] = []
            self.acc[b] = (np.empty(0, np.int64), np.empty(0, np.int64))
            for f in self.spilled[b]:
                runs.append(_load_arrays(f, 2))
                os.remove(f)
            k, w = merge_runs(runs)
            del runs
            lo, hi = int(self.bounds[b]), int(self.bounds[b + 1])
            xadj, adj = csr_from_keys(k, self.nc, np.int32, row0=lo, num_rows=hi - lo)
            f = os.path.join(self.dir, f"{self.tag}-bucket{b}.bin")
            _save_arrays(f, xadj, adj, w)
            files.append(f)
            entries += k.size
            if hi > lo:
                maxdeg = max(maxdeg, int(np.diff(xadj).max()))
        return BucketedGraph(self.dir, self.nc, self.bounds, files, entries, maxdeg)


@numba.njit(cache=True)
def _sum_sorted(key, w):
    """Compact the sorted ``key`` to its distinct values in place, summing ``w`` alike; return
    how many."""
    m = 0
    for i in range(key.size):
        if m > 0 and key[m - 1] == key[i]:
            w[m - 1] += w[i]
        else:
            key[m] = key[i]
            w[m] = w[i]
            m += 1
    return m


@numba.njit(cache=True)
def _contract_keys(xadj, adj, ew, lo, lab, nl, keys, w):
    """Map a bucket's entries to ``lab[u] * nl + lab[v]`` (dropping the new self loops);
    return how many."""
    j = 0
    for r in range(xadj.size - 1):
        a = np.int64(lab[lo + r])
        for e in range(xadj[r], xadj[r + 1]):
            b = lab[adj[e]]
            if a != b:
                keys[j] = a * nl + b
                w[j] = ew[e]
                j += 1
    return j


@numba.njit(cache=True)
def _lp_bucket(xadj, adj, ew, lo, label, lw, vw, maxw, rating, touched, state, cpart,
               use_part):
    """One round of size-constrained label propagation over a bucket's rows (random order):
    each vertex joins the neighbouring label it has the most edge weight to if that label's
    weight stays within ``maxw`` (and, with ``use_part``, if it is in the same block
    ``cpart``).  ``label``, ``lw`` (label weights) and ``rating`` (zeros, left zero) are
    global.  Returns the number of moves."""
    nr = xadj.size - 1
    order = visit_order(nr, state)
    moved = 0
    for i in range(nr):
        r = order[i]
        v = lo + r
        cur = label[v]
        best = lp_best_label(adj, ew, xadj[r], xadj[r + 1], v, label, lw, vw[v], maxw, rating,
                             touched, cpart, use_part, state)
        if best != cur:
            lw[cur] -= vw[v]
            lw[best] += vw[v]
            label[v] = best
            moved += 1
    return moved


@numba.njit(cache=True)
def _remap(cmap, lab):
    """``cmap[i] = lab[cmap[i]]`` in place."""
    for i in range(cmap.size):
        cmap[i] = lab[cmap[i]]


def _coarsen_in_memory(xadj, adj, ew, vw, cmap, nc, maxw, maxw_cap, budget, state, part, info,
                       total):
    """The levels of :func:`coarsen_cluster_graph` on a cluster graph held in memory:
    :data:`IN_MEMORY_LP_ROUNDS` rounds of size-constrained LP (:func:`~.coarsening.lp_cluster`,
    on the true weights, inside the blocks
    of ``part`` if given) and contraction (:func:`~.coarsening.contract`) until the graph has at
    most ``budget`` entries; a level that shrinks the clusters by less than 10 % doubles
    ``maxw`` up to ``maxw_cap``.  Memory: the graph, its next level and O(clusters)."""
    levels = 0
    while adj.size > budget:
        if part is not None:  # every cluster lies inside one block
            cpart = np.empty(nc, np.int64)
            cpart[cmap] = part
            nblocks = int(part.max()) + 1 if part.size else 1
        else:
            cpart, nblocks = np.zeros(nc, np.int64), 1
        label = lp_cluster(xadj, adj, ew, vw, maxw, IN_MEMORY_LP_ROUNDS, state, cpart, nblocks,
                           get_threads())
        del cpart
        lab, cx, ca, ce, cv = contract(xadj, adj, ew, vw, label, get_threads())
        del label
        nl = cv.size
        if nl > COARSEN_STALL * nc:
            if maxw >= maxw_cap:
                logger.info("GREM coarsening: stalled at %d clusters, %d entries", nc, adj.size)
                return cmap, nc, maxw, info, None
            maxw = min(2 * maxw, maxw_cap)
            logger.info("GREM coarsening: %d -> %d clusters only; clusters up to %d vertices",
                        nc, nl, maxw)
            if nl == nc:
                continue
        levels += 1
        info["levels"] = levels
        _remap(cmap, lab)  # in place: a second vertex map is n more ids at the peak
        logger.info("GREM coarsening level %d (in memory): %d -> %d clusters, %d entries",
                    levels, nc, nl, ca.size)
        xadj, adj, ew, vw, nc = cx, ca, ce, cv, nl
        del lab, cx, ca, ce, cv
    return cmap, nc, maxw, info, (xadj, adj.astype(np.int64), ew.astype(np.int64), total)


def _bucket_count(entries: int, budget: int, nc: int) -> int:
    """Buckets of about a quarter of the budget each (at least one, at most one per row)."""
    return int(max(1, min(nc, -(-int(entries) // max(budget // 4, 1)))))


def _stream_to_buckets(stream: EdgeStream, cmap: np.ndarray, nc: int, nb: int, directory: str,
                       tag: str, spill: int) -> Tuple[BucketedGraph, np.ndarray]:
    """One pass over the stream: the cluster graph of ``cmap`` (renumbered by
    :func:`_hash_ids`), bucketed on disk.  Returns the graph and the renumbered ``cmap``."""
    new_id, bounds = _hash_ids(nc, nb)
    cmap = new_id[cmap]
    del new_id
    out = _BucketWriter(directory, tag, nc, bounds, spill)
    for _, runs in counted_runs(stream, cmap, nc):
        for key, count in runs:
            out.add(key, count)
    return out.finish(), cmap


def _contract_buckets(g: BucketedGraph, lab: np.ndarray, nl: int, nb: int, tag: str,
                      spill: int) -> BucketedGraph:
    """The graph of the labels ``lab`` (ids ``0..nl-1``, already renumbered for ``nb``
    buckets by :func:`_hash_ids`), bucket to bucket."""
    _, bounds = _hash_ids(nl, nb)
    out = _BucketWriter(g.dir, tag, nl, bounds, spill)
    for b in range(g.nb):
        xadj, adj, ew = g.load(b)
        keys = np.empty(adj.size, np.int64)
        w = np.empty(adj.size, np.int64)
        m = _contract_keys(xadj, adj, ew, int(g.bounds[b]), lab, nl, keys, w)
        order = np.argsort(keys[:m])  # equal keys are summed: any order
        keys, w = keys[order], w[order]
        del order, xadj, adj, ew
        u = _sum_sorted(keys, w)
        out.add(keys[:u], w[:u])
    return out.finish()


def coarsen_cluster_graph(stream: EdgeStream, cmap: np.ndarray, nc: int, maxw: int,
                          maxw_cap: int, budget: int, state: np.ndarray,
                          workdir: Optional[str] = None, part: Optional[np.ndarray] = None,
                          memory_entries: Optional[int] = None):
    """Cluster graph of ``cmap`` within ``budget`` entries, coarsening it out of core when the
    streamed clusters leave it over the budget.

    With few clusters it is built in memory (dense, :func:`build_cluster_graph`).  Otherwise,
    or when that is over the budget, it is built in buckets (in memory until half the budget,
    then spilled to disk); if over the budget it is coarsened by levels: rounds of
    size-constrained label propagation bucket by bucket (clusters of at most ``maxw``
    vertices), then contraction, until the coarse graph fits.  A level that shrinks the
    clusters by less than 10 % doubles ``maxw`` (up to ``maxw_cap``) and retries.  With
    ``part`` (the block of every vertex; clusters inside blocks, as in GREM's V-cycles)
    clusters only join clusters of their own block.  Scratch files go to a fresh directory
    under ``workdir`` and are removed on return, also on errors (e.g. a full disk: the
    ``OSError`` propagates).  A first-level graph over ``budget`` but within
    ``memory_entries`` (GREM: the O(n) budget, when an effort level asks for a smaller graph)
    is coarsened in memory instead (:func:`_coarsen_in_memory`: the same label propagation and
    contraction without the buckets' files and key sorts).

    Returns:
        tuple: ``(cmap, nc, maxw, info, built)``: the coarsened vertex -> cluster map, its
        cluster count, the size limit reached, ``info`` (``levels`` run, ``level1_entries``:
        the entries of the graph of the given clusters), and ``(xadj, adj, ew, entries)``
        as :func:`build_cluster_graph` gives it, or ``None`` when even ``maxw_cap`` clusters did
        not fit (the caller decides).
    """
    memory_entries = budget if memory_entries is None else max(int(memory_entries), budget)
    if nc * nc * 8 <= DENSE_CLUSTER_GRAPH_BYTES:  # few clusters: in memory, dense
        built = build_cluster_graph(stream, cmap, nc, 1 << 20, budget)
        if built is not None:
            return cmap, nc, maxw, dict(levels=0, level1_entries=int(built[1].size)), built
    total = int(stream.stream_entries)
    narrow = max(nc, total) < 2 ** 31  # 32-bit ids and weights (weights count stream entries)
    # in memory while one id per entry between clusters takes no more than the in-memory
    # coarsening may hold (memory_entries at 16 bytes or more each): no buckets, no files.
    # Counted exactly where one id per stream entry would not fit, if ~1M sampled entries say
    # they will (a graph whose clusters leave more between them costs no counting pass)
    ids = (16 * memory_entries) // (4 if narrow else 8)
    dtype = np.int32 if narrow else np.int64
    if total <= ids:
        built = scatter_cluster_graph(stream, cmap, nc, dtype, ids)
    elif stream.seekable and sampled_shares(stream, cmap, cmap, 1 << 20)[1] * total <= 0.8 * ids:
        built = scatter_cluster_graph(stream, cmap, nc, dtype, ids)
    else:
        built = None
    if built is not None and built[1].size <= memory_entries:
        info = dict(levels=0, level1_entries=int(built[1].size))
        logger.info("GREM coarsening: level-1 cluster graph %d clusters, %d entries in memory "
                    "(budget %d)", nc, built[1].size, budget)
        vw = cluster_sizes(cmap, nc)
        return _coarsen_in_memory(*built, vw, cmap, nc, maxw, maxw_cap, budget, state, part,
                                  info, total)
    del built  # over the memory budget: built and coarsened out of core
    tmp = tempfile.mkdtemp(prefix="argosy-clustergraph-", dir=workdir)
    spill = max(budget // 2, 1)
    levels = 0
    try:
        g, cmap = _stream_to_buckets(stream, cmap, nc, _bucket_count(total, budget, nc), tmp,
                                     "l0", spill)
        logger.info("GREM coarsening: level-1 cluster graph %d clusters, %d entries in %d "
                    "buckets (budget %d)", nc, g.entries, g.nb, budget)
        info = dict(levels=0, level1_entries=g.entries)
        vw = cluster_sizes(cmap, nc)
        if budget < g.entries <= memory_entries:
            # over the effort's size but within the O(n) memory budget: coarsen in memory
            # 32-bit ids and weights while they fit (weights count stream entries): the
            # 20M road-like graph's 16M-entry level peaked at 904 MB with 64-bit ones
            narrow = max(nc, total) < 2 ** 31
            xadj, adj, ew = g.to_csr(np.int32 if narrow else np.int64)
            g.remove()
            return _coarsen_in_memory(xadj, adj, ew, vw, cmap, nc, maxw, maxw_cap, budget,
                                      state, part, info, total)
        while g.entries > budget:
            cpart = np.zeros(1, np.int32)
            if part is not None:  # every cluster lies inside one block
                cpart = np.empty(nc, np.int32)
                cpart[cmap] = part
            label = np.arange(nc, dtype=np.int32)
            lw = vw.copy()
            rating = np.zeros(nc, np.int64)
            touched = np.empty(g.max_degree + 1, np.int64)
            for _ in range(COARSEN_LP_ROUNDS):
                moved = 0
                for b in permutation(g.nb, state):
                    xadj, adj, ew = g.load(int(b))
                    moved += _lp_bucket(xadj, adj, ew, int(g.bounds[b]), label, lw, vw, maxw,
                                        rating, touched, state, cpart, part is not None)
                logger.debug("GREM coarsening: LP round moved %d of %d", moved, nc)
                if moved <= nc // 100:
                    break
            del rating, touched, lw
            first, lab = np.unique(label, return_inverse=True)
            nl = first.size
            del first, label
            if nl > COARSEN_STALL * nc:
                if maxw >= maxw_cap:
                    logger.info("GREM coarsening: stalled at %d clusters, %d entries",
                                nc, g.entries)
                    return cmap, nc, maxw, info, None  # the scratch goes in `finally`
                maxw = min(2 * maxw, maxw_cap)
                logger.info("GREM coarsening: %d -> %d clusters only; clusters up to %d "
                            "vertices", nc, nl, maxw)
                if nl == nc:
                    continue
            levels += 1
            info["levels"] = levels
            nb = _bucket_count(g.entries, budget, nl)
            new_id, _ = _hash_ids(nl, nb)
            lab = new_id[lab].astype(np.int32)
            del new_id
            g2 = _contract_buckets(g, lab, nl, nb, f"l{levels}", spill)
            g.remove()  # one level on disk at a time
            cmap = lab[cmap]
            vw = np.bincount(lab, weights=vw, minlength=nl).astype(np.int64)
            logger.info("GREM coarsening level %d: %d -> %d clusters, %d entries", levels, nc,
                        nl, g2.entries)
            g, nc = g2, nl
        xadj, adj, ew = g.to_csr()
        return cmap, nc, maxw, info, (xadj, adj, ew, total)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
