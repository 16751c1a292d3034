"""Link-prediction batches: seed edges and their negatives -> one seed set -> blocks without the positives.

A ``train`` work item is a range of one part's training edges (:mod:`shared.plan`); this module
adds ``K`` negatives per positive (:func:`shared.linkpred.negatives`), takes the union of all
endpoints as the seeds (sorted, each once), samples the usual multi-hop blocks around them
(:meth:`SamplerCore.sample`) and then removes every sampled edge that is one of the batch's
positives, in either direction, from every hop, and those edges from the endpoints' ``degrees``:
the batch's message-passing graph is the training graph minus the edges it predicts (DGL's
``exclude="reverse_id"``, PyG's ``LinkNeighborLoader``).  ``val``/``test`` items are ranges of the
part's held-out pairs (positives and negatives, never in the stored graph): nothing to exclude.

Randomness (negatives and neighbours) is derived from ``(seed, epoch, batch id)``: a re-claimed
item gives the same batch.
"""
from __future__ import annotations

import time

import numpy as np

from argosy.shared.config import LinkConfig
from argosy.shared.linkpred import degree_cdf, kg_relations, negatives, pair_keys, part_pairs
from argosy.shared.plan import WorkItem, mix_seed
from argosy.shared.protocol import SampledBatch

__all__ = ["sample_link_item", "exclude_pairs"]


def exclude_pairs(batch: SampledBatch, src: np.ndarray, dst: np.ndarray, num_nodes: int) -> int:
    """Remove the undirected edges ``{src[i], dst[i]}`` (global ids; all of them seeds of ``batch``)
    from every hop of ``batch`` in place: edges, per-hop offsets, CSR offsets, and the endpoints'
    degrees (the edges are in the training graph the degrees count).  Vectorised, O(E + P log P).

    Returns the number of sampled edges removed.
    """
    nodes = batch.nodes
    keys = np.unique(pair_keys(src, dst, num_nodes))
    # degrees: each positive edge counted once at each endpoint
    ends = np.concatenate([keys // num_nodes, keys % num_nodes])
    seeds = nodes[:batch.num_seeds]
    loc = np.searchsorted(seeds, ends)                  # seeds are sorted (np.unique in sample_link_item)
    batch.degrees = batch.degrees - np.bincount(loc, minlength=nodes.shape[0]).astype(np.int32)
    E = batch.edge_src.shape[0]
    if E == 0 or keys.size == 0:
        return 0
    ek = pair_keys(nodes[batch.edge_src], nodes[batch.edge_dst], num_nodes)
    pos = np.minimum(np.searchsorted(keys, ek), keys.size - 1)
    keep = keys[pos] != ek
    removed = int(E - np.count_nonzero(keep))
    if removed == 0:
        return 0
    he, hn = batch.hop_edges, batch.hop_nodes
    kept_before = np.concatenate([[0], np.cumsum(keep)])
    new_he = kept_before[he].astype(np.int64)
    ptrs = []
    for h in range(1, he.shape[0]):
        d = batch.edge_dst[he[h - 1]:he[h]][keep[he[h - 1]:he[h]]]
        ptr = np.zeros(int(hn[h - 1]) + 1, np.int32)
        np.cumsum(np.bincount(d, minlength=int(hn[h - 1])), out=ptr[1:])
        ptrs.append(ptr)
    batch.edge_src, batch.edge_dst = batch.edge_src[keep], batch.edge_dst[keep]
    if batch.edge_type is not None and batch.edge_type.shape[0] == E:     # a typed store's relations
        batch.edge_type = batch.edge_type[keep]
    batch.hop_edges = new_he
    if batch.dst_ptr.shape[0]:
        batch.dst_ptr = np.concatenate(ptrs) if ptrs else np.empty(0, np.int32)
    batch.remote_neighbors = min(batch.remote_neighbors, int(batch.edge_src.shape[0]))
    return removed


def sample_link_item(core, item: WorkItem, fanouts, link: LinkConfig, rows: np.ndarray,
                     relation_fanouts: dict | None = None) -> SampledBatch:
    """The link batch a work item describes (``rows`` of its part's edges or pairs), deterministically.

    Shapes: the batch's ``link_pairs`` int32[P, 3]: for ``train`` the item's positives first, then
    negative ``j`` of positive ``i`` at row ``P_pos + i * K + j``.  A knowledge graph's batch holds
    its triples ``(head, tail, relation)`` instead (no negatives: the trainer scores every entity).
    """
    t0 = time.perf_counter()
    n = int(core.store.manifest.num_nodes)
    pairs, labels = part_pairs(core.store, item.part, item.phase)
    sel = np.asarray(pairs[rows], np.int64)
    rng = np.random.default_rng(mix_seed(core.seed, item.epoch, item.batch_id, 0x11A7))
    kg = bool(kg_relations(core.store))
    if kg:                          # a knowledge graph: triples, each scored by the trainer against every entity
        src, dst, lab = sel[:, 0], sel[:, 1], np.asarray(labels[rows], np.int32)
    elif item.phase == "train":
        cdf = degree_cdf(core.store) if link.neg_sampler == "degree" else None
        lo, hi = (core.store.manifest.link or {}).get("split", {}).get("tail_range", (0, n))   # one relation's tails
        nsrc, ndst = negatives(link.neg_sampler, sel[:, 0], sel[:, 1], link.negatives, int(hi), rng, cdf, int(lo))
        src, dst = np.concatenate([sel[:, 0], nsrc]), np.concatenate([sel[:, 1], ndst])
        lab = np.concatenate([np.ones(sel.shape[0], np.int32), np.zeros(nsrc.shape[0], np.int32)])
    else:
        src, dst, lab = sel[:, 0], sel[:, 1], np.asarray(labels[rows], np.int32)
    seeds, inv = np.unique(np.concatenate([src, dst]), return_inverse=True)
    batch = core.sample(seeds, fanouts, rng_seed=mix_seed(core.seed, item.epoch, item.batch_id),
                        home_part=item.part, epoch=item.epoch, relation_fanouts=relation_fanouts)
    if item.phase == "train" and not kg:
        exclude_pairs(batch, sel[:, 0], sel[:, 1], n)
    m = src.shape[0]
    batch.link_pairs = np.stack([inv[:m], inv[m:], lab], axis=1).astype(np.int32)
    batch.epoch, batch.phase, batch.batch_id = item.epoch, item.phase, item.batch_id
    batch.part, batch.trainer_rank = item.part, item.trainer_rank
    batch.sample_seconds = time.perf_counter() - t0
    return batch
