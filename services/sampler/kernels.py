"""Numba kernels for uniform multi-hop neighbour sampling over the parts a sampler holds.

The graph arrives as one CSR per partition (``typed.List``; parts this process does not hold are
empty placeholders) plus the global ``assignment`` / ``local_index`` maps, so a sampler never
stitches a global CSR in memory.  A batch is sampled one hop at a time: a vertex of a part held
elsewhere is added with degree ``-1``; between hops the caller fetches those rows from their
owners in one request per owner (the halo) into a flat ``halo`` buffer and fills in degree and
offset, then the next hop reads them from there.  The random draws depend only on the degrees, so
a batch is identical whether its rows were local or fetched.

De-duplication of sampled vertices uses an O(n) slot array instead of a hash map:
``slot[v] >> 32 == tick`` means ``v`` is already in this batch at local position
``slot[v] & 0xFFFFFFFF``.  Randomness is an inline xorshift64* generator (seeded per batch), which
is several times cheaper per draw than ``np.random`` inside numba.
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["seed_nodes", "sample_hop", "init_state"]

_MASK32 = np.int64(0xFFFFFFFF)


def init_state(rng_seed: int) -> np.ndarray:
    """The generator state of one batch (uint64[1])."""
    return np.array([((rng_seed & 0x7FFFFFFFFFFFFFFF) * 0x9E3779B97F4A7C15 + 1) & 0xFFFFFFFFFFFFFFFF], np.uint64)


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
def seed_nodes(seeds, part_indptr, assignment, local_index, held, slot, tick, nodes, degrees, npart, nstart):
    """Put the distinct ``seeds`` first; a seed of a part not held gets degree -1 (to fetch)."""
    tag = np.int64(tick) << 32
    for i in range(seeds.shape[0]):
        v = seeds[i]
        slot[v] = tag | i
        p = assignment[v]
        nodes[i] = v
        npart[i] = p
        if held[p]:
            ip = part_indptr[p]
            r = local_index[v]
            nstart[i] = ip[r]
            degrees[i] = ip[r + 1] - ip[r]
        else:
            nstart[i] = -1
            degrees[i] = -1
    return seeds.shape[0]


@njit(cache=True)
def sample_hop(f, count, ecount, nodes, degrees, npart, nstart, esrc, edst, chosen, part_indptr, part_indices,
               halo, assignment, local_index, held, served, slot, tick, state):
    """Sample up to ``f`` neighbours (``-1``: all) of every node so far, appending new nodes.

    Rows of nodes of held parts are read from ``part_indices``, the others from ``halo`` at
    ``nstart``.  Returns the (possibly grown) arrays, the new counts and the remote neighbour count.
    """
    tag = np.int64(tick) << 32
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
    remote = 0
    for j in range(ndst):
        nbr = part_indices[npart[j]] if held[npart[j]] else halo
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
                nodes[count] = u
                npart[count] = pu
                if held[pu]:
                    ip = part_indptr[pu]
                    ru = local_index[u]
                    nstart[count] = ip[ru]
                    degrees[count] = ip[ru + 1] - ip[ru]
                else:
                    nstart[count] = -1
                    degrees[count] = -1
                count += 1
            esrc[ecount] = lu
            edst[ecount] = j
            ecount += 1
    return nodes, degrees, npart, nstart, esrc, edst, chosen, count, ecount, remote
