"""Pure sampling logic (no sockets, no Redis): used by the sampler service, tests and benchmarks.

A core *holds* the topology of some parts (all of them when no parts are given: one process,
tests), memory-mapped from the store, so the samplers of one host share one copy of it.  Rows of
vertices held elsewhere come from ``fetch`` (the halo client of the service), one call per hop for
all of them, through a byte-budgeted cache of halo rows (:mod:`shared.halo_cache`).  Batches are the same whichever process holds which rows.

Example:
    >>> core = SamplerCore(PartitionStore("STORE"), served_parts=[0, 1])      # doctest: +SKIP
    >>> batch = core.sample(np.array([0, 5]), fanouts=(10, 5), rng_seed=1)     # doctest: +SKIP
"""
from __future__ import annotations

import logging
import time
from typing import Callable

import numpy as np
from numba import typed

from argosy.shared.config import LinkConfig
from argosy.shared.errors import RequestFailedError
from argosy.shared.halo import check_request, gather_csr_rows
from argosy.shared.halo_cache import AdjacencyCache
from argosy.shared.plan import WorkItem, mix_seed, split_order
from argosy.shared.protocol import AdjacencyRows, HaloRequest, SampledBatch
from argosy.shared.store import PartitionStore
from argosy.shared.store.manifest import edge_type_dtype
from argosy.shared.store.residency import Residency, plan_residency
from argosy.services.sampler.kernels import (PartTable, gather_weights, init_state, sample_hop, sample_hop_typed,
                                             seed_nodes)
from argosy.shared.fanouts import relation_fanout_table
from argosy.services.sampler.link import sample_link_item

__all__ = ["SamplerCore"]

logger = logging.getLogger(__name__)

Fetch = Callable[[str, np.ndarray, int], AdjacencyRows]


def _read_only(a: np.ndarray) -> np.ndarray:
    """A read-only view: the kernels' lists hold one array type, and mapped parts are read-only."""
    v = a.view()
    v.flags.writeable = False
    return v


class SamplerCore:
    """Samples multi-hop blocks from a partitioned store.

    Args:
        store: the partitioned store (may be restricted to the held parts).
        served_parts: partitions whose seeds this sampler serves; neighbours owned by other
            partitions are counted as *remote* (they would be fetched from another machine).
        seed: job seed; each batch's randomness is derived from (seed, epoch, batch id).
        held_parts: parts whose topology this process loads into memory; ``None`` = every part,
            memory-mapped (a single process holding the whole graph).
        fetch: ``fetch(what, ids, epoch)`` returns rows (``adjacency``) or degrees (``degree``) of
            vertices held elsewhere, in ``ids`` order.
        cache_bytes: budget of the halo row cache.
        link: link prediction's settings: work items are then ranges of edges or pairs
            (:mod:`services.sampler.link`); None = node classification.
        edge_weights: send each sampled edge's weight and each node's weighted degree when the
            store has weights (``SampledBatch.edge_weight``); False ignores them.  With weights the
            halo row cache holds each row's weights too (an entry costs its id + 4 bytes).
        memory_budget: the host's memory budget in bytes (0 = the cgroup limit, if any): held parts
            that do not fit it are mapped for random access instead of prefetched
            (:mod:`shared.store.residency`).
    """

    def __init__(self, store: PartitionStore, served_parts: list[int] | None = None, seed: int = 0,
                 held_parts: list[int] | None = None, fetch: Fetch | None = None, cache_bytes: int = 0,
                 link: LinkConfig | None = None, edge_weights: bool = True, memory_budget: int = 0):
        self.store = store
        self.memory_budget = memory_budget
        self.residency: Residency | None = None
        self.seed = seed
        self.link = link
        self.task = "node" if link is None else "link"
        self.fetch = fetch
        self.weighted = bool(edge_weights and store.manifest.edge_weights)
        self.has_types = bool(store.manifest.num_relations)
        """A typed store: each sampled edge carries its relation (``SampledBatch.edge_type``)."""
        self._tdtype = edge_type_dtype(store.manifest.num_relations)
        """The relations' dtype as stored: the kernels read the mapped files, no widened copy."""
        self.cache_bytes = cache_bytes
        k = store.num_parts
        self._dtype = np.dtype(store.manifest.index_dtype)
        self._assign = np.asarray(store.assignment)
        self._local = np.asarray(store.local_index)
        n = store.manifest.num_nodes
        self._slot = np.zeros(n, np.int64)
        self._tick = 0
        self._orders: dict[tuple, np.ndarray] = {}
        self._tables: dict[tuple, np.ndarray] = {}
        self._loaded: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._wloaded: dict[int, np.ndarray] = {}
        self._tloaded: dict[int, np.ndarray] = {}
        self._wdeg = np.full(n, np.nan, np.float32) if self.weighted else None
        """float32[n]: weighted degree of the vertices of held parts (NaN elsewhere)."""
        self.held = np.zeros(k, np.bool_)
        self.cache: AdjacencyCache | None = None
        self.stats = {"halo_cache_hits": 0.0, "halo_cache_misses": 0.0}
        self._scratch: tuple | None = None
        if held_parts is None:
            self.held[:] = True
            for p in range(k):
                self._load_values(p)
            self._set_topology([np.asarray(store.part(p).indptr).astype(np.int64, copy=False) for p in range(k)],
                               [np.asarray(store.part(p).indices) for p in range(k)])
        else:
            self.set_held(held_parts)
        self.served = np.zeros(k, np.bool_)
        self.set_served(list(range(k)) if served_parts is None else served_parts)

    # ---- ownership -----------------------------------------------------------------------------
    def set_held(self, parts: list[int]) -> None:
        """Hold exactly ``parts`` in memory: load new ones once, drop the others, rebuild the cache."""
        k = self.store.num_parts
        parts = sorted(int(p) for p in parts)
        res = self.residency = plan_residency(self.store, parts, self.memory_budget)
        self._loaded = {p: v for p, v in self._loaded.items() if p in parts}
        self._wloaded = {p: v for p, v in self._wloaded.items() if p in parts}
        self._tloaded = {p: v for p, v in self._tloaded.items() if p in parts}
        for p in parts:
            self._load_values(p)
            if p not in self._loaded:
                # memory-mapped: shared by the host's samplers; indptr (per vertex) always read ahead
                ptr = self.store.read_part(p, ("indptr",))["indptr"]
                ind = self.store.read_part(p, ("indices",), advice="willneed" if res.fits else "random")["indices"]
                self._loaded[p] = (_read_only(ptr.astype(np.int64, copy=False)),
                                   _read_only(ind.astype(self._dtype, copy=False)))
        empty_ptr, empty_ind = _read_only(np.zeros(1, np.int64)), _read_only(np.empty(0, self._dtype))
        held = np.zeros(k, np.bool_)
        held[parts] = True
        # swapped, never edited in place: the halo server thread may be reading the old ones
        self.held = np.zeros(k, np.bool_)
        self._set_topology([self._loaded[p][0] if p in self._loaded else empty_ptr for p in range(k)],
                           [self._loaded[p][1] if p in self._loaded else empty_ind for p in range(k)], held)
        self.held = held
        self._orders.clear()
        self.cache = AdjacencyCache(self._assign.shape[0], self.cache_bytes, self._dtype, weighted=self.weighted,
                                    typed=self.has_types) if self.cache_bytes and not self.held.all() else None

    def _load_values(self, p: int) -> None:
        """Part ``p``'s per-entry values, once: edge weights (memory-mapped) and its vertices' weighted
        degrees (a weighted job), relations as stored (a typed store: int16 or int32, memory-mapped)."""
        if self.weighted and p not in self._wloaded:
            a = self.store.read_part(p, ("edge_weight", "weighted_degree", "nodes"))
            self._wloaded[p] = _read_only(np.ascontiguousarray(a["edge_weight"], np.float32))
            self._wdeg[np.asarray(a["nodes"])] = a["weighted_degree"]
        if self.has_types and p not in self._tloaded:
            self._tloaded[p] = _read_only(np.ascontiguousarray(self.store.read_part(p, ("edge_type",))["edge_type"],
                                                               self._tdtype))

    def _set_topology(self, indptr: list[np.ndarray], indices: list[np.ndarray], held: np.ndarray | None = None) -> None:
        """Swap in the per-part CSR arrays (``held`` defaults to :attr:`held`): the typed lists the
        halo server reads and the address table the sampling kernels read, never edited in place."""
        held = self.held if held is None else held
        self._topo = PartTable(indptr, indices, held)
        self._dtype = self._topo.dtype
        self._indptr, self._indices = typed.List(indptr), typed.List(indices)
        if self.weighted:                    # weights laid out like indices: same table, same addresses
            empty = _read_only(np.empty(0, np.float32))
            wts = [self._wloaded.get(p, empty) if held[p] else empty for p in range(len(indptr))]
            self._wtab = PartTable(indptr, [w.view(np.int32) for w in wts], held)
            self._weights = typed.List(wts)
        if self.has_types:                   # relations: the same layout again
            empty = _read_only(np.empty(0, self._tdtype))
            rel = [self._tloaded.get(p, empty) if held[p] else empty for p in range(len(indptr))]
            self._ttab = PartTable(indptr, rel, held)
            self._types = typed.List(rel)

    @property
    def held_parts(self) -> list[int]:
        return np.flatnonzero(self.held).tolist()

    def set_served(self, parts: list[int]) -> None:
        self.served[:] = False
        self.served[list(parts)] = True

    @property
    def served_parts(self) -> list[int]:
        return np.flatnonzero(self.served).tolist()

    def serve(self, req: HaloRequest) -> AdjacencyRows:
        """Answer another sampler's request for rows (``adjacency``) or degrees (``degree``) held here."""
        parts = check_request(req, ("adjacency", "degree"), self._assign, self.held)
        ids = req.ids
        parts, locs = parts.astype(np.int64), self._local[ids].astype(np.int64)
        indptr, indices = gather_csr_rows(self._indptr, self._indices, parts, locs, req.what == "degree")
        out = AdjacencyRows(indptr=indptr, indices=indices)
        if self.weighted:
            _, out.weights = gather_csr_rows(self._indptr, self._weights, parts, locs, req.what == "degree")
            out.weighted_degrees = self._wdeg[ids]
        if self.has_types and req.what == "adjacency":
            _, out.types = gather_csr_rows(self._indptr, self._types, parts, locs, False)
        return out

    # ---- sampling ------------------------------------------------------------------------------
    def seeds_for(self, item: WorkItem) -> np.ndarray:
        """The seed ids of a work item (see :mod:`shared.plan`)."""
        key = (item.part, item.phase, item.epoch if item.phase == "train" else 0)
        order = self._orders.get(key)
        if order is None:
            if len(self._orders) > 4 * self.store.num_parts:
                self._orders.clear()
            order = self._orders[key] = split_order(self.store, item.part, item.phase, self.seed, item.epoch,
                                                    task=self.task)
        return order[item.offset:item.offset + item.count]

    def _resolve(self, lo: int, hi: int, nodes, degrees, nstart, halo: np.ndarray, halo_w: np.ndarray,
                 halo_t: np.ndarray, rows: bool, epoch: int):
        """Fill in degree (and, with ``rows``, the halo offset) of nodes[lo:hi] held elsewhere.

        Returns the grown ``halo`` rows and, weighted, their weights ``halo_w`` (float32, aligned
        with ``halo``; empty otherwise), and, typed, their relations ``halo_t`` (int32, aligned
        likewise); a fetched vertex's weighted degree goes to ``_wdeg``."""
        unres = lo + np.flatnonzero(degrees[lo:hi] < 0)
        if unres.size == 0:
            return halo, halo_w, halo_t
        ids = nodes[unres]
        if self.fetch is None:
            raise RequestFailedError(f"vertex {int(ids[0])} belongs to part {int(self._assign[ids[0]])}, which this "
                                     f"sampler does not hold (held: {self.held_parts}) and no halo client is set")
        pieces, wpieces, tpieces = [halo], [halo_w], [halo_t]
        off = halo.shape[0]
        hit = np.zeros(ids.shape[0], np.bool_)
        if self.cache is not None:
            hit, ptr, ind, w, t = self.cache.get(ids)
            if hit.any():
                sel = unres[hit]
                degrees[sel] = np.diff(ptr)
                if rows:
                    nstart[sel] = off + ptr[:-1]
                    pieces.append(ind)
                    wpieces.append(w)
                    tpieces.append(t.astype(self._tdtype, copy=False))
                    off += ind.shape[0]
            self.stats["halo_cache_hits"] += int(np.count_nonzero(hit))
            self.stats["halo_cache_misses"] += int(ids.shape[0] - np.count_nonzero(hit))
        miss = ~hit
        if miss.any():
            rep = self.fetch("adjacency" if rows else "degree", ids[miss], epoch)
            sel = unres[miss]
            degrees[sel] = np.diff(rep.indptr)
            if self.weighted:
                if rep.weighted_degrees.shape[0] != sel.shape[0] or (rows and rep.weights.shape != rep.indices.shape):
                    raise RequestFailedError(f"a halo reply for {sel.shape[0]} vertices carries no edge weights "
                                             "(a peer that ignores them, or an unweighted store)")
                self._wdeg[ids[miss]] = rep.weighted_degrees    # a store's constant: kept for later batches
                if rows:
                    wpieces.append(rep.weights.astype(np.float32, copy=False))
            if rows:
                nstart[sel] = off + rep.indptr[:-1]
                pieces.append(rep.indices.astype(self._dtype, copy=False))
                if self.has_types:
                    if rep.types.shape != rep.indices.shape:
                        raise RequestFailedError(f"a halo reply for {sel.shape[0]} vertices carries no relations "
                                                 "(a peer on an untyped store)")
                    tpieces.append(rep.types.astype(self._tdtype, copy=False))
                if self.cache is not None:
                    self.cache.put(ids[miss], rep.indptr, rep.indices, rep.weights if self.weighted else None,
                                   rep.types.astype(np.int32, copy=False) if self.has_types else None)
        if len(pieces) == 1:
            return halo, halo_w, halo_t
        return (np.concatenate(pieces), (np.concatenate(wpieces) if self.weighted else halo_w),
                (np.concatenate(tpieces) if self.has_types else halo_t))

    def sample(self, seeds: np.ndarray, fanouts, rng_seed: int = 0, home_part: int | None = None,
               epoch: int = 0, relation_fanouts: dict | None = None) -> SampledBatch:
        """Sample blocks around ``seeds`` (global ids).  See :class:`~shared.protocol.SampledBatch`.

        On a typed store every hop's fanout is per relation (``relation_fanouts``: named relations'
        own, see :mod:`shared.fanouts`); a hop that takes every neighbour needs no relations.

        Args:
            home_part: count a neighbour as remote when it is owned by another part than this
                one (the machine holding ``home_part`` would fetch it over the network); default:
                remote = outside every part this sampler serves.
            epoch: attributes halo traffic to an epoch.
        """
        seeds = np.asarray(seeds, np.int64)
        n = self._assign.shape[0]
        if seeds.size and (seeds.min() < 0 or seeds.max() >= n):
            raise ValueError(f"seed ids must lie in [0, {n}) (got [{seeds.min()}, {seeds.max()}])")
        if home_part is None:
            served = self.served
        else:
            served = np.zeros_like(self.served)
            served[home_part] = True
        t0 = time.perf_counter()
        topo = self._topo                               # one consistent table for the whole batch
        fanouts = [int(f) for f in fanouts]
        H = len(fanouts)
        table = self._fanout_table(fanouts, relation_fanouts) if self.has_types else None
        per_relation = [table is not None and bool((table[h] >= 0).any()) for h in range(H)]
        nodes, degrees, npart, nstart, esrc, edst, epos = self._buffers(seeds.shape[0])
        hop_nodes, hop_edges = np.zeros(H + 1, np.int64), np.zeros(H + 1, np.int64)
        state = init_state(rng_seed)
        count = seed_nodes(seeds, topo.ptr_addr, self._assign, self._local, self._slot, self._next_tick(),
                           nodes, degrees, npart, nstart)
        if count < 0:                                   # repeated seeds: sample each once, sorted
            seeds = np.unique(seeds)
            nodes, degrees, npart, nstart, esrc, edst, epos = self._buffers(seeds.shape[0])
            count = seed_nodes(seeds, topo.ptr_addr, self._assign, self._local, self._slot, self._next_tick(),
                               nodes, degrees, npart, nstart)
        hop_nodes[0] = count
        local = bool(self.held.all())                   # nothing to fetch
        halo, halo_w, halo_t = np.empty(0, topo.dtype), np.empty(0, np.float32), np.empty(0, self._tdtype)
        wtab = self._wtab if self.weighted else None    # the weights of the same parts as ``topo``
        ttab = self._ttab if self.has_types else None   # and their relations
        values = self.weighted or self.has_types        # sample_hop records each edge's position
        if not local:
            halo, halo_w, halo_t = self._resolve(0, count, nodes, degrees, nstart, halo, halo_w, halo_t, H > 0, epoch)
        ecount = remote = 0
        for h in range(H):
            before = count
            if per_relation[h]:
                nodes, degrees, npart, nstart, esrc, edst, count, ecount, r, epos = sample_hop_typed(
                    table[h], count, ecount, nodes, degrees, npart, nstart, esrc, edst, topo.ptr_addr,
                    topo.ind_addr, ttab.ind_addr, halo, halo_t, self._assign, self._local, served, self._slot,
                    self._tick, state, epos)
            else:
                nodes, degrees, npart, nstart, esrc, edst, count, ecount, r, epos = sample_hop(
                    fanouts[h], count, ecount, nodes, degrees, npart, nstart, esrc, edst, topo.ptr_addr,
                    topo.ind_addr, halo, self._assign, self._local, served, self._slot, self._tick, state,
                    epos, values)
            remote += r
            hop_nodes[h + 1], hop_edges[h + 1] = count, ecount
            if not local:
                halo, halo_w, halo_t = self._resolve(before, count, nodes, degrees, nstart, halo, halo_w, halo_t,
                                                     h + 1 < H, epoch)
        self._scratch = (nodes, degrees, npart, nstart, esrc, edst, epos)
        out = SampledBatch(nodes=nodes[:count].copy(), hop_nodes=hop_nodes, degrees=degrees[:count].copy(),
                           edge_src=esrc[:ecount].copy(), edge_dst=edst[:ecount].copy(), hop_edges=hop_edges,
                           dst_ptr=dst_ptr(degrees, hop_nodes, fanouts, edst, hop_edges, per_relation),
                           remote_neighbors=int(remote))
        if self.weighted:
            if halo_w.shape[0] != halo.shape[0]:
                raise RequestFailedError(f"halo rows hold {halo.shape[0]} entries but {halo_w.shape[0]} weights")
            w = np.empty(ecount, np.float32)
            gather_weights(epos, out.edge_dst, npart, nstart, degrees, count, topo.ind_addr, wtab.ind_addr,
                           halo_w.view(np.int32), w.view(np.int32))
            wd = self._wdeg[out.nodes]
            if np.isnan(wd).any():
                v = int(out.nodes[np.flatnonzero(np.isnan(wd))[0]])
                raise RequestFailedError(f"vertex {v} (part {int(self._assign[v])}) has no weighted degree: "
                                         "neither held here nor fetched")
            out.edge_weight, out.weighted_degrees = w, wd
        if self.has_types:
            if halo_t.shape[0] != halo.shape[0]:
                raise RequestFailedError(f"halo rows hold {halo.shape[0]} entries but {halo_t.shape[0]} relations")
            t = np.empty(ecount, np.int32)
            gather_weights(epos, out.edge_dst, npart, nstart, degrees, count, topo.ind_addr, ttab.ind_addr, halo_t, t)
            out.edge_type = t
        out.sample_seconds = time.perf_counter() - t0
        return out

    def _next_tick(self) -> int:
        """A fresh stamp for the de-duplication slots (see :mod:`kernels`)."""
        self._tick += 1
        if self._tick >= 2**31 - 1:                     # stamps wrap: clear the slots once
            self._slot[:] = 0
            self._tick = 1
        return self._tick

    def _buffers(self, num_seeds: int) -> tuple:
        """Scratch arrays reused from batch to batch (the kernels grow them; results are copied out)."""
        if self._scratch is None or self._scratch[0].shape[0] < num_seeds:
            cap = max(num_seeds * 4, 16)
            ecap = max(num_seeds * 8, 16)
            self._scratch = (np.empty(cap, np.int64), np.empty(cap, np.int32), np.empty(cap, np.int32),
                             np.empty(cap, np.int64), np.empty(ecap, np.int32), np.empty(ecap, np.int32),
                             np.empty(ecap if self.weighted or self.has_types else 0, np.int64))
        return self._scratch

    def _fanout_table(self, fanouts, relation_fanouts: dict | None) -> np.ndarray:
        """int64[hops, R] per-relation fanouts, resolved against the store's relations once per setting."""
        key = (tuple(fanouts), tuple(sorted((relation_fanouts or {}).items())))
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = relation_fanout_table(fanouts, relation_fanouts or {},
                                                              self.store.manifest.typed.get("relations", []))
        return table

    def sample_item(self, item: WorkItem, fanouts, relation_fanouts: dict | None = None) -> SampledBatch:
        """Sample the batch a work item describes, deterministically (``relation_fanouts``: the named
        relations' own fanouts, for training batches)."""
        if self.link is not None:
            return sample_link_item(self, item, fanouts, self.link, self.seeds_for(item), relation_fanouts)
        batch = self.sample(self.seeds_for(item), fanouts, rng_seed=mix_seed(self.seed, item.epoch, item.batch_id),
                            home_part=item.part, epoch=item.epoch, relation_fanouts=relation_fanouts)
        batch.epoch, batch.phase, batch.batch_id = item.epoch, item.phase, item.batch_id
        batch.part, batch.trainer_rank = item.part, item.trainer_rank
        return batch


def dst_ptr(degrees: np.ndarray, hop_nodes: np.ndarray, fanouts: list[int], edst: np.ndarray | None = None,
            hop_edges: np.ndarray | None = None, per_relation: list[bool] | None = None) -> np.ndarray:
    """The blocks' CSR offsets over destinations (see :class:`~shared.protocol.SampledBatch`).

    ``sample_hop`` emits each destination's edges together, in destination order, and takes
    ``min(degree, fanout)`` of them (all with fanout -1), so the offsets follow from the degrees
    alone: O(nodes), no pass over the edges.  A hop sampled per relation (``per_relation[h]``) takes
    a number that depends on the row's relations: its offsets count ``edst`` over the hop's edges.
    Shapes: degrees int32[>= hop_nodes[-1]] -> int32[...].
    """
    parts = []
    for h, f in enumerate(fanouts):
        d = degrees[:hop_nodes[h]]
        ptr = np.zeros(d.shape[0] + 1, np.int32)
        if per_relation is not None and per_relation[h]:
            np.cumsum(np.bincount(edst[hop_edges[h]:hop_edges[h + 1]], minlength=d.shape[0]), out=ptr[1:])
        else:
            np.cumsum(d if f < 0 else np.minimum(d, f), out=ptr[1:])
        parts.append(ptr)
    return np.concatenate(parts) if parts else np.empty(0, np.int32)
