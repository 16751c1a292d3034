"""``.npy`` arrays in plain files and ``.npz`` members, header checked and read in row blocks,
and edge lists stored as such arrays.

Why this module exists: a billion-edge ``.npy`` or ``.npz`` must be read without a memory map
(which keeps every touched page resident) and without trusting its header; :class:`NpyArray`
is that reader for edges and node data alike.
"""
from __future__ import annotations

import math
import os
import warnings
import zipfile
import zlib
from typing import Iterator

import numpy as np

from argosy.shared.errors import GraphFormatError

from .formats import ZIP_ERRORS, as_ids

__all__ = ["NpyArray", "PairArrayReader"]


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
        except ZIP_ERRORS as e:
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
        except ZIP_ERRORS as e:
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
        except ZIP_ERRORS as e:
            raise GraphFormatError(f"{self.where}: truncated or corrupt ({type(e).__name__}: {e})") from None


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
            return as_ids(blk[:, 0], self.path), as_ids(blk[:, 1], self.path)
        return as_ids(self._src.read(a, b), self.path), as_ids(self._dst.read(a, b), self.path)

    def iter_blocks(self, rows: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """``(first_row, u, v)`` blocks in file order."""
        if self.seekable:
            for a in range(0, self.num_edges, rows):
                yield (a, *self.read(a, a + rows))
        elif self._pair is not None:
            for a, blk in self._pair.iter_blocks(rows):
                yield a, as_ids(blk[:, 0], self.path), as_ids(blk[:, 1], self.path)
        else:
            for (a, u), (_, v) in zip(self._src.iter_blocks(rows), self._dst.iter_blocks(rows)):
                yield a, as_ids(u, self.path), as_ids(v, self.path)
