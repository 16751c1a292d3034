"""The offload store service: tensor blocks keyed by ``(kind, layer, part)`` in a host cache that spills to disk.

- :mod:`.store`: :class:`~.store.OffloadStore`, the cache and its spill files (NVMe in production);
- :mod:`.policy`: the cache policy, Belady (MIN) from a known schedule with exact prefetch, or LRU;
- :mod:`.service`: the store as a ZeroMQ service and :class:`~.service.RemoteStore`, its client;
- :mod:`.memory`: host memory probes and allocator settings every full-graph process applies.

The image role, the compose service and the Helm template are called ``offload``; the entry point is
``python -m argosy.services.offload --bind ADDR`` (:mod:`.__main__`).  Full-graph training, which uses
the store, sits with the training code in :mod:`argosy.services.trainer.fullgraph`.
"""
