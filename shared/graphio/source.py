"""Opening a graph file of any format: headers validated, edges and node columns ready to be
read in blocks, nothing read in bulk (:func:`open_graph`).

Why this module exists: the partitioner's streams and whole-graph loads start from the same
:class:`GraphSource`, so a file is accepted or refused the same way by both.
"""
from __future__ import annotations

import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from argosy.shared.errors import GraphFormatError

from .columns import ArrayColumn, CsvColumn, NpyColumn, read_index_list
from .formats import ALIASES, NODE_ARRAYS, ZIP_ERRORS, as_ids, graph_format, ogb_edge_file
from .npy import NpyArray, PairArrayReader
from .text import TextEdgeReader
from .weights import TEXT_COLUMN, weight_member

__all__ = ["GraphSource", "open_graph"]


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
    weights: object = None
    """Inline edge weights: an :class:`NpyArray` (``.npz`` member ``edge_weight``/``weight``/``data``),
    ``"column"`` (a text edge list whose header names its third column a weight) or None
    (see :mod:`.weights`)."""
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
                out[name] = ArrayColumn(name, read_index_list(spec[1], n), str(spec[1]))
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
    except ZIP_ERRORS as e:
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
        canon = ALIASES.get(key, key)
        if canon in NODE_ARRAYS:
            if canon in specs:
                raise GraphFormatError(f"{p}: both {key!r} and its alias for {canon!r} are present")
            specs[canon] = get(key)
    src = GraphSource(path=str(p), format="npz", kind="csr", name=_stem(p), _column_specs=specs)
    wkey = weight_member(names)
    if wkey is not None:
        src.weights = get(wkey)
    if "indptr" in names and "indices" in names:
        ip = get("indptr")
        if ip.dtype.kind not in "iu" or get("indices").dtype.kind not in "iu":
            raise GraphFormatError(f"{p}: indptr/indices must be integer arrays (got {ip.dtype}/{get('indices').dtype})")
        if len(ip.shape) != 1 or ip.rows < 1:
            raise GraphFormatError(f"{p}: indptr must be 1-D with at least 1 entry (got shape {ip.shape})")
        ind = get("indices")
        if len(ind.shape) != 1:
            raise GraphFormatError(f"{p}: indices must be 1-D (got shape {ind.shape})")
        indptr = as_ids(ip.read(), ip.where)
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
    edge = ogb_edge_file(p)
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
    reader = TextEdgeReader(p, block_bytes=block_bytes)
    head = reader.header()
    weighted = head is not None and len(head) >= 3 and "weight" in head[2]
    return GraphSource(path=str(p), format="text", kind="edges", name=_stem(p), edges=reader,
                       weights=TEXT_COLUMN if weighted else None)
