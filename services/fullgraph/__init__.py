"""Full-graph GNN training over a partitioned store: offloaded activations, SAR, and the in-memory baseline.

The two full-graph modes share one layer implementation (the mini-batch model of
:mod:`argosy.shared.models`) and the store's partition:

- ``fullgraph``: GriNNder-style single-process training; activations and gradients live in
  :class:`~.store.OffloadStore` (host cache + spill files, Belady or LRU eviction), forward/backward
  run layer by layer, part by part, with regather instead of snapshot (:mod:`.fullgraph`);
- ``sar``: N worker processes with sequential aggregation and case-A rematerialisation over
  ``torch.distributed`` (:mod:`.sar`).

The offload store also runs as a ZeroMQ service (:mod:`.service`).  Entry point:
``python -m argosy.services.fullgraph train|serve`` (:mod:`.__main__`); runs go through
:func:`.train.run`.
"""
