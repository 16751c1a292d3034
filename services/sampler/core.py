"""Pure sampling logic (no sockets, no Redis): used by the sampler service, tests and benchmarks.

Example:
    >>> core = SamplerCore(PartitionStore("STORE"), served_parts=[0, 1])      # doctest: +SKIP
    >>> batch = core.sample(np.array([0, 5]), fanouts=(10, 5), rng_seed=1)     # doctest: +SKIP
"""
from __future__ import annotations

import time

import numpy as np
from numba import typed

from argosy.shared.plan import WorkItem, mix_seed, split_order
from argosy.shared.protocol import SampledBatch
from argosy.shared.store import PartitionStore
from argosy.services.sampler.kernels import sample_blocks

__all__ = ["SamplerCore"]


class SamplerCore:
    """Samples multi-hop blocks from a partitioned store.

    Args:
        store: the partitioned store (memory-mapped; nothing is copied into RAM up front).
        served_parts: partitions whose seeds this sampler serves; neighbours owned by other
            partitions are counted as *remote* (they would be fetched from another machine).
        seed: job seed; each batch's randomness is derived from (seed, epoch, batch id).
    """

    def __init__(self, store: PartitionStore, served_parts: list[int] | None = None, seed: int = 0):
        self.store = store
        self.seed = seed
        k = store.num_parts
        self._indptr = typed.List([np.asarray(store.part(p).indptr) for p in range(k)])
        self._indices = typed.List([np.asarray(store.part(p).indices) for p in range(k)])
        self._assign = np.asarray(store.assignment)
        self._local = np.asarray(store.local_index)
        n = store.manifest.num_nodes
        self._slot = np.zeros(n, np.int64)
        self._tick = 0
        self._orders: dict[tuple, np.ndarray] = {}
        self.served = np.zeros(k, np.bool_)
        self.set_served(list(range(k)) if served_parts is None else served_parts)

    def set_served(self, parts: list[int]) -> None:
        self.served[:] = False
        self.served[list(parts)] = True

    @property
    def served_parts(self) -> list[int]:
        return np.flatnonzero(self.served).tolist()

    def seeds_for(self, item: WorkItem) -> np.ndarray:
        """The seed ids of a work item (see :mod:`shared.plan`)."""
        key = (item.part, item.phase, item.epoch if item.phase == "train" else 0)
        order = self._orders.get(key)
        if order is None:
            if len(self._orders) > 4 * self.store.num_parts:
                self._orders.clear()
            order = self._orders[key] = split_order(self.store, item.part, item.phase, self.seed, item.epoch)
        return order[item.offset:item.offset + item.count]

    def sample(self, seeds: np.ndarray, fanouts, rng_seed: int = 0, home_part: int | None = None) -> SampledBatch:
        """Sample blocks around ``seeds`` (global ids).  See :class:`~shared.protocol.SampledBatch`.

        Args:
            home_part: count a neighbour as remote when it is owned by another part than this
                one (the machine holding ``home_part`` would fetch it over the network); default:
                remote = outside every part this sampler serves.
        """
        seeds = np.asarray(seeds, np.int64)
        if np.unique(seeds).shape[0] != seeds.shape[0]:      # the kernel needs distinct seeds
            seeds = np.unique(seeds)
        n = self._assign.shape[0]
        if seeds.size and (seeds.min() < 0 or seeds.max() >= n):
            raise ValueError(f"seed ids must lie in [0, {n}) (got [{seeds.min()}, {seeds.max()}])")
        if home_part is None:
            served = self.served
        else:
            served = np.zeros_like(self.served)
            served[home_part] = True
        self._tick += 1
        if self._tick >= 2**31 - 1:                     # stamps wrap: clear the scratch once
            self._slot[:] = 0
            self._tick = 1
        t0 = time.perf_counter()
        nodes, hop_nodes, degrees, esrc, edst, hop_edges, remote = sample_blocks(
            seeds, np.asarray(fanouts, np.int64), self._indptr, self._indices, self._assign, self._local,
            served, self._slot, self._tick, rng_seed & 0x7FFFFFFFFFFFFFFF)
        return SampledBatch(nodes=nodes, hop_nodes=hop_nodes, degrees=degrees, edge_src=esrc, edge_dst=edst,
                            hop_edges=hop_edges, remote_neighbors=int(remote),
                            sample_seconds=time.perf_counter() - t0)

    def sample_item(self, item: WorkItem, fanouts) -> SampledBatch:
        """Sample the batch a work item describes, deterministically."""
        batch = self.sample(self.seeds_for(item), fanouts, rng_seed=mix_seed(self.seed, item.epoch, item.batch_id),
                            home_part=item.part)
        batch.epoch, batch.phase, batch.batch_id = item.epoch, item.phase, item.batch_id
        batch.part, batch.trainer_rank = item.part, item.trainer_rank
        return batch
