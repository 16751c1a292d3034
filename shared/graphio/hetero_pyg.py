"""PyG ``HeteroData`` <-> :class:`TypedGraph`.

Why this module exists: a graph already built in PyTorch Geometric (``OGB_MAG``, ``DBLP``,
``HeteroData`` made by hand) enters Argosy through the same typed object as files do, and a
typed graph read from files can be handed to PyG code.  ``torch_geometric`` is an optional extra,
imported only inside :func:`to_hetero_data`.

Mapping: node types = ``data.node_types``; ``num_nodes[t] = data[t].num_nodes``; relations =
``data.edge_types`` with ``edge_index`` (2, m) split into ``(src, dst)``; ``features[t] =
data[t].x``; the target is the one node type holding ``y`` (``y`` of shape (n,) or (n, 1)), with
its ``train_mask``/``val_mask``/``test_mask``; class names in the graph-level ``label_names``.
"""
from __future__ import annotations

import numpy as np

from argosy.shared.errors import GraphFormatError

from .formats import SPLITS
from .typed import TypedGraph

__all__ = ["from_hetero_data", "to_hetero_data"]


def _np(v) -> np.ndarray:
    """A tensor (or array) as a numpy array on the CPU."""
    return v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v)


def from_hetero_data(data, name: str = "hetero_data") -> TypedGraph:
    """A :class:`TypedGraph` from a PyG ``HeteroData`` (shapes: ``x`` float[n_t, F_t],
    ``edge_index`` int[2, m_r], ``y`` int[n_target] or int[n_target, 1], masks bool[n_target]).

    Raises:
        GraphFormatError: naming ``name`` and the fault: several node types with ``y``, an
            ``edge_index`` not of shape (2, m), or any :meth:`TypedGraph.validate` fault.
    """
    types = [str(t) for t in data.node_types]
    num, feats = {}, {}
    for t in types:
        store = data[t]
        n = store.num_nodes
        if n is None:
            raise GraphFormatError(f"{name}: node type {t!r} has no vertex count (set data[{t!r}].num_nodes)")
        num[t] = int(n)
        if getattr(store, "x", None) is not None:
            x = _np(store.x)
            feats[t] = x.astype(np.float32, copy=False) if x.dtype.kind == "f" else x
    relations, edges = [], {}
    for key in data.edge_types:
        key = tuple(str(k) for k in key)
        ei = _np(data[key].edge_index)
        if ei.ndim != 2 or ei.shape[0] != 2:
            raise GraphFormatError(f"{name}: edge_index of {key!r} has shape {ei.shape}; expected (2, m)")
        relations.append(key)
        edges[key] = (ei[0].astype(np.int64), ei[1].astype(np.int64))
    tg = TypedGraph(node_types=types, num_nodes=num, relations=relations, edges=edges, features=feats, name=name)
    targets = [t for t in types if getattr(data[t], "y", None) is not None]
    if len(targets) > 1:
        raise GraphFormatError(f"{name}: node types {targets} all hold y; one target type expected")
    if targets:
        tg.target = t = targets[0]
        y = _np(data[t].y)
        if y.ndim == 2 and y.shape[1] == 1:
            y = y[:, 0]
        if y.dtype.kind not in "iu":
            raise GraphFormatError(f"{name}: y of node type {t!r} is {y.dtype}; expected integer class ids")
        tg.labels = y.astype(np.int64)
        for k in SPLITS:
            if getattr(data[t], k, None) is not None:
                setattr(tg, k, _np(getattr(data[t], k)).astype(bool))
        names = getattr(data, "label_names", None)
        tg.label_names = [str(c) for c in names] if names is not None else None
    return tg.validate(name)


def to_hetero_data(tg: TypedGraph):
    """A PyG ``HeteroData`` from ``tg``: ``num_nodes``, ``x``, ``edge_index`` (int64) per type and
    relation, ``y`` and masks on the target type, ``data.label_names``.  Triples and vertex
    names are not carried."""
    import torch
    from torch_geometric.data import HeteroData

    tg.validate(tg.name)
    data = HeteroData()
    for t in tg.node_types:
        data[t].num_nodes = int(tg.num_nodes[t])
        if t in tg.features:
            data[t].x = torch.from_numpy(np.ascontiguousarray(tg.features[t]))
    for key in tg.relations:
        s, d = tg.edges[key]
        data[key].edge_index = torch.from_numpy(np.stack([np.asarray(s, np.int64), np.asarray(d, np.int64)]))
    if tg.target is not None:
        if tg.labels is not None:
            data[tg.target].y = torch.from_numpy(np.asarray(tg.labels, np.int64))
        for k in SPLITS:
            if getattr(tg, k) is not None:
                setattr(data[tg.target], k, torch.from_numpy(np.asarray(getattr(tg, k), bool)))
        if tg.label_names is not None:
            data.label_names = list(tg.label_names)
    return data
