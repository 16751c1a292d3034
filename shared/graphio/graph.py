"""The in-memory graph: :class:`Graph` (a symmetric CSR with node data), built from edges by
:func:`csr_from_edges`, and the one-pass symmetry check of a CSR read in blocks.

Why this module exists: small graphs (tests, generators, full-graph training) are held whole
as a :class:`Graph`; every CSR built from edges anywhere in Argosy goes through
:func:`csr_from_keys`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from argosy.shared.errors import GraphFormatError

from .formats import check_num_nodes, index_dtype

__all__ = ["Graph", "csr_from_edges", "csr_from_keys", "indptr_from_rows", "sorted_unique", "csr_is_symmetric",
           "coalesce_weights"]


@dataclass
class Graph:
    """An undirected graph in symmetric CSR form with optional node data.

    Shapes:
        indptr: int64[n + 1]; indices: int32|int64[2m] (global ids, sorted per row);
        features: float32|float16[n, F] or None; labels: int64[n] (-1 = unlabelled) or None;
        masks: bool[n] each (``train_mask``, ``val_mask``, ``test_mask``) or None;
        edge_weight: float32[2m] aligned with ``indices`` (entry ``(v, u)`` weighs the message
        ``u -> v``) or None (unweighted).
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
    edge_weight: np.ndarray | None = None

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


def sorted_unique(keys: np.ndarray, return_counts: bool = False):
    """Sorted distinct values (and their counts) via sort + diff.

    ``np.unique`` on int64 is ~50x slower than ``np.sort`` with NumPy 2.4 on this machine, so
    the hot paths use this instead.
    """
    keys = np.sort(keys)
    if keys.size == 0:
        return (keys, np.empty(0, np.int64)) if return_counts else keys
    first = np.empty(keys.size, np.bool_)
    first[0] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    idx = np.flatnonzero(first)
    if not return_counts:
        return keys[idx]
    counts = np.diff(np.append(idx, keys.size))
    return keys[idx], counts


def indptr_from_rows(rows: np.ndarray, num_rows: int) -> np.ndarray:
    """int64 ``indptr`` (num_rows + 1,) of a CSR whose entries, in row order, have row ids ``rows``."""
    indptr = np.zeros(num_rows + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=num_rows), out=indptr[1:])
    return indptr


def csr_from_keys(keys: np.ndarray, width: int, dtype=None, row0: int = 0,
                  num_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The CSR of entries given as sorted int64 keys ``row * width + col``: the one edges-to-CSR
    builder (graphs, gathered streams, cluster graphs and their buckets).

    Args:
        keys: int64 (nnz,), sorted (deduplicated if the CSR must be simple).
        width: the key's row stride (the column count).
        dtype: column dtype of ``indices`` (default int64).
        row0: the first row's id (a bucket of rows ``row0 .. row0 + num_rows - 1``).
        num_rows: rows of the CSR (default ``width``).

    Returns:
        tuple: ``(indptr int64 (num_rows + 1,), indices (nnz,))``.
    """
    rows = keys // width
    cols = keys - rows * width
    if row0:
        rows -= row0
    indptr = indptr_from_rows(rows, width if num_rows is None else num_rows)
    return indptr, cols.astype(np.int64 if dtype is None else dtype, copy=False)


def coalesce_weights(keys: np.ndarray, w: np.ndarray, mirrored: np.ndarray | None = None):
    """Merge weighted entries that share a key: the one duplicate rule of every weighted path.

    The rule (docs/python-api.md, "Edge weights"): entries given in the input with the same
    ``(row, neighbour)`` are *summed* (PyG's ``coalesce``/``to_undirected`` default); a reverse entry
    that symmetrisation added (``mirrored``) carries its edge's weight and counts only where the
    input does not give that direction itself, so a graph listed in both directions keeps each
    direction's own weight and is never doubled.

    Args:
        keys: int64[c] entry keys (``row * n + col``), any order.
        w: float[c] weights.  mirrored: bool|uint8[c] or None (no entry is mirrored).
    Returns:
        ``(sorted unique keys int64[u], weights float32[u])``.
    """
    m = np.zeros(keys.size, np.int64) if mirrored is None else np.asarray(mirrored, np.int64)
    k2 = keys.astype(np.int64) * 2 + m
    order = np.argsort(k2, kind="stable")
    k2 = k2[order]
    if k2.size == 0:
        return k2, np.empty(0, np.float32)
    grp = k2 >> 1
    first = np.empty(k2.size, np.bool_)
    first[0] = True
    np.not_equal(grp[1:], grp[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    gid = np.cumsum(first) - 1
    mm = k2 & 1                                          # direct entries sort before mirrored ones
    keep = mm == mm[starts][gid]
    ws = np.where(keep, np.asarray(w, np.float64)[order], 0.0)
    return grp[starts], np.add.reduceat(ws, starts).astype(np.float32)


def csr_from_edges(src: np.ndarray, dst: np.ndarray, num_nodes: int | None = None,
                   symmetrize: bool = True, weights: np.ndarray | None = None) -> Graph:
    """Build a clean symmetric CSR from an edge list: drops self loops and duplicates.

    Args:
        src, dst: int[E] endpoint ids (any integer dtype); must be ``>= 0``.
        num_nodes: vertex count; defaults to ``max id + 1``. Ids ``>= num_nodes`` are an error.
        symmetrize: add the reverse of every edge (default); if False the input must
            already contain both directions.
        weights: float[E] edge weights (checked: finite, ``>= 0``), kept in ``edge_weight`` by the
            rule of :func:`coalesce_weights`; an edge ``src -> dst`` weighs the entry ``(dst, src)``.
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
    if weights is not None:
        from .weights import check_weights
        w = check_weights(weights, keep.size, "edge weights")[keep]
        mirrored = np.zeros(src.size, np.uint8)
        if symmetrize:
            src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
            w, mirrored = np.concatenate([w, w]), np.concatenate([mirrored, np.ones_like(mirrored)])
        key, ew = coalesce_weights(dst * num_nodes + src, w, mirrored)   # row = destination
        indptr, indices = csr_from_keys(key, num_nodes, index_dtype(num_nodes))
        g = Graph(indptr=indptr, indices=indices, edge_weight=ew)
        if not symmetrize:
            _check_symmetric(g)
        return g
    if symmetrize:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    key = sorted_unique(src * num_nodes + dst)             # by (src, dst), duplicates dropped
    indptr, indices = csr_from_keys(key, num_nodes, index_dtype(num_nodes))
    g = Graph(indptr=indptr, indices=indices)
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


def csr_is_symmetric(indptr: np.ndarray, blocks) -> tuple[bool, int]:
    """Whether a CSR given as ``(first_row_entry, indices_block)`` blocks is symmetric, in one pass
    and O(n) memory: in-degrees must equal out-degrees and an order-free hash of the entries
    must equal that of the reversed entries (:func:`~argosy.shared.hashing.mix64` of
    ``row * GOLDEN_GAMMA + col``).  Returns ``(symmetric, entries)``."""
    from argosy.shared.hashing import GOLDEN_GAMMA, mix64  # numba only once a CSR is checked

    gamma = np.uint64(GOLDEN_GAMMA)
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
            fwd += mix64(rows.astype(np.uint64) * gamma + idx.astype(np.uint64)).sum(dtype=np.uint64)
            rev += mix64(idx.astype(np.uint64) * gamma + rows.astype(np.uint64)).sum(dtype=np.uint64)
            entries += idx.size
    return bool(np.array_equal(indeg, np.diff(indptr)) and fwd == rev), entries
