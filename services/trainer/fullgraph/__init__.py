"""Full-graph GNN training over a partitioned store: offloaded activations, SAR, and the in-memory baseline.

The full-graph modes share one layer implementation (the mini-batch model of
:mod:`argosy.shared.models`) and the store's partition:

- ``fullgraph``: GriNNder-style single-process training; activations and gradients live in the
  offload store (:class:`argosy.services.offload.store.OffloadStore`: host cache + spill files, Belady
  or LRU eviction), forward/backward run layer by layer, part by part, with regather instead of
  snapshot (:mod:`.fullgraph`);
- ``sar``: N worker processes with sequential aggregation and case-A rematerialisation over
  ``torch.distributed`` (:mod:`.sar`);
- ``memory``: plain in-memory full-batch training, the reference (:mod:`.inmemory`).

The front door is ``argosy train --mode fullgraph|sar|memory``; it starts
``python -m argosy.services.trainer.fullgraph --config RUN_DIR/fullgraph.json`` (:mod:`.__main__`),
and runs go through :func:`.train.run`.
"""
