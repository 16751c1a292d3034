"""Numba kernels for uniform multi-hop neighbour sampling over the parts a sampler holds.

The graph arrives as one CSR per partition plus the global ``assignment`` / ``local_index`` maps,
so a sampler never stitches a global CSR in memory.  The kernels reach part ``p``'s arrays through
their addresses (:class:`PartTable`: ``ptr_addr[p]``, ``ind_addr[p]``; 0 for parts held elsewhere)
rather than through a ``typed.List``: a typed list costs a call and a reference count per access
(~35 ns), once per sampled vertex, which dominated on low-degree graphs (road networks: ~2.5
sampled edges per sampled vertex).  The table holds the arrays, so they live as long as it does.
For the same reason the hot loop calls no helper with array arguments (each call would incref and
decref them): new vertices are located in one pass after each hop (:func:`_locate`).

A batch is sampled one hop at a time: a vertex of a part held elsewhere is added with degree
``-1``; between hops the caller fetches those rows from their owners in one request per owner
(the halo) into a flat ``halo`` buffer and fills in degree and offset, then the next hop reads them
from there.  The random draws depend only on the degrees, so a batch is identical whether its rows
were local or fetched.

De-duplication of sampled vertices uses an O(n) slot array instead of a hash map:
``slot[v] >> 32 == tick`` means ``v`` is already in this batch at local position
``slot[v] & 0xFFFFFFFF``.  Randomness is an inline xorshift64* generator (seeded per batch), which
is several times cheaper per draw than ``np.random`` inside numba.
"""
from __future__ import annotations

import numpy as np
from numba import carray, njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from argosy.shared.intrinsics import prefetch as _prefetch

__all__ = ["PartTable", "seed_nodes", "sample_hop", "sample_hop_typed", "init_state", "gather_weights"]

_MASK32 = np.int64(0xFFFFFFFF)


class PartTable:
    """The held parts' CSR arrays and their addresses, as the kernels read them.

    Args:
        indptr: one int64 array per part (an empty or placeholder one for parts not held).
        indices: one array per part, all of one integer dtype (placeholders included).
        held: bool[k], the parts whose arrays are real.
    Raises:
        ValueError: an array of a held part that is not C-contiguous, an indptr that is not int64,
            or indices of mixed dtypes (the kernels read raw memory as one layout).
    """

    def __init__(self, indptr: list[np.ndarray], indices: list[np.ndarray], held: np.ndarray):
        if len(indptr) != len(indices) or len(indptr) != held.shape[0]:
            raise ValueError(f"expected one indptr and one indices array per part ({held.shape[0]} parts), "
                             f"got {len(indptr)} and {len(indices)}")
        dtypes = {np.dtype(a.dtype) for a in indices}
        if len(dtypes) != 1 or not all(np.issubdtype(d, np.integer) for d in dtypes):
            raise ValueError(f"indices of all parts must share one integer dtype (got {sorted(map(str, dtypes))})")
        self.dtype = dtypes.pop()
        self.indptr, self.indices = list(indptr), list(indices)     # keep the memory alive
        self.ptr_addr = np.zeros(len(indptr), np.int64)
        self.ind_addr = np.zeros(len(indptr), np.int64)
        for p in np.flatnonzero(held):
            ip, ind = indptr[p], indices[p]
            if ip.dtype != np.int64 or not ip.flags.c_contiguous or not ind.flags.c_contiguous:
                raise ValueError(f"part {p}: expected a C-contiguous int64 indptr and C-contiguous indices "
                                 f"(got {ip.dtype}, contiguous {ip.flags.c_contiguous} / {ind.flags.c_contiguous})")
            self.ptr_addr[p] = ip.ctypes.data
            self.ind_addr[p] = ind.ctypes.data if ind.size else 0


def init_state(rng_seed: int) -> np.ndarray:
    """The generator state of one batch (uint64[1])."""
    return np.array([((rng_seed & 0x7FFFFFFFFFFFFFFF) * 0x9E3779B97F4A7C15 + 1) & 0xFFFFFFFFFFFFFFFF], np.uint64)


@intrinsic
def _voidptr(typingctx, addr):
    """An int64 address as a ``void*`` (for ``numba.carray``)."""
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], cgutils.voidptr_t)
    return types.voidptr(types.int64), codegen


_AHEAD = 8
"""Destinations :func:`gather_weights` prefetches ahead (a row's weights are one or two cache
misses and a destination's few edges leave the out-of-order window too short to overlap them)."""


@njit(cache=True, inline="always")
def _step(x):
    """One xorshift64 step; ``(x * 0x2545F4914F6CDD1D) >> 32`` of the new state is the draw."""
    x ^= x >> np.uint64(12)
    x ^= x << np.uint64(25)
    x ^= x >> np.uint64(27)
    return x


@njit(cache=True)
def _grow(a, need):
    if need <= a.shape[0]:
        return a
    b = np.empty(max(need, 2 * a.shape[0]), a.dtype)
    b[:a.shape[0]] = a
    return b


@njit(cache=True)
def _locate(lo, hi, ptr_addr, assignment, local_index, nodes, degrees, npart, nstart):
    """Part, row start and degree of nodes[lo:hi]; -1 (to fetch) for rows of parts held elsewhere.

    One pass after the nodes are known rather than a call per new node: a numba call with array
    arguments costs reference counting, and independent iterations overlap their cache misses.
    """
    for i in range(lo, hi):
        v = nodes[i]
        p = assignment[v]
        npart[i] = p
        a = ptr_addr[p]
        if a != 0:
            r = np.int64(local_index[v])
            ip = carray(_voidptr(a), r + 2, np.int64)
            nstart[i] = ip[r]
            degrees[i] = ip[r + 1] - ip[r]
        else:
            nstart[i] = -1
            degrees[i] = -1


@njit(cache=True)
def seed_nodes(seeds, ptr_addr, assignment, local_index, slot, tick, nodes, degrees, npart, nstart):
    """Put ``seeds`` first; a seed of a part not held gets degree -1 (to fetch).

    Returns the number of seeds, or -1 when a seed repeats (the caller de-duplicates and retries
    with a new ``tick``).
    """
    tag = np.int64(tick) << 32
    for i in range(seeds.shape[0]):
        v = seeds[i]
        if (slot[v] >> 32) == tick:
            return -1
        slot[v] = tag | i
        nodes[i] = v
    _locate(0, seeds.shape[0], ptr_addr, assignment, local_index, nodes, degrees, npart, nstart)
    return seeds.shape[0]


@njit(cache=True)
def sample_hop(f, count, ecount, nodes, degrees, npart, nstart, esrc, edst, ptr_addr, ind_addr,
               halo, assignment, local_index, served, slot, tick, state, epos, record):
    """Sample up to ``f`` neighbours (``-1``: all) of every node so far, appending new nodes.

    Rows of nodes of held parts are read at ``ind_addr[part]`` + ``nstart``, the others from
    ``halo`` at ``nstart``.  With ``record``, ``epos[e]`` is where sampled edge ``e``'s entry lies:
    its offset in its destination's part's ``indices`` (held part) or in ``halo`` (a fetched row),
    so per-edge data laid out like them (edge weights) is a plain gather (:func:`gather_weights`).
    Returns the (possibly grown) arrays, the new counts and the number of sampled neighbours of
    parts not ``served``.
    """
    tag = np.int64(tick) << 32
    ndst, e0 = count, ecount
    need = 0                                   # exact number of edges this hop samples
    for j in range(ndst):
        d = degrees[j]
        need += d if (f < 0 or d <= f) else f
    if ecount + need > esrc.shape[0]:
        esrc = _grow(esrc, ecount + need)
        edst = _grow(edst, ecount + need)
    if record and ecount + need > epos.shape[0]:
        epos = _grow(epos, ecount + need)
    if count + need > nodes.shape[0]:
        nodes = _grow(nodes, count + need)
        degrees = _grow(degrees, count + need)
        npart = _grow(npart, count + need)
        nstart = _grow(nstart, count + need)
    chosen = np.empty(max(f, 1), np.int64)
    halo_addr = np.int64(halo.ctypes.data)
    x = state[0]                               # the generator state stays in a register
    for j in range(ndst):
        start = nstart[j]
        d = np.int64(degrees[j])
        a = ind_addr[npart[j]]
        nbr = carray(_voidptr(a if a != 0 else halo_addr), start + d, halo.dtype)
        take_all = f < 0 or d <= f
        k = d if take_all else f
        if not take_all:
            # Floyd's algorithm: f distinct offsets out of d (the scan has no branch: it vectorises)
            for t in range(f):
                m = d - f + t + 1
                x = _step(x)
                cand = np.int64((((x * np.uint64(0x2545F4914F6CDD1D)) >> np.uint64(32)) * np.uint64(m)) >> np.uint64(32))
                dup = False
                for q in range(t):
                    dup |= chosen[q] == cand
                chosen[t] = (m - 1) if dup else cand
        for t in range(k):
            i = start + (t if take_all else chosen[t])
            u = nbr[i]
            if record:                         # one branch, the same for the whole batch
                epos[ecount] = i
            s = slot[u]
            new = (s >> 32) != tick
            lu = count if new else s & _MASK32
            slot[u] = tag | lu                 # no branch: one mispredicted per new vertex
            nodes[count] = u                   # would stall the loads of the next edges
            count += new
            esrc[ecount] = lu
            edst[ecount] = j
            ecount += 1
    state[0] = x
    _locate(ndst, count, ptr_addr, assignment, local_index, nodes, degrees, npart, nstart)
    remote = 0
    for e in range(e0, ecount):
        remote += not served[npart[esrc[e]]]
    return nodes, degrees, npart, nstart, esrc, edst, count, ecount, remote, epos


@njit(cache=True)
def gather_weights(epos, edst, npart, nstart, degrees, count, ind_addr, wt_addr, halo_w, out):
    """``out[e]``: the stored weight of sampled edge ``e``, read at the position :func:`sample_hop`
    recorded (``epos[e]``) in its destination's part's weights (``wt_addr``, laid out like that
    part's indices at ``ind_addr``) or, for a fetched row, in ``halo_w`` (aligned with ``halo``).
    ``count``: the batch's node count (destinations lie below it).  Values are read as ``halo_w``'s
    dtype (the parts' arrays have the same): float32 weights viewed as int32, or the store's int16 /
    int32 relations; ``out`` is int32."""
    last = -1
    w = halo_w
    hw_addr = np.int64(halo_w.ctypes.data)
    for e in range(out.shape[0]):
        j = edst[e]
        if j != last:                          # edges come grouped by destination: one lookup each
            last = j
            p = npart[j]
            w = halo_w if ind_addr[p] == 0 else carray(_voidptr(wt_addr[p]), nstart[j] + degrees[j], halo_w.dtype)
            k = j + _AHEAD
            if k < count and degrees[k] > 0:
                q = npart[k]
                _prefetch((wt_addr[q] if ind_addr[q] != 0 else hw_addr) + halo_w.itemsize * nstart[k])
        out[e] = w[epos[e]]


@njit(cache=True)
def sample_hop_typed(fr, count, ecount, nodes, degrees, npart, nstart, esrc, edst, ptr_addr, ind_addr, typ_addr,
                     halo, halo_t, assignment, local_index, served, slot, tick, state, epos):
    """:func:`sample_hop` with a fanout per relation: up to ``fr[r]`` neighbours (``-1``: all, ``0``:
    none) of every node through each relation ``r`` (DGL's and PyG's per-edge-type fanouts).

    A row's relations are read at ``typ_addr[part]`` (the store's ``edge_type`` as mapped, int16 or
    int32 like ``halo_t``, laid out like the part's indices) or in ``halo_t`` (aligned with ``halo``).  A row no longer than the smallest fanout is taken whole
    with no look at its relations.  A longer one is counted by relation (8-bit counters packed in
    one register when there are at most 8 relations), then taken whole if no relation is over its
    fanout; if it holds one relation only, Floyd's algorithm picks offsets into the row itself;
    otherwise one branchless pass puts the entries to take (relation within its fanout) in
    ``chosen`` and the first relation over its fanout's in ``bucket``, one more pass per further
    such relation collects its entries (counters in registers, no branch on the relation), and
    Floyd's algorithm picks ``fr[r]`` distinct ones of each (relations in id order: the same draws
    as a counting sort into buckets would give).  The picks depend only on the row (entries,
    relations, order) and the generator, so a fetched row gives the same batch.  A destination's
    edges stay together (the ones taken in row order, then each relation's picks), so ``dst_ptr``
    is their counts.

    Most of the time is memory latency (mag_like: a row scanned per destination, two to three
    times the entries that are sampled, and a slot, a part and a row offset per new node), so the
    kernel asks for lines ahead: the rows ``ROWS_AHEAD`` destinations on (up to 4 lines of their
    relations); the sampled entries, buffered ``FLUSH`` edges at a time as addresses, the entry
    ``2 * SLOTS_AHEAD`` on and the de-duplication slot of the neighbour ``SLOTS_AHEAD`` on while this
    one is resolved; and, locating the new nodes as :func:`_locate` does, their part and local
    index, then their row offsets.  ``epos`` is always recorded (the caller gathers each edge's
    relation from it).
    """
    ROWS_AHEAD, SLOTS_AHEAD, NODES_AHEAD, FLUSH = 8, 32, 16, 1024
    R = fr.shape[0]
    tag = np.int64(tick) << 32
    ndst, e0 = count, ecount
    fmin = np.int64(2**62)
    fsum = np.int64(0)
    for r in range(R):
        if fr[r] >= 0:
            fmin = min(fmin, fr[r])
            if fsum >= 0:
                fsum += fr[r]
        else:
            fsum = -1
    need = 0                                   # an upper bound: min(d, sum of the fanouts)
    dmax = 0
    for j in range(ndst):
        d = np.int64(degrees[j])
        dmax = max(dmax, d)
        need += d if (fsum < 0 or d <= fsum) else fsum
    if ecount + need > esrc.shape[0]:
        esrc = _grow(esrc, ecount + need)
        edst = _grow(edst, ecount + need)
    if ecount + need > epos.shape[0]:
        epos = _grow(epos, ecount + need)
    if count + need > nodes.shape[0]:
        nodes = _grow(nodes, count + need)
        degrees = _grow(degrees, count + need)
        npart = _grow(npart, count + need)
        nstart = _grow(nstart, count + need)
    packed = R <= 8
    cnt = np.zeros(R, np.int64)
    take = np.zeros(R, np.int64)               # 1: the row's entries of this relation are all taken
    overs = np.empty(R, np.int64)              # the row's relations over their (positive) fanout
    bucket = np.empty(max(dmax, 1), np.int64)
    chosen = np.empty(max(dmax, 1), np.int64)  # row offsets of the entries to emit
    ubuf = np.empty(FLUSH + max(dmax, 1), np.int64)
    halo_addr = np.int64(halo.ctypes.data)
    halo_t_addr = np.int64(halo_t.ctypes.data)
    tsz = halo_t.itemsize                      # the store's relation width (int16, or int32 past 32k relations)
    slot_addr = np.int64(slot.ctypes.data)
    isz = halo.itemsize
    x = state[0]
    nb = 0                                     # edges buffered (neighbour in ubuf, epos / edst written)
    for j in range(ndst):
        jn = j + ROWS_AHEAD
        if jn < ndst and degrees[jn] > 0:      # a row ahead: its first lines, one miss each
            pn = npart[jn]
            an = ind_addr[pn]
            _prefetch((an if an != 0 else halo_addr) + isz * nstart[jn])
            if degrees[jn] > fmin:             # its relations: up to 4 lines (256 B)
                tb = (typ_addr[pn] if an != 0 else halo_t_addr) + tsz * nstart[jn]
                for q in range(min((tsz * np.int64(degrees[jn]) + 63) >> 6, 4)):
                    _prefetch(tb + 64 * q)
        start = nstart[j]
        d = np.int64(degrees[j])
        a = ind_addr[npart[j]]
        base = a if a != 0 else halo_addr
        k = 0                                  # entries to emit: chosen[:k]
        whole = d <= fmin                      # every relation's share fits its fanout
        if not whole:
            ta = typ_addr[npart[j]]
            typ = carray(_voidptr((ta if a != 0 else halo_t_addr) + tsz * start), d, halo_t.dtype)
            for r in range(R):
                cnt[r] = 0
            if packed:                         # 8-bit counters in one register, 255 entries at a time
                for t0 in range(0, d, 255):
                    acc = np.uint64(0)
                    for v in typ[t0:min(t0 + 255, d)]:
                        acc += np.uint64(1) << (np.uint64(v) << np.uint64(3))
                    for r in range(R):
                        cnt[r] += np.int64((acc >> np.uint64(8 * r)) & np.uint64(0xFF))
            else:
                for v in typ:
                    cnt[v] += 1
            nover = 0
            present = 0
            only = 0
            takes_all = True
            for r in range(R):
                c, f = cnt[r], fr[r]
                if c > 0:
                    present += 1
                    only = r
                tk = f < 0 or c <= f
                take[r] = tk
                takes_all &= tk
                if not tk and f > 0:
                    overs[nover] = r
                    nover += 1
            if takes_all:
                whole = True
            elif present == 1:                 # one relation: Floyd's offsets are row offsets
                k = fr[only]
                for t in range(k):             # Floyd's algorithm: k distinct offsets out of d
                    m = d - k + t + 1
                    x = _step(x)
                    cand = np.int64((((x * np.uint64(0x2545F4914F6CDD1D)) >> np.uint64(32)) * np.uint64(m))
                                    >> np.uint64(32))
                    dup = False
                    for q in range(t):
                        dup |= chosen[q] == cand
                    chosen[t] = (m - 1) if dup else cand
            else:
                # entries to take -> chosen, the first relation over its fanout's -> bucket: one
                # branchless pass (counters in registers); one more per further relation over it
                r1 = overs[0] if nover > 0 else -1
                q = 0
                for t in range(d):
                    r = typ[t]
                    chosen[k] = t
                    bucket[q] = t
                    k += take[r]
                    q += r == r1
                for o in range(nover):
                    r = overs[o]
                    if o > 0:
                        q = 0
                        for t in range(d):
                            bucket[q] = t
                            q += typ[t] == r
                    f = fr[r]
                    for t in range(f):         # Floyd's algorithm: f distinct offsets out of q
                        m = q - f + t + 1
                        x = _step(x)
                        cand = np.int64((((x * np.uint64(0x2545F4914F6CDD1D)) >> np.uint64(32)) * np.uint64(m))
                                        >> np.uint64(32))
                        dup = False
                        for p in range(t):
                            dup |= chosen[k + p] == cand
                        chosen[k + t] = (m - 1) if dup else cand
                    for t in range(k, k + f):
                        chosen[t] = bucket[chosen[t]]
                    k += f
        if whole:
            for t in range(d):
                chosen[t] = t
            k = d
        for t in range(k):                     # buffered: the entry's address, read below
            i = start + chosen[t]
            ubuf[nb] = base + isz * i
            epos[ecount + nb] = i
            edst[ecount + nb] = j
            nb += 1
        if nb >= FLUSH or j == ndst - 1:      # de-duplicate the buffered neighbours
            for b in range(nb):
                if b + 2 * SLOTS_AHEAD < nb:   # the entry two strides on, its slot one stride on
                    _prefetch(ubuf[b + 2 * SLOTS_AHEAD])
                if b + SLOTS_AHEAD < nb:
                    _prefetch(slot_addr + 8 * np.int64(carray(_voidptr(ubuf[b + SLOTS_AHEAD]), 1, halo.dtype)[0]))
                u = np.uint64(carray(_voidptr(ubuf[b]), 1, halo.dtype)[0])
                s = slot[u]
                new = (s >> 32) != tick
                lu = count if new else s & _MASK32
                slot[u] = tag | lu
                nodes[count] = u
                count += new
                esrc[ecount] = lu
                ecount += 1
            nb = 0
    state[0] = x
    # :func:`_locate` of the new nodes, with the maps' lines and then the rows' offsets asked ahead
    as_addr, as_sz = np.int64(assignment.ctypes.data), assignment.itemsize
    li_addr, li_sz = np.int64(local_index.ctypes.data), local_index.itemsize
    for i in range(ndst, count):
        if i + 2 * NODES_AHEAD < count:
            v = nodes[i + 2 * NODES_AHEAD]
            _prefetch(as_addr + as_sz * v)
            _prefetch(li_addr + li_sz * v)
        if i + NODES_AHEAD < count:
            v = nodes[i + NODES_AHEAD]
            pa = ptr_addr[assignment[v]]
            if pa != 0:
                _prefetch(pa + 8 * np.int64(local_index[v]))
        v = nodes[i]
        p = assignment[v]
        npart[i] = p
        pa = ptr_addr[p]
        if pa != 0:
            r = np.int64(local_index[v])
            ip = carray(_voidptr(pa), r + 2, np.int64)
            nstart[i] = ip[r]
            degrees[i] = ip[r + 1] - ip[r]
        else:
            nstart[i] = -1
            degrees[i] = -1
    remote = 0
    every = True                               # every part served (one machine): no edge is remote
    for p in range(served.shape[0]):
        every &= served[p]
    if not every:
        for e in range(e0, ecount):
            remote += not served[npart[esrc[e]]]
    return nodes, degrees, npart, nstart, esrc, edst, count, ecount, remote, epos
