"""Format detection and the checks every reader shares: which format a path holds, the node
data names, id dtypes and id range checks.

Why this module exists: every reader of :mod:`argosy.shared.graphio` (``.npy``, text, ``.npz``,
OGB) refuses the same faults with the same message, and the format of a file is decided in one
place (:func:`graph_format`).
"""
from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

import numpy as np

from argosy.shared.errors import GraphFormatError

__all__ = ["SPLITS", "NODE_ARRAYS", "TEXT_SUFFIXES", "SUPPORTED_FORMATS", "ALIASES", "ZIP_ERRORS",
           "index_dtype", "check_num_nodes", "check_ids", "as_ids", "ogb_edge_file", "graph_format"]


SPLITS = ("train_mask", "val_mask", "test_mask")


NODE_ARRAYS = ("features", "labels", *SPLITS)


TEXT_SUFFIXES = {"", ".txt", ".csv", ".tsv", ".el", ".edges", ".edgelist", ".snap", ".dat"}


SUPPORTED_FORMATS = (".npz (CSR indptr/indices or src/dst), .npy (m, 2) edge list, text edge list "
                     "(.txt .csv .tsv .el .edges .edgelist .snap .dat, optionally .gz), "
                     "or an OGB node-property directory (raw/edge.csv.gz)")


ALIASES = {"x": "features", "y": "labels"}


ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError,
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


def as_ids(arr: np.ndarray, where: str) -> np.ndarray:
    """int64 ids from any integer block; uint64 values >= 2**63 are an error, not a wrap."""
    if arr.dtype.kind == "u" and arr.dtype.itemsize == 8 and arr.size and int(arr.max()) >= 2**63:
        raise GraphFormatError(f"{where}: vertex id {int(arr.max())} is beyond int64")
    return arr.astype(np.int64, copy=False)


def ogb_edge_file(d: Path) -> Path | None:
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
        if ogb_edge_file(p) is not None:
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
