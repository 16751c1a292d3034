"""A typed graph (:class:`~argosy.shared.graphio.typed.TypedGraph`) as a store: the same writer,
one more per-entry array.

Why this module exists: a heterogeneous graph goes through the one store format (one global id
space with per-type ranges, ``edge_type.npy`` beside ``indices.npy``, the typing in the manifest),
so the samplers, loaders, halo exchange and trainers serve it with the code that serves a
homogeneous graph, which is the one-type, one-relation case.

Conventions: an edge ``s -> d`` of relation ``r`` is stored as the entry ``(d, s)`` with relation
``r`` (``d`` aggregates the message from ``s``); with ``reverse`` (the default: R-GCN and every
hetero model need messages both ways) the entry ``(s, d)`` with relation ``R + r`` (``rev_<r>``,
``(dst_type, rev_r, src_type)``) is added too, so the store is symmetric as GREM and the sampler
expect.  Without it the store is directed (``--directed``: only the given direction is sampled).

Node data: each type's features go to their own file per part, in the type's own width
(``part-N/features_t{t}.npy``; :mod:`shared.store.features` says where a vertex's row is); a
featureless type has no file and gets a learned embedding.  Labels and masks live on the target
type; other types are unlabelled (-1, False).
"""
from __future__ import annotations

import os

import numpy as np

from argosy.shared.graphio import Graph, csr_from_edges
from argosy.shared.graphio.typed import REVERSE_PREFIX, TypedGraph
from argosy.shared.store.manifest import Manifest
from argosy.shared.store.writer import write_store_from_edges

__all__ = ["typed_relations", "typed_edge_chunks", "typed_flat_graph", "typed_node_data", "write_typed_store"]


def typed_relations(tg: TypedGraph, reverse: bool = True) -> list[list[str]]:
    """The store's relation list: the graph's, then (``reverse``) ``(d, rev_r, s)`` for each."""
    rels = [list(r) for r in tg.relations]
    if reverse:
        rels += [[d, REVERSE_PREFIX + r, s] for s, r, d in tg.relations]
    return rels


def typed_edge_chunks(tg: TypedGraph, reverse: bool = True, chunk: int = 1 << 20):
    """``(src, dst, relation)`` entry chunks of the store writer (see the module docstring), one
    slice of one relation at a time: the relations are never concatenated (O(chunk) memory)."""
    R = len(tg.relations)
    for r, (s, d, so, do) in enumerate(tg.relation_segments()):
        for a in range(0, len(s), chunk):
            ss = np.asarray(s[a:a + chunk], np.int64) + so
            dd = np.asarray(d[a:a + chunk], np.int64) + do
            rr = np.full(ss.shape[0], r, np.int32)
            yield dd, ss, rr
            if reverse:
                yield ss, dd, rr + R


def typed_flat_graph(tg: TypedGraph) -> Graph:
    """The typed graph without its types, symmetric: what GREM (or any partitioner) cuts."""
    s, d, _ = tg.global_edges()
    return csr_from_edges(s, d, num_nodes=tg.total_nodes)


def typed_node_data(tg: TypedGraph) -> dict:
    """The store writer's node data: ``features`` per type (``{type id: (first global id, rows)}``,
    each in its own width), ``labels`` (-1 off the target type) and the split masks (False off it);
    only those the graph has."""
    n, off = tg.total_nodes, tg.type_offsets
    out = {}
    if tg.features:
        out["features"] = {tg.node_types.index(t): (int(off[tg.node_types.index(t)]), f)
                           for t, f in tg.features.items()}
    if tg.target is not None:
        i = tg.node_types.index(tg.target)
        lo, hi = int(off[i]), int(off[i + 1])
        if tg.labels is not None:
            y = np.full(n, -1, np.int64)
            y[lo:hi] = tg.labels
            out["labels"] = y
        for k in ("train_mask", "val_mask", "test_mask"):
            m = getattr(tg, k)
            if m is not None:
                a = np.zeros(n, bool)
                a[lo:hi] = m
                out[k] = a
    return out


def typed_manifest_info(tg: TypedGraph, reverse: bool = True) -> dict:
    """The manifest's ``typed`` section (see :class:`~argosy.shared.store.manifest.Manifest`)."""
    return {"node_types": list(tg.node_types), "type_offsets": tg.type_offsets.tolist(),
            "relations": typed_relations(tg, reverse), "reverse": len(tg.relations) if reverse else 0,
            "target": tg.target, "feature_dims": {t: int(tg.features[t].shape[1]) if t in tg.features else 0
                                                  for t in tg.node_types},
            "label_names": list(tg.label_names) if tg.label_names else []}


def write_typed_store(tg: TypedGraph, assignment: np.ndarray, out: str | os.PathLike, num_parts: int | None = None,
                      reverse: bool = True, partition_info: dict | None = None, feature_dtype: str = "float32",
                      overwrite: bool = False, finish=None, split=None) -> Manifest:
    """Write ``tg`` partitioned by ``assignment`` (int[n] over global ids) as a typed store.
    ``split``: a :class:`~argosy.shared.linkpred.RelationEdgeSplit` whose held-out edges never reach
    the stored graph (its link arrays are written by ``finish``)."""
    tg.validate(tg.name)
    chunks = typed_edge_chunks(tg, reverse)
    return write_store_from_edges(chunks if split is None else split.filter(chunks), tg.total_nodes, assignment, out,
                                  num_parts=num_parts, node_data=typed_node_data(tg), partition_info=partition_info,
                                  feature_dtype=feature_dtype, overwrite=overwrite, name=tg.name,
                                  directed=not reverse, num_relations=len(tg.relations) * (2 if reverse else 1),
                                  typed=typed_manifest_info(tg, reverse), finish=finish)


KG_SPLITS = ("train", "valid", "test")


def write_kg_triples(tg: TypedGraph):
    """The store writer's ``finish`` for a knowledge graph: each split's ``(head, relation, tail)``
    triples (global ids, the graph's relation ids) go to the part owning the head, as
    ``part-*/kg_<split>.npy`` int64[m_p, 3]; the manifest's ``typed.triples`` counts them per part."""
    from argosy.shared.store.manifest import MANIFEST_NAME

    def finish(root, manifest: Manifest) -> Manifest:
        assign = np.load(root / "assignment.npy")
        counts = {}
        for split in KG_SPLITS:
            tr = np.asarray(tg.triples.get(split, np.empty((0, 3), np.int64)), np.int64).reshape(-1, 3)
            owner = assign[tr[:, 0]] if tr.size else np.empty(0, np.int32)
            counts[split] = []
            for entry in manifest.parts:
                sel = tr[owner == entry.part]
                np.save(root / entry.path / f"kg_{split}.npy", sel)
                counts[split].append(int(sel.shape[0]))
        manifest.typed["triples"] = counts
        (root / MANIFEST_NAME).write_text(manifest.to_json())
        return manifest
    return finish
