"""GREM: streaming min-edge-cut partitioner that refines its assignment as it streams.

Why this module exists: Armada (arXiv 2502.17846) partitions billion-edge graphs with GREM, a
streaming greedy partitioner whose earlier assignments keep being refined while the edge
stream is read, to get METIS-like edge cuts with a fraction of METIS's memory.  This is
Argosy's implementation.  It reads the graph only through :class:`~.stream.EdgeStream` chunks
and keeps O(n) state plus O(chunk) buffers plus a cluster graph (below): no n x k score
table, no in-memory CSR of the input graph.

Algorithm (each step a numba kernel over one chunk; Python only loops over chunks/passes):

1. **Streaming clustering** (``cluster_passes`` passes): size-constrained label propagation.
   Each vertex met in a chunk joins the neighbouring cluster it has most edges to, if that
   cluster stays under ``max_cluster = eps * n / min(k, n / 160)`` vertices.  State: ``label``
   and ``cluster_size`` (O(n)).  Assignments are revisited on every pass.  The first pass
   also runs one-pass **Fennel** on the same chunks (the classic streaming greedy start).
   Without streamed V-cycles (``fast``, ``default``), when a sample of the stream shows the
   clusters leaving >= 90 % of the entries between them and Fennel cutting <= 0.72x a random
   partition (R-MAT), steps 2-3 are skipped and step 4 refines the Fennel partition.
2. **Cluster graph** (:mod:`.cluster_graph`): one pass maps every edge to
   ``(label[u], label[v])`` and accumulates the weighted cluster graph (deduplicated per
   chunk, merged as it grows; in buckets of clusters on disk when large).  Over the in-memory
   budget (``cluster_budget``) it is coarsened out of core by size-constrained label
   propagation on its true weights, level by level, until it fits.
3. **Strong partition of the cluster graph** in memory with
   :func:`~.multilevel.multilevel_partition` (own numba multilevel: LP coarsening, multilevel
   recursive bisection with 2-way FM, k-way LP + FM refinement, iterated V-cycles; best of
   ``repeats`` runs; no METIS needed).  Its cut equals the projected partition's cut exactly.
4. **Streaming refinement** (up to ``refine_passes`` passes): every vertex met in a chunk moves
   to the block it has most neighbours in (a length-k scratch array per visit) if that reduces
   the cut and the block stays under the hard capacity ``ceil((1 + eps) n / k)``; then a
   buffered k-way FM (hill climbing with rollback) runs on the chunk's vertices with the rest
   of the graph fixed.  In the first cycle, when k-way LP moved the projected partition by
   0.5 % or more, LP also runs between groups of blocks down the recursive-bisection tree
   (halves, quarters, ...; ``refine_down_tree``) and the better of the two results goes on.
   With vertex-aligned chunks (CSR input) all gains are exact; for
   unaligned edge lists only the LP moves run and the refined cut is checked at the end
   (the projected partition is kept if refinement did not help).
5. **Streamed V-cycles** (``stream_cycles``): starting from the better of the multilevel and
   the Fennel partition, re-cluster the stream *inside* the current blocks, improve the
   partition on that cluster graph (k-way refinement + V-cycles), project, stream-refine; keep
   the best; stop when a cycle gains < 0.2 % (or right after cycle 0 if streaming refinement
   improved the projected multilevel cut by < 0.05 %, i.e. it is already locally optimal, or
   removed a third of it, or if the first-level clusters left > 80 % of the entries between
   them: re-clustering would find nothing new).  This is GREM's "keep refining earlier
   assignments while streaming", applied to whole clusters as well as single vertices.

The balance constraint holds after every step (hard capacity in every move; an O(n) repair
``force_balance`` is the safety net).  With ``edge_weighted`` the balanced quantity is
1 + degree per vertex instead (:func:`grem_edge_limited` runs GREM both ways under an edge
limit and finishes each with :func:`~.edge_balance.edge_balance_phase`).

Where the steps live: step 1 in :mod:`.clustering`, step 2 in :mod:`.cluster_graph`, step 3 in
:mod:`.multilevel`, step 4 in :mod:`.refine` (and :mod:`.tree` for the bisection-tree passes),
the edge limit in :mod:`.edge_balance`; the capacity, stream orders and greedy placement they
share in :mod:`.placement`, the RNG and heap in :mod:`.nbutil`.  This module drives the cycles.

Stream order (``order``): ``"file"`` = chunks and vertices in stored order; ``"random"`` =
seeded random chunk order (seekable streams) and random vertex order inside each chunk;
``"degree"`` = inside each chunk, vertices by decreasing (chunk-local) degree.

Memory: ~10 int32/int64 arrays of length n, 2-3 copies of one chunk, O(clusters) coarsening
state, and the cluster graph (at most ``cluster_budget`` entries) with its multilevel
hierarchy (``details['cluster_graph_entries']``).  Disk: the regrouped stream and, while
coarsening, ~16 bytes per first-level cluster-graph entry.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Dict, Optional, Tuple

import numpy as np

from .clustering import singleton_clusters, stream_cluster
from .cluster_build import build_cluster_graph
from .cluster_graph import coarsen_cluster_graph
from .effort import EFFORTS, FM_MIN_LP_GAIN, FM_MIN_MEAN_DEGREE, effort_options  # noqa: F401 (re-exported)
from .edge_balance import edge_balance_phase, edge_weighted_refine, warn_edge_limit
from .multilevel import edge_cut_csr, improve_partition, multilevel_partition
from .nbutil import cluster_sizes, rng_state
from .placement import capacity, count_degrees, force_balance, place_unseen, stream_cut
from .refine import stream_refine
from .sampled_cut import (FENNEL_MIN_DEGREE_SKEW, estimated_cut, greedy_cut, sampled_degree_skew,
                          sampled_shares)
from .stream import EdgeStream
from .tree import bisection_tree_levels, refine_down_tree

logger = logging.getLogger("argosy.partitioner")

__all__ = ["grem_partition", "grem_edge_limited", "cluster_budget", "EFFORTS"]


def cluster_budget(n: int) -> int:
    """Most cluster-graph entries GREM builds in memory: O(n) (2 per vertex with an edge, at
    least 2M)."""
    return max(2 * int(n), 1 << 21)


# cluster-graph entries up to which the in-memory partitioner repeats its runs
ML_EFFORT_ENTRIES = 1 << 21


# no streamed V-cycles when the first cycle's first-level clusters left more than this share of
# the stream's entries between clusters
VCYCLE_MAX_LEVEL1_SHARE = 0.8


TREE_MIN_LP_GAIN = 0.005  # tree refinement only after k-way LP removed >= 0.5 % of the projected cut

# fast/default: tree refinement only when the first-level clusters left at least this share of
# the stream's entries between them (sampled for the early decision): the tree is for clusters
# that missed the structure (planted blocks, near-regular graphs: 0.93); where they caught it
# (geometric 0.26, road-like 0.45, DC-SBM 0.11 at 20M edges) its halves pass found 1-4 cut
# edges of 7k-57k (issue 43, rounds 3-4) for a pass over the stream and a cut count
TREE_MIN_CLUSTER_SHARE = 0.8


# fast/default: the Fennel start is refined at once, with no cluster graph and no multilevel
# partition, when the first-level clusters leave at least GREEDY_EARLY_CLUSTER_SHARE of the
# stream's entries between them and Fennel cuts at most GREEDY_EARLY of what a random
# partition would, (1 - 1/k) of the entries (both sampled; see grem_partition)
GREEDY_EARLY_CLUSTER_SHARE = 0.9
# on graphs whose sampled degree moment E[d^2] / E[d]^2 is at least this, Fennel places in the
# first clustering pass (the same loop as LP: its loads bring in the lines the label gather
# then hits) and the early start is decided right after it: on the 20M R-MAT (55.7) the
# separate Fennel pass after LP's first cost ~0.5 s, the fused one ~0.2 s; Fennel's start won on
# R-MAT, soc-slashdot (12.2) and Chung-Lu (691) and never on the DC-SBM (6.4), which stays on
# the two-pass path (Fennel in the second pass, only where the first pass's clusters leave
# >= 0.65 of the entries between them)
FENNEL_FIRST_MIN_DEGREE_SKEW = 10.0
GREEDY_EARLY = 0.72

# fast/default: the Fennel start replaces the multilevel partition in step 4 when its cut is
# below this share of the multilevel one after k-way LP (R-MAT: 0.80; tree and FM refinement
# closed at most 8 % of such a gap in the recorded runs)
GREEDY_CLEAR = 0.85


def _early_fennel(cluster_share: float, greedy_share: float, k: int) -> bool:
    """Refine the Fennel start at once (no cluster graph): the clusters leave at least
    :data:`GREEDY_EARLY_CLUSTER_SHARE` of the entries between them and Fennel cuts at most
    :data:`GREEDY_EARLY` of what a random partition cuts (``1 - 1/k`` of the entries)."""
    return cluster_share >= GREEDY_EARLY_CLUSTER_SHARE and \
        greedy_share <= GREEDY_EARLY * (1.0 - 1.0 / k)


def grem_partition(stream: EdgeStream, k: int, order: str = "file", seed: int = 0,
                   eps: float = 0.03, effort: str = "default",
                   cluster_passes: Optional[int] = None, refine_passes: Optional[int] = None,
                   vcycles: Optional[int] = None, repeats: Optional[int] = None,
                   stream_cycles: Optional[int] = None,
                   refine_shrink: int = 1, fm_rounds: Optional[int] = None,
                   fm_min_lp_gain: Optional[float] = None,
                   greedy_start: bool = True,
                   initial: str = "rb", whole_graph: Optional[bool] = None,
                   tree_refine: Optional[bool] = None, edge_weighted: Optional[float] = None,
                   degrees: Optional[np.ndarray] = None, cluster_entries: Optional[int] = None,
                   cluster_stop_moved: Optional[float] = None,
                   workdir: Optional[str] = None) -> Tuple[np.ndarray, Dict]:
    """Partition a streamed graph with GREM.

    Args:
        stream (EdgeStream): the graph.
        k (int): number of blocks (``1 <= k <= n``).
        order (str): ``"file"``, ``"random"`` or ``"degree"`` (see module docstring).
        seed (int): RNG seed; equal seeds give equal assignments.
        eps (float): imbalance; every block has ``<= ceil((1 + eps) n / k)`` vertices.
        effort (str): ``"fast"``, ``"default"`` or ``"best"``: the preset (:data:`EFFORTS`)
            that fills every option below left at None.
        cluster_passes (int): streaming LP clustering passes per cycle.
        refine_passes (int): streaming refinement passes per cycle (stops early without gain).
        vcycles (int): iterated V-cycles of the in-memory cluster-graph partitioner.
        repeats (int): independent runs of the cluster-graph partitioner; the best is kept.
        stream_cycles (int): extra *streamed* V-cycles: re-cluster inside the current blocks,
            improve the partition on the new cluster graph, stream-refine; best kept.
        refine_shrink (int): divide the cluster-size limit by this in the streamed V-cycles.
        fm_rounds (int): rounds of buffered k-way FM per chunk during streaming refinement
            (vertex-aligned streams only; 0 = label-propagation refinement only).
        fm_min_lp_gain (float): skip those FM rounds when the LP pass right before them
            removed less than this share of the cut (``default``: :data:`FM_MIN_LP_GAIN`,
            0.01; 0 = never skip; see :func:`~.refine.stream_refine`).  Each cycle records
            ``fm`` (``"ran"``, ``"skipped"``, ``"off"``) and ``lp_gain_before_fm``.
        greedy_start (bool): also compute a one-pass Fennel partition during the first
            clustering pass (same chunk reads) and start the streamed V-cycles from it if its
            cut is lower than the multilevel one (it is on hub-first orders, e.g. SNAP ids);
            skipped on a graph of flat degrees (``details["degree_skew"]`` below
            :data:`~.sampled_cut.FENNEL_MIN_DEGREE_SKEW`), where it never won.
        initial (str): initial partitioner of the cluster graph's coarsest level,
            ``"rb"`` (own, default) or ``"metis"`` (pymetis, optional).
        whole_graph (bool): when the graph has at most 2M entries (the least cluster-graph
            budget), partition it vertex by vertex in memory before clustering it (False:
            always cluster in the stream, e.g. to measure the streaming path on small graphs).
        tree_refine (bool): before the first k-way streaming refinement, refine between the
            groups of blocks of the recursive-bisection tree, top down (see ``refine_down_tree``).
        edge_weighted (float, optional): balance by edges instead of vertices: a vertex weighs
            1 + its degree and no block may weigh more than ``edge_weighted`` times the mean
            (the cluster graph's vertex weights, the coarse partitioner's block limit, and
            step 4's refinement, limited by adjacency entries; no Fennel start, no tree).  The
            vertex capacity is then *not* enforced here: :func:`~.edge_balance.edge_balance_phase` (which
            ``partition_stream`` runs after it for ``max_edge_balance``) restores it by moving
            light vertices, which costs far less cut than moving hubs out of a partition that
            packed them (soc-slashdot, k = 16, edge limit 1.1: 62.3 % against 71.4 %).
        degrees (np.ndarray, optional): with ``edge_weighted``, the adjacency entries per vertex
            if already counted (:func:`~.placement.count_degrees`); otherwise one pass counts them.
        cluster_entries (int, optional): most entries of the cluster graph partitioned in
            memory (0: the O(n) budget :func:`cluster_budget`); a smaller one is reached by
            coarsening out of core first (a 15M-vertex road-like graph left 5M clusters and
            16M entries after 2 LP passes, whose in-memory multilevel run took 420 s of 505).
        cluster_stop_moved (float): the clustering passes stop once one moves fewer than this
            share of the vertices (from the second pass on, checked after its first eighth too).
        workdir (str, optional): scratch directory for the out-of-core cluster graph (default:
            the stream's own ``workdir``, else the system temp dir).

    Returns:
        tuple: ``(assignment int32 (n,), details dict)``; ``details`` holds phase timings,
        cluster counts, pass counts and cuts (in undirected edges) per cycle.
    """
    o = effort_options(effort, stream, cluster_passes=cluster_passes, refine_passes=refine_passes,
                       vcycles=vcycles, repeats=repeats, stream_cycles=stream_cycles,
                       fm_rounds=fm_rounds, fm_min_lp_gain=fm_min_lp_gain, whole_graph=whole_graph,
                       tree_refine=tree_refine, cluster_entries=cluster_entries,
                       cluster_stop_moved=cluster_stop_moved)
    cluster_passes, refine_passes, vcycles, repeats = (o["cluster_passes"], o["refine_passes"],
                                                       o["vcycles"], o["repeats"])
    stream_cycles, fm_rounds, fm_min_lp_gain = o["stream_cycles"], o["fm_rounds"], o["fm_min_lp_gain"]
    whole_graph, tree_refine, cluster_entries = (o["whole_graph"], o["tree_refine"],
                                                 o["cluster_entries"])
    cluster_stop_moved = o["cluster_stop_moved"]
    n = int(stream.num_nodes)
    cap = capacity(n, k, eps)
    state = rng_state(seed)
    det: Dict = {"order": order, "cap": cap, "cycles": [], "effort": effort}
    deg, bcap, ecap = None, cap, 0  # bcap: the block limit in vertex weights
    if edge_weighted is not None:
        deg = count_degrees(stream) if degrees is None else degrees
        entries = int(deg.sum(dtype=np.int64))
        bcap = int(math.ceil(edge_weighted * (entries + n) / k))
        ecap = int(math.ceil(edge_weighted * entries / k))
        greedy_start, tree_refine = False, False  # both balance vertex counts
        det["edge_weighted"] = {"limit": float(edge_weighted), "weight_cap": bcap, "ecap": ecap}
    seen = np.zeros(n, dtype=np.bool_)  # vertices with at least one edge
    part = None
    best_part, best_cut = None, None
    t_start = time.perf_counter()
    # a graph within the cluster-graph budget is first partitioned vertex by vertex in memory;
    # the streamed-clustering start follows as a second fresh start (better on road-like
    # graphs, where stream clusters are good coarse vertices) and the V-cycles go on from the
    # better of the two
    # the whole-graph start is for graphs small in absolute terms (at most the least budget,
    # 2M entries, ~120 MB in memory): a large graph of average degree <= 2 is within 2 entries
    # per vertex too, but partitioning it whole costs ~60 bytes per entry (a 20M-vertex tree:
    # 2.5 GB and 108 s, against 1.1 GB and 36 s streamed), and an edge list over a sparse id
    # space (20M ids, 2M with edges) bought it with its empty ids (2.5 GB and 226 s)
    budget = cluster_budget(0)  # set from the vertices with edges by the first pass
    memory_budget = budget
    whole_first = whole_graph and k > 1 and stream.stream_entries <= budget
    for cyc in range(1 + max(0, stream_cycles) + int(whole_first)):
        cd: Dict = {}
        t0 = time.perf_counter()
        fresh = part is None
        whole = whole_first and cyc == 0
        # 1. streaming size-constrained label propagation (inside blocks after a fresh start)
        greedy, skew = None, None
        if cyc == 0 and greedy_start:  # only where Fennel's start can win (FENNEL_MIN_DEGREE_SKEW)
            skew = sampled_degree_skew(stream)
            det["degree_skew"] = None if skew is None else round(skew, 3)
            greedy_start = skew is None or skew >= FENNEL_MIN_DEGREE_SKEW
        if cyc == 0 and greedy_start:
            gsize = np.zeros(k, np.int64)
            galpha = math.sqrt(k) * max(stream.stream_entries / 2.0, 1.0) / max(n, 1) ** 1.5
            greedy = (gsize, cap, galpha)
        # whole graph: one pass only, for Fennel and for packing isolated vertices (its label
        # propagation clusters are then dropped for singletons)
        early_check = None
        if greedy is not None and stream_cycles <= 0 and not whole and deg is None:
            def take_fennel(label, gpart, cd=cd):
                """The early Fennel start (below), decided before a second clustering pass."""
                if np.count_nonzero(np.bincount(label)) <= k:
                    return False
                tg = time.perf_counter()
                gshare, cshare, gexact = sampled_shares(stream, gpart, label)
                cd.update(greedy_share=gshare, cluster_share=cshare, greedy_exact_cut=gexact,
                          t_shares=time.perf_counter() - tg)
                return _early_fennel(cshare, gshare, k)
            early_check = (GREEDY_EARLY_CLUSTER_SHARE, take_fennel)
        cmap, nc, passes, maxw, gpart = stream_cluster(stream, n, k, eps, order, state,
                                                        1 if whole else cluster_passes, seen,
                                                        part,
                                                        1 if part is None else refine_shrink,
                                                        greedy, cd, cluster_stop_moved,
                                                        early_check,
                                                        fennel_first=skew is not None and
                                                        skew >= FENNEL_FIRST_MIN_DEGREE_SKEW)
        if gpart is None:
            greedy = None  # not run: the first pass's clusters caught the structure
        if greedy is not None:
            place_unseen(gpart, gsize, k)
        # without take_fennel's sample, counted as the greedy check (phase_seconds)
        cd["t_lp"] = time.perf_counter() - t0 - cd.get("t_shares", 0.0)
        if cyc == 0:  # per vertex with an edge: empty ids of a sparse id space buy nothing
            budget = memory_budget = cluster_budget(int(np.count_nonzero(seen)))
            if cluster_entries:  # below "best": coarsen out of core down to this size first
                budget = min(budget, int(cluster_entries))
        nc1 = nc
        built, info = None, dict(levels=0, level1_entries=0)
        early, gexact_cut = False, None
        taken = cd.pop("greedy_exact_cut", False)  # take_fennel's count, if it ran
        if greedy is not None and taken is not False and passes == 1:
            # decided in the clustering (take_fennel): the same sample, not counted twice
            gshare, cshare, gexact_cut = cd["greedy_share"], cd["cluster_share"], taken
            early = _early_fennel(cshare, gshare, k)
        elif greedy is not None and stream_cycles <= 0 and not whole and deg is None and nc > k:
            tg = time.perf_counter()
            gshare, cshare, gexact_cut = sampled_shares(stream, gpart, cmap)
            cd.update(greedy_share=gshare, cluster_share=cshare,
                      t_shares=cd.get("t_shares", 0.0) + time.perf_counter() - tg)
            early = _early_fennel(cshare, gshare, k)
        elif tree_refine and stream_cycles <= 0 and not whole and deg is None and nc > k:
            tg = time.perf_counter()  # no Fennel start: the share the tree refinement is gated by
            cshare = sampled_shares(stream, cmap, cmap, 1 << 20)[1]
            cd.update(cluster_share=cshare, t_shares=time.perf_counter() - tg)
        if early:
            pass
        elif whole:
            cmap, nc = singleton_clusters(cmap, nc, seen)
        else:
            # 2. cluster graph within the budget: coarsened out of core (true weights; see
            # cluster_graph.py for why not by streamed merges), inside the blocks in a V-cycle;
            # the size limit may double up to a block's n / k vertices (R-MAT at k = 256:
            # 234-vertex clusters stall at 18.7M entries)
            cmap, nc, maxw, info, built = coarsen_cluster_graph(
                stream, cmap, nc, maxw, max(1, n // k), budget, state,
                workdir or stream.workdir, part, memory_budget)
        cd.update(cluster_passes=passes, clusters_level1=int(nc1),
                  level1_entries=info["level1_entries"], coarsen_levels=info["levels"],
                  clusters=int(nc), max_cluster=maxw, whole_graph=bool(whole))
        logger.info("GREM cycle %d: %d clusters in %.1f s", cyc, nc, time.perf_counter() - t0)
        if early:
            # the clusters hold almost none of the edges (>= 90 % of the entries between
            # them) while Fennel found structure (<= 0.72x a random partition's cut): on R-MAT
            # (20M: 0.95 and 0.62) the cluster graph's multilevel partition then projects to
            # ~0.81 of the entries (0.75 after k-way LP) against Fennel's 0.59, and step 4a
            # dropped it for the refined Fennel start after building the cluster graph out of
            # core (8-38 s); so refine the Fennel start at once.  Graphs whose clusters carry
            # the structure have cluster shares of 0.01-0.76 (meshes, DC-SBM, the 7 real
            # graphs at k = 8-32); random-like blocks (skewed SBM, planted, near-regular,
            # Chung-Lu) 0.87-0.93 but Fennel at 0.69-0.88x a random cut, and there the
            # multilevel start wins (skewed SBM 20M: 0.31 against Fennel's 0.77)
            t1 = t2 = time.perf_counter()
            del cmap
            part = gpart.copy()
            size = np.bincount(part, minlength=k).astype(np.int64)
            if size.max() > cap:  # threads raced on the block sizes
                force_balance(part, k, cap)
                size = np.bincount(part, minlength=k).astype(np.int64)
            coarse_cut = projected = int(cd["greedy_share"] * stream.stream_entries) \
                if gexact_cut is None else gexact_cut
            cd.update(refined_greedy=coarse_cut // 2, greedy_cut_estimated=gexact_cut is None,
                      cluster_graph_entries=0, early_greedy=True)
            tree = False
            t3 = time.perf_counter()
        else:
            t1 = time.perf_counter()
            if whole:
                built = build_cluster_graph(stream, cmap, nc, 1 << 20)
            elif built is None and part is None:
                logger.warning("GREM cycle 0: the cluster graph does not fit its budget of %d "
                               "entries even with %d-vertex clusters; building it anyway", budget,
                               maxw)
                built = build_cluster_graph(stream, cmap, nc, 1 << 20)
            elif built is None:
                logger.info("GREM cycle %d: cluster graph still over its budget after %d clusters; "
                            "no more V-cycles", cyc, nc)
                det["vcycles_skipped"] = "cluster-graph-over-budget"
                del cmap
                break
            cx, ca, ce, entries = built
            del built
            cvw = cluster_sizes(cmap, nc)
            if deg is not None:  # a cluster weighs its vertices plus their adjacency entries
                cvw += np.bincount(cmap, weights=deg, minlength=nc).astype(np.int64)
            cd.update(cluster_graph_entries=int(ca.size))
            logger.info("GREM cycle %d: cluster graph %d entries; partitioning it", cyc, ca.size)
            t2 = time.perf_counter()
            # 3. partition (cycle 0) or improve (later cycles) the cluster graph
            if part is None:
                if nc <= k:
                    cpart = np.arange(nc, dtype=np.int64) % k
                else:
                    cpart, bc = None, None
                    # effort scales down with size: repeats and V-cycles while the cluster graph
                    # is small, one multilevel run (many tries at its coarsest level) when large
                    runs = max(1, min(repeats, ML_EFFORT_ENTRIES // max(ca.size, 1)))
                    vc = vcycles if ca.size * (1 + vcycles) <= 2 * ML_EFFORT_ENTRIES else 0
                    for r in range(runs):
                        # odd runs skip the k-way coarsening and bisect the graph itself
                        # recursively (each bisection multilevel): on social and power-law graphs
                        # the k-way LP coarsening loses structure that bisection keeps, on road
                        # and citation graphs the reverse; the best run is kept
                        cp = multilevel_partition(cx, ca, ce, cvw, k, bcap, eps,
                                                  seed=seed * 1000003 + r, vcycles=vc,
                                                  initial=initial,
                                                  coarsen_to=nc if r % 2 else None)
                        cc = int(edge_cut_csr(cx, ca, ce, cp))
                        if bc is None or cc < bc:
                            cpart, bc = cp, cc
            else:
                cpart = np.empty(nc, np.int64)
                cpart[cmap] = part
                vc = vcycles if ca.size * (1 + vcycles) <= 2 * ML_EFFORT_ENTRIES else 1
                cpart = improve_partition(cx, ca, ce, cvw, cpart, k, bcap, eps,
                                          seed=seed * 1000003 + 17 * cyc, vcycles=vc)
            coarse_cut = int(edge_cut_csr(cx, ca, ce, cpart)) * 2  # directed entries
            tree = fresh and not whole and tree_refine and initial == "rb" and nc > k and \
                stream.grouped and bool(bisection_tree_levels(k)) and \
                cd.get("cluster_share", 1.0) >= TREE_MIN_CLUSTER_SHARE
            del cx, ca, ce
            part = cpart.astype(np.int32)[cmap]
            del cmap, cpart
            size = np.bincount(part, minlength=k).astype(np.int64)
            if deg is None and size.max() > cap:
                force_balance(part, k, cap)
                size = np.bincount(part, minlength=k).astype(np.int64)
                coarse_cut = -1
            t3 = time.perf_counter()  # steps 4a and 4 count as refinement time
            if tree and coarse_cut < 0:  # rebalanced after projection: count the cut
                coarse_cut = stream_cut(stream, part)
            projected = coarse_cut
            if tree:
                # 4a. k-way LP from the projection (while a pass removes 2 % of the cut, as
                # step 4 would), then from that result the refinement down the bisection tree
                # (halves, quarters, ...; see refine_down_tree) and k-way LP again; the better
                # of the two goes on to step 4 (the tree imposes a binary hierarchy that can fit
                # worse, e.g. 5 planted blocks in 16 parts)
                lp_only = 4 * max(refine_passes, 1)
                _, g0 = stream_refine(stream, part, size, k, cap, order, state, lp_only,
                                       coarse_cut, 0, min_gain=0.02)
                cut_kway = coarse_cut - 2 * g0
                coarse_cut = cut_kway
                # a projection that LP barely improves already carries the structure (clustered
                # graphs, e.g. DC-SBM: 30 of 1.86M cut edges): the tree is for projections far from
                # a local optimum, and would only cost its passes
                tree = cut_kway < (1.0 - TREE_MIN_LP_GAIN) * projected
                cd["cut_kway_lp"] = cut_kway // 2
            if greedy is not None and stream_cycles <= 0 and not whole and coarse_cut > 0 and \
                    deg is None and GREEDY_CLEAR * coarse_cut > \
                    estimated_cut(stream, gpart, cd.get("greedy_share"), gexact_cut):
                # the one-pass Fennel partition is already far below the multilevel one (graphs
                # with hubs first in id order, e.g. R-MAT: 11.5M against 14.3M cut edges): with
                # no streamed V-cycle to start from it later, refine it instead of the multilevel
                # partition (whose tree and FM passes would not close the gap)
                gexact = stream_cut(stream, gpart) if gexact_cut is None else gexact_cut
                if gexact < GREEDY_CLEAR * coarse_cut:
                    part = gpart.copy()
                    size = np.bincount(part, minlength=k).astype(np.int64)
                    if size.max() > cap:  # threads raced on the block sizes
                        force_balance(part, k, cap)
                        size = np.bincount(part, minlength=k).astype(np.int64)
                        gexact = stream_cut(stream, part)
                    coarse_cut, tree = gexact, False
                    cd["refined_greedy"] = gexact // 2
            if tree:
                alt = part.copy()
                cd["tree_refine"] = refine_down_tree(stream, alt, k, eps, order, state, lp_only)
                tree = cd["tree_refine"][-1][0] > 0  # else it stopped: the halves found ~nothing
                if not tree:
                    del alt
            if tree:
                asize = np.bincount(alt, minlength=k).astype(np.int64)
                if asize.max() > cap:
                    force_balance(alt, k, cap)
                    asize = np.bincount(alt, minlength=k).astype(np.int64)
                cut_tree = stream_cut(stream, alt)
                _, g1 = stream_refine(stream, alt, asize, k, cap, order, state, lp_only,
                                       cut_tree, 0, min_gain=0.02)
                cut_tree -= 2 * g1
                cd["cut_tree_lp"] = cut_tree // 2
                if cut_tree < cut_kway:
                    part, size, coarse_cut = alt, asize, cut_tree
                del alt
        # 4. streaming refinement
        keep = part.copy() if not stream.grouped else None
        if deg is not None:
            rp, gain = edge_weighted_refine(stream, part, k, deg, ecap, order, state,
                                             refine_passes)
        else:
            fm_stats: Dict = {}
            rp, gain = stream_refine(stream, part, size, k, cap, order, state, refine_passes,
                                      coarse_cut, fm_rounds, fm_min_lp_gain=fm_min_lp_gain,
                                      stats=fm_stats, probe_gain=o["refine_probe_gain"])
            cd.update(fm_stats)
        if stream.grouped and coarse_cut >= 0:
            cut_now = coarse_cut - 2 * gain
        else:
            cut_now = stream_cut(stream, part)
            if keep is not None and 0 <= coarse_cut < cut_now:
                part, cut_now = keep, coarse_cut
        t4 = time.perf_counter()
        cd.update(refine_passes=rp, cut_projected=projected // 2, cut=cut_now // 2,
                  t_cluster=t1 - t0, t_cluster_graph=t2 - t1, t_partition_coarse=t3 - t2,
                  t_refine=t4 - t3)
        det["cycles"].append(cd)
        logger.info("GREM cycle %d: cut %d undirected edges (%.1f s so far)", cyc, cut_now // 2,
                    time.perf_counter() - t_start)
        before = best_cut
        if best_cut is None or cut_now < best_cut:
            if fresh and best_cut is not None:
                det["start"] = "stream-clusters"  # the second fresh start won
            best_cut, best_part = cut_now, part.copy()
        if greedy is not None and "refined_greedy" in cd:
            det["greedy_cut"] = cd["refined_greedy"]
            det["greedy_cut_estimated"] = bool(cd.get("greedy_cut_estimated", False))
            det["start"] = "greedy-refined"
            del greedy
        elif greedy is not None:
            tg = time.perf_counter()
            gcut, estimated = greedy_cut(stream, gpart, best_cut, cd.get("greedy_share"),
                                          gexact_cut)
            cd["t_greedy_cut"] = time.perf_counter() - tg
            det["greedy_cut"] = gcut // 2
            det["greedy_cut_estimated"] = estimated
            det["start"] = "greedy" if gcut < best_cut else ("whole-graph" if whole
                                                             else "multilevel")
            if gcut < best_cut:  # the one-pass greedy partition is the better start
                best_cut, best_part = gcut, gpart
            del greedy
        elif cyc == 0:
            det["start"] = "whole-graph" if whole else "multilevel"
        if whole:
            part = None  # the streamed-clustering start comes next
            continue
        part = best_part.copy()
        if not fresh and before is not None and best_cut > 0.998 * before:
            break
        if fresh and det.get("start") != "greedy" and projected > 0 and \
                projected - cut_now < 0.0005 * projected:
            det["converged_after_cycle0"] = True  # refinement found ~nothing: cycles won't
            break
        if fresh and det.get("start") != "greedy" and projected >= 1.5 * max(cut_now, 1):
            # refinement removed a third or more of the projected cut: the clusters did not
            # carry the graph's structure at the budget's resolution (blocks without local
            # structure), and a streamed V-cycle re-clusters the same way, so it finds ~nothing
            # (none of the 5 recorded runs above this ratio gained an edge; of ~55 runs below
            # 1.35, V-cycles gained up to 27 %)
            det["vcycles_skipped"] = "clusters-poor"
            break
        if fresh and det.get("start") != "greedy" and \
                info["level1_entries"] > VCYCLE_MAX_LEVEL1_SHARE * stream.stream_entries:
            # the stream clusters hold almost none of the edges (random-like blocks), and a
            # V-cycle re-clusters the same way inside the blocks: on the 20M-edge skewed SBM,
            # near-regular and 4-block planted graphs (93 % of the entries between first-level
            # clusters) it gained 0.01-0.07 % for 8-16 s, on a random graph with one hub
            # vertex (86 %) 0.06 % for 19 s, on a bipartite Zipf graph (85 %) 0.007 % for 15 s;
            # on R-MAT (68 %) it gains 18 %, on Chung-Lu (71 %) 0.2 %
            det["vcycles_skipped"] = "clusters-poor"
            break
    part = best_part
    if deg is None and np.bincount(part, minlength=k).max() > cap:  # pragma: no cover
        force_balance(part, k, cap)
    det["seconds"] = time.perf_counter() - t_start
    det["clusters"] = det["cycles"][0]["clusters"]
    det["cluster_graph_entries"] = max(c["cluster_graph_entries"] for c in det["cycles"])
    return part.astype(np.int32, copy=False), det


def grem_edge_limited(stream: EdgeStream, k: int, max_edge_balance: float, order: str = "file",
                      seed: int = 0, eps: float = 0.03, **options) -> Tuple[np.ndarray, Dict]:
    """GREM under both limits: at most ``ceil((1 + eps) n / k)`` vertices and
    ``max_edge_balance`` times the mean adjacency entries per block.

    Why two runs: the vertex-balanced partition may already meet the edge limit (citation and
    road graphs), and then it is the better one; on heavy-tailed graphs it packs the hubs, and
    moving them out afterwards costs much more cut than partitioning by edges in the first place
    (a vertex weighs 1 + its degree, ``grem_partition(edge_weighted=...)``) and then moving
    light vertices to restore the vertex count.  So: the vertex-balanced run and its
    :func:`~.edge_balance.edge_balance_phase`; if it was over the edge limit, also the edge-weighted run and
    its phase; the lower cut among those that meet both limits is kept.

    Returns:
        tuple: as :func:`grem_partition`; ``details['edge_balance_phase']`` is the kept
        partition's phase, ``details['edge_limited']`` the cut and phase of each run.
    """
    part, det = grem_partition(stream, k, order=order, seed=seed, eps=eps, **options)
    det = dict(det)
    deg = count_degrees(stream)  # counted once for both phases and the edge-weighted run
    phase = edge_balance_phase(stream, part, k, eps, max_edge_balance, order, warn=False,
                               degrees=deg)
    runs = {"vertex_balanced": {"edge_balance_before": phase["edge_balance_before"],
                                "reached": phase["reached"]}}
    det["edge_limited"] = runs
    if phase["edge_balance_before"] <= max_edge_balance:
        det["edge_balance_phase"] = phase  # met without moving anything: the phase only refined
        return part, det
    # the weighted run gets half the slack above the mean, the phase the other half: blocks
    # filled right up to the limit leave the phase no room to trade the vertices it must move
    # for the vertex capacity (R-MAT 20M at 1.1: stuck at 1.1002x, so the vertex-balanced
    # run's 89.3 % was kept); at 1.1 aiming at 1.05 cut less than 1.03 or 1.1 on 5 of 7 graphs
    alt, adet = grem_partition(stream, k, order=order, seed=seed, eps=eps,
                               edge_weighted=1.0 + (max_edge_balance - 1.0) / 2, degrees=deg,
                               **options)
    aphase = edge_balance_phase(stream, alt, k, eps, max_edge_balance, order, warn=False,
                                degrees=deg)
    cut = stream_cut(stream, part) // 2
    acut = stream_cut(stream, alt) // 2
    runs["vertex_balanced"]["cut"] = cut
    runs["edge_weighted"] = {"cut": acut, "reached": aphase["reached"],
                             "edge_balance_before": aphase["edge_balance_before"],
                             "seconds": adet.get("seconds")}
    if (aphase["reached"], -acut) > (phase["reached"], -cut):
        part, phase = alt, aphase
        det = dict(adet, edge_limited=runs)  # the kept run's cycles and timings
        runs["kept"] = "edge_weighted"
    else:
        runs["kept"] = "vertex_balanced"
    logger.info("GREM under an edge limit of %.2fx: vertex-balanced run %d cut edges, "
                "edge-weighted run %d; keeping the %s one", max_edge_balance, cut, acut,
                runs["kept"].replace("_", "-"))
    det["edge_balance_phase"] = phase
    if not phase["reached"]:
        warn_edge_limit(max_edge_balance, phase)
    return part, det
