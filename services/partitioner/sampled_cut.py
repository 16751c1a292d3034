"""A partition's cut in stream entries, counted on every chunk or estimated from 8 evenly spaced
chunks of a long seekable stream: what GREM's greedy (Fennel) start is judged by, early and at the
end (:func:`grem.grem_partition`), without a full pass when the estimate already decides.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numba
import numpy as np

from .placement import count_cut, stream_cut
from .stream import read_groups
from .threads import map_chunks

__all__ = ["estimated_cut", "sampled_shares", "count_two_cuts", "greedy_cut",
           "sampled_degree_skew", "FENNEL_MIN_DEGREE_SKEW"]


FENNEL_MIN_DEGREE_SKEW = 2.0
"""GREM runs its one-pass Fennel start only on a graph whose degrees are at least this skewed
(:func:`sampled_degree_skew`, ``E[d^2] / E[d]^2``).  Fennel's start won only on power-law graphs
(R-MAT 20M: 41.8, soc-slashdot 12.2, Chung-Lu 691; never on the flat families: road-like 1.12,
geometric, planted, skewed SBM and near-regular 1.03-1.05, road-ny 1.13), and it is a third of
the first clustering pass on the flat ones (20M road-like, one thread: 13.6 s -> 7.9 s without
it, same cut).  The small real graphs (Cora 2.8, Citeseer 2.5, Pubmed 3.7) keep it."""


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


def sampled_shares(stream, gpart, cmap, max_entries: Optional[int] = None
                   ) -> Tuple[float, float, Optional[int]]:
    """Shares of the stream's entries cut by ``gpart`` and lying between clusters of ``cmap``:
    from 8 evenly spaced chunks of a long seekable stream, from every chunk else (and then
    ``gpart``'s exact cut in entries as the third value, else None).  ``max_entries``: count
    at most about this many, the head of each sampled chunk (a share that only has to be told
    from a threshold far from it: 8 of the 20M road-like graph's 2M-entry chunks are 0.4 of its
    entries)."""
    nch = stream.num_chunks
    sampled = stream.seekable and (nch >= 16 or max_entries is not None)
    if stream.seekable:  # chunks on the worker threads (a full pass on a short stream)
        idx = np.unique(np.linspace(0, nch - 1, 8).astype(np.int64)) if sampled else range(nch)
        head = None if max_entries is None else max(1, int(max_entries) // len(idx))

        def count(i):
            src, dst = stream.read_chunk(int(i))
            return count_two_cuts(src[:head], dst[:head], gpart, cmap)
        counts = map_chunks(count, idx)
    else:
        counts = (count_two_cuts(src, dst, gpart, cmap) for src, dst in stream)
    c, q, e = 0, 0, 0
    for ci, qi, ei in counts:
        c += int(ci)
        q += int(qi)
        e += int(ei)
    return c / max(e, 1), q / max(e, 1), (None if sampled else c)


def sampled_degree_skew(stream) -> Optional[float]:
    """``E[d^2] / E[d]^2`` of the degrees of the vertices in 8 evenly spaced chunks of a grouped,
    seekable stream (1 when every degree is equal, ``1 + CV^2`` in general; the chunks are read,
    not the whole stream), or None where chunks cannot be read so (then nothing is skipped)."""
    nch = stream.num_chunks
    if not (stream.grouped and stream.seekable) or nch < 1:
        return None
    s1, s2 = 0.0, 0.0
    cnt = 0
    for i in np.unique(np.linspace(0, nch - 1, 8).astype(np.int64)):
        _, _, starts = read_groups(stream, int(i))
        d = np.diff(starts).astype(np.float64)
        s1 += float(d.sum())
        s2 += float(np.dot(d, d))
        cnt += d.size
    if cnt == 0 or s1 == 0:
        return None
    return s2 * cnt / (s1 * s1)


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
