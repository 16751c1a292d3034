"""Per-part aggregation matrices of a partitioned graph, and the graph as the full-graph modes load it.

Why this module exists: both full-graph modes (offloaded single-process and SAR) need the same
per-part view of the graph: which vertices a part owns, which rows of other parts it needs (its
*boundary*), and the normalised aggregation matrix over its *expanded* input (own rows first, then
boundary rows grouped by source part, as in GriNNder).  Normalisation is computed from whole-graph
degrees before splitting, which is what makes the partitioned computation exact.  The parts are the
ones ``argosy partition`` wrote into the store.

Relations: on a typed store R-GCN's operator is the per-(destination, relation) mean
(``relation_mean``): row ``v * R + r`` of the matrix holds ``1/|N_r(v)|`` for each in-neighbour of
``v`` along ``r``, so one product gives every destination's ``R`` means (``[m * R, F]``, read as
``[m, R, F]``).  GCN and SAGE are the one-relation case (``R = 1``): the same matrices, row ``v``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from argosy.shared.errors import StoreFormatError
from argosy.shared.graphio import Graph
from argosy.shared.store.reader import PartitionStore

from .kernels import CSR, CSRFiles, csr_from_coo, csr_rows

__all__ = ["GraphData", "PartPlan", "load_store_graph", "normalize_rows", "build_plan",
           "normalized_values", "degree_weights", "relation_rows", "edge_types", "assemble_plan", "full_matrix"]

logger = logging.getLogger(__name__)

Aggr = Literal["gcn", "mean", "mean_self", "relation_mean"]

GraphData = Graph
"""The common library's graph type (symmetric CSR + node data); a typed store's graph also carries
``extra["edge_type"]`` (``int[nnz]`` aligned with ``indices``) and ``extra["num_relations"]``."""


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """Row-normalise features to sum 1 in place (Kipf & Welling's bag-of-words preprocessing).

    Shapes: x float32[n, F] (writable); returns x.
    """
    rs = x.sum(1, keepdims=True, dtype=np.float64)
    rs[rs == 0] = 1.0
    x /= rs.astype(np.float32)
    return x


def load_store_graph(store: PartitionStore, normalize: bool = False) -> tuple[Graph, np.ndarray]:
    """The whole graph of a store (single-process modes) and its part assignment.

    Returns:
        ``(graph, owner)``: the global CSR with features, labels and masks in global id order (and,
        typed, each entry's relation: :data:`GraphData`), and ``int32[n]`` the part of every vertex.
    """
    m = store.manifest
    if not m.num_classes or not (m.feature_dim or m.num_relations):  # typed, featureless: R-GCN's learned input
        raise StoreFormatError(f"{store.root}: full-graph training needs features and labels, and this "
                               f"store has {m.feature_dim} feature columns and {m.num_classes} classes")
    indptr, indices = store.global_csr()
    n = m.num_nodes
    extra = {}
    if m.num_relations:
        extra = {"edge_type": edge_types(store, indptr), "num_relations": int(m.num_relations)}
    feats = np.empty((n, m.feature_dim), np.float32)
    labels = np.full(n, -1, np.int64)
    masks = {k: np.zeros(n, bool) for k in ("train_mask", "val_mask", "test_mask")}
    for p in range(store.num_parts):
        pd = store.part(p)
        nodes = np.asarray(pd.nodes)
        if m.feature_dim:
            feats[nodes] = store.features.dense(p)
        labels[nodes] = pd.labels
        for k, arr in masks.items():
            if getattr(pd, k) is not None:
                arr[nodes] = getattr(pd, k)
    if normalize:
        normalize_rows(feats)
    g = Graph(indptr=np.asarray(indptr, np.int64), indices=indices, features=feats, labels=labels, extra=extra,
              **masks)
    return g, np.asarray(store.assignment, np.int32)


def edge_types(store: PartitionStore, indptr: np.ndarray) -> np.ndarray:
    """A typed store's relations aligned with :meth:`PartitionStore.global_csr`'s ``indices``
    (``int32[nnz]``; ``indptr`` is that CSR's)."""
    out = np.empty(int(indptr[-1]), np.int32)
    for p in range(store.num_parts):
        a = store.read_part(p, ("nodes", "indptr", "edge_type"))
        pip = np.asarray(a["indptr"], np.int64)
        lens = np.diff(pip)
        pos = np.repeat(indptr[np.asarray(a["nodes"], np.int64)] - pip[:-1], lens) + np.arange(int(pip[-1]))
        out[pos] = a["edge_type"]
    return out


def relation_rows(lr: np.ndarray, et: np.ndarray, num_rows: int, relations: int) -> tuple[np.ndarray, np.ndarray]:
    """R-GCN's rows and weights of a set of destination rows' in-edges: ``(lr * R + r, 1/|N_r(v)|)``.

    The count is over the row's own entries, which are all of its in-edges, so it needs no
    whole-graph array.  Shapes: lr, et ``int[e]`` (local row, relation); returns ``int64[e]``, ``float32[e]``.
    """
    key = lr.astype(np.int64) * relations + et.astype(np.int64)
    cnt = np.bincount(key, minlength=num_rows * relations)
    return key, (1.0 / cnt[key]).astype(np.float32)


def normalized_values(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray,
                      cols: np.ndarray, aggr: Aggr) -> np.ndarray:
    """Edge weights for aggregation, from whole-graph degrees.

    ``gcn``: ``1/sqrt((d_i+1)(d_j+1))`` (self loops added by the caller as
    edges ``i -> i``), Kipf & Welling. ``mean``: ``1/d_i`` over neighbours. ``mean_self``:
    ``1/(d_i+1)`` over neighbours and the self loop (SAGE's ``gcn`` aggregator).

    Shapes:
        rows, cols: ``int64[e]`` global ids; returns ``float32[e]``.
    """
    return degree_weights(np.diff(indptr).astype(np.float64), rows, cols, aggr)


def degree_weights(deg: np.ndarray, rows: np.ndarray, cols: np.ndarray, aggr: Aggr) -> np.ndarray:
    """:func:`normalized_values` from the whole-graph degree array ``float64[n]`` (no CSR needed)."""
    if aggr == "gcn":
        dinv = 1.0 / np.sqrt(deg + 1.0)
        return (dinv[rows] * dinv[cols]).astype(np.float32)
    if aggr == "mean":
        return (1.0 / np.maximum(deg[rows], 1.0)).astype(np.float32)
    if aggr == "mean_self":
        return (1.0 / (deg[rows] + 1.0)).astype(np.float32)
    raise ValueError(f"unknown aggregation {aggr!r}")


def _edges_of(g: GraphData, rows: np.ndarray, aggr: Aggr) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(local_row, global_col, weight) of rows' in-edges, plus self loops for gcn and mean_self
    (``relation_mean``: the local row is ``lr * R + relation``, :func:`relation_rows`)."""
    lr, col = csr_rows(g.indptr, g.indices, rows)
    if aggr == "relation_mean":
        if "edge_type" not in g.extra:
            raise ValueError("relation_mean aggregation needs each edge's relation: a typed store's graph")
        _, et = csr_rows(g.indptr, g.extra["edge_type"], rows)
        key, val = relation_rows(lr, et, len(rows), int(g.extra["num_relations"]))
        return key, col, val
    if aggr in ("gcn", "mean_self"):
        lr = np.concatenate([lr, np.arange(len(rows), dtype=np.int64)])
        col = np.concatenate([col, rows.astype(np.int64)])
    val = normalized_values(g.indptr, g.indices, rows[lr], col, aggr)
    return lr, col, val


def full_matrix(g: GraphData, aggr: Aggr) -> CSR:
    """The whole-graph aggregation matrix (in-memory reference path).

    Shapes:
        returns an ``(n * R, n)`` CSR (``R = 1`` but for ``relation_mean``).
    """
    n = g.num_nodes
    lr, col, val = _edges_of(g, np.arange(n, dtype=np.int64), aggr)
    return csr_from_coo(lr, col, val, (n * plan_relations(g, aggr), n))


def plan_relations(g: GraphData, aggr: Aggr) -> int:
    """Rows of the operator per destination: the store's relations for ``relation_mean``, else 1."""
    return int(g.extra.get("num_relations", 1)) if aggr == "relation_mean" else 1


@dataclass
class PartPlan:
    """Per-part view of a partitioned graph for one aggregation type.

    Attributes:
        num_parts: ``P``.
        owner: ``int32[n]`` part of each vertex.
        local: ``int64[n]`` row of each vertex inside its owner's block.
        own: per part, ``int64[n_p]`` global ids, in block row order.
        deps: per part, the source parts ``q != p`` it needs rows from (ascending).
        boundary: ``boundary[p][q]`` = ``int64[b_pq]`` rows *of q's block* that p
            needs (sorted).
        matrix: per part, CSR ``(n_p * R, n_p + sum_q b_pq)`` over the expanded input:
            own rows, then boundary rows in ``deps`` order (row ``v * R + r``: see the module docstring).
        matrix_t: transposes of ``matrix``.
        relations: ``R``, rows per destination (1 but for R-GCN's ``relation_mean``).

    ``matrix``/``matrix_t`` are lists held in memory, or :class:`~.kernels.CSRFiles` (read from files
    at each access) when the plan was assembled with a ``matrix_dir``.
    """

    num_parts: int
    owner: np.ndarray
    local: np.ndarray
    own: list[np.ndarray]
    deps: list[list[int]]
    boundary: list[dict[int, np.ndarray]]
    matrix: list[CSR] | CSRFiles = field(repr=False)
    matrix_t: list[CSR] | CSRFiles = field(repr=False)
    relations: int = 1

    def part_sizes(self) -> list[int]:
        return [len(o) for o in self.own]

    def expanded_size(self, p: int) -> int:
        m = self.matrix
        return m.shapes[p][1] if isinstance(m, CSRFiles) else m[p].shape[1]

    def matrix_bytes(self) -> int:
        """Bytes of the matrices the plan holds in memory: all of them, or with files the largest
        unit's pair (what one unit's computation maps)."""
        if isinstance(self.matrix, CSRFiles):
            return max((self.matrix.nbytes(p) + self.matrix_t.nbytes(p) for p in range(self.num_parts)), default=0)
        return sum(a.nbytes + b.nbytes for a, b in zip(self.matrix, self.matrix_t))

    def expansion_ratio(self) -> float:
        """GriNNder's alpha: sum of expanded sizes over n."""
        return sum(self.expanded_size(p) for p in range(self.num_parts)) / max(1, len(self.owner))

    def block(self, p: int, q: int) -> CSR:
        """Columns of part ``p``'s matrix that read from part ``q`` (``q == p`` = own rows).

        Shapes:
            returns CSR ``(n_p * R, n_q)`` for ``q == p`` else ``(n_p * R, b_pq)``.
        """
        m = self.matrix[p]
        lo, hi = self._col_range(p, q)
        rows = np.repeat(np.arange(m.shape[0], dtype=np.int64), np.diff(m.indptr))
        sel = (m.indices >= lo) & (m.indices < hi)
        return csr_from_coo(rows[sel], m.indices[sel] - lo, m.data[sel], (m.shape[0], hi - lo))

    def _col_range(self, p: int, q: int) -> tuple[int, int]:
        if q == p:
            return 0, len(self.own[p])
        lo = len(self.own[p])
        for d in self.deps[p]:
            b = len(self.boundary[p][d])
            if d == q:
                return lo, lo + b
            lo += b
        return lo, lo  # no dependency: empty range


def build_plan(g: GraphData, owner: np.ndarray, aggr: Aggr) -> PartPlan:
    """Build the per-part matrices and boundary lists from a graph held in memory.

    Args:
        g: the graph.
        owner: ``int32[n]`` part per vertex (the store's assignment).
        aggr: ``gcn`` (symmetric norm + self loops) or ``mean`` (SAGE).
    """
    n = g.num_nodes
    num_parts = int(owner.max()) + 1 if n else 1
    order = np.argsort(owner, kind="stable")
    counts = np.bincount(owner, minlength=num_parts)
    offs = np.concatenate([[0], np.cumsum(counts)])
    own = [order[offs[p]:offs[p + 1]].astype(np.int64) for p in range(num_parts)]
    return assemble_plan(owner, own, aggr, lambda p: _edges_of(g, own[p], aggr), relations=plan_relations(g, aggr))


def assemble_plan(owner: np.ndarray, own: list[np.ndarray], aggr: Aggr, edges_of,
                  matrix_dir: str | None = None, relations: int = 1) -> PartPlan:
    """The plan from each part's in-edges: ``edges_of(p)`` gives ``(local_row, global_col, weight)``
    of part ``p``'s rows (self loops included; ``relations`` > 1: the row is ``local_row * R + r``),
    one part at a time, so a caller reading the
    topology per part from the store never holds the whole graph; with ``matrix_dir`` each part's
    matrices go to files there as they are built (:class:`~.kernels.CSRFiles`), so the plan never
    holds them all either.

    Shapes:
        owner: ``int32[n]``; own: per part ``int64[n_p]`` global ids, ascending.
    """
    n = len(owner)
    num_parts = len(own)
    local = np.empty(n, dtype=np.int64)
    for p in range(num_parts):
        local[own[p]] = np.arange(len(own[p]), dtype=np.int64)
    deps: list[list[int]] = []
    boundary: list[dict[int, np.ndarray]] = []
    mats: list[CSR] | CSRFiles = [] if matrix_dir is None else CSRFiles(matrix_dir, "matrix")
    mats_t: list[CSR] | CSRFiles = [] if matrix_dir is None else CSRFiles(matrix_dir, "matrix_t")
    for p in range(num_parts):
        lr, col, val = edges_of(p)
        col_owner = owner[col]
        remote = col_owner != p
        # unique boundary vertices sorted by (owner part, local row)
        rv = np.unique(col[remote])
        key = owner[rv].astype(np.int64) * (n + 1) + local[rv]
        rv = rv[np.argsort(key, kind="stable")]
        rv_owner = owner[rv]
        dq, starts = np.unique(rv_owner, return_index=True)
        deps.append([int(q) for q in dq])
        bnd = {}
        ends = list(starts[1:]) + [len(rv)]
        for q, s, e in zip(dq, starts, ends):
            bnd[int(q)] = local[rv[s:e]]
        boundary.append(bnd)
        # expanded column position
        ecol = np.empty(len(col), dtype=np.int64)
        ecol[~remote] = local[col[~remote]]
        ecol[remote] = len(own[p]) + np.searchsorted(
            owner[rv].astype(np.int64) * (n + 1) + local[rv],
            owner[col[remote]].astype(np.int64) * (n + 1) + local[col[remote]])
        m = csr_from_coo(lr, ecol, val, (len(own[p]) * relations, len(own[p]) + len(rv)))
        del lr, col, val, ecol
        mats.append(m)
        mats_t.append(m.transpose())
        del m
    plan = PartPlan(num_parts, owner.astype(np.int32), local, own, deps, boundary, mats, mats_t, relations)
    logger.info("partition plan: P=%d aggr=%s alpha=%.3f", num_parts, aggr, plan.expansion_ratio())
    return plan
