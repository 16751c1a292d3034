"""Numba utilities shared by the partitioner's kernels: a seeded xorshift RNG, an
indexed binary max-heap and an atomic add.

Why this module exists: the multilevel partitioner, GREM's streaming kernels, the cluster-graph
coarsening and the one-pass baselines all draw random numbers from the same ``uint64[1]`` state
(so one seed reproduces a whole run) and FM in both forms needs a max-heap with a position
index (gains change while a vertex sits in the heap).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["atomic_add", "cluster_sizes", "xorshift", "rand_below", "permutation", "visit_order", "rng_state", "heap_push_or_update",
           "heap_pop", "compact_labels"]


@intrinsic
def atomic_add(typingctx, arr, idx, val):
    """``arr[idx] += val`` as one atomic instruction (``lock xadd``); returns the old value.
    For counters that several threads of a ``prange`` update (numba has no CPU atomics)."""
    if not (isinstance(arr, types.Array) and isinstance(arr.dtype, types.Integer)
            and isinstance(idx, types.Integer) and isinstance(val, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        aryty = sig.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        i = context.cast(builder, args[1], sig.args[1], types.intp)
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [i], wraparound=False)
        v = context.cast(builder, args[2], sig.args[2], aryty.dtype)
        return builder.atomic_rmw("add", ptr, v, "monotonic")

    return arr.dtype(arr, idx, val), codegen


@numba.njit(cache=True)
def xorshift(state):
    x = state[0]
    x ^= (x << np.uint64(13)) & np.uint64(0xFFFFFFFFFFFFFFFF)
    x ^= x >> np.uint64(7)
    x ^= (x << np.uint64(17)) & np.uint64(0xFFFFFFFFFFFFFFFF)
    state[0] = x
    return x


@numba.njit(cache=True)
def rand_below(state, n):
    return np.int64(xorshift(state) % np.uint64(n))


@numba.njit(cache=True)
def permutation(n, state):
    p = np.arange(n)
    for i in range(n - 1, 0, -1):
        j = rand_below(state, i + 1)
        t = p[i]
        p[i] = p[j]
        p[j] = t
    return p


# vertex counts from which the in-memory kernels visit vertices in a cache-friendly order
LOCAL_ORDER_MIN = 1 << 17
LOCAL_ORDER_BLOCK = 512


@numba.njit(cache=True)
def visit_order(n, state):
    """A random visiting order of ``0 .. n - 1`` for a pass of label propagation or FM.

    Below :data:`LOCAL_ORDER_MIN` vertices a uniform permutation.  Above it, blocks of
    :data:`LOCAL_ORDER_BLOCK` consecutive ids in random order, each block in id order: on a
    graph of millions of vertices a uniform order makes every visit a cache miss on the CSR
    (a 3M-vertex road-like graph: 5 s per LP round against ~1 s), and the ids within a block
    are still visited in a random position of the pass."""
    if n < LOCAL_ORDER_MIN:
        return permutation(n, state)
    nb = (n + LOCAL_ORDER_BLOCK - 1) // LOCAL_ORDER_BLOCK
    bo = permutation(nb, state)
    out = np.empty(n, np.int64)
    i = 0
    for t in range(nb):
        a = bo[t] * LOCAL_ORDER_BLOCK
        for v in range(a, min(a + LOCAL_ORDER_BLOCK, n)):
            out[i] = v
            i += 1
    return out


def rng_state(seed: int) -> np.ndarray:
    """The generator state (uint64[1], never 0) the kernels draw from for ``seed``: one seed
    reproduces a whole run."""
    s = (int(seed) * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & 0xFFFFFFFFFFFFFFFF
    return np.array([s or 1], dtype=np.uint64)


@numba.njit(cache=True)
def _heap_swap(hv, hk, pos, a, b):
    """Swap heap slots ``a`` and ``b`` and keep the position index up to date."""
    hv[a], hv[b] = hv[b], hv[a]
    hk[a], hk[b] = hk[b], hk[a]
    pos[hv[a]] = a
    pos[hv[b]] = b


@numba.njit(cache=True)
def _heap_up(hv, hk, pos, i):
    while i > 0:
        p = (i - 1) >> 1
        if hk[p] >= hk[i]:
            break
        _heap_swap(hv, hk, pos, p, i)
        i = p


@numba.njit(cache=True)
def _heap_down(hv, hk, pos, i, size):
    while True:
        l = 2 * i + 1
        if l >= size:
            break
        c = l
        if l + 1 < size and hk[l + 1] > hk[l]:
            c = l + 1
        if hk[i] >= hk[c]:
            break
        _heap_swap(hv, hk, pos, c, i)
        i = c


@numba.njit(cache=True)
def heap_push_or_update(hv, hk, pos, size, v, key):
    i = pos[v]
    if i < 0:
        hv[size] = v
        hk[size] = key
        pos[v] = size
        _heap_up(hv, hk, pos, size)
        return size + 1
    old = hk[i]
    hk[i] = key
    if key > old:
        _heap_up(hv, hk, pos, i)
    else:
        _heap_down(hv, hk, pos, i, size)
    return size


@numba.njit(cache=True)
def heap_pop(hv, hk, pos, size):
    v = hv[0]
    pos[v] = -1
    size -= 1
    if size > 0:
        hv[0] = hv[size]
        hk[0] = hk[size]
        pos[hv[0]] = 0
        _heap_down(hv, hk, pos, 0, size)
    return v, size


@numba.njit(cache=True)
def compact_labels(label, cmap):
    """Renumber the labels ``0 .. nc - 1`` in order of first appearance: ``cmap[v]`` becomes the
    new id of ``label[v]`` (labels are ``< label.size``; ``cmap``'s dtype is the ids').  Returns
    ``nc``."""
    n = label.size
    mapping = np.full(n, -1, cmap.dtype)
    nc = 0
    for v in range(n):
        c = label[v]
        if mapping[c] < 0:
            mapping[c] = nc
            nc += 1
        cmap[v] = mapping[c]
    return nc


@numba.njit(cache=True)
def _count_ids(ids, out):
    for i in range(ids.size):
        out[ids[i]] += 1


def cluster_sizes(cmap: np.ndarray, nc: int) -> np.ndarray:
    """Vertices per cluster, int64 ``(nc,)``: ``np.bincount(cmap, minlength=nc)`` without its n-long
    int64 copy of an int32 ``cmap`` and the ``astype`` copy after it (123 MB + 40 MB on the 20M-edge
    road-like graph's 15.4M vertices, at the moment its level-1 cluster graph is built: the run's
    peak)."""
    out = np.zeros(nc, np.int64)
    _count_ids(cmap, out)
    return out
