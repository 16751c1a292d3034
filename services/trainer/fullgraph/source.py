"""What the offloaded schedule reads per part: features, labels and topology straight from the store.

Why this module exists: the offloaded mode exists to train where the graph's activations do not fit
in memory, so it must not load the whole graph either.  The schedule works part by part on the
store's parts; this module builds the plan from one part's topology at a time and reads a part's
feature rows from the store's ``features.npy`` when a layer-0 gather needs them (a memory mapping
opened for the copy and dropped after it, so the file's pages do not stay in the process's resident
set).  :class:`GraphSource` gives the same interface over a graph held in memory (exactness tests).

The schedule's working set is one *unit*'s layer tensors, and each unit costs a gather, a few
kernel calls and block puts per layer, whatever its size.  So the units are sized by the run's
memory (:func:`make_units`, :func:`.budget.unit_rows`), not by the store's part count: a part larger
than that is cut into pieces (its rows in breadth-first, reverse Cuthill-McKee, order over its own
edges, cut into equal runs, so a piece's halo is a BFS frontier; not when the pieces would read more
than :data:`MAX_CUT_HALO` of the part from each other), and small parts are grouped, each
group grown by the part with the most edges into it, so cut edges inside a group stop being halo.
Users train with the store they partitioned (4 parts of a 1.5M-vertex road network hold 375k rows
each; 16 parts of road-ny 16k).  (Cutting a part into *row ranges* instead was
measured and rejected: on a DCSBM graph of 1.2M vertices, 4 GREM parts cut into 15 row ranges
raised the expansion ratio alpha from ~1.3 to 3.0; row order inside a part follows vertex ids, not
the topology.)

Shapes: unit ``u`` owns ``n_u`` vertices (``plan.own[u]``, ascending global ids, the store's row
order); its features are ``float32[n_u, F]``.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from argosy.shared.errors import StoreFormatError
from argosy.shared.store.reader import PartitionStore

from .graph import Aggr, GraphData, PartPlan, assemble_plan, degree_weights, normalize_rows, relation_rows
from .kernels import csr_rows

__all__ = ["GraphSource", "StoreSource", "Unit", "make_units", "plan_from_store", "part_tensors"]

Unit = tuple[tuple[int, ...], "np.ndarray | None"]
"""A compute unit: ``(store parts, rows)``: whole parts (rows None; their rows in part order, one
part after the other), or one part's rows (``int64``, ascending row numbers inside the part)."""

MAX_CUT_HALO = 0.25
"""The most halo rows cutting a store part may add, as a fraction of its rows: a part whose pieces
would need more (a DCSBM part: most of its edges cross any cut) stays one unit."""

READ_ROWS = 1 << 14
"""Rows per read(2) when a unit's feature rows are picked out of its part's file."""

logger = logging.getLogger(__name__)

SPLITS = ("train_mask", "val_mask", "test_mask")


class GraphSource:
    """Part reads from a graph held in memory (the reference path of the exactness tests)."""

    def __init__(self, graph: GraphData, plan: PartPlan) -> None:
        if graph.features is None or graph.labels is None:
            raise ValueError("offloaded training needs features and labels")
        self.graph, self.plan = graph, plan
        self.feature_dim = int(graph.features.shape[1])
        self.labels = [np.asarray(graph.labels[o]) for o in plan.own]
        self.masks = {k: [np.asarray(getattr(graph, k)[o]) if getattr(graph, k) is not None else np.zeros(len(o), bool)
                          for o in plan.own] for k in SPLITS}

    def features_into(self, s: int, out: np.ndarray) -> None:
        """Copy part ``s``'s feature rows into ``out`` (``float32[n_s, F]``)."""
        out[...] = self.graph.features[self.plan.own[s]]

    def nbytes(self) -> int:
        return int(self.graph.features.nbytes)


class StoreSource:
    """Part reads from a partitioned store.

    Args:
        store: the store ``argosy partition`` wrote.
        normalize: row-normalise features as they are read (row-local, so the same as whole).
        units: the schedule's units (:func:`make_units`); default: one per store part.
    """

    def __init__(self, store: PartitionStore, normalize: bool = False, units: list[Unit] | None = None) -> None:
        m = store.manifest
        if not m.num_classes or not (m.feature_dim or m.num_relations):  # typed, featureless: R-GCN's learned input
            raise StoreFormatError(f"{store.root}: full-graph training needs features and labels, and this "
                                   f"store has {m.feature_dim} feature columns and {m.num_classes} classes")
        self.store, self.normalize = store, normalize
        self.feature_dim = int(m.feature_dim)
        self.labels: list[np.ndarray] = []
        self.masks: dict[str, list[np.ndarray]] = {k: [] for k in SPLITS}
        self.units = units if units is not None else [((p,), None) for p in range(store.num_parts)]
        for parts, rows in self.units:
            labels, masks = [], {k: [] for k in SPLITS}
            for p in parts:
                arrays = store.read_part(p, ("labels",) + SPLITS)
                n_u = m.parts[p].num_nodes if rows is None else len(rows)
                take = (lambda a: a) if rows is None else (lambda a: np.asarray(a)[rows])  # noqa: E731
                lab = arrays["labels"]
                labels.append(np.array(take(lab), np.int64) if lab is not None else np.full(n_u, -1, np.int64))
                for k in SPLITS:
                    a = arrays[k]
                    masks[k].append(np.array(take(a), bool) if a is not None else np.zeros(n_u, bool))
            self.labels.append(labels[0] if len(parts) == 1 else np.concatenate(labels))
            for k in SPLITS:
                self.masks[k].append(masks[k][0] if len(parts) == 1 else np.concatenate(masks[k]))

    def features_into(self, u: int, out: np.ndarray) -> None:
        """Copy unit ``u``'s feature rows from the store into ``out`` (``float32[n_u, F]``)."""
        parts, rows = self.units[u]
        off = 0
        for p in parts:
            n = self.store.manifest.parts[p].num_nodes if rows is None else len(rows)
            self._part_features_into(p, rows, out[off:off + n])
            off += n
        if self.normalize:
            normalize_rows(out)

    def _part_features_into(self, p: int, rows: np.ndarray | None, out: np.ndarray) -> None:
        """Part ``p``'s rows (``rows`` ascending, None: all) from each of its feature files: one per
        part, or one per node type (:mod:`shared.store.features`; a narrower type's columns beyond its
        width and a featureless type's rows are zero)."""
        layout = self.store.features
        d = self.store.root / self.store.manifest.parts[p].path
        if layout.per_type:
            out[...] = 0
        for key, t, lo, hi in layout.keys(p):
            a, b = (lo, hi) if rows is None else np.searchsorted(rows, [lo, hi]).tolist()
            if b > a:
                _read_feature_file(d / f"{layout.file(key)}.npy", (hi - lo, int(layout.dims[t])),
                                   None if rows is None else rows[a:b] - lo, out[a:b, :int(layout.dims[t])])

    def nbytes(self) -> int:
        return 0  # nothing held: read per part


def _read_feature_file(path, want: tuple[int, int], rows: np.ndarray | None, out: np.ndarray) -> None:
    """Rows ``rows`` (ascending; None: all) of the feature file ``path`` of shape ``want``, into ``out``."""
    # read(2) straight into ``out``: a fresh mapping per part faulted every page in (~2.5x slower),
    # and nothing stays in this process's resident set afterwards
    try:
        with open(path, "rb") as f:
            major, _ = np.lib.format.read_magic(f)
            shape, fortran, dtype = (np.lib.format.read_array_header_1_0 if major == 1
                                     else np.lib.format.read_array_header_2_0)(f)
            if tuple(shape) != want or fortran or dtype not in (np.dtype("<f4"), np.dtype("<f2")):
                raise StoreFormatError(f"{path}: expected C-ordered float32 or float16 features of shape "
                                       f"{want}, got {dtype}{' (Fortran order)' if fortran else ''} {tuple(shape)}")
            if rows is not None:
                _read_rows(f, rows, want, dtype, out, path)
            else:
                direct = out.flags.c_contiguous and out.dtype == dtype
                dst = out if direct else np.empty(want, dtype)   # float16 stores: read, then widen
                got = f.readinto(memoryview(dst).cast("B"))
                if got != dst.nbytes:
                    raise StoreFormatError(f"{path}: truncated: {got:,} of {dst.nbytes:,} feature bytes present")
                if dst is not out:
                    out[...] = dst
    except (ValueError, OSError) as e:
        raise StoreFormatError(f"{path}: unreadable features ({e})") from None


def _read_rows(f, rows: np.ndarray, shape: tuple[int, int], dtype: np.dtype, out: np.ndarray, path) -> None:
    """Rows ``rows`` (ascending) of the ``.npy`` array whose data starts at ``f``'s position, into
    ``out``: the file read in runs of :data:`READ_ROWS` rows (one bounded buffer, no mapping: nothing
    of the file stays resident), runs holding none of the rows skipped."""
    base, width = f.tell(), shape[1] * dtype.itemsize
    buf = np.empty((min(READ_ROWS, shape[0]), shape[1]), dtype)
    cuts = np.searchsorted(rows, np.arange(0, shape[0] + READ_ROWS, READ_ROWS))
    for i in np.flatnonzero(np.diff(cuts)):
        lo, hi = i * READ_ROWS, min(shape[0], (i + 1) * READ_ROWS)
        f.seek(base + lo * width)
        got = f.readinto(memoryview(buf[: hi - lo]).cast("B"))
        if got != (hi - lo) * width:
            raise StoreFormatError(f"{path}: truncated: rows {lo:,}-{hi:,} of {shape[0]:,} not all present")
        sel = rows[cuts[i]:cuts[i + 1]]
        out[cuts[i]:cuts[i + 1]] = buf[sel - lo]


def make_units(store: PartitionStore, max_rows: int | None, min_piece: int = 1) -> list[Unit]:
    """The schedule's units of at most ``max_rows`` rows (see the module docstring).

    A store part of more than ``max(max_rows, min_piece)`` rows is cut into ``ceil(n_p / that)`` pieces of equal
    size along a reverse Cuthill-McKee order of its own edges (each piece's rows sorted back into the
    part's order).  The other parts are grouped greedily: a group starts from the largest part left
    and takes, while its rows stay within ``max_rows``, the part with the most edges into it.

    Args:
        max_rows: the most rows of a unit (:func:`.budget.unit_rows`); None: one unit per part.
        min_piece: the fewest rows a piece of a cut part may get (:data:`.budget.MIN_UNIT_ROWS`).
    """
    if max_rows is not None and max_rows < 1:
        raise ValueError(f"max_rows must be >= 1 or None (got {max_rows})")
    P = store.num_parts
    sizes = np.array([store.manifest.parts[p].num_nodes for p in range(P)], np.int64)
    if max_rows is None:
        return [((p,), None) for p in range(P)]
    assign, local = np.asarray(store.assignment), np.asarray(store.local_index)
    units: list[Unit] = []
    cut_at = max(max_rows, min_piece)
    small = [p for p in range(P) if sizes[p] <= cut_at]
    for p in range(P):
        if sizes[p] > cut_at:
            pieces = _split_part(store, p, -(-int(sizes[p]) // cut_at), assign, local)
            units += [((p,), rows) for rows in pieces] if pieces else [((p,), None)]
    small_sizes = np.sort(sizes[small])
    if len(small) < 2 or small_sizes[0] + small_sizes[1] > max_rows:
        return sorted(units + [((p,), None) for p in small], key=lambda u: u[0][0])
    cut = np.zeros((P, P), np.int64)  # edges between parts (rows: from)
    for p in small:
        cut[p] = np.bincount(assign[np.asarray(store.read_part(p, ("indices",))["indices"])], minlength=P)
    left = np.zeros(P, bool)
    left[small] = True
    while left.any():
        seed = int(np.flatnonzero(left)[np.argmax(sizes[left])])
        group, rows, pull = [seed], int(sizes[seed]), cut[seed].copy()
        left[seed] = False
        while True:
            fits = left & (sizes + rows <= max_rows)
            if not fits.any():
                break
            q = int(np.flatnonzero(fits)[np.argmax(pull[fits])])
            group.append(q)
            rows += int(sizes[q])
            pull += cut[q]
            left[q] = False
        units.append((tuple(sorted(group)), None))
    return sorted(units, key=lambda u: u[0][0])


def _split_part(store: PartitionStore, p: int, k: int, assign: np.ndarray,
                local: np.ndarray) -> list[np.ndarray] | None:
    """Part ``p``'s rows cut into ``k`` runs of a reverse Cuthill-McKee order of its own edges, or None
    when the pieces would read more than :data:`MAX_CUT_HALO` of the part's rows from each other."""
    # imported here: scipy.sparse and its graph routines add ~5 MiB to a process's RSS, which runs that
    # cut no part (most stores, SAR workers, the in-memory baseline) need not hold
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    n_p = store.manifest.parts[p].num_nodes
    a = store.read_part(p, ("indptr", "indices"))
    col = np.asarray(a["indices"], np.int64)
    lr = np.repeat(np.arange(n_p, dtype=np.int64), np.diff(a["indptr"]))
    inside = assign[col] == p
    src, dst = lr[inside], local[col[inside]]
    del col, lr, inside
    order = reverse_cuthill_mckee(csr_matrix((np.ones(len(src), np.int8), (src, dst)), shape=(n_p, n_p)),
                                  symmetric_mode=True).astype(np.int64)
    pieces = np.array_split(order, k)
    piece_of = np.empty(n_p, np.int64)
    piece_of[order] = np.repeat(np.arange(k), [len(x) for x in pieces])
    cross = piece_of[src] != piece_of[dst]
    added = len(np.unique(dst[cross] * k + piece_of[src[cross]]))  # (row, piece reading it) pairs
    if added > MAX_CUT_HALO * n_p:
        logger.info("part %d: not cut into %d pieces (they would read %d rows of each other, %.0f%% of its %d)",
                    p, k, added, 100 * added / n_p, n_p)
        return None
    return [np.sort(x) for x in pieces]


def plan_from_store(store: PartitionStore, aggr: Aggr, units: list[Unit] | None = None,
                    matrix_dir: str | None = None) -> PartPlan:
    """The schedule's plan over ``units`` (default: the store's parts), built from one part's topology
    at a time (with ``matrix_dir``, kept there: see :func:`~.graph.assemble_plan`).

    Normalisation uses whole-graph degrees (one ``float64[n]`` array, from the parts' row pointers),
    so the plan equals :func:`~.graph.build_plan` on the whole graph with the units as the assignment.
    ``relation_mean`` (R-GCN, a typed store) reads each part's ``edge_type`` beside its indices.
    """
    n = store.manifest.num_nodes
    R = int(store.manifest.num_relations) if aggr == "relation_mean" else 1
    if aggr == "relation_mean" and not R:
        raise StoreFormatError(f"{store.root}: R-GCN needs each edge's relation, and this store is not typed")
    names = ("indptr", "indices", "edge_type") if aggr == "relation_mean" else ("indptr", "indices")
    units = units if units is not None else [((p,), None) for p in range(store.num_parts)]
    deg = np.zeros(n, np.float64)
    nodes: list[np.ndarray] = []
    for p in range(store.num_parts):
        a = store.read_part(p, ("nodes", "indptr"))
        nodes.append(np.asarray(a["nodes"], np.int64))
        deg[nodes[p]] = np.diff(a["indptr"])
    own = [np.concatenate([nodes[p] for p in parts]) if rows is None else nodes[parts[0]][rows]
           for parts, rows in units]
    if len(units) == store.num_parts and all(rows is None for _, rows in units):
        owner = np.asarray(store.assignment, np.int32)
    else:
        owner = np.empty(n, np.int32)
        for u, o in enumerate(own):
            owner[o] = u

    def edges_of(u: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        parts, rows = units[u]
        lrs, cols, ets, off = [], [], [], 0
        for p in parts:
            a = store.read_part(p, names)
            if rows is None:
                lrs.append(off + np.repeat(np.arange(len(nodes[p]), dtype=np.int64), np.diff(a["indptr"])))
                cols.append(np.asarray(a["indices"], np.int64))
                ets.append(a.get("edge_type"))
                off += len(nodes[p])
            else:
                lr, col = csr_rows(np.asarray(a["indptr"], np.int64), a["indices"], rows)
                lrs.append(lr)
                cols.append(col)
                ets.append(csr_rows(np.asarray(a["indptr"], np.int64), a["edge_type"], rows)[1]
                           if aggr == "relation_mean" else None)
        lr, col = (lrs[0], cols[0]) if len(parts) == 1 else (np.concatenate(lrs), np.concatenate(cols))
        if aggr == "relation_mean":
            key, val = relation_rows(lr, ets[0] if len(ets) == 1 else np.concatenate(ets), len(own[u]), R)
            return key, col, val
        if aggr in ("gcn", "mean_self"):
            lr = np.concatenate([lr, np.arange(len(own[u]), dtype=np.int64)])
            col = np.concatenate([col, own[u]])
        return lr, col, degree_weights(deg, own[u][lr], col, aggr)

    return assemble_plan(owner, own, aggr, edges_of, matrix_dir, relations=R)


def part_tensors(source, device: torch.device) -> tuple[list[torch.Tensor], dict[str, list[torch.Tensor]], int]:
    """Labels and split masks per part as tensors on ``device``, and the global training count."""
    labels = [torch.from_numpy(x).to(device) for x in source.labels]
    masks = {k: [torch.from_numpy(x).to(device) for x in v] for k, v in source.masks.items()}
    n_train = int(sum(int((m & (lab >= 0)).sum()) for m, lab in zip(source.masks["train_mask"], source.labels)))
    return labels, masks, n_train
