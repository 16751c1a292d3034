"""Every vertex's output with full neighbourhoods, from a store: what ``argosy predict`` runs for
node and link models alike.

Built-in models (GCN, SAGE, GAT, R-GCN) run **layer by layer** (:func:`layerwise`): layer ``i`` for every
vertex, part by part, in chunks of destination vertices whose full neighbour lists come from the
store (on a typed store with each neighbour's relation), its output written to a memory-mapped
file that layer ``i + 1`` reads; memory is one chunk plus the page cache, whatever the graph size.
A ``MODULE:FACTORY`` model has no layer structure Argosy can split, so :func:`khop` runs it on chunks of seeds with their full ``L``-hop
neighbourhoods and the in-edges of the outermost hop (exact, equal to training's evaluation).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from argosy.shared.errors import ArgosyError
from argosy.shared.models import Blocks, EdgeIndexModel, GNN
from argosy.shared.store import PartitionStore
from argosy.shared.store.gather import gather_feature_rows
from argosy.shared.usermodel import embedding_module

__all__ = ["layerwise", "khop"]

_CHUNK_EDGES = 1 << 20
_CHUNK_NODES = 1 << 15
_RGCN_FLOATS = 1 << 26
"""An R-GCN layer's chunk holds at most this many floats (256 MB) of per-(destination, relation)
means (``num_dst * R * width``), or, for a featureless first layer, of gathered basis rows
(``edges * B * hidden``): its chunks are smaller than other layers' where these would be larger."""


class _Rows:
    """Rows of a per-vertex matrix by global id: the store's features (then, with ``learned``, a
    link model's learned input rows float[n, d]), or a layer's output memmap."""

    def __init__(self, store: PartitionStore, matrix: np.ndarray | None = None, normalize: bool = False,
                 learned: np.ndarray | None = None):
        self.store, self.matrix, self.normalize, self.learned = store, matrix, normalize, learned
        self.assign = np.asarray(store.assignment)
        self.local = np.asarray(store.local_index)
        self._feats: dict[int, np.ndarray] = {}         # feature arrays by key, of the parts in ``_read``
        self._read: set[int] = set()

    def __call__(self, ids: np.ndarray) -> torch.Tensor:
        if self.learned is not None:
            e = torch.from_numpy(np.asarray(self.learned[ids], np.float32))
            if self.store.manifest.feature_dim == 0:
                return e
            return torch.cat([_Rows(self.store, normalize=self.normalize)(ids), e], 1)
        if self.matrix is not None:
            o = np.argsort(ids)
            out = np.empty((ids.shape[0], self.matrix.shape[1]), np.float32)
            out[o] = self.matrix[ids[o]]                 # ascending ids: sequential reads of the memmap
            return torch.from_numpy(out)
        layout = self.store.features            # per-type files: a featureless type's rows stay zero
        ids = np.asarray(ids, np.int64)
        out = np.zeros((ids.shape[0], layout.width), layout.dtype)
        fe = layout.featured(ids)
        sel = np.arange(ids.shape[0]) if fe is None else np.flatnonzero(fe)
        keys, rows = layout.locate(ids[sel], self.assign[ids[sel]], self.local[ids[sel]])
        for p in np.unique(keys // layout.T).tolist():
            if p not in self._read:
                self._feats.update(layout.read(p, advice=None))
                self._read.add(p)
        o = np.argsort(rows, kind="stable")      # ascending rows: forward reads of each map
        gather_feature_rows(self._feats, keys[o], rows[o], sel[o], out)
        x = torch.from_numpy(out.astype(np.float32, copy=False))
        if self.normalize:
            x = x / x.sum(1, keepdim=True).clamp(min=1e-12)
        return x


def _degrees(store: PartitionStore, weighted: bool = False) -> np.ndarray:
    """float32[n]: every vertex's degree (``weighted``: its sum of edge weights, as the sampler sends)."""
    deg = np.zeros(store.manifest.num_nodes, np.float32)
    for p in range(store.num_parts):
        pd = store.part(p)
        deg[np.asarray(pd.nodes)] = pd.weighted_degree if weighted else np.diff(np.asarray(pd.indptr))
    return deg


def _chunks(store: PartitionStore, max_nodes: int = 0, max_edges: int = 0):
    """``(dst global ids, src local ids, dst local ids, nodes, weights, relations)`` per chunk of
    destination vertices: full neighbour lists, destinations first in ``nodes``; ``weights`` float32
    aligned with the edges (a weighted store) or None; ``relations`` int64 each edge's relation (a
    typed store's ``edge_type``) or None.  ``max_nodes``, ``max_edges``: at most this many
    destinations, edges (0: :data:`_CHUNK_NODES`, :data:`_CHUNK_EDGES`; a vertex with more edges
    is a chunk alone)."""
    max_nodes, max_edges = max_nodes or _CHUNK_NODES, max_edges or _CHUNK_EDGES
    for p in range(store.num_parts):
        pd = store.part(p)
        indptr, owned = np.asarray(pd.indptr), np.asarray(pd.nodes)
        a = 0
        while a < owned.shape[0]:
            b = min(owned.shape[0], a + max_nodes,
                    max(a + 1, int(np.searchsorted(indptr, indptr[a] + max_edges, "right")) - 1))
            dst = owned[a:b].astype(np.int64)
            nbrs = np.asarray(pd.indices[indptr[a]:indptr[b]]).astype(np.int64)
            dst_local = np.repeat(np.arange(b - a), np.diff(indptr[a:b + 1]))
            extra = np.setdiff1d(np.unique(nbrs), dst, assume_unique=True)
            nodes = np.concatenate([dst, extra])
            order = np.argsort(nodes, kind="stable")
            src_local = order[np.searchsorted(nodes[order], nbrs)]
            w = None if pd.edge_weight is None else np.array(pd.edge_weight[indptr[a]:indptr[b]], np.float32)
            et = None if pd.edge_type is None else np.asarray(pd.edge_type[indptr[a]:indptr[b]]).astype(np.int64)
            yield dst, src_local, dst_local, nodes, w, et
            a = b


def _rgcn_limits(model: GNN, i: int) -> tuple[int, int]:
    """``(max destinations, max edges)`` of layer ``i``'s chunks (0: the defaults), see :data:`_RGCN_FLOATS`."""
    if model.kind != "rgcn":
        return 0, 0
    layer = model.layers[i]
    if layer.featureless:                 # per edge: B gathered rows of hidden; per vertex (B + 1) of them
        per_edge = (layer.num_bases + 1) * layer.out_dim
        return 0, max(1, min(_CHUNK_EDGES, _RGCN_FLOATS // per_edge))
    return max(1, min(_CHUNK_NODES, _RGCN_FLOATS // (layer.num_relations * layer.root.in_features))), 0


@torch.no_grad()
def layerwise(model: GNN, store: PartitionStore, normalize: bool, tmp: Path, embeddings: bool,
               weighted: bool = False, learned: np.ndarray | None = None):
    """Every vertex's output of a built-in :class:`GNN`, one layer at a time over chunks of full
    neighbour lists (see the module's docstring).  ``learned``: learned input rows float[n, d] after
    the features (if any).  R-GCN gets each edge's relation; its per-(destination, relation) means
    over a full neighbour list are the layer on the whole graph, as training's evaluation (fanouts -1).
    -> (float32[n, out] logits or memmap, float32[n, hidden] last hidden layer or None)."""
    if model.kind in ("rgcn", "rgat") and store.manifest.num_relations < 1:
        raise ArgosyError(f"{store.root}: a relational model ({model.kind}) needs each edge's relation, and this store is not typed")
    n = store.manifest.num_nodes
    deg = torch.from_numpy(_degrees(store))
    wdeg = torch.from_numpy(_degrees(store, True)) if weighted else None
    rows = _Rows(store, normalize=normalize, learned=learned)
    L = len(model.layers)
    emb = None
    for i in range(L):
        out = None
        for dst, src_local, dst_local, nodes, w, et in _chunks(store, *_rgcn_limits(model, i)):
            idx = torch.from_numpy(nodes)
            h = model.layer_forward(i, rows(nodes), torch.from_numpy(src_local), torch.from_numpy(dst_local),
                                    dst.shape[0], deg[idx], None,
                                    torch.from_numpy(w) if weighted else None, wdeg[idx] if weighted else None,
                                    torch.from_numpy(et) if et is not None else None)
            if out is None:
                out = np.lib.format.open_memmap(tmp / f"h{i + 1}.npy", "w+", np.float32, (n, h.shape[1]))
            out[dst] = h.numpy()
        if out is None:                                  # a graph with no vertex
            out = np.zeros((0, 0), np.float32)
        if i == L - 2 and embeddings:
            emb = out
        rows = _Rows(store, matrix=out)
    return out, emb


@torch.no_grad()
def khop(model: EdgeIndexModel, store: PartitionStore, normalize: bool, num_layers: int, embeddings: bool,
          batch: int = 4096, learned: np.ndarray | None = None):
    """Exact predictions of a PyG-style model: each chunk of seeds with its full ``L``-hop
    neighbourhood plus the in-edges of the outermost hop (degrees a model counts in the subgraph are
    then the graph's, as in training's evaluation, see :meth:`JobConfig.fanouts_for`).
    ``embeddings``: also the input of the model's last layer (:func:`embedding_module`).
    ``learned``: a link model's learned input rows float[n, d], after the features (if any)."""
    from argosy.services.sampler.core import SamplerCore
    sampler = SamplerCore(store)
    rows = _Rows(store, normalize=normalize, learned=learned)
    n = store.manifest.num_nodes
    hetero = getattr(model, "metadata", None) is not None      # a PyG heterogeneous model: nodes' types
    offsets = np.asarray(store.manifest.typed.get("type_offsets", [0, n]), np.int64)
    out = emb = None
    seen: list = []
    hook = embedding_module(model.inner).register_forward_pre_hook(
        lambda mod, args: seen.append(args[0])) if embeddings else None
    try:
        for a in range(0, n, batch):
            seeds = np.arange(a, min(n, a + batch), dtype=np.int64)
            sb = sampler.sample(seeds, tuple([-1] * (num_layers + 1)))
            blocks = Blocks(hop_nodes=sb.hop_nodes.tolist(), hop_edges=sb.hop_edges.tolist(),
                            edge_src=torch.from_numpy(sb.edge_src.astype(np.int64)),
                            edge_dst=torch.from_numpy(sb.edge_dst.astype(np.int64)),
                            degrees=torch.from_numpy(sb.degrees.astype(np.float32)),
                            edge_type=None if getattr(sb, "edge_type", None) is None else
                            torch.from_numpy(np.asarray(sb.edge_type, np.int64)),
                            node_type=torch.from_numpy(np.searchsorted(offsets, np.asarray(sb.nodes, np.int64),
                                                                       "right") - 1) if hetero else None)
            seen.clear()
            logits = model(rows(np.asarray(sb.nodes, np.int64)), blocks)
            if out is None:
                out = np.empty((n, logits.shape[1]), np.float32)
            out[seeds] = logits.numpy()
            if embeddings:
                if not seen or not isinstance(seen[-1], torch.Tensor):
                    raise ArgosyError(f"--embeddings: the layer {type(embedding_module(model.inner)).__name__} "
                                      "was not called with a tensor as its first input; set the model's "
                                      "argosy_embedding attribute to the layer whose input is the embedding")
                h = seen[-1][:seeds.shape[0]]
                if emb is None:
                    emb = np.empty((n, h.shape[1]), np.float32)
                emb[seeds] = h.numpy()
    finally:
        if hook is not None:
            hook.remove()
    return out, emb
