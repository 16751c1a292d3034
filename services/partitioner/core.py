"""Single entry point for every vertex partitioner of Argosy.

Why this module exists: ``argosy partition`` (and the benchmark) must call GREM and the
baselines the same way and get the same result record back.  :func:`partition_stream` checks
its arguments, refuses a memory budget it cannot meet (:func:`estimate_cost`), runs one method
on an :class:`~.stream.EdgeStream`, and measures the edge cut and balance with one extra
streaming pass.
"""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import numpy as np

from .baselines import BASELINES
from .edge_balance import edge_balance_phase
from .grem import EFFORTS, grem_edge_limited, grem_partition
from .placement import capacity, count_cut
from .regroup import GroupedEdgeStream
from .stream import EdgeStream
from .threads import default_threads, get_threads, map_chunks, using_threads

__all__ = ["PartitionResult", "MemoryBudgetError", "partition_stream", "estimate_cost",
           "METHODS", "ORDERS", "evaluate_partition", "phase_seconds"]

METHODS = ("grem",) + tuple(BASELINES)
ORDERS = ("file", "random", "degree")


class MemoryBudgetError(ValueError):
    """The method's estimated peak memory exceeds the caller's ``memory_budget``."""


@dataclass
class PartitionResult:
    """Outcome of one partitioning run.

    Attributes:
        assignment (np.ndarray): int32 (n,) block id per vertex, in ``0..k-1``.
        method (str): partitioner name.
        order (str): stream order used (``file``/``random``/``degree``).
        seconds (float): wall time of the partitioning call (excludes the metrics pass).
        edge_cut (int): undirected edges whose endpoints lie in different blocks.
        edge_cut_fraction (float): ``edge_cut / undirected edges``.
        balance (float): largest block / (n / k).
        edge_balance (float): the block with the most adjacency entries (the edges it stores,
            samples from and gathers for) over the mean.  Only ``balance`` is constrained; on
            power-law graphs a low cut can come from packing the hubs into a few blocks, which
            this shows (see docs/partitioning.md, "Vertex balance and edge balance").
        part_sizes (np.ndarray): int64 (k,) vertices per block.
        details (dict): method-specific statistics (phase times, cluster counts, ...).
        regrouped (GroupedEdgeStream | None): the on-disk regrouped view of the input, when
            ``keep_regrouped=True`` was passed and one was built (sorted, deduplicated,
            symmetric entries in source order: the store writer's cheapest input).  The caller
            must ``close()`` it.
    """

    assignment: np.ndarray
    method: str
    order: str
    seconds: float
    edge_cut: int
    edge_cut_fraction: float
    balance: float
    part_sizes: np.ndarray
    edge_balance: float = 0.0
    details: Dict = field(default_factory=dict)
    regrouped: Optional[EdgeStream] = None


# bytes and seconds per unit, calibrated with bench/partition.py --scale on the 2-core dev
# machine (DC-SBM edge lists of 20M and 100M edges, k=16; see bench/results/partition_scale.md)
# and rounded up.  GREM keeps ~10 small arrays of length n (labels, cluster sizes, blocks,
# activity flags, ...), two sorted buckets and a chunk's scratch; METIS holds the CSR plus its
# multilevel hierarchy (~110 bytes per directed entry measured through pymetis).
_BYTES = {
    # method: (per vertex, per streamed directed entry, per chunk entry)
    "grem": (36, 1, 48),
    "ldg": (16, 0, 48),
    "fennel": (16, 0, 48),
    "random": (16, 0, 0),
    "hash": (8, 0, 0),
    "metis": (100, 110, 32),
}
_SECONDS = {  # (per vertex, per directed entry), including the regrouping pass; GREM: `default`
    # on both cores of the 2-core machine the CLI runs on by default (every core), fitted on the
    # 20M-edge DC-SBM, geometric and road-like graphs (bench/results/effort_20m_r15: 1.4-2.0 s and
    # 7.1 s measured, 1.9 and 7.5 s estimated) and, through GREM_ENTRIES_BEYOND_CACHE, the
    # 1/4-scale papers100M graph (808M entries: 53-59 s measured, 53 s estimated); the other
    # methods single-threaded
    "grem": (4.2e-7, 2.2e-8),
    "ldg": (2.0e-7, 6.0e-8),
    "fennel": (2.0e-7, 6.0e-8),
    "random": (3.0e-8, 0.0),
    "hash": (1.0e-8, 0.0),
    "metis": (1.0e-6, 1.5e-6),
}
_BASE_BYTES = 160 << 20  # the interpreter with numpy and numba (and the kernels) loaded
# GREM's time per effort level relative to _SECONDS (fitted on `default`): `fast` took 0.63-1.04x
# `default`'s time in effort_20m_r10, rounded up; `best` 1/0.7 of `default` in the last fit of both
_EFFORT_SECONDS = {"fast": 1.0, "default": 1.0, "best": 1.5}
# on graphs without local structure (R-MAT, random-like blocks) GREM's time per entry is several
# times the DC-SBM's the model is fitted on: the upper end --dry-run prints (20M R-MAT 7.2 s, 1.5x
# the estimate; the planted partition, random-like blocks whose cluster graph is coarsened out of
# core, 49 s at load 3.6, 10x)
GREM_UNSTRUCTURED_TIME = 10.0
# GREM's time per entry grows past this many entries, as (entries / it) ** 0.25: more of every
# random read misses the caches, and the regrouping's buckets go to the disk rather than stay in
# the page cache (the 20M-edge graphs' 40M entries: 1.0x; 1/4-scale papers100M's 808M: 2.1x, the
# model's 31 s -> 53 s against 53-59 s measured)
GREM_ENTRIES_BEYOND_CACHE = 4.0e7


def estimate_cost(num_nodes: int, num_edges: int, k: int, method: str = "grem",
                  chunk_edges: int = 1 << 20, edge_limited: bool = False,
                  effort: str = "default") -> Tuple[int, float]:
    """Rough peak extra memory and run time of a partitioning run.

    The model is linear: ``a * n + b * entries + c * chunk`` bytes (GREM's ``b`` covers its
    cluster graph, which is a fraction of the input; METIS holds the CSR plus its own
    multilevel copies), plus a k-dependent term for the ``k``-sized scratch arrays.

    Args:
        num_nodes (int): vertices.
        num_edges (int): directed entries as streamed (2x undirected edges).
        k (int): number of blocks.
        method (str): one of :data:`METHODS`.
        chunk_edges (int): stream chunk size.
        edge_limited (bool): with ``max_edge_balance``: an int32 degree per vertex, and for GREM
            up to a second full run (:func:`~.grem.grem_edge_limited`; measured 1.5-1.6x the
            time on the 20M R-MAT and Chung-Lu graphs, counted as 2x).
        effort (str): GREM's effort level (time only; the memory bound is the same).

    Returns:
        tuple: ``(peak_bytes, seconds)``.
    """
    if method not in _BYTES:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
    a, b, c = _BYTES[method]
    chunk = min(chunk_edges, max(num_edges, 1)) if c else 0
    peak = _BASE_BYTES + a * num_nodes + b * num_edges + c * chunk + 64 * k
    sa, sb = _SECONDS[method]
    scale = max(1.0, num_edges / GREM_ENTRIES_BEYOND_CACHE) ** 0.25 if method == "grem" else 1.0
    secs = sa * num_nodes + sb * num_edges * (1.0 + 0.05 * math.log2(max(k, 2))) * scale
    if method == "grem":
        secs *= _EFFORT_SECONDS.get(effort, 1.0)
    if edge_limited:
        peak += 4 * num_nodes
        secs *= 2.0 if method == "grem" else 1.2
    return int(peak), float(secs)


def phase_seconds(details: Dict, seconds: Optional[float] = None) -> Dict[str, float]:
    """Where a run's time went, summed over GREM's cycles (``details`` of a
    :class:`PartitionResult`): ``regroup`` (on-disk regrouping of an edge list), ``lp_clustering``
    (streamed label propagation, with the Fennel start), ``cluster_graph`` (building and
    coarsening it), ``coarse_partition`` (the in-memory multilevel partitioner), ``refinement``
    (streamed LP/tree/FM passes), ``greedy_check`` (counting the Fennel start's cut),
    ``evaluate`` (the closing cut/balance pass) and ``other`` (the rest of ``seconds``)."""
    out = {"regroup": float(details.get("t_regroup", 0.0))}
    keys = (("lp_clustering", "t_lp"), ("cluster_graph", None), ("coarse_partition", "t_partition_coarse"),
            ("refinement", "t_refine"), ("greedy_check", "t_greedy_cut"))
    for name, _ in keys:
        out[name] = 0.0
    for c in details.get("cycles", []):
        lp = float(c.get("t_lp", 0.0))
        out["lp_clustering"] += lp
        sh = float(c.get("t_shares", 0.0))  # sampling the Fennel and cluster cut shares
        out["cluster_graph"] += (float(c.get("t_cluster", 0.0)) - lp - sh
                                 + float(c.get("t_cluster_graph", 0.0)))
        out["coarse_partition"] += float(c.get("t_partition_coarse", 0.0))
        out["refinement"] += float(c.get("t_refine", 0.0))
        out["greedy_check"] += float(c.get("t_greedy_cut", 0.0)) + sh
    if seconds is not None:
        out["other"] = max(0.0, float(seconds) - sum(out.values()))
    out["evaluate"] = float(details.get("t_evaluate", 0.0))
    return {k: round(v, 3) for k, v in out.items()}


def evaluate_partition(stream: EdgeStream, assignment: np.ndarray, k: int) -> Dict:
    """One streaming pass: undirected edge cut, cut fraction, balance (vertices), edge balance
    (adjacency entries per block, max / mean) and block sizes."""
    n = stream.num_nodes

    def one(chunk):
        src, dst = chunk
        return src.size, int(count_cut(src, dst, assignment)), np.bincount(assignment[src],
                                                                            minlength=k)

    cut_entries, entries = 0, 0
    volume = np.zeros(k, np.int64)
    if stream.seekable and stream.num_chunks >= 4 and get_threads() > 1:
        per_chunk = map_chunks(lambda i: one(stream.read_chunk(i)), range(stream.num_chunks))
    else:
        per_chunk = map(one, stream)
    for e, c, vol in per_chunk:
        entries += e
        cut_entries += c
        volume += vol
    div = 2 if stream.symmetric else 1
    sizes = np.bincount(assignment, minlength=k).astype(np.int64)
    und = entries // div
    return {
        "edge_cut": cut_entries // div,
        "edge_cut_fraction": (cut_entries // div) / und if und else 0.0,
        "balance": float(sizes.max() / (n / k)) if n else 0.0,
        "edge_balance": float(volume.max() / (entries / k)) if entries else 0.0,
        "part_sizes": sizes,
        "undirected_edges": und,
    }


def partition_stream(stream: EdgeStream, k: int, method: str = "grem", order: str = "file",
                     seed: int = 0, eps: float = 0.03,
                     memory_budget: Optional[int] = None, effort: str = "default",
                     threads: Optional[int] = 1, **options) -> PartitionResult:
    """Partition the vertices of a streamed graph into ``k`` balanced blocks.

    Every method guarantees ``max block <= ceil((1 + eps) * n / k)``.

    Args:
        stream (EdgeStream): from :func:`~.stream.open_edge_stream`.
        k (int): number of blocks, ``1 <= k <= n``.
        method (str): ``grem`` (default), ``fennel``, ``ldg``, ``metis``, ``hash``, ``random``.
        order (str): stream order ``file`` | ``random`` | ``degree`` (recorded in the result).
        seed (int): RNG seed (same seed, same input -> same assignment).
        eps (float): allowed imbalance (default 0.03).
        memory_budget (int, optional): bytes; refuse to run if :func:`estimate_cost` exceeds it.
        effort (str): GREM's preset, ``"fast"``, ``"default"`` or ``"best"``
            (:data:`~.effort.EFFORTS`; other methods ignore it).
        threads (int, optional): threads for the streamed passes (default 1; None: the
            cores this process may use, as ``argosy partition`` does, see :mod:`.threads`).  One
            thread gives the same assignment for the same seed every time; several threads
            race on shared labels, so runs may differ slightly (same balance guarantee).
        **options: extra keyword arguments for the method (e.g. GREM's ``refine_passes``).
            ``regroup`` (bool): regroup an unaligned edge-list stream by source through
            on-disk buckets (:class:`~.stream.GroupedEdgeStream`) first; default on for every
            method when the stream has several unaligned chunks (exact gains for GREM, true
            vertex stream for LDG/Fennel, duplicates across chunks removed so that every
            method is scored on the same simple graph; its time is included in ``seconds``).
            ``tmpdir`` (str): where the buckets and GREM's out-of-core cluster graph go
            (default: the system temp dir).
            ``keep_regrouped`` (bool): hand the regrouped view back in the result (see
            :class:`PartitionResult`) instead of deleting it.
            ``evaluate`` (bool, default True): count the cut and edge balance in one more
            pass; False leaves ``edge_cut`` -1 and the fractions NaN (``argosy partition``: the
            store writer counts them while it writes, so the pass would be a second count).
            ``max_edge_balance`` (float >= 1): cap every block's adjacency entries at this
            multiple of the mean too: after any method, :func:`~.edge_balance.edge_balance_phase`;
            GREM also partitions by edges and keeps the better result
            (:func:`~.grem.grem_edge_limited`).  Its time is included in ``seconds``.

    Returns:
        PartitionResult: the assignment and its quality.

    Raises:
        ValueError: empty graph, ``k < 1`` or ``k > n``, bad ``eps``, unknown method/order.
        MemoryBudgetError: estimated peak memory exceeds ``memory_budget``.
        ImportError: ``metis`` without pymetis installed.
    """
    n = int(stream.num_nodes)
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
    if order not in ORDERS:
        raise ValueError(f"unknown stream order {order!r}; expected one of {ORDERS}")
    if n <= 0:
        raise ValueError("cannot partition an empty graph (0 vertices)")
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if k > n:
        raise ValueError(f"k={k} exceeds the number of vertices n={n}")
    if not (0.0 <= eps < 1.0):
        raise ValueError(f"eps must be in [0, 1), got {eps}")
    if effort not in EFFORTS:
        raise ValueError(f"unknown effort {effort!r}; expected one of {tuple(EFFORTS)}")
    if threads is not None and (not isinstance(threads, (int, np.integer)) or threads < 1):
        raise ValueError(f"threads must be an integer >= 1, got {threads!r}")
    with using_threads(default_threads() if threads is None else threads):
        return _partition(stream, int(k), method, order, seed, eps, memory_budget, effort,
                          options)


def _partition(stream, k, method, order, seed, eps, memory_budget, effort, options):
    n = int(stream.num_nodes)
    entries = int(stream.stream_entries)
    if memory_budget is not None:
        chunk = stream.chunk_edges * (2 if entries > stream.num_edges else 1)
        need, _ = estimate_cost(n, entries, int(k), method, chunk,
                                edge_limited=options.get("max_edge_balance") is not None)
        if need > memory_budget:
            raise MemoryBudgetError(
                f"method {method!r} needs an estimated {need} bytes ({need / 2**20:.1f} MiB) for "
                f"n={n}, entries={entries}, k={k}, but memory_budget is {memory_budget} bytes "
                f"({memory_budget / 2**20:.1f} MiB)")
    k = int(k)
    regroup = options.pop("regroup", None)
    tmpdir = options.pop("tmpdir", None)
    keep_regrouped = bool(options.pop("keep_regrouped", False))
    evaluate = bool(options.pop("evaluate", True))
    max_edge_balance = options.pop("max_edge_balance", None)
    if max_edge_balance is not None and not (max_edge_balance >= 1.0):
        raise ValueError(f"max_edge_balance must be >= 1 (a multiple of the mean edge count per "
                         f"part), got {max_edge_balance}")
    t0 = time.perf_counter()
    work, grouped_view = stream, None
    if regroup is None:
        regroup = not stream.grouped and stream.num_chunks > 1
    if regroup and not stream.grouped and k > 1:
        base = tmpdir or tempfile.gettempdir()
        grouped_view = GroupedEdgeStream(stream, tempfile.mkdtemp(prefix="argosy-grem-",
                                                                  dir=base))
        work = grouped_view
    t_regroup = time.perf_counter() - t0
    try:
        if k == 1:
            part, det = np.zeros(n, np.int32), {}
        elif method == "grem" and max_edge_balance is not None:
            part, det = grem_edge_limited(work, k, max_edge_balance, order=order, seed=seed,
                                          eps=eps, workdir=work.workdir or tmpdir, effort=effort,
                                          **options)
        elif method == "grem":
            part, det = grem_partition(work, k, order=order, seed=seed, eps=eps,
                                       workdir=work.workdir or tmpdir, effort=effort, **options)
        else:
            part, det = BASELINES[method](work, k, order=order, seed=seed, eps=eps, **options)
        part = np.ascontiguousarray(part, dtype=np.int32)
        if max_edge_balance is not None and k > 1 and "edge_balance_phase" not in det:
            det = dict(det)
            det["edge_balance_phase"] = edge_balance_phase(work, part, k, eps, max_edge_balance,
                                                           order)
        seconds = time.perf_counter() - t0
        t_ev = time.perf_counter()
        if evaluate:
            ev = evaluate_partition(work, part, k)
        else:  # the caller counts the cut itself (the store writer does, per part)
            sizes = np.bincount(part, minlength=k).astype(np.int64)
            ev = {"edge_cut": -1, "edge_cut_fraction": float("nan"), "part_sizes": sizes,
                  "balance": float(sizes.max() / (n / k)), "edge_balance": float("nan"),
                  "undirected_edges": -1}
        t_ev = time.perf_counter() - t_ev
    except BaseException:
        if grouped_view is not None:
            grouped_view.close()
        raise
    if grouped_view is not None and not keep_regrouped:
        grouped_view.close()
    det = dict(det)
    det["regrouped"] = grouped_view is not None
    det["t_regroup"] = t_regroup
    det["t_evaluate"] = t_ev
    cap = capacity(n, k, eps)
    if ev["part_sizes"].max() > cap:  # pragma: no cover - every method enforces it
        raise RuntimeError(f"{method} violated the capacity {cap}: {ev['part_sizes'].max()}")
    det["undirected_edges"] = ev["undirected_edges"]
    return PartitionResult(assignment=part, method=method, order=order, seconds=seconds,
                           edge_cut=int(ev["edge_cut"]),
                           edge_cut_fraction=float(ev["edge_cut_fraction"]),
                           balance=float(ev["balance"]), part_sizes=ev["part_sizes"],
                           edge_balance=float(ev["edge_balance"]), details=det, regrouped=grouped_view if keep_regrouped else None)
