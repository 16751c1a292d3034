"""Edge streams over graph files: a ``.npz`` CSR (:class:`CSRNpzStream`), edge lists stored as
arrays (:class:`PairEdgeStream`) or as text (:class:`TextEdgeStream`), and
:func:`open_edge_stream`, which picks one for any file :mod:`argosy.shared.graphio` opens.

Why this module exists: a file is read block by block, never whole, with its ids validated as
read; these classes turn what :func:`argosy.shared.graphio.open_graph` opened into the chunk
streams of :mod:`.stream`.
"""

from __future__ import annotations

import logging
import os
import weakref
from typing import Iterator, Optional, Tuple

import numba
import numpy as np

from argosy.shared.errors import GraphFormatError
from argosy.shared.graphio import TextEdgeReader, check_num_nodes, open_graph
from argosy.shared.graphio.formats import as_ids
from argosy.shared.hashing import mix64
from argosy.shared.graphio import check_ids as _check_ids

from .stream import (DEFAULT_CHUNK_EDGES, Chunk, CSRArrayStream, EdgeStream, GroupedChunk, group_chunk,
                     normalise_pairs)

logger = logging.getLogger("argosy.partitioner")

__all__ = ["CSRNpzStream", "PairEdgeStream", "TextEdgeStream", "open_edge_stream", "write_edge_list_npy",
           "write_edge_list_npy_chunked"]


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
            stored_symmetric = _csr_checked_symmetric(indptr, self._validated_blocks(spill), n)
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
        self.symmetrize = bool(symmetrize and not stored_symmetric)
        if not stored_symmetric:
            if symmetrize:
                logger.warning("%s: the CSR is not symmetric; treating it as undirected (adding the missing "
                               "reverse entries); pass --directed to keep it directed", self.path)
            self.grouped = self.num_chunks <= 1 and not self.symmetrize
            self.symmetric = self.symmetrize

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
            yield a, idx

    @property
    def stream_entries(self) -> int:
        return self.num_edges * (2 if self.symmetrize else 1)

    def _sym(self, chunk: Chunk) -> Chunk:
        return normalise_pairs(chunk[0], chunk[1], self.num_nodes, True) if self.symmetrize else chunk

    def read_chunk(self, i: int) -> Chunk:
        if self._compressed:
            raise RuntimeError("compressed .npz streams can only be read in order")
        return self._sym(super().read_chunk(i))

    def read_groups(self, i: int) -> GroupedChunk:
        if self._compressed:
            raise RuntimeError("compressed .npz streams can only be read in order")
        if self.symmetrize:
            return group_chunk(*self.read_chunk(i))
        return super().read_groups(i)

    def iter_groups(self, chunk_order=None) -> Iterator[GroupedChunk]:
        if self.symmetrize:
            yield from EdgeStream.iter_groups(self, chunk_order)
        elif self._compressed:
            for v0, v1, dst in self._raw_rows():
                yield self._make_groups(v0, v1, dst)
        else:
            yield from super().iter_groups(chunk_order)

    def _raw(self) -> Iterator[Chunk]:
        for v0, v1, dst in self._raw_rows():
            yield self._make_chunk(v0, v1, dst)

    def _raw_rows(self) -> Iterator[Tuple[int, int, np.ndarray]]:
        """``(v0, v1, stored entries of rows v0 .. v1 - 1)`` per chunk, in file order."""
        if not self._compressed:
            for i in range(self.num_chunks):
                v0, v1 = int(self._bounds[i]), int(self._bounds[i + 1])
                yield v0, v1, self._indices[int(self._indptr[v0]):int(self._indptr[v1])]
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
            yield v0, v1, dst

    def __iter__(self) -> Iterator[Chunk]:
        for chunk in self._raw():
            yield self._sym(chunk)

    def iter_raw(self) -> Iterator[Chunk]:
        yield from self._raw()


@numba.njit(cache=True, nogil=True)
def _csr_check_block(indptr, a, idx, n, indeg):
    """One block ``idx`` = ``indices[a:a + idx.size]`` of a CSR: ids in range, in-degrees
    counted into ``indeg``, and order-free hashes of the entries and of the reversed entries.
    Returns ``(fwd, rev, position of the first bad id or -1)``."""
    gamma = np.uint64(0x9E3779B97F4A7C15)
    fwd = np.uint64(0)
    rev = np.uint64(0)
    end = a + idx.size
    lo, hi = 0, indptr.size - 1  # the row holding entry a: indptr[r] <= a < indptr[r + 1]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if indptr[mid] <= a:
            lo = mid
        else:
            hi = mid - 1
    for e in range(idx.size):  # ids and in-degrees; the hashes in a loop of their own (SIMD)
        c = np.int64(idx[e])
        if c < 0 or c >= n:
            return fwd, rev, e
        indeg[c] += 1
    r = lo
    while r < indptr.size - 1 and indptr[r] < end:
        e0 = max(indptr[r], a) - a
        e1 = min(indptr[r + 1], end) - a
        ur = np.uint64(r)
        for e in range(e0, e1):
            uc = np.uint64(np.int64(idx[e]))
            fwd += mix64(ur * gamma + uc)
            rev += mix64(uc * gamma + ur)
        r += 1
    return fwd, rev, -1


def _csr_checked_symmetric(indptr: np.ndarray, blocks, n: int) -> bool:
    """Validate every ``(first entry, indices block)`` of a CSR (ids in range: the error names
    the first bad one) and tell whether it is symmetric, in one compiled pass and O(n) memory:
    in-degrees must equal out-degrees and an order-free hash of the entries must equal that of
    the reversed entries (the test of :func:`argosy.shared.graphio.csr_is_symmetric`, fused)."""
    # int32 counts while they cannot overflow: half the cache footprint of the random increments
    indeg = np.zeros(max(n, 1), np.int32 if int(indptr[-1]) < 2 ** 31 else np.int64)
    fwd = rev = 0
    for a, idx in blocks:
        if idx.size == 0:
            continue
        if idx.dtype.kind not in "iu" or idx.dtype.itemsize > 8 or idx.dtype == np.uint64:
            idx = as_ids(idx, "indices")
        f, r, bad = _csr_check_block(indptr, int(a), idx, int(n), indeg)
        if bad >= 0:
            _check_ids(np.asarray(idx, np.int64), n, "indices", a)
        fwd = (fwd + int(f)) & 0xFFFFFFFFFFFFFFFF
        rev = (rev + int(r)) & 0xFFFFFFFFFFFFFFFF
    return bool(fwd == rev and np.array_equal(indeg[:n], np.diff(indptr)))


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
        self.symmetrize = self.symmetric = bool(symmetrize)
        self.seekable = self._reader.seekable
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
        return normalise_pairs(u, v, self.num_nodes, self.symmetrize)

    def __iter__(self) -> Iterator[Chunk]:
        for u, v in self.iter_raw():
            yield normalise_pairs(u, v, self.num_nodes, self.symmetrize)

    def iter_raw(self) -> Iterator[Chunk]:
        for a, u, v in self._reader.iter_blocks(self.chunk_edges):
            yield self._checked(a, u, v)


@numba.njit(cache=True, nogil=True)
def _first_bad_id(u, v, n):
    """Index of the first row with an id outside ``[0, n)``, or -1."""
    for i in range(u.size):
        if u[i] < 0 or u[i] >= n or v[i] < 0 or v[i] >= n:
            return i
    return -1


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
        self.symmetrize = self.symmetric = bool(symmetrize)
        self.seekable = False
        self.grouped = False
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
        return normalise_pairs(u, v, self.num_nodes, self.symmetrize)

    def __iter__(self) -> Iterator[Chunk]:
        for u, v in self.iter_raw():
            yield normalise_pairs(u, v, self.num_nodes, self.symmetrize)

    def iter_raw(self) -> Iterator[Chunk]:
        if self._pairs is not None:
            for _, u, v in self._pairs.iter_blocks(self.chunk_edges):
                yield u, v
            return
        for u, v, _ in self._reader.iter_blocks(self.num_nodes):
            yield u, v


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
