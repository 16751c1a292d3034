"""Numba kernel for uniform multi-hop neighbour sampling over a partitioned CSR.

The graph arrives as one CSR per partition (``typed.List`` of memory-mapped arrays) plus the
global ``assignment`` / ``local_index`` maps, so a sampler never stitches a global CSR in memory.
De-duplication of sampled vertices uses an O(n) slot array instead of a hash map:
``slot[v] >> 32 == tick`` means ``v`` is already in this batch at local position
``slot[v] & 0xFFFFFFFF``.  Randomness is an inline xorshift64* generator (seeded per batch), which
is several times cheaper per draw than ``np.random`` inside numba.
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["sample_blocks"]

_MASK32 = np.int64(0xFFFFFFFF)


@njit(cache=True, inline="always")
def _next(state):
    x = state[0]
    x ^= x >> np.uint64(12)
    x ^= x << np.uint64(25)
    x ^= x >> np.uint64(27)
    state[0] = x
    return (x * np.uint64(0x2545F4914F6CDD1D)) >> np.uint64(32)   # 32 random bits


@njit(cache=True)
def _grow(a, need):
    if need <= a.shape[0]:
        return a
    b = np.empty(max(need, 2 * a.shape[0]), a.dtype)
    b[:a.shape[0]] = a
    return b


@njit(cache=True)
def sample_blocks(seeds, fanouts, part_indptr, part_indices, assignment, local_index, served,
                  slot, tick, rng_seed):
    """Sample ``len(fanouts)`` hops around ``seeds``.

    Args:
        seeds: int64[B] distinct global ids.
        fanouts: int64[H]; ``-1`` takes every neighbour.
        part_indptr, part_indices: typed lists, one CSR per partition (neighbours are global ids).
        assignment: int32[n] part of every vertex; local_index: int[n] its row in that part.
        served: bool[k] partitions this sampler serves (neighbours elsewhere count as remote).
        slot: int64[n] scratch owned by the caller, reused across batches (never shrunk).
        tick: a positive value not used before as a stamp (< 2**31).  rng_seed: makes the sample deterministic.
    Returns:
        nodes int64[N], hop_nodes int64[H+1], degrees int32[N], edge_src int32[E],
        edge_dst int32[E], hop_edges int64[H+1], remote neighbour count.
    """
    state = np.empty(1, np.uint64)
    state[0] = np.uint64(rng_seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(1)
    H = fanouts.shape[0]
    B = seeds.shape[0]
    cap = max(B * 4, 16)
    nodes = np.empty(cap, np.int64)
    degrees = np.empty(cap, np.int32)
    npart = np.empty(cap, np.int32)      # part of each node, and its row start in that part's CSR
    nstart = np.empty(cap, np.int64)
    esrc = np.empty(max(B * 8, 16), np.int32)
    edst = np.empty(esrc.shape[0], np.int32)
    hop_nodes = np.zeros(H + 1, np.int64)
    hop_edges = np.zeros(H + 1, np.int64)
    tag = np.int64(tick) << 32
    remote = 0
    count = 0
    for i in range(B):
        v = seeds[i]
        slot[v] = tag | count
        p = assignment[v]
        ip = part_indptr[p]
        r = local_index[v]
        nodes[count] = v
        npart[count] = p
        nstart[count] = ip[r]
        degrees[count] = ip[r + 1] - ip[r]
        count += 1
    hop_nodes[0] = count
    ecount = 0
    chosen = np.empty(64, np.int64)
    for h in range(H):
        f = fanouts[h]
        ndst = count
        need = 0                                   # exact number of edges this hop samples
        for j in range(ndst):
            d = degrees[j]
            need += d if (f < 0 or d <= f) else f
        if ecount + need > esrc.shape[0]:
            esrc = _grow(esrc, ecount + need)
            edst = _grow(edst, ecount + need)
        if count + need > nodes.shape[0]:
            nodes = _grow(nodes, count + need)
            degrees = _grow(degrees, count + need)
            npart = _grow(npart, count + need)
            nstart = _grow(nstart, count + need)
        if f > chosen.shape[0]:
            chosen = np.empty(f, np.int64)
        for j in range(ndst):
            nbr = part_indices[npart[j]]
            start = nstart[j]
            d = degrees[j]
            take_all = f < 0 or d <= f
            k = d if take_all else f
            if not take_all:
                # Floyd's algorithm: f distinct offsets out of d
                for t in range(f):
                    m = d - f + t + 1
                    cand = np.int64((_next(state) * np.uint64(m)) >> np.uint64(32))
                    dup = False
                    for q in range(t):
                        if chosen[q] == cand:
                            dup = True
                            break
                    chosen[t] = (m - 1) if dup else cand
            for t in range(k):
                off = t if take_all else chosen[t]
                u = nbr[start + off]
                s = slot[u]
                if (s >> 32) == tick:
                    lu = s & _MASK32
                    if not served[npart[lu]]:
                        remote += 1
                else:
                    pu = assignment[u]
                    if not served[pu]:
                        remote += 1
                    lu = count
                    slot[u] = tag | count
                    ip = part_indptr[pu]
                    ru = local_index[u]
                    nodes[count] = u
                    npart[count] = pu
                    nstart[count] = ip[ru]
                    degrees[count] = ip[ru + 1] - ip[ru]
                    count += 1
                esrc[ecount] = lu
                edst[ecount] = j
                ecount += 1
        hop_nodes[h + 1] = count
        hop_edges[h + 1] = ecount
    return (nodes[:count].copy(), hop_nodes, degrees[:count].copy(), esrc[:ecount].copy(),
            edst[:ecount].copy(), hop_edges, remote)
