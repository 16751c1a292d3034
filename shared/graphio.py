"""Read input graphs: ``.npz`` CSR (the format of the bundled datasets), SNAP-style text edge
lists, and binary ``.npy`` edge lists; validate them so bad files fail with a clear message.

Every reader returns a :class:`Graph` holding a *symmetric* CSR without self loops or duplicate
edges (the form every Argosy stage expects).  Text edge lists are parsed in chunks of lines so a
file is never held twice in memory; binary edge lists are memory-mapped.

Example:
    >>> import numpy as np
    >>> g = csr_from_edges(np.array([0, 1, 2]), np.array([1, 2, 0]), num_nodes=3)
    >>> g.indptr.tolist(), g.indices.tolist()
    ([0, 2, 4, 6], [1, 2, 0, 2, 0, 1])
"""
from __future__ import annotations

import logging
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from argosy.shared.errors import GraphFormatError

__all__ = ["Graph", "load_graph", "csr_from_edges", "iter_text_edges", "save_graph_npz", "index_dtype"]

logger = logging.getLogger(__name__)

SPLITS = ("train_mask", "val_mask", "test_mask")


def index_dtype(num_nodes: int) -> np.dtype:
    """Smallest id dtype that holds ``num_nodes`` ids (int32 below 2**31, else int64)."""
    return np.dtype(np.int32) if num_nodes < 2**31 - 1 else np.dtype(np.int64)


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
    src = src.astype(np.int64, copy=False)
    dst = dst.astype(np.int64, copy=False)
    if src.size and min(src.min(), dst.min()) < 0:
        bad = int(min(src.min(), dst.min()))
        raise GraphFormatError(f"edge ids must be non-negative (got {bad})")
    hi = int(max(src.max(), dst.max())) + 1 if src.size else 0
    if num_nodes is None:
        num_nodes = hi
    elif hi > num_nodes:
        raise GraphFormatError(f"edge id {hi - 1} is out of range for a graph of {num_nodes} nodes")
    if num_nodes == 0:
        raise GraphFormatError("the graph is empty (0 nodes)")
    keep = src != dst
    src, dst = src[keep], dst[keep]
    if symmetrize:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    key = np.unique(src * num_nodes + dst)            # sorts by (src, dst) and dedups
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


def iter_text_edges(path: str | os.PathLike, chunk_lines: int = 1 << 20):
    """Yield ``(src, dst)`` int64 arrays from a SNAP-style text edge list, chunk by chunk.

    Lines starting with ``#`` or ``%`` are comments; other lines hold at least two
    whitespace-separated integer ids (extra columns such as weights are ignored).

    Raises:
        GraphFormatError: naming the file and line of the first malformed line.
    """
    path = Path(path)
    line_no = 0
    with open(path, "r", encoding="utf-8", errors="replace") as f:
        while True:
            lines = f.readlines(chunk_lines * 16)
            if not lines:
                break
            base = line_no
            line_no += len(lines)
            body = [ln for ln in lines if ln.strip() and ln.lstrip()[0] not in "#%"]
            if not body:
                continue
            try:
                arr = np.loadtxt(body, dtype=np.int64, ndmin=2, usecols=(0, 1))
            except ValueError as e:
                bad = _first_bad_line(lines)
                where = f"line {base + bad[0] + 1}: {bad[1]!r}" if bad else str(e)
                raise GraphFormatError(f"{path}: malformed edge list at {where} "
                                       "(expected two integer ids per line)") from None
            yield arr[:, 0].copy(), arr[:, 1].copy()


def _first_bad_line(lines: list[str]) -> tuple[int, str] | None:
    for i, ln in enumerate(lines):
        s = ln.strip()
        if not s or s[0] in "#%":
            continue
        parts = s.split()
        if len(parts) < 2 or not all(p.lstrip("-").isdigit() for p in parts[:2]):
            return i, s[:80]
    return None


def _load_npz(path: Path, symmetrize: bool) -> Graph:
    try:
        z = np.load(path, allow_pickle=False)
        names = set(z.files)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
        raise GraphFormatError(f"{path}: not a readable .npz archive ({e})") from None
    try:
        if "indptr" in names and "indices" in names:
            indptr = np.asarray(z["indptr"])
            indices = np.asarray(z["indices"])
            _validate_csr(path, indptr, indices)
            n = indptr.shape[0] - 1
            if symmetrize:
                rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
                g = csr_from_edges(rows, indices, num_nodes=n, symmetrize=True)
            else:
                g = Graph(indptr=indptr.astype(np.int64), indices=indices.astype(index_dtype(n)))
        elif "src" in names and "dst" in names:
            src, dst = np.asarray(z["src"]), np.asarray(z["dst"])
            n = int(z["num_nodes"]) if "num_nodes" in names else None
            g = csr_from_edges(src, dst, num_nodes=n, symmetrize=True)
        else:
            raise GraphFormatError(f"{path}: expected arrays 'indptr'+'indices' or 'src'+'dst' (found {sorted(names)})")
        n = g.num_nodes
        if "features" in names:
            feats = np.asarray(z["features"])
            if feats.ndim != 2 or feats.shape[0] != n:
                raise GraphFormatError(f"{path}: features must be [num_nodes={n}, F] (got shape {feats.shape})")
            if feats.dtype not in (np.float32, np.float16, np.float64):
                raise GraphFormatError(f"{path}: features must be float (got {feats.dtype})")
            if not np.isfinite(feats).all():
                raise GraphFormatError(f"{path}: features contain NaN or inf")
            g.features = feats.astype(np.float32) if feats.dtype == np.float64 else feats
        if "labels" in names:
            labels = np.asarray(z["labels"])
            if labels.shape != (n,) or not np.issubdtype(labels.dtype, np.integer):
                raise GraphFormatError(f"{path}: labels must be int[{n}] (got {labels.dtype}{list(labels.shape)})")
            if labels.size and labels.min() < -1:
                raise GraphFormatError(f"{path}: labels must be >= -1 (-1 = unlabelled) (got {labels.min()})")
            g.labels = labels.astype(np.int64)
        for split in SPLITS:
            if split in names:
                m = np.asarray(z[split])
                if m.shape != (n,):
                    raise GraphFormatError(f"{path}: {split} must have shape ({n},) (got {m.shape})")
                setattr(g, split, m.astype(bool))
        return g
    except (zipfile.BadZipFile, EOFError, OSError) as e:
        raise GraphFormatError(f"{path}: truncated or corrupt .npz member ({e})") from None


def _validate_csr(path, indptr: np.ndarray, indices: np.ndarray) -> None:
    if indptr.ndim != 1 or indptr.shape[0] < 2:
        raise GraphFormatError(f"{path}: indptr must be 1-D with at least 2 entries (got shape {indptr.shape})")
    if not np.issubdtype(indptr.dtype, np.integer) or not np.issubdtype(indices.dtype, np.integer):
        raise GraphFormatError(f"{path}: indptr/indices must be integer arrays (got {indptr.dtype}/{indices.dtype})")
    if indptr[0] != 0 or np.any(np.diff(indptr) < 0):
        raise GraphFormatError(f"{path}: indptr must start at 0 and be non-decreasing")
    if int(indptr[-1]) != indices.shape[0]:
        raise GraphFormatError(f"{path}: indptr[-1]={int(indptr[-1])} does not match len(indices)={indices.shape[0]}")
    n = indptr.shape[0] - 1
    if indices.size and (indices.min() < 0 or indices.max() >= n):
        bad = int(indices.min()) if indices.min() < 0 else int(indices.max())
        raise GraphFormatError(f"{path}: neighbour id {bad} is out of range [0, {n})")


def load_graph(path: str | os.PathLike, symmetrize: bool = True, num_nodes: int | None = None) -> Graph:
    """Load a graph file into a clean symmetric CSR.

    Formats (by suffix): ``.npz`` (``indptr``/``indices`` or ``src``/``dst`` + optional
    ``features``, ``labels``, ``*_mask``), ``.npy`` (int[m, 2] edge list, memory-mapped),
    anything else is read as a whitespace-separated text edge list.

    Raises:
        GraphFormatError: for any malformed input, naming the file and the problem.
    """
    path = Path(path)
    if not path.exists():
        raise GraphFormatError(f"{path}: no such file")
    try:
        return _load_graph(path, symmetrize, num_nodes)
    except GraphFormatError as e:
        if str(path) in str(e):
            raise
        raise GraphFormatError(f"{path}: {e}") from None
    except (MemoryError, ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise GraphFormatError(f"{path}: unreadable or inconsistent graph file ({type(e).__name__}: {e})") from None


def _load_graph(path: Path, symmetrize: bool, num_nodes: int | None) -> Graph:
    if path.suffix == ".npz":
        g = _load_npz(path, symmetrize)
    elif path.suffix == ".npy":
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError) as e:
            raise GraphFormatError(f"{path}: not a readable .npy edge list ({e})") from None
        if arr.ndim != 2 or arr.shape[1] != 2:
            raise GraphFormatError(f"{path}: a binary edge list must have shape (m, 2) (got {arr.shape})")
        g = csr_from_edges(np.asarray(arr[:, 0]), np.asarray(arr[:, 1]), num_nodes=num_nodes, symmetrize=True)
    else:
        srcs, dsts = [], []
        for s, d in iter_text_edges(path):
            srcs.append(s)
            dsts.append(d)
        if not srcs:
            raise GraphFormatError(f"{path}: the edge list is empty")
        g = csr_from_edges(np.concatenate(srcs), np.concatenate(dsts), num_nodes=num_nodes, symmetrize=symmetrize)
    g.name = path.stem
    if g.num_nodes == 0:
        raise GraphFormatError(f"{path}: the graph is empty (0 nodes)")
    return g


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
