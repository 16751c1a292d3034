"""A partition's cut in stream entries, counted on every chunk or estimated from 8 evenly spaced
chunks of a long seekable stream: what GREM's greedy (Fennel) start is judged by, early and at the
end (:func:`grem.grem_partition`), without a full pass when the estimate already decides.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numba
import numpy as np

from .placement import count_cut, stream_cut
from .threads import map_chunks

__all__ = ["estimated_cut", "sampled_shares", "count_two_cuts", "greedy_cut"]


def estimated_cut(stream, gpart, share: Optional[float] = None,
                     exact: Optional[int] = None) -> float:
    """Cut entries of ``gpart``: exact on short streams, from 8 evenly spaced chunks else
    (``share`` / ``exact``: that sample's cut share / the exact cut, if already counted by
    :func:`sampled_shares`)."""
    nch = stream.num_chunks
    if exact is not None:
        return float(exact)
    if share is not None and stream.seekable and nch >= 16 and stream.stream_entries > 0:
        return share * stream.stream_entries
    if not (stream.seekable and nch >= 16 and stream.stream_entries > 0):
        return float(stream_cut(stream, gpart))
    idx = np.unique(np.linspace(0, nch - 1, 8).astype(np.int64))
    c, e = 0, 0
    for src, dst, _ in stream.iter_groups(idx):
        c += int(count_cut(src, dst, gpart))
        e += src.size
    return c * stream.stream_entries / max(e, 1)


def sampled_shares(stream, gpart, cmap) -> Tuple[float, float, Optional[int]]:
    """Shares of the stream's entries cut by ``gpart`` and lying between clusters of ``cmap``:
    from 8 evenly spaced chunks of a long seekable stream, from every chunk else (and then
    ``gpart``'s exact cut in entries as the third value, else None)."""
    nch = stream.num_chunks
    sampled = stream.seekable and nch >= 16
    if stream.seekable:  # chunks on the worker threads (a full pass on a short stream)
        idx = np.unique(np.linspace(0, nch - 1, 8).astype(np.int64)) if sampled else range(nch)
        counts = map_chunks(lambda i: count_two_cuts(*stream.read_chunk(int(i)), gpart, cmap),
                            idx)
    else:
        counts = (count_two_cuts(src, dst, gpart, cmap) for src, dst in stream)
    c, q, e = 0, 0, 0
    for ci, qi, ei in counts:
        c += int(ci)
        q += int(qi)
        e += int(ei)
    return c / max(e, 1), q / max(e, 1), (None if sampled else c)


@numba.njit(cache=True, nogil=True)
def count_two_cuts(src, dst, a, b):
    """Entries ``(u, v)`` of a chunk with ``a[u] != a[v]``, with ``b[u] != b[v]``, and all."""
    ca = 0
    cb = 0
    for i in range(src.size):
        u = src[i]
        v = dst[i]
        if a[u] != a[v]:
            ca += 1
        if b[u] != b[v]:
            cb += 1
    return ca, cb, src.size


def greedy_cut(stream, gpart, best_cut, share: Optional[float] = None,
                exact: Optional[int] = None):
    """Cut (entries) of the one-pass greedy partition, or a sampled estimate when that is
    clearly worse than ``best_cut``.

    Eight evenly spaced chunks of a long seekable stream estimate the cut; only if the
    estimate comes within 25 % of ``best_cut`` is the exact cut counted (a full pass).

    Returns:
        tuple: ``(cut entries, estimated)``.
    """
    nch = stream.num_chunks
    if exact is not None:  # counted on every chunk by sampled_shares
        return int(exact), False
    if stream.seekable and nch >= 16 and best_cut is not None and stream.stream_entries > 0:
        if share is not None:  # the same 8 chunks, already counted (sampled_shares)
            est = share * stream.stream_entries
            return (int(est), True) if est > 1.25 * best_cut else (stream_cut(stream, gpart),
                                                                    False)
        idx = np.unique(np.linspace(0, nch - 1, 8).astype(np.int64))
        c, e = 0, 0
        for src, dst, _ in stream.iter_groups(idx):
            c += int(count_cut(src, dst, gpart))
            e += src.size
        est = c * stream.stream_entries / max(e, 1)
        if est > 1.25 * best_cut:
            return int(est), True
    return stream_cut(stream, gpart), False
