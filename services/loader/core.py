"""Pure feature-gathering logic: turn a SampledBatch into a FeatureBatch (no sockets, no Redis).

Rows are gathered part by part from the memory-mapped ``features.npy`` files with sorted row
indices (sequential-ish page access), one vectorised ``np.take`` per part touched, never a
per-vertex Python loop.  Rows owned by a part other than the batch's own part are the *halo*
(``remote_feature_rows``): on a multi-machine deployment they are the bytes that cross the network.
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np

from argosy.shared.protocol import FeatureBatch, SampledBatch
from argosy.shared.store import PartitionStore

__all__ = ["LoaderCore"]


class LoaderCore:
    """Gathers input features and seed labels for sampled batches.

    Args:
        store: the partitioned store.  Features may be float32 or float16 on disk; they are
            shipped in the stored dtype and cast on the trainer (halves bytes for float16).
    """

    def __init__(self, store: PartitionStore):
        self.store = store
        k = store.num_parts
        parts = [store.part(p) for p in range(k)]
        if any(pd.features is None for pd in parts):
            raise ValueError(f"store {store.root} has no node features; the loader needs them "
                             "(re-partition a graph with features, or generate random ones)")
        self._feats = [pd.features for pd in parts]
        self._labels = [pd.labels for pd in parts]
        self._assign = np.asarray(store.assignment)
        self._local = np.asarray(store.local_index)
        self.feature_dim = int(self._feats[0].shape[1])
        self.dtype = self._feats[0].dtype

    def gather_rows(self, nodes: np.ndarray) -> np.ndarray:
        """Feature rows of global ``nodes`` in order.  Shapes: nodes int64[N] -> float[N, F]."""
        parts = self._assign[nodes]
        rows = self._local[nodes]
        out = np.empty((nodes.shape[0], self.feature_dim), self.dtype)
        order = np.lexsort((rows, parts))
        sp = parts[order]
        bounds = np.searchsorted(sp, np.arange(len(self._feats) + 1))
        for p in np.flatnonzero(np.diff(bounds)):
            sel = order[bounds[p]:bounds[p + 1]]
            out[sel] = np.take(self._feats[p], rows[sel], axis=0)
        return out

    def labels_of(self, nodes: np.ndarray) -> np.ndarray:
        parts = self._assign[nodes]
        rows = self._local[nodes]
        out = np.full(nodes.shape[0], -1, np.int64)
        for p in np.unique(parts):
            sel = parts == p
            if self._labels[p] is not None:
                out[sel] = np.asarray(self._labels[p])[rows[sel]]
        return out

    def load(self, batch: SampledBatch) -> FeatureBatch:
        """Attach features for every node of ``batch`` and labels for its seeds."""
        t0 = time.perf_counter()
        feats = self.gather_rows(batch.nodes)
        labels = self.labels_of(batch.nodes[:batch.num_seeds])
        remote = int(np.count_nonzero(self._assign[batch.nodes] != batch.part))
        fields = {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
        return FeatureBatch(**fields, features=feats, labels=labels, remote_feature_rows=remote,
                            load_seconds=time.perf_counter() - t0)
