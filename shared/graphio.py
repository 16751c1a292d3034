"""The one input layer for graph files: format detection, header validation and block reading.

Both the streaming partitioner (``services/partitioner/stream.py``) and whole-graph loads
(:func:`load_graph`, for small graphs) read through the classes here, so a file is accepted or
rejected the same way everywhere.

Formats (detected by content first, then by case-insensitive extension):

* ``.npz``: a CSR (``indptr`` + ``indices``) or an edge list (``src`` + ``dst``, optional
  ``num_nodes``), with optional node data ``features`` (alias ``x``), ``labels`` (alias ``y``),
  ``train_mask``/``val_mask``/``test_mask``.  Members are read one at a time, in blocks.
* ``.npy``: an integer edge list of shape ``(m, 2)``.
* text edge lists (``.txt .csv .tsv .el .edges .edgelist .snap .dat``, optionally ``.gz``):
  ``u v`` per line, space/tab/comma separated; ``#``/``%`` comment lines; a UTF-8 BOM and one
  header line (e.g. ``src,dst,weight``) are skipped; columns after the second (weights) are
  dropped, in every reader.
* an OGB node-property-prediction directory: ``raw/edge.csv.gz``, ``raw/node-feat.csv.gz``,
  ``raw/node-label.csv.gz``, ``split/<name>/{train,valid,test}.csv.gz``.

Arrays are read with an explicit dtype, byte order and memory order: big-endian and
Fortran-ordered ``.npy`` data are converted, object (pickled) members are refused, and a header
that declares more bytes than the file holds is reported as truncated before anything is
allocated.  Edge lists and asymmetric CSRs are symmetrised (the store is undirected) unless the
caller keeps them directed.

Example:
    >>> import numpy as np
    >>> g = csr_from_edges(np.array([0, 1, 2]), np.array([1, 2, 0]), num_nodes=3)
    >>> g.indptr.tolist(), g.indices.tolist()
    ([0, 2, 4, 6], [1, 2, 0, 2, 0, 1])
"""
from __future__ import annotations

import gzip
import io
import logging
import math
import os
import warnings
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from argosy.shared.errors import GraphFormatError

__all__ = ["Graph", "load_graph", "csr_from_edges", "iter_text_edges", "save_graph_npz", "index_dtype",
           "graph_format", "open_graph", "GraphSource", "NpyArray", "PairArrayReader", "TextEdgeReader",
           "NodeColumn", "ArrayColumn", "check_node_columns", "node_column_from_file", "SUPPORTED_FORMATS",
           "check_num_nodes", "check_ids", "NODE_ARRAYS", "SPLITS", "save_graph_ogb"]

logger = logging.getLogger(__name__)

SPLITS = ("train_mask", "val_mask", "test_mask")
NODE_ARRAYS = ("features", "labels", *SPLITS)
TEXT_SUFFIXES = {"", ".txt", ".csv", ".tsv", ".el", ".edges", ".edgelist", ".snap", ".dat"}
SUPPORTED_FORMATS = (".npz (CSR indptr/indices or src/dst), .npy (m, 2) edge list, text edge list "
                     "(.txt .csv .tsv .el .edges .edgelist .snap .dat, optionally .gz), "
                     "or an OGB node-property directory (raw/edge.csv.gz)")
_ALIASES = {"x": "features", "y": "labels"}
_F32_MAX = float(np.finfo(np.float32).max)
_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError,
               ValueError, KeyError, OverflowError, IndexError, UnicodeDecodeError)


def index_dtype(num_nodes: int) -> np.dtype:
    """Smallest id dtype that holds ``num_nodes`` ids (int32 below 2**31, else int64)."""
    return np.dtype(np.int32) if num_nodes < 2**31 - 1 else np.dtype(np.int64)


def check_num_nodes(path, hi: int, entries: int) -> int:
    """Vertex count implied by the largest id ``hi``; refuse ids so sparse that the O(n) arrays
    every stage keeps would dwarf the graph (more than 16 vertices per edge beyond the first
    2**20): ids must be dense, ``0..n-1``; pass the vertex count explicitly to allow more."""
    n = int(hi) + 1
    if n > 16 * int(entries) + (1 << 20):
        raise GraphFormatError(f"{path}: vertex id {hi} is far beyond the {entries:,} edges (ids must be "
                               "0..n-1; relabel the vertices densely)")
    return n


@dataclass
class Graph:
    """An undirected graph in symmetric CSR form with optional node data.

    Shapes:
        indptr: int64[n + 1]; indices: int32|int64[2m] (global ids, sorted per row);
        features: float32|float16[n, F] or None; labels: int64[n] (-1 = unlabelled) or None;
        masks: bool[n] each (``train_mask``, ``val_mask``, ``test_mask``) or None.
    """

    indptr: np.ndarray
    indices: np.ndarray
    features: np.ndarray | None = None
    labels: np.ndarray | None = None
    train_mask: np.ndarray | None = None
    val_mask: np.ndarray | None = None
    test_mask: np.ndarray | None = None
    name: str = "graph"
    extra: dict = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def num_edges(self) -> int:
        """Undirected edges (each stored twice in the symmetric CSR)."""
        return int(self.indices.shape[0] // 2)

    @property
    def num_classes(self) -> int:
        if self.labels is None or self.labels.size == 0:
            return 0
        return int(self.labels.max()) + 1

    def degrees(self) -> np.ndarray:
        return np.diff(self.indptr)


def csr_from_edges(src: np.ndarray, dst: np.ndarray, num_nodes: int | None = None,
                   symmetrize: bool = True) -> Graph:
    """Build a clean symmetric CSR from an edge list: drops self loops and duplicates.

    Args:
        src, dst: int[E] endpoint ids (any integer dtype); must be ``>= 0``.
        num_nodes: vertex count; defaults to ``max id + 1``. Ids ``>= num_nodes`` are an error.
        symmetrize: add the reverse of every edge (default); if False the input must
            already contain both directions.
    """
    src = np.asarray(src)
    dst = np.asarray(dst)
    if src.shape != dst.shape or src.ndim != 1:
        raise GraphFormatError(f"edge endpoint arrays must be 1-D and of equal length (got {src.shape} and {dst.shape})")
    if not (np.issubdtype(src.dtype, np.integer) and np.issubdtype(dst.dtype, np.integer)):
        raise GraphFormatError(f"edge ids must be integers (got {src.dtype} and {dst.dtype})")
    if src.size and (src.dtype == np.uint64 or dst.dtype == np.uint64) and max(src.max(), dst.max()) >= 2**63:
        raise GraphFormatError("edge ids must be non-negative int64 values (got an id >= 2**63)")
    src = src.astype(np.int64, copy=False)
    dst = dst.astype(np.int64, copy=False)
    if src.size and min(src.min(), dst.min()) < 0:
        bad = int(min(src.min(), dst.min()))
        raise GraphFormatError(f"edge ids must be non-negative (got {bad})")
    hi = int(max(src.max(), dst.max())) + 1 if src.size else 0
    if num_nodes is None:
        num_nodes = check_num_nodes("edge list", hi - 1, src.size) if hi else 0
    elif hi > num_nodes:
        raise GraphFormatError(f"edge id {hi - 1} is out of range for a graph of {num_nodes} nodes")
    if num_nodes == 0:
        raise GraphFormatError("the graph is empty (0 nodes)")
    keep = src != dst
    src, dst = src[keep], dst[keep]
    if symmetrize:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    key = np.sort(src * num_nodes + dst)                   # sorts by (src, dst); dedup below
    if key.size:
        key = key[np.concatenate([[True], key[1:] != key[:-1]])]
    s = key // num_nodes
    d = key - s * num_nodes
    indptr = np.zeros(num_nodes + 1, np.int64)
    np.cumsum(np.bincount(s, minlength=num_nodes), out=indptr[1:])
    g = Graph(indptr=indptr, indices=d.astype(index_dtype(num_nodes)))
    if not symmetrize:
        _check_symmetric(g)
    return g


def _check_symmetric(g: Graph) -> None:
    n = g.num_nodes
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(g.indptr))
    fwd = np.sort(rows * n + g.indices)
    rev = np.sort(g.indices.astype(np.int64) * n + rows)
    if not np.array_equal(fwd, rev):
        raise GraphFormatError("the CSR is not symmetric: pass symmetrize=True to add reverse edges")


# ----------------------------------------------------------------------------------------------
# format detection
# ----------------------------------------------------------------------------------------------
def _ogb_edge_file(d: Path) -> Path | None:
    for rel in ("raw/edge.csv.gz", "raw/edge.csv", "edge.csv.gz"):
        if (d / rel).is_file():
            return d / rel
    return None


def _text_suffix_ok(p: Path) -> bool:
    name = p.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    return Path(name).suffix in TEXT_SUFFIXES


def graph_format(path) -> str:
    """``"npz"``, ``"npy"``, ``"text"`` or ``"ogb"`` for ``path``, or a clear error.

    The file's first bytes decide where they are unambiguous (a zip is an ``.npz``, ``\\x93NUMPY`` an
    ``.npy``, gzip is compressed text); otherwise the case-insensitive extension does.
    """
    p = Path(path)
    if not p.exists():
        raise GraphFormatError(f"{p}: no such file")
    if p.is_dir():
        if _ogb_edge_file(p) is not None:
            return "ogb"
        raise GraphFormatError(f"{p}: is a directory, not a graph file (an OGB dataset directory needs "
                               f"raw/edge.csv.gz); supported: {SUPPORTED_FORMATS}")
    if not p.is_file():
        raise GraphFormatError(f"{p}: not a regular file; supported: {SUPPORTED_FORMATS}")
    try:
        with open(p, "rb") as f:
            head = f.read(6)
    except OSError as e:
        raise GraphFormatError(f"{p}: cannot be read ({e.strerror or e})") from None
    suffix = p.suffix.lower()
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return "npz"
    if suffix == ".npz":
        return "npz"  # not a zip: the reader says so
    if suffix == ".npy":
        return "npy"
    if head.startswith(b"\x1f\x8b") or _text_suffix_ok(p):
        if not _text_suffix_ok(p):
            raise GraphFormatError(f"{p}: unsupported format {p.suffix!r}; supported: {SUPPORTED_FORMATS}")
        return "text"
    raise GraphFormatError(f"{p}: unsupported format {p.suffix!r}; supported: {SUPPORTED_FORMATS}")


# ----------------------------------------------------------------------------------------------
# .npy arrays in plain files and zip members
# ----------------------------------------------------------------------------------------------
class NpyArray:
    """One ``.npy`` array in a plain file or an ``.npz`` member, header checked, read in row blocks.

    Blocks come back native-endian and C-ordered whatever the file holds.  Plain files and
    stored (uncompressed) members are seekable (:meth:`read` any rows); deflated members are
    read sequentially (:meth:`iter_blocks`).

    Raises:
        GraphFormatError: "pickled member NAME in FILE" for object arrays, "truncated" when the
            header declares more bytes than are present, and other header faults, always
            naming the file (and member).
    """

    def __init__(self, path, member: str | None = None):
        self.path = str(path)
        self.member = member
        self.where = f"member {member!r} in {self.path}" if member else self.path
        try:
            if member is None:
                with open(self.path, "rb") as f:
                    self._parse_header(f)
                    self._data_offset = f.tell()
                avail = os.path.getsize(self.path) - self._data_offset
                self.seekable = True
            else:
                with zipfile.ZipFile(self.path) as zf:
                    info = zf.getinfo(member)
                    if info.flag_bits & 1:
                        raise GraphFormatError(f"{self.where}: encrypted zip members are not supported")
                    with zf.open(info) as f:
                        self._parse_header(f)
                        header_len = f.tell()
                avail = info.file_size - header_len
                self.seekable = info.compress_type == zipfile.ZIP_STORED
                self._data_offset = None
                if self.seekable:
                    with open(self.path, "rb") as raw:
                        raw.seek(info.header_offset)
                        local = raw.read(30)
                    if len(local) < 30 or local[:4] != b"PK\x03\x04":
                        raise GraphFormatError(f"{self.where}: corrupt zip (bad local header)")
                    fn_len = int.from_bytes(local[26:28], "little")
                    ex_len = int.from_bytes(local[28:30], "little")
                    self._data_offset = info.header_offset + 30 + fn_len + ex_len + header_len
                    avail = min(avail, os.path.getsize(self.path) - self._data_offset)
        except GraphFormatError:
            raise
        except _ZIP_ERRORS as e:
            raise GraphFormatError(f"{self.where}: truncated or corrupt ({type(e).__name__}: {e})") from None
        self.nbytes = math.prod(self.shape) * self.dtype.itemsize
        if avail < self.nbytes:
            raise GraphFormatError(f"{self.where}: truncated: the header declares shape {self.shape} "
                                   f"({self.nbytes:,} bytes) but only {max(avail, 0):,} bytes are present")

    def _parse_header(self, f) -> None:
        try:
            version = np.lib.format.read_magic(f)
            with warnings.catch_warnings():  # numpy warns about Python 2 headers; the checks below decide
                warnings.simplefilter("ignore")
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
                elif version == (2, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
                else:
                    raise ValueError(f"unsupported .npy version {version}")
        except Exception as e:  # numpy's header parser raises many types (ValueError, TokenError, ...)
            if isinstance(e, (EOFError, zlib.error, zipfile.BadZipFile)):
                raise GraphFormatError(f"{self.where}: truncated or corrupt ({e})") from None
            raise GraphFormatError(f"{self.where}: not a valid .npy array ({e})") from None
        if dtype.hasobject:
            what = f"pickled member {self.member!r} in {self.path}" if self.member else f"pickled array in {self.path}"
            raise GraphFormatError(f"{what}: object arrays are not accepted (save plain numeric arrays)")
        if dtype.kind not in "biuf" or dtype.fields is not None or dtype.subdtype is not None:
            raise GraphFormatError(f"{self.where}: unsupported dtype {dtype} (expected bool, integer or float)")
        self._version = version
        self.shape = tuple(int(s) for s in shape)
        self.fortran = bool(fortran) and len(self.shape) > 1
        self.dtype = dtype
        self.native = dtype.newbyteorder("=")

    @property
    def rows(self) -> int:
        return self.shape[0] if self.shape else 1

    @property
    def row_shape(self) -> tuple:
        return self.shape[1:]

    def _fix(self, flat: np.ndarray, nrows: int) -> np.ndarray:
        arr = flat.reshape((nrows,) + self.row_shape) if self.shape else flat.reshape(())
        if arr.dtype != self.native:
            arr = arr.astype(self.native)
        return arr

    def _read_exact(self, f, count: int, at_row: int) -> np.ndarray:
        nbytes = count * self.dtype.itemsize
        try:
            buf = f.read(nbytes)
        except _ZIP_ERRORS as e:
            raise GraphFormatError(f"{self.where}: truncated or corrupt ({type(e).__name__}: {e})") from None
        if len(buf) != nbytes:
            raise GraphFormatError(f"{self.where}: truncated at row {at_row}")
        return np.frombuffer(buf, dtype=self.dtype)

    def read(self, a: int = 0, b: int | None = None) -> np.ndarray:
        """Rows ``[a, b)`` (all by default)."""
        b = self.rows if b is None else min(b, self.rows)
        a = max(0, min(a, b))
        if not self.seekable:
            if a == 0 and b == self.rows:
                blocks = [blk for _, blk in self.iter_blocks(max(self.rows, 1))]
                return blocks[0] if len(blocks) == 1 else np.concatenate(blocks) if blocks else \
                    np.empty((0,) + self.row_shape, self.native)
            raise GraphFormatError(f"{self.where}: compressed members can only be read in order")
        inner = math.prod(self.row_shape)
        with open(self.path, "rb") as f:
            if not self.fortran:
                f.seek(self._data_offset + a * inner * self.dtype.itemsize)
                return self._fix(self._read_exact(f, (b - a) * inner, a), b - a)
            if len(self.shape) > 2:  # rare: read whole, reorder, slice
                flat = self._read_exact(f, self.rows * inner, 0)
                arr = np.ascontiguousarray(flat.reshape(self.shape, order="F")[a:b])
                return arr.astype(self.native, copy=False)
            cols = []
            for j in range(inner):  # column-major (m, F): each column is contiguous on disk
                f.seek(self._data_offset + (j * self.rows + a) * self.dtype.itemsize)
                cols.append(self._read_exact(f, b - a, a))
        out = np.stack(cols, axis=1) if cols else np.empty((b - a, 0), self.dtype)
        return np.ascontiguousarray(out.astype(self.native, copy=False))

    def iter_blocks(self, block_rows: int) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(first_row, rows)`` blocks in file order, every row once."""
        block_rows = max(1, int(block_rows))
        if self.seekable:
            for a in range(0, self.rows, block_rows):
                yield a, self.read(a, a + block_rows)
            return
        inner = math.prod(self.row_shape)
        try:
            with zipfile.ZipFile(self.path) as zf, zf.open(self.member) as f:
                np.lib.format.read_magic(f)
                (np.lib.format.read_array_header_1_0 if self._version == (1, 0)
                 else np.lib.format.read_array_header_2_0)(f)
                if not self.shape:
                    yield 0, self._fix(self._read_exact(f, 1, 0), 1)
                    return
                if self.fortran:  # column-major deflated data cannot be cut into rows: read whole
                    flat = self._read_exact(f, self.rows * inner, 0)
                    arr = flat.reshape(self.shape, order="F")
                    arr = np.ascontiguousarray(arr.astype(self.native, copy=False))
                    for a in range(0, self.rows, block_rows):
                        yield a, arr[a:a + block_rows]
                    return
                for a in range(0, self.rows, block_rows):
                    c = min(block_rows, self.rows - a)
                    yield a, self._fix(self._read_exact(f, c * inner, a), c)
                f.read(1)  # reaching the end makes zipfile check the CRC
        except GraphFormatError:
            raise
        except _ZIP_ERRORS as e:
            raise GraphFormatError(f"{self.where}: truncated or corrupt ({type(e).__name__}: {e})") from None

# ----------------------------------------------------------------------------------------------
# edge readers
# ----------------------------------------------------------------------------------------------
def check_ids(arr: np.ndarray, n: int | None, what: str, base_index: int = 0, path=None) -> None:
    """Raise naming the first negative id (or id ``>= n``) of ``arr``, its position and the file."""
    if arr.size == 0:
        return
    pre = f"{path}: " if path is not None else ""
    lo = int(arr.min())
    if lo < 0:
        pos = int(np.argmin(arr))
        raise GraphFormatError(f"{pre}negative vertex id {lo} in {what} at entry {base_index + pos}")
    if n is not None:
        hi = int(arr.max())
        if hi >= n:
            pos = int(np.argmax(arr))
            raise GraphFormatError(f"{pre}vertex id {hi} in {what} at entry {base_index + pos} is out of "
                                   f"range: num_nodes={n}")


def _as_ids(arr: np.ndarray, where: str) -> np.ndarray:
    """int64 ids from any integer block; uint64 values >= 2**63 are an error, not a wrap."""
    if arr.dtype.kind == "u" and arr.dtype.itemsize == 8 and arr.size and int(arr.max()) >= 2**63:
        raise GraphFormatError(f"{where}: vertex id {int(arr.max())} is beyond int64")
    return arr.astype(np.int64, copy=False)


class PairArrayReader:
    """An edge list stored as one ``(m, 2)`` integer array or two ``(m,)`` arrays (``src``/``dst``)."""

    def __init__(self, pair: NpyArray | None = None, src: NpyArray | None = None, dst: NpyArray | None = None):
        self.path = (pair or src).path
        if pair is not None:
            if len(pair.shape) != 2 or pair.shape[1] != 2:
                raise GraphFormatError(f"{pair.where}: expected an edge list of shape (m, 2), got {pair.shape}")
            arrays = [pair]
        else:
            for a in (src, dst):
                if len(a.shape) != 1:
                    raise GraphFormatError(f"{a.where}: edge endpoints must be 1-D (got shape {a.shape})")
            if src.shape != dst.shape:
                raise GraphFormatError(f"{self.path}: src and dst differ in length ({src.rows} vs {dst.rows})")
            arrays = [src, dst]
        for a in arrays:
            if a.dtype.kind not in "iu":
                raise GraphFormatError(f"{a.where}: edge list must be integer, got {a.dtype}")
        self._pair, self._src, self._dst = pair, src, dst
        self.num_edges = arrays[0].rows
        self.seekable = all(a.seekable for a in arrays)

    def read(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows ``[a, b)`` as int64 ``(u, v)`` (seekable readers only); ids not range-checked."""
        if self._pair is not None:
            blk = self._pair.read(a, b)
            return _as_ids(blk[:, 0], self.path), _as_ids(blk[:, 1], self.path)
        return _as_ids(self._src.read(a, b), self.path), _as_ids(self._dst.read(a, b), self.path)

    def iter_blocks(self, rows: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """``(first_row, u, v)`` blocks in file order."""
        if self.seekable:
            for a in range(0, self.num_edges, rows):
                yield (a, *self.read(a, a + rows))
        elif self._pair is not None:
            for a, blk in self._pair.iter_blocks(rows):
                yield a, _as_ids(blk[:, 0], self.path), _as_ids(blk[:, 1], self.path)
        else:
            for (a, u), (_, v) in zip(self._src.iter_blocks(rows), self._dst.iter_blocks(rows)):
                yield a, _as_ids(u, self.path), _as_ids(v, self.path)


class _GzipReader:
    """Sequential gzip decompression that, unlike :mod:`gzip`, treats a stream cut before its
    trailer (CRC and size) as truncated.  Concatenated members are read in turn."""

    def __init__(self, path):
        self.path = str(path)
        self._f = open(self.path, "rb")
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._buf = b""

    def _fill(self, n: int) -> None:
        """Decompress until ``n`` bytes are buffered or the data ends."""
        while len(self._buf) < n:
            if self._d.eof:
                rest = self._d.unused_data
                if not rest.strip(b"\x00"):
                    rest = self._f.read(1 << 20)
                    if not rest.strip(b"\x00"):
                        return
                self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            else:
                rest = self._d.unconsumed_tail or self._f.read(1 << 20)
                if not rest:
                    raise EOFError("compressed data ended before the end of the gzip stream")
            self._buf += self._d.decompress(rest, max(n - len(self._buf), 1 << 16))

    def read(self, n: int) -> bytes:
        self._fill(n)
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def readline(self) -> bytes:
        start = 0
        while b"\n" not in self._buf[start:]:
            start = len(self._buf)
            self._fill(len(self._buf) + (1 << 16))
            if len(self._buf) == start:
                break
        i = self._buf.find(b"\n")
        i = len(self._buf) if i < 0 else i + 1
        out, self._buf = self._buf[:i], self._buf[i:]
        return out

    def readlines(self, hint: int) -> list:
        data = self.read(max(hint, 1))
        if not data:
            return []
        if not data.endswith(b"\n"):
            data += self.readline()
        return data.splitlines(keepends=True)

    def close(self):
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class TextEdgeReader:
    """A text edge list (plain or gzip), parsed block by block by a numba kernel.

    A UTF-8 BOM and one header line (first content line starting with a letter or quote) are
    skipped; columns after the second are dropped; ids are overflow-checked.
    """

    def __init__(self, path, block_bytes: int = 16 << 20):
        self.path = str(path)
        self.block_bytes = max(1 << 10, int(block_bytes))
        with open(self.path, "rb") as f:
            self.gzipped = f.read(2) == b"\x1f\x8b"
        self.seekable = False

    def _open(self):
        return _GzipReader(self.path) if self.gzipped else open(self.path, "rb")

    def _raise(self, code: int, line: int, block: bytes, pos: int) -> None:
        end = block.find(b"\n", pos)
        text = block[pos:end if end >= 0 else len(block)].decode("utf-8", "replace").strip()[:80]
        why = {1: "malformed line (expected two integer vertex ids)",
               2: "expected at least 2 fields (two integer vertex ids)",
               3: "negative vertex id",
               4: "vertex id beyond int64 (ids must be 0..n-1)"}[code]
        raise GraphFormatError(f"{self.path}: line {line + 1}: {why}: {text!r}")

    @staticmethod
    def _blank_header(block: bytes) -> bytes:
        """Blank out a leading BOM and a header line (the first content line, if it starts with a
        letter or a quote) so that the parser sees an empty line and line numbers stay right."""
        if block.startswith(b"\xef\xbb\xbf"):
            block = b"   " + block[3:]
        pos = 0
        while pos < len(block):
            end = block.find(b"\n", pos)
            end = len(block) if end < 0 else end
            s = block[pos:end].strip(b" \t\r,")
            if not s or s[:1] in (b"#", b"%"):
                pos = end + 1
                continue
            if s[:1].isalpha() or s[:1] in (b'"', b"'"):
                return block[:pos] + b" " * (end - pos) + block[end:]
            break
        return block

    def iter_blocks(self, num_nodes: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Yield ``(u, v, line)`` int64 arrays per block; ids checked against ``num_nodes``."""
        from argosy.shared.textparse import empty_out, parse_edge_block

        line0, rest, first = 0, b"", True
        try:
            with self._open() as f:
                while True:
                    data = f.read(self.block_bytes)
                    eof = not data
                    block = rest + data
                    if not eof:
                        cut = block.rfind(b"\n")
                        if cut < 0:
                            if len(block) > (64 << 20):
                                raise GraphFormatError(f"{self.path}: line {line0 + 1}: a line longer than 64 MiB "
                                                       "(not a text edge list?)")
                            rest = block
                            continue
                        block, rest = block[:cut + 1], block[cut + 1:]
                    else:
                        rest = b""
                    if first and block:
                        first = False
                        block = self._blank_header(block)
                    if block:
                        buf = np.frombuffer(block, dtype=np.uint8)
                        out = empty_out(buf.size)
                        cnt, line1, err, err_line, err_pos = parse_edge_block(buf, out, line0)
                        if err:
                            self._raise(int(err), int(err_line), block, int(err_pos))
                        pairs = out[:cnt]
                        if num_nodes is not None and cnt:
                            bad = np.flatnonzero((pairs[:, 0] >= num_nodes) | (pairs[:, 1] >= num_nodes))
                            if bad.size:
                                r = int(bad[0])
                                raise GraphFormatError(
                                    f"{self.path}: line {int(pairs[r, 2]) + 1}: vertex id "
                                    f"{int(pairs[r, :2].max())} is out of range: num_nodes={num_nodes}")
                        line0 = int(line1)
                        yield pairs[:, 0], pairs[:, 1], pairs[:, 2]
                    if eof:
                        break
        except GraphFormatError:
            raise
        except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as e:
            if isinstance(e, OSError) and not isinstance(e, gzip.BadGzipFile) and e.errno is not None:
                raise GraphFormatError(f"{self.path}: cannot be read ({e.strerror or e})") from None
            raise GraphFormatError(f"{self.path}: truncated or corrupt gzip data ({e})") from None

    def scan(self, num_nodes: int | None = None) -> tuple[int, int, int]:
        """One validation pass: ``(edges, largest id, blocks)``."""
        count, hi, blocks = 0, -1, 0
        for u, v, _ in self.iter_blocks(num_nodes):
            count += u.size
            blocks += 1
            if u.size:
                hi = max(hi, int(u.max()), int(v.max()))
        return count, hi, blocks


def iter_text_edges(path, chunk_lines: int = 1 << 20):
    """Yield ``(src, dst)`` int64 arrays from a text edge list, block by block."""
    for u, v, _ in TextEdgeReader(path, block_bytes=chunk_lines * 16).iter_blocks():
        yield u, v


# ----------------------------------------------------------------------------------------------
# node data columns
# ----------------------------------------------------------------------------------------------
class NodeColumn:
    """One per-vertex array (features, labels or a mask) readable in row blocks, validated as read.

    Attributes:
        name: ``features``, ``labels``, ``train_mask``, ``val_mask`` or ``test_mask``.
        rows: vertex count; row_shape: ``(F,)`` for features, ``()`` otherwise.
        dtype: the dtype blocks come back in (float32|float16, int64, bool).
        source: the file (and member) it comes from, for messages.
    """

    name: str
    rows: int
    row_shape: tuple
    dtype: np.dtype
    source: str

    def _blocks(self, block_rows: int) -> Iterator[tuple[int, np.ndarray]]:
        raise NotImplementedError

    def iter_blocks(self, block_rows: int = 1 << 16) -> Iterator[tuple[int, np.ndarray]]:
        """``(first_row, block)`` in row order, converted to :attr:`dtype` and validated."""
        seen = 0
        for a, blk in self._blocks(block_rows):
            blk = _check_block(self, blk, a)
            seen += blk.shape[0]
            yield a, blk
        if seen != self.rows:
            raise GraphFormatError(f"{self.source}: {self.name} has {seen} rows, expected {self.rows}")

    def read(self) -> np.ndarray:
        """The whole column (small graphs)."""
        parts = [blk for _, blk in self.iter_blocks(max(self.rows, 1))]
        return np.concatenate(parts) if parts else np.empty((0,) + self.row_shape, self.dtype)


def _check_block(col: NodeColumn, blk: np.ndarray, a: int) -> np.ndarray:
    src, name = col.source, col.name
    if name == "features":
        if blk.dtype.kind != "f":
            raise GraphFormatError(f"{src}: features must be float (got {blk.dtype})")
        if not np.isfinite(blk).all():
            r = a + int(np.flatnonzero(~np.isfinite(blk).all(axis=tuple(range(1, blk.ndim))))[0])
            raise GraphFormatError(f"{src}: features contain NaN or inf (first at vertex {r})")
        limit = float(np.finfo(col.dtype).max)
        if blk.dtype.itemsize > col.dtype.itemsize and blk.size and float(np.abs(blk).max()) > limit:
            r = a + int(np.flatnonzero((np.abs(blk) > limit).any(axis=tuple(range(1, blk.ndim))))[0])
            raise GraphFormatError(f"{src}: feature value beyond the {col.dtype} range at vertex {r} "
                                   f"(|x| > {limit:.3g}); rescale the features")
        return blk.astype(col.dtype, copy=False)
    if name == "labels":
        if blk.dtype.kind not in "iu":
            raise GraphFormatError(f"{src}: labels must be integers (got {blk.dtype})")
        blk = blk.reshape(-1)
        if blk.size:
            lo, hi = int(blk.min()), int(blk.max())
            if lo < -1:
                r = a + int(np.argmin(blk))
                raise GraphFormatError(f"{src}: label {lo} at vertex {r} is negative (-1 = unlabelled)")
            if hi >= max(col.rows, 2):
                r = a + int(np.argmax(blk))
                raise GraphFormatError(f"{src}: label {hi} at vertex {r} is out of range (a class id must be "
                                       f"below the vertex count {col.rows}; classes are 0..C-1)")
        return blk.astype(np.int64, copy=False)
    # masks
    if blk.dtype.kind == "f":
        raise GraphFormatError(f"{src}: {name} is a float array; masks must be bool (or 0/1 integers)")
    if blk.dtype.kind in "iu":
        if blk.size and (int(blk.min()) < 0 or int(blk.max()) > 1):
            raise GraphFormatError(f"{src}: {name} holds values other than 0/1 (masks must be bool)")
    return blk.reshape(-1).astype(bool, copy=False)


_OUT_DTYPES = {"labels": np.dtype(np.int64), "train_mask": np.dtype(bool), "val_mask": np.dtype(bool),
               "test_mask": np.dtype(bool)}


def _want_shape(name: str, shape: tuple, n: int, where: str) -> tuple:
    if name == "features":
        if len(shape) != 2 or shape[0] != n or shape[1] < 1:
            raise GraphFormatError(f"{where}: features must be [num_nodes={n}, F >= 1] (got shape {shape})")
        return shape[1:]
    if shape == (n, 1):
        return ()
    if shape != (n,):
        raise GraphFormatError(f"{where}: {name} must have shape ({n},) (got {shape})")
    return ()


class NpyColumn(NodeColumn):
    """A node column backed by an ``.npy`` file or ``.npz`` member."""

    def __init__(self, name: str, arr: NpyArray, n: int, feature_dtype: str = "float32"):
        self.name, self.arr, self.rows, self.source = name, arr, n, arr.where
        self.row_shape = _want_shape(name, arr.shape, n, arr.where)
        self.dtype = np.dtype(feature_dtype) if name == "features" else _OUT_DTYPES[name]
        kind = arr.dtype.kind
        if name == "features" and kind != "f":
            raise GraphFormatError(f"{arr.where}: features must be float (got {arr.dtype})")
        if name == "labels" and kind not in "iu":
            raise GraphFormatError(f"{arr.where}: labels must be int[{n}] (got {arr.dtype}{list(arr.shape)})")
        if name in SPLITS and kind == "f":
            raise GraphFormatError(f"{arr.where}: {name} is a float array; masks must be bool (or 0/1 integers)")

    def _blocks(self, block_rows):
        for a, blk in self.arr.iter_blocks(block_rows):
            yield a, blk.reshape((blk.shape[0],) + self.row_shape)


class ArrayColumn(NodeColumn):
    """A node column held in memory (an in-memory graph, random features, index-list splits)."""

    def __init__(self, name: str, arr: np.ndarray, source: str = "<memory>", feature_dtype: str | None = None):
        arr = np.asarray(arr)
        self.name, self.arr, self.rows, self.source = name, arr, int(arr.shape[0]), source
        self.row_shape = arr.shape[1:] if name == "features" else ()
        if name == "features":
            self.dtype = np.dtype(feature_dtype or (arr.dtype if arr.dtype in (np.float16, np.float32) else np.float32))
        else:
            self.dtype = _OUT_DTYPES[name]

    def _blocks(self, block_rows):
        for a in range(0, self.rows, block_rows):
            yield a, self.arr[a:a + block_rows]


class CsvColumn(NodeColumn):
    """A node column from a (gzip) CSV with one row per vertex (OGB ``node-feat``/``node-label``)."""

    def __init__(self, name: str, path: Path, n: int, feature_dtype: str = "float32"):
        self.name, self.path, self.rows, self.source = name, Path(path), n, str(path)
        self.dtype = np.dtype(feature_dtype) if name == "features" else _OUT_DTYPES[name]
        first = self._first_line()
        width = len(first.split(b",")) if first else 0
        self.row_shape = (width,) if name == "features" else ()
        if name != "features" and width != 1:
            raise GraphFormatError(f"{self.source}: {name} must have one value per line (got {width})")

    def _open(self):
        with open(self.path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        return _GzipReader(self.path) if gz else open(self.path, "rb")

    def _first_line(self) -> bytes:
        try:
            with self._open() as f:
                return f.readline().strip()
        except (OSError, EOFError, zlib.error) as e:
            raise GraphFormatError(f"{self.source}: truncated or corrupt ({e})") from None

    def _blocks(self, block_rows):
        dt = np.float64 if self.name in ("features", "labels") else np.int64
        a = 0
        try:
            with self._open() as f:
                while True:
                    lines = f.readlines(max(1 << 16, block_rows * 8 * max(1, self.row_shape[0] if self.row_shape else 1)))
                    if not lines:
                        break
                    lines = [ln for ln in lines if ln.strip()]
                    if not lines:
                        continue
                    width = self.row_shape[0] if self.row_shape else 1
                    try:  # split + one array() call: ~10x faster than np.loadtxt
                        flat = np.array(b" ".join(lines).replace(b",", b" ").split(), dtype=dt)
                    except (ValueError, OverflowError) as e:
                        raise GraphFormatError(f"{self.source}: malformed value near row {a + 1} ({e})") from None
                    if flat.size != len(lines) * width:
                        bad = next(i for i, ln in enumerate(lines) if len(ln.split(b",")) != width)
                        raise GraphFormatError(f"{self.source}: row {a + bad + 1} has "
                                               f"{len(lines[bad].split(b','))} values, expected {width}")
                    blk = flat.reshape(len(lines), width)
                    if self.name == "features" and blk.shape[1] != self.row_shape[0]:
                        raise GraphFormatError(f"{self.source}: rows have {blk.shape[1]} values, expected "
                                               f"{self.row_shape[0]}")
                    if a + blk.shape[0] > self.rows:
                        raise GraphFormatError(f"{self.source}: more than {self.rows} rows (one per vertex)")
                    if self.name == "labels":  # OGB writes "nan" for unlabelled vertices
                        lab = blk[:, 0]
                        known = ~np.isnan(lab)
                        bad = known & ((lab != np.round(lab)) | (np.abs(lab) > 2**53))
                        if bad.any():
                            r = a + int(np.flatnonzero(bad)[0]) + 1
                            raise GraphFormatError(f"{self.source}: the label in row {r} is not an integer class id")
                        blk = np.where(known, lab, -1).astype(np.int64).reshape(-1, 1)
                    yield a, blk if self.name == "features" else blk[:, 0]
                    a += blk.shape[0]
        except GraphFormatError:
            raise
        except (OSError, EOFError, zlib.error) as e:
            raise GraphFormatError(f"{self.source}: truncated or corrupt ({e})") from None


def _read_index_list(path: Path, n: int) -> np.ndarray:
    """Vertex ids, one per line (OGB split files), as a bool mask of length ``n``."""
    col = CsvColumn("labels", path, n)
    col.rows = 2**62  # an id list has any length; only the row-count check is relaxed
    ids = [blk for _, blk in col._blocks(1 << 16)]
    ids = np.concatenate(ids) if ids else np.empty(0, np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= n):
        bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
        raise GraphFormatError(f"{path}: vertex id {bad} out of range [0, {n})")
    mask = np.zeros(n, bool)
    mask[ids] = True
    return mask


def node_column_from_file(name: str, path, n: int, feature_dtype: str = "float32") -> NodeColumn:
    """A side file (``--features F.npy`` etc.) as a node column.

    ``.npy`` arrays are streamed; a mask given as an integer id list (length != n) is turned
    into a bool mask; text files hold one row per vertex (or one id per line for masks).
    """
    p = Path(path)
    if not p.exists():
        raise GraphFormatError(f"{p}: no such file (given for {name})")
    if p.is_dir():
        raise GraphFormatError(f"{p}: is a directory (given for {name})")
    fmt = graph_format(p)
    if fmt == "npy":
        arr = NpyArray(p)
        if name in SPLITS and arr.dtype.kind in "iu" and arr.shape != (n,) and len(arr.shape) == 1:
            ids = _as_ids(arr.read(), str(p))
            if ids.size and (ids.min() < 0 or ids.max() >= n):
                raise GraphFormatError(f"{p}: vertex id out of range [0, {n}) in the {name} id list")
            mask = np.zeros(n, bool)
            mask[ids] = True
            return ArrayColumn(name, mask, str(p))
        return NpyColumn(name, arr, n, feature_dtype)
    if fmt == "text":
        if name in SPLITS:
            return ArrayColumn(name, _read_index_list(p, n), str(p))
        return CsvColumn(name, p, n, feature_dtype)
    raise GraphFormatError(f"{p}: {name} must be a .npy array or a text/CSV file (got {fmt})")


def check_node_columns(columns: dict, n: int, block_rows: int = 1 << 20) -> dict:
    """Validate labels and masks together (cheap: O(n) bytes per block): ranges, non-float
    masks, no vertex in two splits, no split vertex without a label.  Returns counts per split."""
    masks = [s for s in SPLITS if s in columns]
    want = ([columns["labels"]] if "labels" in columns else []) + [columns[s] for s in masks]
    counts = {s: 0 for s in masks}
    if not want:
        return counts
    iters = [c.iter_blocks(block_rows) for c in want]
    for blocks in zip(*iters):
        a = blocks[0][0]
        labels = blocks[0][1] if "labels" in columns else None
        mblocks = [b for _, b in blocks[1 if labels is not None else 0:]]
        for s, m in zip(masks, mblocks):
            counts[s] += int(m.sum())
            if labels is not None and m.any() and (labels[m] < 0).any():
                r = a + int(np.flatnonzero(m & (labels < 0))[0])
                raise GraphFormatError(f"{columns[s].source}: {s} selects vertex {r}, which has no label (-1)")
        for i in range(len(masks)):
            for j in range(i + 1, len(masks)):
                both = mblocks[i] & mblocks[j]
                if both.any():
                    r = a + int(np.flatnonzero(both)[0])
                    raise GraphFormatError(f"{columns[masks[i]].source}: {masks[i]} and {masks[j]} overlap "
                                           f"({int(both.sum())} vertices in this block, first {r}); splits "
                                           "must be disjoint")
    for it in iters:  # finish the generators so they check their row counts
        for _ in it:
            pass
    return counts


# ----------------------------------------------------------------------------------------------
# opening a graph
# ----------------------------------------------------------------------------------------------
@dataclass
class GraphSource:
    """A graph file opened and its headers validated: the edges (a CSR or an edge list) and the
    node data columns, nothing read in bulk yet.

    Attributes:
        kind: ``"csr"`` (``indptr`` loaded, ``indices`` an :class:`NpyArray`) or ``"edges"``
            (``edges`` a :class:`PairArrayReader` or :class:`TextEdgeReader`).
        num_nodes: known for CSRs, ``.npz`` edge lists with ``num_nodes`` and OGB directories;
            else ``None`` (edge lists: max id + 1, found by the stream's scan).
    """

    path: str
    format: str
    kind: str
    name: str
    num_nodes: int | None = None
    indptr: np.ndarray | None = None
    indices: NpyArray | None = None
    edges: object = None
    _column_specs: dict = field(default_factory=dict)

    def node_columns(self, n: int, feature_dtype: str = "float32") -> dict:
        """The node data as :class:`NodeColumn` objects for a graph of ``n`` vertices."""
        out = {}
        for name, spec in self._column_specs.items():
            if isinstance(spec, NpyArray):
                out[name] = NpyColumn(name, spec, n, feature_dtype)
            elif isinstance(spec, tuple) and spec[0] == "csv":
                out[name] = CsvColumn(name, spec[1], n, feature_dtype)
            elif isinstance(spec, tuple) and spec[0] == "ids":
                out[name] = ArrayColumn(name, _read_index_list(spec[1], n), str(spec[1]))
        return out


def _stem(p: Path) -> str:
    name = p.name
    for suf in (".gz",):
        if name.lower().endswith(suf):
            name = name[: -len(suf)]
    return name.split(".")[0] or "graph"


def _open_npz(p: Path) -> GraphSource:
    try:
        with zipfile.ZipFile(p) as zf:
            members = zf.namelist()
    except _ZIP_ERRORS as e:
        size = p.stat().st_size
        why = "an empty (0-byte) file" if size == 0 else f"truncated or not a zip archive ({e})"
        raise GraphFormatError(f"{p}: not a readable .npz: {why}") from None
    names = {}
    for m in members:
        if m.endswith(".npy"):
            key = m[:-4]
            if key in names:
                raise GraphFormatError(f"{p}: duplicate member {m!r}")
            names[key] = m
    arr = {}

    def get(key):
        if key not in arr:
            arr[key] = NpyArray(p, names[key])
        return arr[key]

    specs = {}
    for key in names:
        canon = _ALIASES.get(key, key)
        if canon in NODE_ARRAYS:
            if canon in specs:
                raise GraphFormatError(f"{p}: both {key!r} and its alias for {canon!r} are present")
            specs[canon] = get(key)
    src = GraphSource(path=str(p), format="npz", kind="csr", name=_stem(p), _column_specs=specs)
    if "indptr" in names and "indices" in names:
        ip = get("indptr")
        if ip.dtype.kind not in "iu" or get("indices").dtype.kind not in "iu":
            raise GraphFormatError(f"{p}: indptr/indices must be integer arrays (got {ip.dtype}/{get('indices').dtype})")
        if len(ip.shape) != 1 or ip.rows < 1:
            raise GraphFormatError(f"{p}: indptr must be 1-D with at least 1 entry (got shape {ip.shape})")
        ind = get("indices")
        if len(ind.shape) != 1:
            raise GraphFormatError(f"{p}: indices must be 1-D (got shape {ind.shape})")
        indptr = _as_ids(ip.read(), ip.where)
        if indptr[0] != 0 or (indptr.size > 1 and np.any(indptr[1:] < indptr[:-1])):
            raise GraphFormatError(f"{p}: indptr must start at 0 and be non-decreasing")
        if int(indptr[-1]) != ind.rows:
            raise GraphFormatError(f"{p}: indptr[-1]={int(indptr[-1])} does not match len(indices)={ind.rows}")
        src.indptr, src.indices, src.num_nodes = indptr, ind, int(indptr.size - 1)
    elif "src" in names and "dst" in names:
        src.kind = "edges"
        src.edges = PairArrayReader(src=get("src"), dst=get("dst"))
        if "num_nodes" in names:
            nn = get("num_nodes")
            if nn.shape not in ((), (1,)) or nn.dtype.kind not in "iu":
                raise GraphFormatError(f"{p}: num_nodes must be one integer (got {nn.dtype}{list(nn.shape)})")
            src.num_nodes = int(nn.read().reshape(-1)[0])
            if src.num_nodes < 1:
                raise GraphFormatError(f"{p}: num_nodes must be >= 1 (got {src.num_nodes})")
            if src.num_nodes > 16 * src.edges.num_edges + (1 << 20):
                raise GraphFormatError(f"{p}: num_nodes={src.num_nodes} is far beyond the {src.edges.num_edges:,} "
                                       "edges (ids must be dense 0..n-1)")
    else:
        raise GraphFormatError(f"{p}: expected arrays 'indptr'+'indices' or 'src'+'dst' (missing member "
                               f"'indptr.npy'; found {sorted(names)})")
    return src


def _open_ogb(p: Path, split: str | None) -> GraphSource:
    edge = _ogb_edge_file(p)
    raw = edge.parent
    src = GraphSource(path=str(p), format="ogb", kind="edges", name=p.name, edges=TextEdgeReader(edge))
    nfile = next((raw / f for f in ("num-node-list.csv.gz", "num-node-list.csv") if (raw / f).is_file()), None)
    if nfile is not None:
        vals = CsvColumn("labels", nfile, 1)._first_line()
        try:
            src.num_nodes = int(vals.split(b",")[0])
        except ValueError:
            raise GraphFormatError(f"{nfile}: expected the vertex count (got {vals[:40]!r})") from None
        if src.num_nodes < 1:
            raise GraphFormatError(f"{nfile}: the vertex count must be >= 1 (got {src.num_nodes})")
    for name, fname in (("features", "node-feat"), ("labels", "node-label")):
        f = next((raw / (fname + s) for s in (".csv.gz", ".csv") if (raw / (fname + s)).is_file()), None)
        if f is not None:
            src._column_specs[name] = ("csv", f)
    sd = p / "split"
    if sd.is_dir():
        names = sorted(d.name for d in sd.iterdir() if d.is_dir())
        if split is None and len(names) > 1:
            raise GraphFormatError(f"{sd}: several splits {names}; choose one (--split NAME)")
        if split is not None and split not in names:
            raise GraphFormatError(f"{sd}: no split {split!r} (found {names})")
        if names:
            d = sd / (split or names[0])
            for mask, fname in (("train_mask", "train"), ("val_mask", "valid"), ("test_mask", "test")):
                f = next((d / (fname + s) for s in (".csv.gz", ".csv") if (d / (fname + s)).is_file()), None)
                if f is not None:
                    src._column_specs[mask] = ("ids", f)
    return src


def open_graph(path, split: str | None = None, block_bytes: int = 16 << 20) -> GraphSource:
    """Open ``path`` (any supported format) and validate its headers; read nothing in bulk.

    Raises:
        GraphFormatError: naming the file and the fault (or "unsupported format" with the list).
    """
    p = Path(path)
    fmt = graph_format(p)
    if fmt == "npz":
        return _open_npz(p)
    if fmt == "npy":
        return GraphSource(path=str(p), format="npy", kind="edges", name=_stem(p),
                           edges=PairArrayReader(pair=NpyArray(p)))
    if fmt == "ogb":
        return _open_ogb(p, split)
    return GraphSource(path=str(p), format="text", kind="edges", name=_stem(p),
                       edges=TextEdgeReader(p, block_bytes=block_bytes))


# ----------------------------------------------------------------------------------------------
# whole-graph loads (small graphs)
# ----------------------------------------------------------------------------------------------
def csr_is_symmetric(indptr: np.ndarray, blocks) -> tuple[bool, int]:
    """Whether a CSR given as ``(first_row_entry, indices_block)`` blocks is symmetric, in one pass
    and O(n) memory: in-degrees must equal out-degrees and an order-free hash of the entries
    must equal that of the reversed entries.  Returns ``(symmetric, entries)``."""
    n = indptr.size - 1
    indeg = np.zeros(n, np.int64)
    fwd = np.uint64(0)
    rev = np.uint64(0)
    entries = 0
    with np.errstate(over="ignore"):
        for a, idx in blocks:
            idx = np.asarray(idx, np.int64)
            if idx.size == 0:
                continue
            r0 = int(np.searchsorted(indptr, a, side="right")) - 1
            r1 = int(np.searchsorted(indptr, a + idx.size, side="left"))
            counts = np.diff(np.clip(indptr[r0:r1 + 1], a, a + idx.size))
            rows = np.repeat(np.arange(r0, r0 + counts.size, dtype=np.int64), counts)
            indeg += np.bincount(idx, minlength=n)
            fwd += _mix(rows, idx).sum(dtype=np.uint64)
            rev += _mix(idx, rows).sum(dtype=np.uint64)
            entries += idx.size
    return bool(np.array_equal(indeg, np.diff(indptr)) and fwd == rev), entries


def _mix(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """splitmix64 of the pair (wrapping uint64 arithmetic)."""
    x = u.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + v.astype(np.uint64)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def load_graph(path: str | os.PathLike, symmetrize: bool = True, num_nodes: int | None = None,
               split: str | None = None) -> Graph:
    """Load a graph file (any supported format) into a clean symmetric CSR with its node data.

    Edge lists are symmetrised; an asymmetric CSR is symmetrised with a warning (or rejected
    when ``symmetrize=False``).  Meant for graphs that fit in memory; the partitioner streams.

    Raises:
        GraphFormatError: for any malformed input, naming the file and the problem.
    """
    path = Path(path)
    try:
        g = _load_graph(path, symmetrize, num_nodes, split)
    except GraphFormatError as e:
        if str(path) in str(e):
            raise
        raise GraphFormatError(f"{path}: {e}") from None
    except MemoryError as e:
        raise GraphFormatError(f"{path}: too large to load whole ({e}); partition it with `argosy partition`") from None
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise GraphFormatError(f"{path}: unreadable or inconsistent graph file ({type(e).__name__}: {e})") from None
    return g


def _load_graph(path: Path, symmetrize: bool, num_nodes: int | None, split: str | None) -> Graph:
    src = open_graph(path, split=split)
    if src.kind == "csr":
        n = src.num_nodes
        if num_nodes is not None and num_nodes != n:
            raise GraphFormatError(f"{path}: num_nodes={num_nodes} but the CSR has {n} rows")
        indices = _as_ids(src.indices.read(), src.indices.where)
        check_ids(indices, n, "indices", 0, path)
        ok, _ = csr_is_symmetric(src.indptr, [(0, indices)])
        if not ok and not symmetrize:
            raise GraphFormatError(f"{path}: the CSR is not symmetric (and symmetrisation was not requested)")
        if not ok:
            logger.warning("%s: the CSR is not symmetric; symmetrising it (the store is undirected)", path)
        rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(src.indptr))
        g = csr_from_edges(rows, indices, num_nodes=n, symmetrize=True)
    else:
        n = num_nodes if num_nodes is not None else src.num_nodes
        us, vs = [], []
        if isinstance(src.edges, TextEdgeReader):
            for u, v, _ in src.edges.iter_blocks(n):
                us.append(u)
                vs.append(v)
        else:
            for a, u, v in src.edges.iter_blocks(1 << 22):
                check_ids(u, n, "column 0", a, path)
                check_ids(v, n, "column 1", a, path)
                us.append(u)
                vs.append(v)
        if not us or sum(u.size for u in us) == 0:
            if n is None:
                raise GraphFormatError(f"{path}: the edge list is empty")
            us, vs = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
        u, v = np.concatenate(us), np.concatenate(vs)
        if n is None:
            n = check_num_nodes(path, max(int(u.max()), int(v.max())), u.size)
        g = csr_from_edges(u, v, num_nodes=n, symmetrize=True)
    cols = src.node_columns(g.num_nodes)
    check_node_columns(cols, g.num_nodes)
    for name, col in cols.items():
        setattr(g, name, col.read())
    g.name = src.name
    if g.num_nodes == 0:
        raise GraphFormatError(f"{path}: the graph is empty (0 nodes)")
    return g


def save_graph_ogb(g: Graph, root: str | os.PathLike, split: str = "random") -> None:
    """Write ``g`` as an OGB node-property-prediction directory (``raw/*.csv.gz``,
    ``split/<split>/{train,valid,test}.csv.gz``): each undirected edge once, as OGB ships
    undirected graphs.  For tests and for checking the OGB reader against an ``.npz``."""
    root = Path(root)
    raw = root / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rows = np.repeat(np.arange(g.num_nodes, dtype=np.int64), np.diff(g.indptr))
    keep = rows < g.indices

    def write(path: Path, arr: np.ndarray, fmt: str) -> None:
        buf = io.StringIO()
        np.savetxt(buf, arr, fmt=fmt, delimiter=",")
        path.write_bytes(gzip.compress(buf.getvalue().encode(), mtime=0))

    write(raw / "edge.csv.gz", np.stack([rows[keep], g.indices[keep]], 1), "%d")
    write(raw / "num-node-list.csv.gz", np.array([g.num_nodes]), "%d")
    if g.features is not None:
        write(raw / "node-feat.csv.gz", g.features, "%.9g")
    if g.labels is not None:
        write(raw / "node-label.csv.gz", g.labels.reshape(-1, 1), "%d")
    for mask, name in (("train_mask", "train"), ("val_mask", "valid"), ("test_mask", "test")):
        m = getattr(g, mask)
        if m is not None:
            d = root / "split" / split
            d.mkdir(parents=True, exist_ok=True)
            write(d / f"{name}.csv.gz", np.flatnonzero(m).reshape(-1, 1), "%d")


def save_graph_npz(g: Graph, path: str | os.PathLike) -> None:
    """Write ``g`` in the ``.npz`` dataset format (uncompressed, so it loads fast)."""
    arrays = {"indptr": g.indptr, "indices": g.indices}
    for name in ("features", "labels", *SPLITS):
        val = getattr(g, name)
        if val is not None:
            arrays[name] = val
    tmp = Path(str(path) + ".tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)

