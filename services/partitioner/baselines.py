"""Baseline partitioners with the same streamed input and output as GREM.

Why this module exists: GREM's quality, memory and speed claims are only meaningful next to
the standard alternatives, run through the *same* code path (:func:`~.core.partition_stream`)
on the same :class:`~.stream.EdgeStream`:

* ``random``: seeded random permutation dealt round-robin (perfectly balanced).
* ``hash``: splitmix64 hash of the vertex id mod k; blocks over capacity spill their surplus
  to the lightest blocks so that the balance constraint holds like for every other method.
* ``ldg``: one-pass Linear Deterministic Greedy (Stanton & Kliot 2012):
  ``argmax_b |N(v) & P_b| * (1 - |P_b| / C)`` with hard capacity ``C``.
* ``fennel``: one-pass Fennel (Tsourakakis et al. 2014):
  ``argmax_b |N(v) & P_b| - alpha * gamma * |P_b|^(gamma - 1)``, ``gamma = 1.5``,
  ``alpha = sqrt(k) * m / n^1.5``, hard capacity.
* ``metis``: pymetis ``METIS_PartGraphKway`` (``ufactor = 1000 * eps``) on the CSR gathered
  from the stream (needs the whole graph in memory; pymetis is an optional dependency).

LDG and Fennel are vertex-stream algorithms: each vertex is placed the first time it appears as
a source in a chunk, using the neighbours of that chunk (its full adjacency for CSR input).
Ties go to the lightest block.  Vertices never seen are placed on the lightest blocks at the end.
"""

from __future__ import annotations

import math
from typing import Dict, Tuple

import numba
import numpy as np

from argosy.shared.graphio import csr_from_keys, indptr_from_rows, sorted_unique
from argosy.shared.hashing import splitmix64

from .kway import rebalance
from .nbutil import rng_state
from .placement import (capacity, chunk_order, force_balance, greedy_place, group_order, penalties,
                        place_unseen)
from .stream import EdgeStream, max_group_size

__all__ = ["random_partition", "hash_partition", "ldg_partition", "fennel_partition",
           "metis_partition", "gather_csr", "BASELINES"]


@numba.njit(cache=True)
def _hash_assign(n, k, seed):
    part = np.empty(n, np.int32)
    s = np.uint64(seed)
    for v in range(n):
        part[v] = np.int32(splitmix64(np.uint64(v) ^ s) % np.uint64(k))
    return part


@numba.njit(cache=True)
def _one_pass_chunk(src, dst, starts, gorder, part, size, k, cap, mode, alpha, gamma, conn,
                    touched):
    """mode 0 = LDG, 1 = Fennel.  Places each not-yet-placed source vertex of the chunk."""
    pen = penalties(size, k, alpha, gamma)
    qs = np.empty(max_group_size(starts), np.int32)
    for gi in range(gorder.size):
        g = gorder[gi]
        a = starts[g]
        b = starts[g + 1]
        v = src[a]
        if part[v] < 0:
            greedy_place(v, a, b, dst, part, size, k, cap, mode, alpha, gamma, conn, touched,
                          pen, qs)


def _one_pass(stream: EdgeStream, k: int, order: str, seed: int, eps: float,
              mode: int) -> Tuple[np.ndarray, Dict]:
    n = stream.num_nodes
    cap = capacity(n, k, eps)
    state = rng_state(seed)
    part = np.full(n, -1, np.int32)
    size = np.zeros(k, np.int64)
    m_und = max(stream.stream_entries / 2.0, 1.0)
    alpha = math.sqrt(k) * m_und / max(n, 1) ** 1.5
    conn = np.zeros(k, np.int64)
    touched = np.empty(k, np.int64)
    for src, dst, starts in stream.iter_groups(chunk_order(stream, order, state)):
        go = group_order(starts, order, state)
        _one_pass_chunk(src, dst, starts, go, part, size, k, cap, mode, alpha, 1.5, conn,
                        touched)
    place_unseen(part, size, k)
    return part, {"cap": cap, "alpha": alpha if mode == 1 else None}


def ldg_partition(stream: EdgeStream, k: int, order: str = "file", seed: int = 0,
                  eps: float = 0.03) -> Tuple[np.ndarray, Dict]:
    """One-pass LDG.  Args/Returns as :func:`~.grem.grem_partition`."""
    return _one_pass(stream, k, order, seed, eps, 0)


def fennel_partition(stream: EdgeStream, k: int, order: str = "file", seed: int = 0,
                     eps: float = 0.03) -> Tuple[np.ndarray, Dict]:
    """One-pass Fennel (gamma 1.5).  Args/Returns as :func:`~.grem.grem_partition`."""
    return _one_pass(stream, k, order, seed, eps, 1)


def random_partition(stream: EdgeStream, k: int, order: str = "file", seed: int = 0,
                     eps: float = 0.03) -> Tuple[np.ndarray, Dict]:
    """Seeded random balanced assignment (no edges read)."""
    n = stream.num_nodes
    rng = np.random.default_rng(seed)
    part = np.empty(n, np.int32)
    part[rng.permutation(n)] = np.arange(n, dtype=np.int64) % k
    return part, {"cap": capacity(n, k, eps)}


def hash_partition(stream: EdgeStream, k: int, order: str = "file", seed: int = 0,
                   eps: float = 0.03) -> Tuple[np.ndarray, Dict]:
    """splitmix64(id) mod k, with overflow spilled to the lightest blocks (no edges read)."""
    n = stream.num_nodes
    cap = capacity(n, k, eps)
    part = _hash_assign(n, k, seed)
    moved = force_balance(part, k, cap)
    return part, {"cap": cap, "spilled": int(moved)}


def gather_csr(stream: EdgeStream) -> Tuple[np.ndarray, np.ndarray]:
    """Materialise the symmetric CSR from the stream (METIS needs it in memory)."""
    n = stream.num_nodes
    srcs, dsts = [], []
    for s, d in stream:
        srcs.append(s.astype(np.int32 if n < 2 ** 31 else np.int64))
        dsts.append(d.astype(np.int32 if n < 2 ** 31 else np.int64))
    src = np.concatenate(srcs) if srcs else np.empty(0, np.int32)
    dst = np.concatenate(dsts) if dsts else np.empty(0, np.int32)
    del srcs, dsts
    if not stream.grouped or stream.num_chunks > 1 and np.any(src[1:] < src[:-1]):
        key = sorted_unique(src.astype(np.int64) * n + dst)
        del src
        return csr_from_keys(key, n, dst.dtype)
    return indptr_from_rows(src, n), dst


def metis_partition(stream: EdgeStream, k: int, order: str = "file", seed: int = 0,
                    eps: float = 0.03) -> Tuple[np.ndarray, Dict]:
    """METIS k-way via pymetis on the gathered CSR (``order`` is irrelevant and ignored).

    Raises:
        ImportError: if pymetis is not installed (``pip install argosy[metis]``).
    """
    try:
        import pymetis
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("method 'metis' needs pymetis: pip install pymetis "
                          "(or argosy[metis])") from exc
    n = stream.num_nodes
    cap = capacity(n, k, eps)
    indptr, indices = gather_csr(stream)
    if k == 1:
        return np.zeros(n, np.int32), {"cap": cap}
    opts = pymetis.Options(ufactor=max(1, int(round(eps * 1000))), seed=int(seed))
    _, memb = pymetis.part_graph(k, adjacency=pymetis.CSRAdjacency(indptr, indices),
                                 recursive=False, options=opts)
    part = np.asarray(memb, dtype=np.int64)
    fixed = 0
    if np.bincount(part, minlength=k).max() > cap:
        ew = np.ones(indices.size, np.int64)
        rebalance(indptr, indices.astype(np.int64), ew, np.ones(n, np.int64), part, k, cap)
        fixed = 1
    return part.astype(np.int32), {"cap": cap, "rebalanced": fixed}


BASELINES = {
    "random": random_partition,
    "hash": hash_partition,
    "ldg": ldg_partition,
    "fennel": fennel_partition,
    "metis": metis_partition,
}
