"""Whole-graph loads and saves (small graphs): any supported file into a :class:`~.graph.Graph`,
and a :class:`~.graph.Graph` out as ``.npz`` or an OGB directory.

Why this module exists: tests, generators and full-graph training hold a graph whole; the
partitioner streams instead (``services/partitioner/stream.py``), through the same readers.
"""
from __future__ import annotations

import gzip
import io
import logging
import os
import zipfile
from pathlib import Path

import numpy as np

from argosy.shared.errors import GraphFormatError

from .columns import check_node_columns
from .formats import SPLITS, as_ids, check_ids, check_num_nodes
from .graph import Graph, csr_from_edges, csr_is_symmetric
from .source import open_graph
from .text import TextEdgeReader

logger = logging.getLogger("argosy.shared.graphio")

__all__ = ["load_graph", "save_graph_npz", "save_graph_ogb"]


def load_graph(path: str | os.PathLike, symmetrize: bool = True, num_nodes: int | None = None,
               split: str | None = None, edge_weights: str | os.PathLike | bool | None = None) -> Graph:
    """Load a graph file (any supported format) into a clean symmetric CSR with its node data.

    Edge lists are symmetrised; an asymmetric CSR is symmetrised with a warning (or rejected
    when ``symmetrize=False``).  Meant for graphs that fit in memory; the partitioner streams.

    ``edge_weights``: None keeps the weights the file holds (``Graph.edge_weight``, see
    :mod:`.weights`); a ``W.npy`` path or ``"column"`` reads them from there; False drops them.

    Raises:
        GraphFormatError: for any malformed input, naming the file and the problem.
    """
    path = Path(path)
    try:
        g = _load_graph(path, symmetrize, num_nodes, split, edge_weights)
    except GraphFormatError as e:
        if str(path) in str(e):
            raise
        raise GraphFormatError(f"{path}: {e}") from None
    except MemoryError as e:
        raise GraphFormatError(f"{path}: too large to load whole ({e}); partition it with `argosy partition`") from None
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise GraphFormatError(f"{path}: unreadable or inconsistent graph file ({type(e).__name__}: {e})") from None
    return g


def _load_graph(path: Path, symmetrize: bool, num_nodes: int | None, split: str | None,
                edge_weights=None) -> Graph:
    src = open_graph(path, split=split)
    if num_nodes is not None and src.num_nodes is None:
        src.num_nodes = num_nodes
    if edge_weights is not False and (edge_weights is not None or src.weights is not None):
        from .weights import iter_weighted_edges
        side = None if edge_weights in (None, True) else edge_weights
        us, vs, ws = [], [], []
        for u, v, w in iter_weighted_edges(src, side):
            us.append(u)
            vs.append(v)
            ws.append(w)
        u, v = (np.concatenate(us), np.concatenate(vs)) if us else (np.empty(0, np.int64),) * 2
        w = np.concatenate(ws) if ws else np.empty(0, np.float32)
        n = src.num_nodes
        if n is None:
            n = check_num_nodes(path, max(int(u.max()), int(v.max())), u.size) if u.size else 0
        check_ids(u, n, "column 0", 0, path)
        check_ids(v, n, "column 1", 0, path)
        g = csr_from_edges(u, v, num_nodes=n, symmetrize=True, weights=w)
    elif src.kind == "csr":
        n = src.num_nodes
        if num_nodes is not None and num_nodes != n:
            raise GraphFormatError(f"{path}: num_nodes={num_nodes} but the CSR has {n} rows")
        indices = as_ids(src.indices.read(), src.indices.where)
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
    if g.edge_weight is not None:
        arrays["edge_weight"] = g.edge_weight
    for name in ("features", "labels", *SPLITS):
        val = getattr(g, name)
        if val is not None:
            arrays[name] = val
    tmp = Path(str(path) + ".tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)
