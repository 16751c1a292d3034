"""Offload service: full-graph GNN training with activations in a budgeted block store, and SAR.

Why this package exists: issue 5's two full-graph modes share one layer
implementation and one partition view of the graph:

- ``fullgraph``: GriNNder-style single-process training; activations and
  gradients live in :class:`OffloadStore` (host cache + spill files, Belady
  or LRU eviction), forward/backward run layer by layer, part by part, with
  regather instead of snapshot (:mod:`.fullgraph`);
- ``sar``: N worker processes with sequential aggregation and case-A
  rematerialisation over ``torch.distributed`` (:mod:`.sar`).

The store also runs as a ZeroMQ service (:mod:`.service`, :mod:`.wire`).
Entry point: ``python -m argosy.services.fullgraph train|serve`` (:mod:`.__main__`).
Public names are imported lazily so ``--help`` stays fast.
"""

from __future__ import annotations

import importlib

__all__ = ["OffloadStore", "StoreStats", "OffloadError", "CacheBudgetError", "DiskBudgetError",
           "BlockNotFoundError", "Schedule", "OffloadTrainer", "InMemoryTrainer", "ModelSpec",
           "init_params", "PartPlan", "build_plan", "partition_vertices", "load_graph", "SARConfig",
           "launch_sar", "launch_sar_jobs", "StoreServer", "RemoteStore", "RemoteStoreError",
           "TrainArgs", "run_train"]

_WHERE = {
    "OffloadStore": "store", "StoreStats": "store", "OffloadError": "store", "CacheBudgetError": "store",
    "DiskBudgetError": "store", "BlockNotFoundError": "store", "Schedule": "policy",
    "OffloadTrainer": "fullgraph", "InMemoryTrainer": "inmemory", "ModelSpec": "model",
    "init_params": "model", "PartPlan": "graph", "build_plan": "graph", "partition_vertices": "graph",
    "load_graph": "graph", "SARConfig": "sar", "launch_sar": "sar", "launch_sar_jobs": "sar",
    "StoreServer": "service", "RemoteStore": "service", "RemoteStoreError": "service",
    "TrainArgs": "train", "run_train": "train",
}


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
