"""Node data columns (features, labels, split masks) read in row blocks and validated as read,
from ``.npy`` files or members, CSV files (OGB) or memory.

Why this module exists: node data of a graph larger than memory is streamed into the store
column by column; the checks (finite features in range, integer labels, 0/1 disjoint masks)
must hold whichever file a column came from.
"""
from __future__ import annotations

import zlib
from pathlib import Path
from typing import Iterator

import numba
import numpy as np

from argosy.shared.errors import GraphFormatError

from .formats import SPLITS, as_ids, graph_format
from .npy import NpyArray
from .text import GzipReader

__all__ = ["NodeColumn", "NpyColumn", "ArrayColumn", "CsvColumn", "read_index_list",
           "node_column_from_file", "check_node_columns"]


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


@numba.njit(cache=True, nogil=True)
def _first_nonfinite(bits, exponent):
    """Index of the first float (viewed as unsigned ints ``bits``) whose exponent bits are all set,
    i.e. a NaN or an infinity; -1 if none.  Spans of 4,096 are scanned without an early exit, so
    that the compiler vectorises the scan."""
    n = bits.size
    for a in range(0, n, 4096):
        b = min(n, a + 4096)
        hit = 0
        for i in range(a, b):
            hit |= (bits[i] & exponent) == exponent
        if hit:
            for i in range(a, b):
                if bits[i] & exponent == exponent:
                    return i
    return -1


# a float's exponent bits, by width: all set is a NaN or an infinity (IEEE 754)
_EXPONENT = {2: (np.uint16, 0x7C00), 4: (np.uint32, 0x7F800000), 8: (np.uint64, 0x7FF0000000000000)}


def first_nonfinite_row(blk: np.ndarray) -> int:
    """The first row of a float block holding a NaN or an infinity, or -1: one pass over its bits
    (``np.isfinite`` on float16, the store's feature dtype, took 3.4 s of the 1/4-scale papers100M
    graph's 7.1 GB of features; this, 0.9 s)."""
    flat = np.ascontiguousarray(blk).reshape(-1)
    if flat.dtype.itemsize not in _EXPONENT or flat.dtype.kind != "f":
        bad = np.flatnonzero(~np.isfinite(flat))
        i = int(bad[0]) if bad.size else -1
    else:
        ut, e = _EXPONENT[flat.dtype.itemsize]
        i = int(_first_nonfinite(flat.view(ut), ut(e)))
    return -1 if i < 0 else i // max(1, flat.size // max(blk.shape[0], 1))


def _check_block(col: NodeColumn, blk: np.ndarray, a: int) -> np.ndarray:
    src, name = col.source, col.name
    if name == "features":
        if blk.dtype.kind != "f":
            raise GraphFormatError(f"{src}: features must be float (got {blk.dtype})")
        r = first_nonfinite_row(blk)
        if r >= 0:
            raise GraphFormatError(f"{src}: features contain NaN or inf (first at vertex {a + r})")
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
        return GzipReader(self.path) if gz else open(self.path, "rb")

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


def read_index_list(path: Path, n: int) -> np.ndarray:
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
            ids = as_ids(arr.read(), str(p))
            if ids.size and (ids.min() < 0 or ids.max() >= n):
                raise GraphFormatError(f"{p}: vertex id out of range [0, {n}) in the {name} id list")
            mask = np.zeros(n, bool)
            mask[ids] = True
            return ArrayColumn(name, mask, str(p))
        return NpyColumn(name, arr, n, feature_dtype)
    if fmt == "text":
        if name in SPLITS:
            return ArrayColumn(name, read_index_list(p, n), str(p))
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
