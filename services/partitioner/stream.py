"""Chunked edge streams for the streaming partitioners.

Why this module exists: GREM and the streaming baselines must partition graphs that do not fit
in memory as a CSR.  Everything they read goes through :func:`open_edge_stream`, which yields the
graph as a sequence of ``(src, dst)`` edge chunks and never loads a big file whole.  The files
themselves are opened and validated by :mod:`argosy.shared.graphio` (the one input layer: format
detection, dtype/byte-order/memory-order handling, overflow-checked text parsing); this module
turns what it opens into chunk streams:

* ``.npz`` CSR: ``indptr`` is read (O(n)); ``indices`` is read in vertex-aligned chunks, by
  seeking when the member is stored, sequentially when it is deflated (``seekable`` is then
  ``False``).  Every vertex arrives with its complete adjacency list (``grouped``) unless the CSR
  is asymmetric and gets symmetrised.
* edge lists (``.npy`` (m, 2), ``.npz`` ``src``/``dst``, text and gzip text, OGB directories):
  read block by block.

Edge lists are symmetrised by default (each stored edge is yielded in both directions).  Self
loops are always dropped.  Within a chunk, edge-list entries are sorted by ``src`` and duplicates
are removed; a duplicate that re-appears in a *different* chunk cannot be detected in O(n) memory
by the raw stream and is then seen as a parallel edge (weight 2).  :class:`GroupedEdgeStream`
fixes both limits of edge lists with an on-disk bucket sort by source (memory O(chunk), disk
~2x the entries): it yields vertex-aligned, globally deduplicated chunks.
:func:`~.core.partition_stream` applies it automatically to multi-chunk edge lists.

Shapes: each chunk is a pair of int64 arrays ``src`` (c,), ``dst`` (c,) with ``c`` about
``chunk_edges`` (twice that for symmetrised edge lists).
"""

from __future__ import annotations

import logging
import math
import os
import time
import weakref
from typing import Iterator, Optional, Tuple

import numba
import numpy as np

from argosy.shared.errors import GraphFormatError
from argosy.shared.graphio import TextEdgeReader, check_num_nodes, csr_is_symmetric, open_graph, sorted_unique
from argosy.shared.graphio import check_ids as _check_ids

__all__ = [
    "EdgeStream",
    "ArrayEdgeStream",
    "CSRNpzStream",
    "GroupedEdgeStream",
    "NpyEdgeStream",
    "PairEdgeStream",
    "TextEdgeStream",
    "open_edge_stream",
    "write_edge_list_npy",
    "write_edge_list_npy_chunked",
    "DEFAULT_CHUNK_EDGES",
]

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
        symmetric (bool): chunks contain both directions of every edge.
        workdir (str | None): a directory for a consumer's scratch files next to the stream's
            own (None: the system temp dir).
    """

    num_nodes: int = 0
    num_edges: int = 0
    chunk_edges: int = DEFAULT_CHUNK_EDGES
    grouped: bool = False
    seekable: bool = False
    symmetric: bool = True
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

    raw_symmetrize: bool = False

    def iter_raw(self) -> Iterator[Chunk]:
        """Yield the stored entries once, validated but otherwise as read: any order,
        possibly with duplicates and self loops, and *not* yet symmetrised if
        :attr:`raw_symmetrize` is set (the consumer adds the reverse entries).

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


def _normalise_pairs(u: np.ndarray, v: np.ndarray, n: int, symmetrize: bool) -> Chunk:
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


# --------------------------------------------------------------------------------------------
# in-memory arrays (tests, generators)
# --------------------------------------------------------------------------------------------
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
        return _normalise_pairs(self._src[a:b], self._dst[a:b], self.num_nodes, self.symmetrize)


# --------------------------------------------------------------------------------------------
# CSR
# --------------------------------------------------------------------------------------------
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

    @property
    def num_chunks(self) -> int:
        return max(0, self._bounds.size - 1)

    def _make_chunk(self, v0: int, v1: int, dst: np.ndarray) -> Chunk:
        seg = self._indptr[v0:v1 + 1]
        deg = np.diff(seg)
        src = np.repeat(np.arange(v0, v1, dtype=np.int64), deg)
        dst = np.asarray(dst, dtype=np.int64)
        _check_ids(dst, self.num_nodes, "indices", int(seg[0]))
        keep = src != dst
        if not keep.all():
            src, dst = src[keep], dst[keep]
        return src, dst

    def read_chunk(self, i: int) -> Chunk:
        v0, v1 = int(self._bounds[i]), int(self._bounds[i + 1])
        a, b = int(self._indptr[v0]), int(self._indptr[v1])
        return self._make_chunk(v0, v1, self._indices[a:b])


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


class _IndicesView:
    """``indices[a:b]`` over an :class:`~argosy.shared.graphio.NpyArray` (reads, no memory map)."""

    def __init__(self, arr):
        self._arr = arr

    def __getitem__(self, sl: slice) -> np.ndarray:
        return self._arr.read(sl.start or 0, sl.stop)


class CSRNpzStream(CSRArrayStream):
    """CSR stored in an ``.npz`` with members ``indptr`` and ``indices``, read member by member.

    ``indptr`` is read (O(n)); ``indices`` is read in vertex-aligned blocks: stored members by
    seeking (``seekable``), deflated members sequentially.  Opening makes one validation pass over
    ``indices`` (ids in range, symmetry by degrees and an order-free hash, O(n) memory).  An
    asymmetric CSR is symmetrised (a warning says so) unless ``symmetrize=False``: its chunks are
    then no longer vertex-aligned, and :func:`~.core.partition_stream` regroups them.

    A deflated ``indices`` member of at least :attr:`SPILL_MIN_BYTES` is decompressed once, during
    that validation pass, into a plain ``.npy`` in ``spill_dir`` (default: the system temp dir;
    removed with the stream): every later pass (partitioner, evaluation, store) then reads it like
    a stored member, seekable, instead of inflating the archive again.
    """

    SPILL_MIN_BYTES = 64 << 20

    def __init__(self, path, chunk_edges: int = DEFAULT_CHUNK_EDGES,
                 num_nodes: Optional[int] = None, symmetrize: bool = True, source=None,
                 spill_dir: Optional[str] = None):
        src = source if source is not None else open_graph(path)
        self.path, self.source = str(src.path), src
        if src.kind != "csr":
            raise GraphFormatError(f"{self.path}: not a CSR .npz (missing member 'indptr.npy')")
        indptr, arr = src.indptr, src.indices
        n = indptr.size - 1
        if num_nodes is not None and num_nodes != n:
            raise GraphFormatError(f"{self.path}: num_nodes={num_nodes} but the CSR has {n} rows")
        self._arr = arr
        self._compressed = not arr.seekable
        super().__init__(indptr, _IndicesView(arr), chunk_edges)
        self.seekable = not self._compressed
        spill = None
        if self._compressed and arr.nbytes >= self.SPILL_MIN_BYTES:
            spill = self._open_spill(spill_dir)
        try:
            self.is_symmetric, _ = csr_is_symmetric(indptr, self._validated_blocks(spill))
        except BaseException:
            if spill is not None:
                spill.close()
                os.remove(spill.name)
            raise
        if spill is not None:
            spill.close()
            from argosy.shared.graphio import NpyArray

            self._arr = NpyArray(spill.name)
            self._indices = _IndicesView(self._arr)
            self._compressed = False
            self.seekable = True
            weakref.finalize(self, _remove_quietly, spill.name)
        self.symmetrize = symmetrize and not self.is_symmetric
        if not self.is_symmetric:
            if symmetrize:
                logger.warning("%s: the CSR is not symmetric; treating it as undirected (adding the missing "
                               "reverse entries); pass --directed to keep it directed", self.path)
            self.grouped = self.num_chunks <= 1 and not self.symmetrize
            self.symmetric = bool(self.symmetrize)
            self.raw_symmetrize = self.symmetrize

    def _open_spill(self, spill_dir: Optional[str]):
        import tempfile

        f = tempfile.NamedTemporaryFile(prefix="argosy-indices-", suffix=".npy", dir=spill_dir, delete=False)
        np.lib.format.write_array_header_2_0(f, {"descr": np.lib.format.dtype_to_descr(self._arr.native),
                                                 "fortran_order": False, "shape": (self._arr.rows,)})
        logger.info("%s: inflating the deflated indices member once into %s", self.path, f.name)
        return f

    def _validated_blocks(self, spill=None):
        step = max(self.chunk_edges, 1 << 22)
        for a, idx in self._arr.iter_blocks(step):
            if spill is not None:
                spill.write(np.ascontiguousarray(idx).tobytes())
            idx = idx.astype(np.int64, copy=False)
            _check_ids(idx, self.num_nodes, "indices", a)
            yield a, idx

    @property
    def stream_entries(self) -> int:
        return self.num_edges * (2 if self.symmetrize else 1)

    def _sym(self, chunk: Chunk) -> Chunk:
        return _normalise_pairs(chunk[0], chunk[1], self.num_nodes, True) if self.symmetrize else chunk

    def read_chunk(self, i: int) -> Chunk:
        if self._compressed:
            raise RuntimeError("compressed .npz streams can only be read in order")
        return self._sym(super().read_chunk(i))

    def _raw(self) -> Iterator[Chunk]:
        if not self._compressed:
            for i in range(self.num_chunks):
                yield CSRArrayStream.read_chunk(self, i)
            return
        blocks = self._arr.iter_blocks(1 << 22)
        buf, buf_at = np.empty(0, self._arr.native), 0
        for i in range(self.num_chunks):
            v0, v1 = int(self._bounds[i]), int(self._bounds[i + 1])
            a, b = int(self._indptr[v0]), int(self._indptr[v1])
            parts = []
            while a < b:
                if a >= buf_at + buf.size:
                    buf_at, buf = next(blocks)
                take = buf[a - buf_at:min(b, buf_at + buf.size) - buf_at]
                parts.append(take)
                a += take.size
            dst = parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.empty(0, np.int64)
            yield self._make_chunk(v0, v1, dst)

    def __iter__(self) -> Iterator[Chunk]:
        for chunk in self._raw():
            yield self._sym(chunk)

    def iter_raw(self) -> Iterator[Chunk]:
        yield from self._raw()


# --------------------------------------------------------------------------------------------
# edge lists: .npy (m, 2), .npz src/dst, text
# --------------------------------------------------------------------------------------------
class PairEdgeStream(EdgeStream):
    """An edge list held as integer arrays (``.npy`` (m, 2) or ``.npz`` ``src``/``dst``), read in
    blocks with plain file reads.

    Plain reads rather than a memory map: a map leaves every page it touched resident (and
    counted in the process's RSS) for as long as it exists, which for a billion-edge file is
    gigabytes; reads keep the footprint at one block.
    """

    def __init__(self, source, chunk_edges: int = DEFAULT_CHUNK_EDGES,
                 num_nodes: Optional[int] = None, symmetrize: bool = True):
        self.source, self.path = source, str(source.path)
        self._reader = source.edges
        self.num_edges = int(self._reader.num_edges)
        self.chunk_edges = int(chunk_edges)
        self.symmetrize = symmetrize
        self.symmetric = symmetrize
        self.raw_symmetrize = symmetrize
        self.seekable = self._reader.seekable
        self.is_symmetric = None
        if num_nodes is None:
            num_nodes = source.num_nodes
        if num_nodes is None:
            hi = -1
            for a, u, v in self._reader.iter_blocks(self.chunk_edges):
                _check_ids(u, None, "column 0", a)
                _check_ids(v, None, "column 1", a)
                if u.size:
                    hi = max(hi, int(u.max()), int(v.max()))
            num_nodes = check_num_nodes(self.path, hi, self.num_edges) if hi >= 0 else 0
        self.num_nodes = int(num_nodes)
        self.grouped = self.num_chunks <= 1

    @property
    def num_chunks(self) -> int:
        return max(1, -(-self.num_edges // self.chunk_edges)) if self.num_edges else 0

    @property
    def stream_entries(self) -> int:
        return self.num_edges * (2 if self.symmetrize else 1)

    def _checked(self, a, u, v) -> Chunk:
        if u.size and _first_bad_id(u, v, self.num_nodes) >= 0:
            _check_ids(u, self.num_nodes, "row (column 0)", a)
            _check_ids(v, self.num_nodes, "row (column 1)", a)
        return u, v

    def read_chunk(self, i: int) -> Chunk:
        if not self.seekable:
            raise RuntimeError("compressed .npz edge lists can only be read in order")
        a = i * self.chunk_edges
        u, v = self._checked(a, *self._reader.read(a, a + self.chunk_edges))
        return _normalise_pairs(u, v, self.num_nodes, self.symmetrize)

    def __iter__(self) -> Iterator[Chunk]:
        for u, v in self.iter_raw():
            yield _normalise_pairs(u, v, self.num_nodes, self.symmetrize)

    def iter_raw(self) -> Iterator[Chunk]:
        for a, u, v in self._reader.iter_blocks(self.chunk_edges):
            yield self._checked(a, u, v)


class NpyEdgeStream(PairEdgeStream):
    """``.npy`` edge list of shape (m, 2), any integer dtype, byte order or memory order.

    Args:
        path (str): file path.
        chunk_edges (int): stored rows per chunk.
        num_nodes (int, optional): vertex count; if omitted one scan finds ``max id + 1``.
        symmetrize (bool): yield both directions of each row (default ``True``).
    """

    def __init__(self, path, chunk_edges: int = DEFAULT_CHUNK_EDGES,
                 num_nodes: Optional[int] = None, symmetrize: bool = True, source=None):
        super().__init__(source if source is not None else open_graph(path), chunk_edges, num_nodes, symmetrize)


class TextEdgeStream(EdgeStream):
    """Text edge list (plain or gzip; see :class:`~argosy.shared.graphio.TextEdgeReader`).

    Opening runs one validation scan (errors carry the line number) that also counts the
    edges and, if ``num_nodes`` is not given, finds the largest id.  A file of at least
    :attr:`SPILL_MIN_BYTES` (an eighth of that when gzipped) is written during that scan as a
    binary int64 ``(m, 2)`` edge list in ``spill_dir`` (removed with the stream), so later passes
    read binary blocks (seekable) instead of parsing the text again.

    Args:
        path (str): file path.
        chunk_edges (int): approximate stored lines per chunk.
        num_nodes (int, optional): vertex count; ids ``>= num_nodes`` raise ``ValueError``.
        symmetrize (bool): yield both directions of each line (default ``True``).
        spill_dir (str, optional): directory for the binary copy (default: the system temp dir).
    """

    _BYTES_PER_LINE_GUESS = 16
    SPILL_MIN_BYTES = 64 << 20
    _HEADER_BYTES = 128

    def __init__(self, path, chunk_edges: int = DEFAULT_CHUNK_EDGES,
                 num_nodes: Optional[int] = None, symmetrize: bool = True, source=None,
                 spill_dir: Optional[str] = None):
        if source is None:
            source = open_graph(path, block_bytes=max(1 << 10, int(chunk_edges) * self._BYTES_PER_LINE_GUESS))
        self.source, self.path = source, str(source.path)
        self._reader = source.edges
        self._reader.block_bytes = max(1 << 10, int(chunk_edges) * self._BYTES_PER_LINE_GUESS)
        self.chunk_edges = int(chunk_edges)
        self.symmetrize = symmetrize
        self.symmetric = symmetrize
        self.raw_symmetrize = symmetrize
        self.seekable = False
        self.grouped = False
        self.is_symmetric = None
        self._pairs = None
        if num_nodes is None:
            num_nodes = source.num_nodes
        size = os.path.getsize(self._reader.path)
        spill = None
        if size * (8 if self._reader.gzipped else 1) >= self.SPILL_MIN_BYTES:
            import tempfile

            spill = tempfile.NamedTemporaryFile(prefix="argosy-edges-", suffix=".npy", dir=spill_dir, delete=False)
            spill.write(b"\0" * self._HEADER_BYTES)
        count, hi, nchunks = 0, -1, 0
        try:
            for u, v, _ in self._reader.iter_blocks(num_nodes):
                count += u.size
                nchunks += 1
                if u.size:
                    hi = max(hi, int(u.max()), int(v.max()))
                    if spill is not None:
                        spill.write(np.stack([u, v], axis=1).tobytes())
            if spill is not None:
                spill.seek(0)
                spill.write(self._npy_header(count))
                spill.close()
        except BaseException:
            if spill is not None:
                spill.close()
                _remove_quietly(spill.name)
            raise
        self.num_edges = count
        self._num_chunks = nchunks
        if num_nodes is None:
            num_nodes = check_num_nodes(self.path, hi, count) if hi >= 0 else 0
        self.num_nodes = int(num_nodes)
        if spill is not None:
            from argosy.shared.graphio import NpyArray, PairArrayReader

            weakref.finalize(self, _remove_quietly, spill.name)
            self._pairs = PairArrayReader(pair=NpyArray(spill.name))
            self._num_chunks = max(1, -(-count // self.chunk_edges)) if count else 0
            self.seekable = True
            logger.info("%s: parsed once into a binary copy at %s", self.path, spill.name)

    def _npy_header(self, rows: int) -> bytes:
        d = "{'descr': '<i8', 'fortran_order': False, 'shape': (%d, 2), }" % rows
        head = d.encode().ljust(self._HEADER_BYTES - 10 - 1) + b"\n"
        return b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head

    @property
    def num_chunks(self) -> int:
        return self._num_chunks

    @property
    def stream_entries(self) -> int:
        return self.num_edges * (2 if self.symmetrize else 1)

    def read_chunk(self, i: int) -> Chunk:
        if self._pairs is None:
            raise RuntimeError("text edge lists can only be read in order")
        a = i * self.chunk_edges
        u, v = self._pairs.read(a, a + self.chunk_edges)
        return _normalise_pairs(u, v, self.num_nodes, self.symmetrize)

    def __iter__(self) -> Iterator[Chunk]:
        for u, v in self.iter_raw():
            yield _normalise_pairs(u, v, self.num_nodes, self.symmetrize)

    def iter_raw(self) -> Iterator[Chunk]:
        if self._pairs is not None:
            for _, u, v in self._pairs.iter_blocks(self.chunk_edges):
                yield u, v
            return
        for u, v, _ in self._reader.iter_blocks(self.num_nodes):
            yield u, v


# --------------------------------------------------------------------------------------------
# regrouping an edge list by source (external bucket sort)
# --------------------------------------------------------------------------------------------
@numba.njit(cache=True)
def _scatter_buckets(u, v, shift, nb, sym, pairs, offsets):
    """Counting sort of one raw chunk into ``nb`` source-id ranges of width ``2**shift``.

    Drops self loops and, if ``sym``, emits both directions.  Returns the entries written
    to ``pairs`` (grouped by bucket; bucket ``b`` is ``pairs[offsets[b]:offsets[b + 1]]``).
    """
    offsets[:] = 0
    for i in range(u.size):
        a = u[i]
        b = v[i]
        if a == b:
            continue
        offsets[(a >> shift) + 1] += 1
        if sym:
            offsets[(b >> shift) + 1] += 1
    for q in range(nb):
        offsets[q + 1] += offsets[q]
    pos = offsets[:-1].copy()
    for i in range(u.size):
        a = u[i]
        b = v[i]
        if a == b:
            continue
        j = pos[a >> shift]
        pairs[j, 0] = a
        pairs[j, 1] = b
        pos[a >> shift] = j + 1
        if sym:
            j = pos[b >> shift]
            pairs[j, 0] = b
            pairs[j, 1] = a
            pos[b >> shift] = j + 1
    return offsets[nb]


@numba.njit(cache=True)
def _first_bad_id(u, v, n):
    """Index of the first row with an id outside ``[0, n)``, or -1."""
    for i in range(u.size):
        if u[i] < 0 or u[i] >= n or v[i] < 0 or v[i] >= n:
            return i
    return -1


@numba.njit(cache=True, nogil=True)
def _sort_bucket(pairs, v0, nv):
    """Sort one bucket's entries by (src, dst), drop duplicates; return src, dst, starts.

    Counting sort by source (the bucket covers ``nv`` consecutive ids from ``v0``), then each
    adjacency list is sorted (insertion sort when short) and deduplicated in place.
    """
    c = pairs.shape[0]
    cnt = np.zeros(nv + 1, np.int64)
    for i in range(c):
        cnt[pairs[i, 0] - v0 + 1] += 1
    for u in range(nv):
        cnt[u + 1] += cnt[u]
    tmp = np.empty(c, pairs.dtype)
    pos = cnt[:-1].copy()
    for i in range(c):
        u = pairs[i, 0] - v0
        tmp[pos[u]] = pairs[i, 1]
        pos[u] += 1
    src = np.empty(c, pairs.dtype)
    dst = np.empty(c, pairs.dtype)
    starts = np.empty(nv + 1, np.int64)
    w = 0
    ng = 0
    for u in range(nv):
        a = cnt[u]
        b = cnt[u + 1]
        if b == a:
            continue
        sort_range(tmp, a, b)
        starts[ng] = w
        ng += 1
        prev = -1
        for i in range(a, b):
            x = tmp[i]
            if x != prev:
                src[w] = u + v0
                dst[w] = x
                w += 1
                prev = x
    starts[ng] = w
    return src[:w], dst[:w], starts[:ng + 1]


def _open_file_limit() -> int:
    """Raise the soft open-files limit to the hard one; return the usable number of files."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            target = 65536 if hard == resource.RLIM_INFINITY else hard
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        return max(16, int(soft) - 128)
    except (ImportError, ValueError, OSError):  # pragma: no cover - platform dependent
        return 512


class GroupedEdgeStream(EdgeStream):
    """Vertex-aligned, globally deduplicated view of any edge stream, via on-disk buckets.

    One pass distributes every entry ``(u, v)`` of ``base`` (read with
    :meth:`EdgeStream.iter_raw`, i.e. unsorted) into one of ``B`` bucket files by source-id
    range with a numba counting sort; then each bucket is sorted by ``(u, v)`` (counting sort
    by source, then each adjacency list), deduplicated, and written back once as three arrays:
    ``src``, ``dst`` and the vertex-group ``starts``.  Later passes only read those files, so
    every vertex's whole adjacency list arrives in one chunk (``grouped``), duplicates across
    the original chunks are removed, chunks come in vertex-id order, and
    :meth:`iter_groups` needs no sorting at all.  Ids are stored as int32 when ``n < 2**31``.
    Memory: one bucket (~``chunk_edges`` entries); disk: about the stream's entries x 2 ids.

    Args:
        base (EdgeStream): the stream to regroup (typically a symmetrised edge list).
        tmpdir (str): directory for the bucket files (created; removed by :meth:`close`).
        chunk_edges (int, optional): target entries per bucket (default ``base.chunk_edges``).

    Raises:
        OSError: if the bucket files cannot be written (e.g. a full disk); the partial files
            are removed.
    """

    def __init__(self, base: EdgeStream, tmpdir: str, chunk_edges: Optional[int] = None):
        self.base = base
        self.num_nodes = int(base.num_nodes)
        self.chunk_edges = int(chunk_edges or base.chunk_edges)
        self.symmetric = base.symmetric
        self.grouped = True
        self.seekable = True
        self._dir = str(tmpdir)
        os.makedirs(self._dir, exist_ok=True)
        self.workdir = self._dir
        n = max(self.num_nodes, 1)
        want = max(1, min(n, -(-int(base.stream_entries) // self.chunk_edges)))
        want = min(want, _open_file_limit())
        # bucket b holds sources [b << shift, (b + 1) << shift): a shift instead of a division
        self._shift = shift = max(0, int(math.ceil(math.log2(-(-n // want)))))
        self._nb = nb = -(-n // (1 << shift))
        self._dtype = np.int32 if n < 2 ** 31 else np.int64
        try:
            self._build(base, n, nb, shift)
        except BaseException:
            self.close()
            raise

    def _build(self, base: EdgeStream, n: int, nb: int, shift: int) -> None:
        t0 = time.perf_counter()
        logger.info("regrouping %d entries by source into %d buckets in %s",
                    base.stream_entries, nb, self._dir)
        offsets = np.zeros(nb + 1, np.int64)
        count = 0
        sym = bool(base.raw_symmetrize)
        files = [open(self._path(b), "wb") for b in range(nb)]
        try:
            for u, v in base.iter_raw():
                pairs = np.empty((u.size * (2 if sym else 1), 2), self._dtype)
                count += int(_scatter_buckets(u, v, shift, nb, sym, pairs, offsets))
                for b in np.flatnonzero(np.diff(offsets)):
                    files[b].write(memoryview(pairs[offsets[b]:offsets[b + 1]]))
        finally:
            for f in files:
                f.close()
        # sort + deduplicate every bucket once, so later passes only read.  Buckets are
        # independent and the kernel releases the GIL: two at a time where two cores exist
        # (memory: two buckets).  The output does not depend on the thread count.
        def sort_one(b: int) -> int:
            v0 = b << shift
            v1 = min(n, (b + 1) << shift)
            pairs = np.fromfile(self._path(b), dtype=self._dtype).reshape(-1, 2)
            src, dst, starts = _sort_bucket(pairs, v0, v1 - v0)
            del pairs
            with open(self._path(b), "wb") as f:
                np.save(f, src)
                np.save(f, dst)
                np.save(f, starts)
            return int(src.size)

        workers = min(2, os.cpu_count() or 1, nb)
        if workers > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(workers) as pool:
                total = sum(pool.map(sort_one, range(nb)))
        else:
            total = sum(sort_one(b) for b in range(nb))
        self.num_edges = total
        self.input_entries = count
        logger.info("regrouped: %d distinct entries (of %d) in %.1f s", total, count,
                    time.perf_counter() - t0)

    def _path(self, b: int) -> str:
        return os.path.join(self._dir, f"bucket_{b:06d}.bin")

    @property
    def num_chunks(self) -> int:
        return self._nb

    def read_groups(self, i: int) -> GroupedChunk:
        """Chunk ``i`` as ``(src, dst, starts)`` (ids int32 when they fit)."""
        with open(self._path(i), "rb") as f:
            return np.load(f), np.load(f), np.load(f)

    def read_chunk(self, i: int) -> Chunk:
        src, dst, _ = self.read_groups(i)
        return src, dst

    def iter_groups(self, chunk_order: Optional[np.ndarray] = None) -> Iterator[GroupedChunk]:
        for i in (range(self._nb) if chunk_order is None else chunk_order):
            yield self.read_groups(int(i))

    def drain(self) -> Iterator[Chunk]:
        """Yield every chunk once, deleting each bucket file as soon as it is read (a last pass
        whose reader writes elsewhere, the store writer: disk use does not double)."""
        for i in range(self._nb):
            src, dst, _ = self.read_groups(i)
            os.remove(self._path(i))
            yield src, dst

    def close(self) -> None:
        """Delete the bucket files."""
        for b in range(self._nb):
            try:
                os.remove(self._path(b))
            except FileNotFoundError:
                pass
        try:
            os.rmdir(self._dir)
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# --------------------------------------------------------------------------------------------
# entry point and writers
# --------------------------------------------------------------------------------------------
def open_edge_stream(path, chunk_edges: int = DEFAULT_CHUNK_EDGES,
                     num_nodes: Optional[int] = None, symmetrize: bool = True,
                     split: Optional[str] = None, tmpdir: Optional[str] = None) -> EdgeStream:
    """Open a graph file as a chunked edge stream (any format :mod:`argosy.shared.graphio` reads).

    Args:
        path (str | os.PathLike): ``.npz`` CSR or ``src``/``dst``, ``.npy`` (m, 2) edge list, text
            edge list (``.txt``/``.csv``/``.el``/..., optionally ``.gz``), or an OGB directory.
        chunk_edges (int): stored entries per chunk (default 2**20).
        num_nodes (int, optional): vertex count; ids must be ``< num_nodes``.
        symmetrize (bool): yield each edge in both directions (default ``True``): edge lists
            get their reverse entries, an asymmetric CSR the missing ones (with a warning).
        split (str, optional): the split directory of an OGB dataset with several.
        tmpdir (str, optional): where a large deflated ``.npz`` member is inflated once, and a
            large text edge list is copied in binary (default: the system temp dir).

    Returns:
        EdgeStream: iterate it for ``(src, dst)`` int64 chunks; ``stream.source`` is the opened
        :class:`~argosy.shared.graphio.GraphSource` (node data columns).

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        GraphFormatError (a ``ValueError``): on malformed content, negative or out-of-range ids,
            naming the file and the fault.
    """
    path = os.fspath(path)
    if chunk_edges < 1:
        raise ValueError(f"chunk_edges must be >= 1, got {chunk_edges}")
    if not os.path.exists(path):
        raise FileNotFoundError(path)
    src = open_graph(path, split=split, block_bytes=max(1 << 10, int(chunk_edges) * 16))
    if src.kind == "csr":
        return CSRNpzStream(path, chunk_edges=chunk_edges, num_nodes=num_nodes, symmetrize=symmetrize,
                            source=src, spill_dir=tmpdir)
    if isinstance(src.edges, TextEdgeReader):
        return TextEdgeStream(path, chunk_edges=chunk_edges, num_nodes=num_nodes, symmetrize=symmetrize,
                              source=src, spill_dir=tmpdir)
    return PairEdgeStream(src, chunk_edges=chunk_edges, num_nodes=num_nodes, symmetrize=symmetrize)


def write_edge_list_npy(path, src, dst) -> None:
    """Write an (m, 2) edge list ``.npy`` (int32 when ids fit, else int64).

    Args:
        path (str | os.PathLike): output file.
        src, dst (array-like): endpoints (m,).
    """
    src = np.asarray(src).ravel()
    dst = np.asarray(dst).ravel()
    if src.shape != dst.shape:
        raise ValueError(f"src and dst differ in length: {src.size} vs {dst.size}")
    hi = int(max(src.max(initial=0), dst.max(initial=0)))
    dtype = np.int32 if hi < 2 ** 31 - 1 else np.int64
    out = np.empty((src.size, 2), dtype=dtype)
    out[:, 0] = src
    out[:, 1] = dst
    np.save(path, out)


def write_edge_list_npy_chunked(path, num_edges: int, chunks, dtype=np.int32) -> int:
    """Write an (m, 2) ``.npy`` edge list chunk by chunk through a memory map.

    Args:
        path (str | os.PathLike): output file.
        num_edges (int): rows to allocate (an upper bound; unused rows are trimmed at the end
            by rewriting the header only if fewer were produced).
        chunks (Iterable[tuple[np.ndarray, np.ndarray]]): generator of ``(src, dst)`` blocks.
        dtype: on-disk integer dtype (default int32).

    Returns:
        int: rows written.
    """
    mm = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(int(num_edges), 2))
    pos = 0
    for s, d in chunks:
        c = min(len(s), num_edges - pos)
        mm[pos:pos + c, 0] = s[:c]
        mm[pos:pos + c, 1] = d[:c]
        pos += c
        if pos >= num_edges:
            break
    mm.flush()
    del mm
    if pos < num_edges:  # shrink: rewrite as a smaller file via a second memmap view
        src = np.load(path, mmap_mode="r")
        tmp = str(path) + ".tmp.npy"
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=(pos, 2))
        step = 1 << 22
        for a in range(0, pos, step):
            b = min(a + step, pos)
            out[a:b] = src[a:b]
        out.flush()
        del out, src
        os.replace(tmp, path)
    return pos
