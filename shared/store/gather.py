"""Copy feature rows of mapped parts into a batch's array: one compiled pass per part, no temporary.

The loader's gather (rows of held parts into the batch that goes on the wire), the halo server's
replies and the out-of-core row cache's build all copy rows this way.  With a thread pool (parts
served from disk) the rows are split into slices whose page faults are in flight at once.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

__all__ = ["gather_feature_rows", "IO_THREADS"]

_AS_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
IO_THREADS = 32
"""Threads a loader whose parts are out of core reads map rows with (they wait on the disk, not the CPU)."""


@njit(nogil=True, cache=True)
def _gather_part(src, rows, dst, out):
    f, fs = out.shape[1], min(src.shape[1], out.shape[1])
    for i in range(rows.shape[0]):
        r, d = rows[i], dst[i]
        for j in range(fs):                 # an element loop compiles to a vectorised row copy
            out[d, j] = src[r, j]
        for j in range(fs, f):              # a narrower node type's row: zero beyond its width
            out[d, j] = 0


def gather_feature_rows(feats, parts: np.ndarray, rows: np.ndarray, dst: np.ndarray, out: np.ndarray,
                        pool: ThreadPoolExecutor | None = None) -> None:
    """``out[dst[i]] = feats[parts[i]][rows[i]]`` for every i: grouped by part (one radix sort),
    then one compiled pass per part straight into ``out`` (no temporary).  Rows are copied as
    unsigned integers of the dtype's width, so every dtype (float16 included) takes the same kernel.

    One thread: a host runs several loader replicas, which are the parallelism (a ``prange``
    version was 2-20x slower than this one on a loaded 2-core machine, bench/gather.py).  With
    ``pool`` (parts served from disk) each part's rows are split into slices copied by the pool's
    threads: the kernel releases the GIL, so their page faults are in flight at once (random 4 KiB
    reads of a cold map: 10k rows/s on one thread, 81k on 16, 134k on 32 here).

    Shapes: feats: key -> float[n_k, F_k <= F] (a dict or list; a key is a part, or a part and node
    type: :mod:`shared.store.features`; a narrower array's rows are zero-padded); parts (the keys),
    rows, dst int64[m]; out float[N, F].
    """
    m = parts.shape[0]
    if m == 0:
        return
    as_int = _AS_UINT[out.itemsize]
    o = out.view(as_int)
    first = parts[0]
    if (parts == first).all():
        groups = [(int(first), rows, dst)]
    else:
        order = np.argsort(parts.astype(np.int16 if parts.max() < 1 << 15 else np.int32), kind="stable")
        ps = parts[order]
        cut = np.flatnonzero(np.diff(ps)) + 1
        groups = [(int(ps[lo]), rows[order[lo:hi]], dst[order[lo:hi]])
                  for lo, hi in zip(np.concatenate([[0], cut]).tolist(), np.concatenate([cut, [m]]).tolist())]
    if pool is None:
        for p, r, d in groups:
            _gather_part(feats[p].view(as_int), r, d, o)
        return
    slices = max(1, 2 * IO_THREADS // len(groups))
    jobs = [pool.submit(_gather_part, feats[p].view(as_int), r[a:b], d[a:b], o)
            for p, r, d in groups for a, b in _bounds(r.shape[0], slices)]
    for j in jobs:
        j.result()


def _bounds(m: int, k: int) -> list[tuple[int, int]]:
    """At most ``k`` contiguous [a, b) slices of ``range(m)``, of 64 rows or more."""
    edges = np.linspace(0, m, min(k, max(1, m // 64)) + 1).astype(np.int64).tolist()
    return [(a, b) for a, b in zip(edges[:-1], edges[1:]) if b > a]
