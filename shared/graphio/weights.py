"""Edge weights of an input graph: where a file carries them, and their checks.

Why this module exists: a weight may come inline (an ``.npz`` member ``edge_weight``, alias
``weight``/``data`` -- scipy's CSR name --, a text edge list's third column) or from a side file
(``--edge-weights W.npy``, one weight per input edge row); every path reads it through the
readers of :mod:`argosy.shared.graphio` and checks it here, so a bad weight is refused the same way
everywhere.

Weights are float32, finite and ``>= 0``.  An input edge ``u -> v`` (a text line ``u v w``, an
``.npz`` ``src``/``dst`` pair, PyG's ``edge_index[:, e]``) weighs the message from ``u`` to ``v``:
the store entry of row ``v``, neighbour ``u``.  A CSR is read as the store holds it (row ``v``'s
entry ``u`` is ``u -> v``; a symmetric matrix reads the same either way).  Duplicates and
symmetrisation follow :func:`~.graph.coalesce_weights`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from argosy.shared.errors import GraphFormatError

__all__ = ["check_weights", "WEIGHT_KEYS", "weight_member", "iter_weighted_edges", "TEXT_COLUMN"]

WEIGHT_KEYS = ("edge_weight", "weight", "data")
"""``.npz`` members read as edge weights, in order of preference (``data``: a scipy CSR's values)."""

TEXT_COLUMN = "column"
"""``--edge-weights column``: a text edge list's third column holds the weights."""


def check_weights(w, expected: int, where: str, offset: int = 0) -> np.ndarray:
    """``w`` as float32[expected], or a :class:`GraphFormatError` naming expected vs got.

    ``offset``: the index of ``w[0]`` in the whole weight array (for messages about blocks).
    """
    w = np.asarray(w)
    if w.ndim != 1 or w.shape[0] != expected:
        raise GraphFormatError(f"{where}: expected one weight per edge, float[{expected}] (got {w.dtype}{list(w.shape)})")
    if w.dtype.kind not in "fiub":
        raise GraphFormatError(f"{where}: edge weights must be numbers (got dtype {w.dtype})")
    w32 = w.astype(np.float32, copy=False)
    bad = ~np.isfinite(w32) | (w32 < 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise GraphFormatError(f"{where}: edge weights must be finite and >= 0 (got {float(w[i])!r} at edge {offset + i}; "
                               f"{int(bad.sum())} bad in all)")
    return w32


def weight_member(names) -> str | None:
    """The ``.npz`` member (without ``.npy``) holding edge weights, if any."""
    return next((k for k in WEIGHT_KEYS if k in names), None)


def iter_weighted_edges(source, side_file: str | Path | None = None, block: int = 1 << 22,
                        ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Yield the input's edges with their weights, ``(u int64[c], v int64[c], w float32[c])`` in
    input order, weights checked: the edge ``u -> v`` (a CSR's row ``v``, column ``u``: read as the
    store holds it, so a saved graph reads back the same), weights checked.

    Args:
        source: an opened :class:`~.source.GraphSource`.
        side_file: ``W.npy`` with one weight per input edge row (or per CSR entry), or
            :data:`TEXT_COLUMN` for a text edge list's third column; None: the weights the
            file holds itself (``source.weights``).
    Raises:
        GraphFormatError: no weights, a count that does not match the edges, a bad value.
    """
    from .npy import NpyArray

    text = hasattr(source.edges, "iter_weighted_blocks")          # a text edge list (graphio.text)
    if side_file == TEXT_COLUMN or (side_file is None and text and source.weights == TEXT_COLUMN):
        if not text:
            raise GraphFormatError(f"{source.path}: --edge-weights {TEXT_COLUMN} reads a text edge list's third "
                                   f"column; this input is {source.format} (pass a W.npy side file)")
        for u, v, w in source.edges.iter_weighted_blocks(source.num_nodes):
            yield u, v, w
        return
    if side_file is not None:
        warr = NpyArray(Path(side_file))
        where = str(side_file)
    elif isinstance(source.weights, NpyArray):
        warr, where = source.weights, f"{source.path}: {source.weights.where}"
    else:
        raise GraphFormatError(f"{source.path}: the input holds no edge weights")
    if len(warr.shape) != 1:
        raise GraphFormatError(f"{where}: expected one weight per edge, a 1-d array (got shape {list(warr.shape)})")
    if source.kind == "csr":
        total = int(source.indptr[-1])
        if warr.rows != total:
            raise GraphFormatError(f"{where}: expected one weight per CSR entry, float[{total}] (got {warr.rows})")
        indptr = source.indptr
        take = _Taker(warr, block, where)
        for a, idx in source.indices.iter_blocks(block):
            w = take(idx.size)
            r0 = int(np.searchsorted(indptr, a, side="right")) - 1
            r1 = int(np.searchsorted(indptr, a + idx.size, side="left"))
            counts = np.diff(np.clip(indptr[r0:r1 + 1], a, a + idx.size))
            rows = np.repeat(np.arange(r0, r0 + counts.size, dtype=np.int64), counts)
            yield np.asarray(idx, np.int64), rows, check_weights(w, idx.size, where, a)
        return
    if text:
        blocks = ((None, u, v) for u, v, _ in source.edges.iter_blocks(source.num_nodes))
        total = None
    else:
        blocks = source.edges.iter_blocks(block)
        total = source.edges.num_edges
        if warr.rows != total:
            raise GraphFormatError(f"{where}: expected one weight per edge row, float[{total}] (got {warr.rows})")
    done = 0
    take = _Taker(warr, block, where)
    for _, u, v in blocks:
        w = take(u.size)
        yield np.asarray(u, np.int64), np.asarray(v, np.int64), check_weights(w, u.size, where, done)
        done += u.size
    if total is None and done != warr.rows:
        raise GraphFormatError(f"{where}: expected one weight per edge row, float[{done}] (got {warr.rows})")


class _Taker:
    """The next ``c`` values of a 1-d array read in order (any block sizes, compressed members too)."""

    def __init__(self, arr, block: int, where: str):
        self.it, self.buf, self.rows, self.where, self.done = arr.iter_blocks(block), np.empty(0), arr.rows, where, 0

    def __call__(self, c: int) -> np.ndarray:
        parts, have = [self.buf], self.buf.size
        while have < c:
            nxt = next(self.it, None)
            if nxt is None:
                raise GraphFormatError(f"{self.where}: expected one weight per edge row, float[>= {self.done + c}] "
                                       f"(got {self.rows})")
            parts.append(nxt[1].reshape(-1))
            have += nxt[1].size
        allw = np.concatenate(parts) if len(parts) > 1 else parts[0]
        out, self.buf = allw[:c], allw[c:]
        self.done += c
        return out
