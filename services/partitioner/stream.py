"""Chunked edge streams for the streaming partitioners.

Why this module exists: GREM and the streaming baselines must partition graphs that do not fit
in memory as a CSR.  Everything they read goes through :func:`~.file_streams.open_edge_stream`, which yields the
graph as a sequence of ``(src, dst)`` edge chunks and never loads a big file whole.  The files
themselves are opened and validated by :mod:`argosy.shared.graphio` (the one input layer: format
detection, dtype/byte-order/memory-order handling, overflow-checked text parsing); this module
turns what it opens into chunk streams:

The interface (:class:`EdgeStream`) and the in-memory streams are here; the file streams and
:func:`open_edge_stream` are in :mod:`.file_streams`, the on-disk regrouping
(:class:`~.regroup.GroupedEdgeStream`) in :mod:`.regroup`.

* ``.npz`` CSR: ``indptr`` is read (O(n)); ``indices`` is read in vertex-aligned chunks, by
  seeking when the member is stored, sequentially when it is deflated (``seekable`` is then
  ``False``).  Every vertex arrives with its complete adjacency list (``grouped``) unless the CSR
  is asymmetric and gets symmetrised.
* edge lists (``.npy`` (m, 2), ``.npz`` ``src``/``dst``, text and gzip text, OGB directories):
  read block by block.

Edge lists are symmetrised by default (each stored edge is yielded in both directions).  Self
loops are always dropped.  Within a chunk, edge-list entries are sorted by ``src`` and duplicates
are removed; a duplicate that re-appears in a *different* chunk cannot be detected in O(n) memory
by the raw stream and is then seen as a parallel edge (weight 2).  :class:`~.regroup.GroupedEdgeStream`
fixes both limits of edge lists with an on-disk bucket sort by source (memory O(chunk), disk
~2x the entries): it yields vertex-aligned, globally deduplicated chunks.
:func:`~.core.partition_stream` applies it automatically to multi-chunk edge lists.

Shapes: each chunk is a pair of int64 arrays ``src`` (c,), ``dst`` (c,) with ``c`` about
``chunk_edges`` (twice that for symmetrised edge lists).
"""

from __future__ import annotations

import logging
from typing import Iterator, Optional, Tuple

import numba
import numpy as np

from argosy.shared.graphio import check_ids as _check_ids
from argosy.shared.graphio import sorted_unique

__all__ = ["EdgeStream", "ArrayEdgeStream", "SegmentEdgeStream", "CSRArrayStream", "Chunk", "GroupedChunk", "group_chunk",
           "max_group_size", "sort_range", "normalise_pairs", "read_groups", "DEFAULT_CHUNK_EDGES"]


DEFAULT_CHUNK_EDGES = 1 << 20


logger = logging.getLogger("argosy.partitioner")


Chunk = Tuple[np.ndarray, np.ndarray]


GroupedChunk = Tuple[np.ndarray, np.ndarray, np.ndarray]


@numba.njit(cache=True)
def _group_starts(src):
    c = src.size
    cnt = 1 if c > 0 else 0
    for i in range(1, c):
        if src[i] != src[i - 1]:
            cnt += 1
    out = np.empty(cnt + 1, np.int64)
    out[0] = 0
    g = 0
    for i in range(1, c):
        if src[i] != src[i - 1]:
            g += 1
            out[g] = i
    out[cnt] = c
    return out


@numba.njit(cache=True, nogil=True)
def _csr_groups(seg, dst, v0, n, src_o, dst_o, starts):
    """Rows ``v0 + r`` of a CSR slice (``seg`` = ``indptr[v0:v1 + 1]``, ``dst`` their entries)
    into ``src_o``/``dst_o`` without self loops, with the start of every non-empty row in
    ``starts``.  Returns ``(entries kept, groups, position of the first bad id or -1)``."""
    base = seg[0]
    kept = 0
    groups = 0
    bad = -1
    for r in range(seg.size - 1):
        a = seg[r] - base
        b = seg[r + 1] - base
        u = v0 + r
        first = kept
        for e in range(a, b):
            w = dst[e]
            if w < 0 or w >= n:
                if bad < 0:
                    bad = e
                continue
            if w != u:
                src_o[kept] = u
                dst_o[kept] = w
                kept += 1
        if kept > first:
            starts[groups] = first
            groups += 1
    starts[groups] = kept
    return kept, groups, bad


@numba.njit(cache=True, nogil=True)
def _csr_rows(seg, dst, v0, n, src_o, starts):
    """The sources and the start of every non-empty row of a CSR slice (as :func:`_csr_groups`)
    with ``dst`` left where it is; returns ``(groups, clean)``, ``clean`` False when an entry is
    out of range or a self loop (the caller then takes :func:`_csr_groups`' copy)."""
    base = seg[0]
    groups = 0
    bad = False
    for r in range(seg.size - 1):
        a = seg[r] - base
        b = seg[r + 1] - base
        u = v0 + r
        if b > a:
            starts[groups] = a
            groups += 1
        for e in range(a, b):  # no early exit: one branch-free loop the compiler vectorises
            w = dst[e]
            src_o[e] = u
            bad |= (w < 0) | (w >= n) | (w == u)
    starts[groups] = seg[seg.size - 1] - base
    return groups, not bad


@numba.njit(cache=True)
def max_group_size(starts):
    """Longest vertex group (adjacency list) of a grouped chunk: the size of scratch buffers."""
    d = 0
    for g in range(starts.size - 1):
        d = max(d, starts[g + 1] - starts[g])
    return d


@numba.njit(cache=True, nogil=True)
def sort_range(arr, a, b):
    """Sort ``arr[a:b]`` in place: insertion sort for short ranges (most adjacency lists),
    numpy's sort otherwise."""
    if b - a <= 32:
        for i in range(a + 1, b):
            x = arr[i]
            j = i - 1
            while j >= a and arr[j] > x:
                arr[j + 1] = arr[j]
                j -= 1
            arr[j + 1] = x
    else:
        arr[a:b].sort()


def read_groups(stream: "EdgeStream", i: int) -> GroupedChunk:
    """Chunk ``i`` of a seekable stream as ``(src, dst, starts)`` (as :meth:`EdgeStream.iter_groups`
    yields it): the unit one worker thread takes."""
    own = getattr(stream, "read_groups", None)
    return own(i) if own is not None else group_chunk(*stream.read_chunk(i))


def group_chunk(src: np.ndarray, dst: np.ndarray) -> GroupedChunk:
    """Sort a chunk by ``src`` if needed and return ``(src, dst, group_starts)``."""
    if src.size > 1 and np.any(src[1:] < src[:-1]):
        o = np.argsort(src, kind="stable")
        src, dst = src[o], dst[o]
    return src, dst, _group_starts(src)


class EdgeStream:
    """A graph readable as a sequence of directed edge chunks.

    Attributes:
        num_nodes (int): number of vertices ``n``; ids are ``0..n-1``.
        num_edges (int): directed entries as stored in the source (``len(indices)`` for CSR,
            rows for edge lists).
        chunk_edges (int): target number of stored entries per chunk.
        grouped (bool): every vertex's full adjacency list arrives inside one chunk.
        seekable (bool): :meth:`read_chunk` can read chunks in any order.
        symmetric (bool): chunks contain both directions of every edge (what a consumer of
            :meth:`__iter__` sees).
        symmetrize (bool): the stream adds the reverse of every stored entry itself: the
            chunks of :meth:`__iter__` have them, those of :meth:`iter_raw` (the stored entries)
            do not, and a consumer of raw entries adds them.  ``symmetric`` without
            ``symmetrize``: the stored entries are symmetric already.
        workdir (str | None): a directory for a consumer's scratch files next to the stream's
            own (None: the system temp dir).
    """

    num_nodes: int = 0
    num_edges: int = 0
    chunk_edges: int = DEFAULT_CHUNK_EDGES
    grouped: bool = False
    seekable: bool = False
    symmetric: bool = True
    symmetrize: bool = False
    workdir: Optional[str] = None

    @property
    def num_chunks(self) -> int:
        """Number of chunks one pass yields."""
        raise NotImplementedError

    @property
    def stream_entries(self) -> int:
        """Upper bound on the directed entries one pass yields (2x stored for symmetrised lists)."""
        return self.num_edges

    def read_chunk(self, i: int) -> Chunk:
        """Return chunk ``i`` (only when ``seekable``)."""
        raise NotImplementedError

    def __iter__(self) -> Iterator[Chunk]:
        for i in range(self.num_chunks):
            yield self.read_chunk(i)

    def iter_chunks(self, chunk_order: Optional[np.ndarray] = None) -> Iterator[Chunk]:
        """Yield chunks, in ``chunk_order`` if given and the stream is seekable.

        Args:
            chunk_order (np.ndarray, optional): a permutation of ``range(num_chunks)``; ignored
                (file order) for non-seekable streams.
        """
        if chunk_order is None or not self.seekable:
            yield from iter(self)
        else:
            for i in chunk_order:
                yield self.read_chunk(int(i))

    def iter_raw(self) -> Iterator[Chunk]:
        """Yield the stored entries once, validated but otherwise as read: any order,
        possibly with duplicates and self loops, and *not* yet symmetrised if
        :attr:`symmetrize` is set (the consumer adds the reverse entries).

        Much cheaper than :meth:`__iter__` for edge lists (no per-chunk sort or copies); used
        by the on-disk regrouping, which sorts and deduplicates itself.
        """
        yield from iter(self)

    def iter_groups(self, chunk_order: Optional[np.ndarray] = None) -> Iterator[GroupedChunk]:
        """Yield ``(src, dst, starts)``: chunks sorted by ``src`` with their vertex-group starts.

        ``src[starts[g]:starts[g + 1]]`` is one vertex's run of entries.  Streams that store
        the grouping (:class:`GroupedEdgeStream`) return it without recomputing.
        """
        for src, dst in self.iter_chunks(chunk_order):
            yield group_chunk(src, dst)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(num_nodes={self.num_nodes}, num_edges={self.num_edges}, "
                f"chunk_edges={self.chunk_edges}, chunks={self.num_chunks})")


def normalise_pairs(u: np.ndarray, v: np.ndarray, n: int, symmetrize: bool) -> Chunk:
    """Drop self loops, optionally symmetrise, sort by (src, dst) and drop duplicates."""
    u = np.asarray(u, dtype=np.int64)
    v = np.asarray(v, dtype=np.int64)
    keep = u != v
    if not keep.all():
        u, v = u[keep], v[keep]
    if symmetrize:
        u, v = np.concatenate([u, v]), np.concatenate([v, u])
    key = sorted_unique(u * np.int64(max(n, 1)) + v)
    return key // max(n, 1), key % max(n, 1)


class ArrayEdgeStream(EdgeStream):
    """An edge stream over in-memory ``(src, dst)`` arrays or a CSR (tests and small graphs).

    Args:
        src, dst (np.ndarray): edge endpoints (m,).
        num_nodes (int, optional): vertex count (default ``max id + 1``).
        chunk_edges (int): entries per chunk.
        symmetrize (bool): also yield every edge reversed.
    """

    def __init__(self, src, dst, num_nodes: Optional[int] = None,
                 chunk_edges: int = DEFAULT_CHUNK_EDGES, symmetrize: bool = True):
        src = np.asarray(src, dtype=np.int64).ravel()
        dst = np.asarray(dst, dtype=np.int64).ravel()
        if src.shape != dst.shape:
            raise ValueError(f"src and dst differ in length: {src.size} vs {dst.size}")
        _check_ids(src, num_nodes, "src")
        _check_ids(dst, num_nodes, "dst")
        if num_nodes is None:
            num_nodes = int(max(src.max(initial=-1), dst.max(initial=-1))) + 1
        self.num_nodes = int(num_nodes)
        self.num_edges = int(src.size)
        self.chunk_edges = int(chunk_edges)
        self.symmetrize = symmetrize
        self.symmetric = True
        self.seekable = True
        self.grouped = self.num_chunks <= 1
        self._src, self._dst = src, dst

    @classmethod
    def from_csr(cls, indptr, indices, chunk_edges: int = DEFAULT_CHUNK_EDGES) -> "CSRArrayStream":
        """Build a vertex-aligned stream over an in-memory symmetric CSR."""
        return CSRArrayStream(indptr, indices, chunk_edges)

    @property
    def num_chunks(self) -> int:
        return max(1, -(-self.num_edges // self.chunk_edges))

    @property
    def stream_entries(self) -> int:
        return self.num_edges * (2 if self.symmetrize else 1)

    def read_chunk(self, i: int) -> Chunk:
        a = i * self.chunk_edges
        b = min(a + self.chunk_edges, self.num_edges)
        return normalise_pairs(self._src[a:b], self._dst[a:b], self.num_nodes, self.symmetrize)

    def iter_raw(self) -> Iterator[Chunk]:
        for a in range(0, self.num_edges, self.chunk_edges):
            yield self._src[a:a + self.chunk_edges], self._dst[a:a + self.chunk_edges]


class SegmentEdgeStream(EdgeStream):
    """An edge stream over several in-memory ``(src, dst)`` arrays, each with its own id offsets:
    a typed graph's relations in type-local ids, yielded in global ids.

    Why not :class:`ArrayEdgeStream` over their concatenation: that copies every edge (int64) and
    building a CSR from it sorts them again (~100 bytes per edge at peak on a typed input); here
    each chunk is one slice of one relation, so the stream adds O(chunk) to the arrays the typed
    reader already holds, and :func:`~.core.partition_stream` regroups it on disk as it does any
    multi-chunk edge list.  The ids must already be in range (the typed readers check them).

    Args:
        segments: ``(src, dst, src_offset, dst_offset)`` per relation (src/dst int arrays (m_r,)).
        num_nodes (int): vertex count of the global id space.
        symmetrize (bool): also yield every edge reversed.
    """

    def __init__(self, segments, num_nodes: int, chunk_edges: int = DEFAULT_CHUNK_EDGES,
                 symmetrize: bool = True):
        self._segs = [(s, d, int(so), int(do)) for s, d, so, do in segments if len(s)]
        self.num_nodes = int(num_nodes)
        self.num_edges = int(sum(len(s) for s, *_ in self._segs))
        self.chunk_edges = int(chunk_edges)
        self.symmetrize = self.symmetric = bool(symmetrize)
        self.seekable = True
        self._slices = [(j, a) for j, (s, *_) in enumerate(self._segs) for a in range(0, len(s), self.chunk_edges)]
        self.grouped = self.num_chunks <= 1

    @property
    def num_chunks(self) -> int:
        return len(self._slices)

    @property
    def stream_entries(self) -> int:
        return self.num_edges * (2 if self.symmetrize else 1)

    def _raw(self, i: int) -> Chunk:
        j, a = self._slices[i]
        s, d, so, do = self._segs[j]
        b = a + self.chunk_edges
        return np.asarray(s[a:b], np.int64) + so, np.asarray(d[a:b], np.int64) + do

    def read_chunk(self, i: int) -> Chunk:
        return normalise_pairs(*self._raw(i), self.num_nodes, self.symmetrize)

    def iter_raw(self) -> Iterator[Chunk]:
        for i in range(self.num_chunks):
            yield self._raw(i)


def _csr_boundaries(indptr: np.ndarray, chunk_edges: int) -> np.ndarray:
    """Vertex ids at which chunks start/end so that each chunk holds ~chunk_edges entries."""
    n = indptr.size - 1
    bounds = [0]
    v = 0
    while v < n:
        target = indptr[v] + chunk_edges
        w = int(np.searchsorted(indptr, target, side="right")) - 1
        w = min(max(w, v + 1), n)
        bounds.append(w)
        v = w
    return np.asarray(bounds, dtype=np.int64)


class CSRArrayStream(EdgeStream):
    """Vertex-aligned chunks over an in-memory (or memory-mapped) CSR ``indptr``/``indices``."""

    def __init__(self, indptr, indices, chunk_edges: int = DEFAULT_CHUNK_EDGES):
        self._indptr = np.asarray(indptr, dtype=np.int64)
        self._indices = indices
        self.num_nodes = int(self._indptr.size - 1)
        self.num_edges = int(self._indptr[-1])
        if self.num_nodes < 0:
            raise ValueError("indptr must have at least one entry")
        self.chunk_edges = int(chunk_edges)
        self.grouped = True
        self.seekable = True
        self.symmetric = True
        self._bounds = _csr_boundaries(self._indptr, self.chunk_edges)
        self._clean = True
        """No slice read so far had a self loop or a bad id (:meth:`_make_groups` keeps their entries)."""

    @property
    def num_chunks(self) -> int:
        return max(0, self._bounds.size - 1)

    def _make_groups(self, v0: int, v1: int, dst: np.ndarray, narrow: bool = True) -> GroupedChunk:
        """Rows ``v0 .. v1 - 1`` with their stored entries ``dst`` as ``(src, dst, starts)``:
        one compiled pass builds the sources, checks the ids and finds the vertex groups, and
        ``dst`` is returned as it is unless it holds a self loop (dropped from a copy) or has
        another dtype (ids int32 when ``narrow`` and ``n < 2**31``, as the regrouped stream
        stores them; int64 otherwise, the dtype of :meth:`read_chunk`).  Keeping ``dst``: 20M
        geometric ``.npz``, a pass's reads 0.09 -> 0.07 s of CPU."""
        seg = self._indptr[v0:v1 + 1]
        dst = np.asarray(dst)
        if dst.dtype != np.int32 and dst.dtype != np.int64:
            dst = dst.astype(np.int64)
        dt = np.int32 if narrow and self.num_nodes < 2 ** 31 else np.int64
        c = int(seg[-1] - seg[0])
        starts = np.empty(v1 - v0 + 1, np.int64)
        if self._clean and dst.dtype == dt:
            # the stored entries as they are (no copy) when the slice has no self loop and no bad
            # id; after the first slice that has one, every slice is copied (_csr_groups)
            src_o = np.empty(c, dt)
            groups, clean = _csr_rows(seg, dst, v0, self.num_nodes, src_o, starts)
            if clean:
                return src_o, dst, starts[:groups + 1]
            self._clean = False  # only ever cleared: a thread's clean slice does not set it back
        src_o, dst_o = np.empty(c, dt), np.empty(c, dt)
        kept, groups, bad = _csr_groups(seg, dst, v0, self.num_nodes, src_o, dst_o, starts)
        if bad >= 0:
            _check_ids(np.asarray(dst, np.int64), self.num_nodes, "indices", int(seg[0]))
        return src_o[:kept], dst_o[:kept], starts[:groups + 1]

    def _make_chunk(self, v0: int, v1: int, dst: np.ndarray) -> Chunk:
        src, dst, _ = self._make_groups(v0, v1, dst, narrow=False)
        return src, dst

    def read_groups(self, i: int) -> GroupedChunk:
        """Chunk ``i`` as ``(src, dst, starts)`` (no sorting: a CSR is grouped by row)."""
        v0, v1 = int(self._bounds[i]), int(self._bounds[i + 1])
        a, b = int(self._indptr[v0]), int(self._indptr[v1])
        return self._make_groups(v0, v1, self._indices[a:b])

    def read_chunk(self, i: int) -> Chunk:
        v0, v1 = int(self._bounds[i]), int(self._bounds[i + 1])
        a, b = int(self._indptr[v0]), int(self._indptr[v1])
        return self._make_chunk(v0, v1, self._indices[a:b])

    def iter_groups(self, chunk_order: Optional[np.ndarray] = None) -> Iterator[GroupedChunk]:
        order = range(self.num_chunks) if chunk_order is None else chunk_order
        for i in order:
            yield self.read_groups(int(i))
