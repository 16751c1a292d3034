"""Placement and balance: the block capacity, stream visiting orders, cut counting, the O(n)
balance repair and the one-pass greedy placement (LDG / Fennel) of a single vertex.

Why this module exists: GREM (its Fennel start, its refinement, the edge-balance phase) and
the one-pass baselines place vertices under the same hard capacity ``ceil((1 + eps) n / k)``,
visit a stream in the same orders and count cuts the same way; these are those shared pieces.
"""

from __future__ import annotations

import math
from typing import Optional

import numba
import numpy as np

from .nbutil import permutation
from .stream import EdgeStream

__all__ = ["capacity", "group_order", "chunk_order", "count_cut", "stream_cut", "force_balance",
           "count_degrees", "block_weights", "penalties", "greedy_place", "place_unseen"]


def capacity(n: int, k: int, eps: float) -> int:
    """Hard block capacity ``ceil((1 + eps) * n / k)``."""
    return int(math.ceil((1.0 + eps) * n / k - 1e-9))


def group_order(starts: np.ndarray, order: str, state: np.ndarray) -> np.ndarray:
    """Visiting order of the vertex groups of a chunk for stream order ``order``."""
    ng = starts.size - 1
    if order == "file":
        return np.arange(ng)
    if order == "random":
        return permutation(ng, state)
    if order == "degree":
        return np.argsort(-np.diff(starts), kind="stable")
    raise ValueError(f"unknown stream order {order!r}; expected 'file', 'random' or 'degree'")


def chunk_order(stream: EdgeStream, order: str, state: np.ndarray) -> Optional[np.ndarray]:
    """Chunk visiting order: a permutation for ``random`` on seekable streams, else None."""
    if order == "random" and stream.seekable and stream.num_chunks > 1:
        return permutation(stream.num_chunks, state)
    return None


@numba.njit(cache=True, nogil=True)
def count_cut(src, dst, part):
    """Number of entries ``(u, v)`` of a chunk with ``part[u] != part[v]``."""
    c = 0
    for i in range(src.size):
        if part[src[i]] != part[dst[i]]:
            c += 1
    return c


def stream_cut(stream: EdgeStream, part: np.ndarray) -> int:
    """Entries of the whole stream whose endpoints lie in different blocks (one pass; chunks
    on :func:`~.threads.get_threads` threads when the stream is seekable)."""
    from .threads import get_threads, map_chunks

    if stream.seekable and stream.num_chunks >= 4 and get_threads() > 1:
        return int(sum(map_chunks(lambda i: int(count_cut(*stream.read_chunk(i), part)),
                                  range(stream.num_chunks))))
    return int(sum(int(count_cut(s, d, part)) for s, d in stream))


@numba.njit(cache=True)
def force_balance(part, k, cap):
    """Move surplus vertices of overloaded blocks to the lightest blocks (O(n) repair).

    Returns:
        int: number of vertices moved.
    """
    n = part.size
    size = np.zeros(k, np.int64)
    for v in range(n):
        size[part[v]] += 1
    moved = 0
    for v in range(n - 1, -1, -1):
        p = part[v]
        if size[p] > cap:
            lb = 0
            for b in range(k):
                if size[b] < size[lb]:
                    lb = b
            part[v] = lb
            size[p] -= 1
            size[lb] += 1
            moved += 1
    return moved


@numba.njit(cache=True)
def _count_entries(src, deg):
    """``deg[v] +=`` v's entries in this chunk (O(chunk), not O(n) per chunk)."""
    for i in range(src.size):
        deg[src[i]] += 1


def count_degrees(stream: EdgeStream) -> np.ndarray:
    """Adjacency entries per vertex as streamed (one pass; int32, 4 bytes per vertex)."""
    deg = np.zeros(int(stream.num_nodes), np.int32)
    for src, _ in stream:
        _count_entries(src, deg)
    return deg


@numba.njit(cache=True)
def block_weights(adj, ew, a, b, part, conn, touched):
    """Add the edge weight from the entries ``a .. b - 1`` (neighbours ``adj[a:b]``, weights
    ``ew[a:b]``; an empty ``ew`` weighs 1) to each neighbouring block into ``conn`` (all zeros
    before; the caller clears the ``nt`` entries listed in ``touched[:nt]``); returns ``nt``."""
    nt = 0
    for e in range(a, b):
        q = part[adj[e]]
        if conn[q] == 0:
            touched[nt] = q
            nt += 1
        conn[q] += ew[e] if ew.size else 1
    return nt


@numba.njit(cache=True)
def penalties(size, k, alpha, gamma):
    """Fennel's balance penalty per block (kept up to date by :func:`greedy_place`)."""
    pen = np.empty(k, np.float64)
    for q in range(k):
        pen[q] = alpha * gamma * size[q] ** (gamma - 1.0)
    return pen


@numba.njit(cache=True)
def greedy_place(v, a, b, dst, part, size, k, cap, mode, alpha, gamma, conn, touched, pen, qs):
    """Place vertex ``v`` (adjacency ``dst[a:b]``) by LDG (mode 0) or Fennel (mode 1)."""
    for e in range(a, b):  # gather first: the random loads overlap
        qs[e - a] = part[dst[e]]
    nt = 0
    for i in range(b - a):
        q = qs[i]
        if q < 0:
            continue
        if conn[q] == 0:
            touched[nt] = q
            nt += 1
        conn[q] += 1
    best = -1
    bests = -1e300
    for q in range(k):
        if size[q] + 1 > cap:
            continue
        c = conn[q]
        if mode == 0:
            s = c * (1.0 - size[q] / cap)
        else:
            s = c - pen[q]
        if s > bests or (s == bests and size[q] < size[best]):
            bests = s
            best = q
    for t in range(nt):
        conn[touched[t]] = 0
    part[v] = best
    size[best] += 1
    pen[best] = alpha * gamma * size[best] ** (gamma - 1.0)


@numba.njit(cache=True)
def place_unseen(part, size, k):
    for v in range(part.size):
        if part[v] < 0:
            lb = 0
            for q in range(k):
                if size[q] < size[lb]:
                    lb = q
            part[v] = lb
            size[lb] += 1
