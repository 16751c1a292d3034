"""Pure feature-gathering logic: turn a SampledBatch into a FeatureBatch (no sockets, no Redis).

A core *holds* the feature rows and labels of some parts (all parts when none are given), memory-
mapped from the store: loaders on one host share one copy of its parts.  Rows of held parts are
gathered by a compiled kernel straight into the batch's feature array, the buffer that goes on
the wire (no intermediate copy); rows of other parts (the halo) come from
``fetch`` (the service's halo client: one request per owning loader per batch) through a
byte-budgeted cache of the hottest halo rows.  ``remote_feature_rows`` counts rows owned by a part
other than the batch's own part: the bytes a multi-machine deployment moves for the halo.
"""
from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

from argosy.shared.errors import RequestFailedError
from argosy.shared.halo import check_request
from argosy.shared.halo_cache import FeatureCache
from argosy.shared.hot_rows import HotRows
from argosy.shared.malloc import trim_heap
from argosy.shared.protocol import FeatureBatch, FeatureRows, HaloRequest, SampledBatch
from argosy.shared.store import PartitionStore
from argosy.shared.store.features import sent_rows
from argosy.shared.store.residency import Residency, plan_residency
from argosy.shared.store.gather import IO_THREADS, gather_feature_rows
from argosy.shared.store.row_cache import RowCache

__all__ = ["LoaderCore"]

Fetch = Callable[[str, np.ndarray, int], FeatureRows]
class LoaderCore:
    """Gathers input features and seed labels for sampled batches.

    Args:
        store: the partitioned store.  Features may be float32 or float16 on disk; they are
            shipped in the stored dtype and cast on the trainer (halves bytes for float16).
        held_parts: parts whose features/labels this process loads into memory; ``None`` = all,
            memory-mapped.
        fetch: ``fetch(what, ids, epoch)`` returns ``features`` or ``labels`` of vertices held elsewhere.
        cache_bytes: budget of the halo feature cache.
        memory_budget: the host's memory budget in bytes (0 = the cgroup limit, if any): held parts
            that do not fit it are served from disk through a hot-row cache
            (:mod:`shared.store.residency`).
    """

    replicas_on_host: int = 1
    """Loaders on this host (the service sets it from the registry): they split the row cache budget."""

    def __init__(self, store: PartitionStore, held_parts: list[int] | None = None, fetch: Fetch | None = None,
                 cache_bytes: int = 0, memory_budget: int = 0):
        self.store = store
        self.fetch = fetch
        self.cache_bytes = cache_bytes
        self.memory_budget = memory_budget
        self.residency: Residency | None = None
        self.row_cache: RowCache | None = None
        self._io_pool: ThreadPoolExecutor | None = None
        """Out of core: threads that fault a batch's map rows in parallel (:func:`gather_feature_rows`)."""
        m = store.manifest
        # a store without features (a link job learning node embeddings): batches carry ids and
        # zero-width feature rows; the trainer looks the inputs up by id
        self.featureless = not m.feature_dim
        self.feature_dim = int(m.feature_dim)
        self.layout = store.features
        """Where each vertex's row is; a featureless node type's vertices have none and are never sent."""
        self.dtype = np.dtype(m.feature_dtype or "float32")
        self._assign = np.asarray(store.assignment)
        self._local = np.asarray(store.local_index)
        k = store.num_parts
        self.held = np.zeros(k, np.bool_)
        self._feats: dict[int, np.ndarray] = {}
        self._labels: dict[int, np.ndarray | None] = {}
        self.cache: FeatureCache | None = None
        self.stats = {"halo_cache_hits": 0.0, "halo_cache_misses": 0.0, "row_cache_hits": 0.0,
                      "row_cache_misses": 0.0}
        self.set_held(list(range(k)) if held_parts is None else held_parts)

    def set_held(self, parts: list[int]) -> None:
        """Hold exactly ``parts`` in memory: load new ones once, drop the others, rebuild the cache."""
        parts = sorted(int(p) for p in parts)
        res = plan_residency(self.store, parts, self.memory_budget)
        feats = {key: v for key, v in self._feats.items() if key // self.layout.T in parts}
        labels = {p: v for p, v in self._labels.items() if p in parts}
        for p in parts:
            if p not in labels:
                advice = "willneed" if res.fits else "random"
                if not self.featureless:          # a featureless store: batches carry zero-width rows
                    feats.update(self.layout.read(p, advice))
                labels[p] = self.store.read_part(p, ("labels",), advice=advice)["labels"]
        held = np.zeros(self.held.shape[0], np.bool_)
        held[parts] = True
        # swapped, never edited in place: the halo server thread may be reading the old ones
        self.held = np.zeros(held.shape[0], np.bool_)
        self._feats, self._labels = feats, labels
        self.held = held
        self.row_cache = None                         # dropped before the new one is built: never two at once
        if not res.fits and self._io_pool is None:
            self._io_pool = ThreadPoolExecutor(IO_THREADS, thread_name_prefix="row-io")
        budget = res.row_cache_bytes(self.replicas_on_host)
        self.row_cache = RowCache(self.store, feats, budget, self._io_pool) \
            if budget and feats and not self.featureless else None
        self.residency = res
        self.cache = FeatureCache(self._assign.shape[0], self.feature_dim, self.dtype, self.cache_bytes) \
            if self.cache_bytes and not self.held.all() and not self.featureless else None
        # the old parts, caches and row cache are freed now; a loader keeps its freed heap (keep_heap) for its
        # batches, which would keep them too: a loader that took over a dead host's parts and handed them back
        # went 85 -> 102 MB of anonymous memory over four host-kills, 28 MB in use (bench/results/trainer_trim.md)
        trim_heap()

    @property
    def held_parts(self) -> list[int]:
        return np.flatnonzero(self.held).tolist()

    def _local_rows(self, nodes: np.ndarray, out: np.ndarray, sel_idx: np.ndarray) -> None:
        """``out[sel_idx] = `` the rows of ``nodes[sel_idx]`` (held parts): from the row cache when
        the parts are out of core and the row is hot, else from the part's map."""
        ids = nodes[sel_idx]
        parts, rows = self.layout.locate(ids, self._assign[ids], self._local[ids])   # parts: the arrays' keys
        dst = sel_idx.astype(np.int64, copy=False)
        rc = self.row_cache
        if rc is not None and ids.size:
            slots = rc.lookup(parts, rows)
            hit = slots >= 0
            nhit = int(np.count_nonzero(hit))
            gather_feature_rows((rc.buf,), np.zeros(nhit, np.int64), slots[hit].astype(np.int64), dst[hit], out)
            self.stats["row_cache_hits"] += nhit
            self.stats["row_cache_misses"] += ids.shape[0] - nhit
            miss = np.flatnonzero(~hit)
            miss = miss[np.argsort(rows[miss], kind="stable")]   # the gather groups by part stably: each
            parts, rows, dst = parts[miss], rows[miss], dst[miss]  # map is then read forward, in row order
        res = self.residency
        gather_feature_rows(self._feats, parts, rows, dst, out,
                            pool=None if res is None or res.fits else self._io_pool)

    def gather_rows(self, nodes: np.ndarray, epoch: int = 0, out: np.ndarray | None = None) -> np.ndarray:
        """Feature rows of global ``nodes`` in order, into ``out`` if given (say, a shared-memory
        ring's slot), else into a new array.  Every node must have a row (:func:`sent_rows`).
        Shapes: nodes int64[N] -> float[N, F]."""
        nodes = np.asarray(nodes, np.int64)
        if out is None:
            out = np.empty((nodes.shape[0], self.feature_dim), self.dtype)
        elif out.shape != (nodes.shape[0], self.feature_dim) or out.dtype != self.dtype:
            raise ValueError(f"gather_rows: out must be {self.dtype}[{nodes.shape[0]}, {self.feature_dim}] "
                             f"(got {out.dtype}{list(out.shape)})")
        if self.featureless:
            return out
        local = self.held[self._assign[nodes]]
        self._local_rows(nodes, out, np.flatnonzero(local))
        rem = np.flatnonzero(~local)
        if rem.size:
            if self.fetch is None:
                raise RequestFailedError(f"vertex {int(nodes[rem[0]])} belongs to a part this loader does not hold "
                                         f"(held: {self.held_parts}) and no halo client is set")
            ids = nodes[rem]
            hit = np.zeros(rem.shape[0], np.bool_)
            if self.cache is not None:
                ent = self.cache.lookup(ids)
                hit = ent >= 0
                gather_feature_rows((self.cache.buf,), np.zeros(int(hit.sum()), np.int64), ent[hit], rem[hit], out)
                self.stats["halo_cache_hits"] += int(np.count_nonzero(hit))
                self.stats["halo_cache_misses"] += int(rem.shape[0] - np.count_nonzero(hit))
            if (~hit).any():
                rep = self.fetch("features", ids[~hit], epoch)
                out[rem[~hit]] = rep.features
                if self.cache is not None:
                    self.cache.put(ids[~hit], rep.features)
        return out

    def labels_of(self, nodes: np.ndarray, epoch: int = 0) -> np.ndarray:
        nodes = np.asarray(nodes, np.int64)
        parts = self._assign[nodes]
        rows = self._local[nodes]
        out = np.full(nodes.shape[0], -1, np.int64)
        local = self.held[parts]
        for p in np.unique(parts[local]):
            sel = parts == p
            if self._labels[p] is not None:
                out[sel] = np.asarray(self._labels[p])[rows[sel]]
        if not local.all():
            if self.fetch is None:
                raise RequestFailedError(f"labels of part {int(parts[~local][0])} are not held here (held: {self.held_parts})")
            out[~local] = self.fetch("labels", nodes[~local], epoch).labels
        return out

    def serve(self, req: HaloRequest) -> FeatureRows:
        """Answer another loader's request for ``features`` or ``labels`` held here."""
        check_request(req, ("features", "labels"), self._assign, self.held)
        ids = req.ids
        featured = self.layout.featured(ids) if req.what == "features" else None
        if featured is not None and not featured.all():
            raise RequestFailedError("bad_request", f"vertex {int(ids[~featured][0])} is of a node type without "
                                                    "features: it has no feature row to send")
        if req.what == "labels":
            return FeatureRows(features=np.empty((0, self.feature_dim), self.dtype), labels=self.labels_of(ids))
        out = np.empty((ids.shape[0], self.feature_dim), self.dtype)
        self._local_rows(ids, out, np.arange(ids.shape[0]))
        return FeatureRows(features=out, labels=np.empty(0, np.int64))

    def load(self, batch: SampledBatch, hot: HotRows | None = None,
             out: Callable[[int], np.ndarray | None] | None = None) -> FeatureBatch:
        """Attach features for every node of ``batch`` and labels for its seeds.

        With ``hot`` (the receiving trainer's feature cache) only the rows of nodes it lacks are
        gathered and sent, in node order, and the batch names the cache (``feature_cache``).
        ``out(rows)`` may give the array the rows are gathered into (a ring slot), or None.
        """
        t0 = time.perf_counter()
        nodes = batch.nodes
        sent = sent_rows(self.layout, nodes, hot)        # rows the trainer lacks, of nodes that have one
        if sent is not None:
            nodes = nodes[sent]
        feats = self.gather_rows(nodes, batch.epoch, out(nodes.shape[0]) if out is not None else None)
        labels = self.labels_of(batch.nodes[:batch.num_seeds], batch.epoch)
        remote = int(np.count_nonzero(self._assign[nodes] != batch.part))
        fields = {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
        return FeatureBatch(**fields, features=feats, labels=labels, remote_feature_rows=remote,
                            feature_cache=hot.digest if hot is not None else "",
                            load_seconds=time.perf_counter() - t0)
