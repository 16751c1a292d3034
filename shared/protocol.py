"""Every message that crosses a process boundary, as one typed struct each.

A message has scalar fields (msgpack-encoded in the header frame) and ``np.ndarray`` fields
(sent as raw zero-copy frames after the header).  :mod:`shared.wire` is the only code that turns
these structs into frames and back; call sites never build dicts.

Node-id conventions in :class:`SampledBatch` (shared by every stage):

* ``nodes`` lists GLOBAL ids; the first ``hop_nodes[0]`` are the seeds, and the nodes found
  by hop ``h`` form the prefix ``nodes[:hop_nodes[h]]`` (each hop only appends).
* Hop ``h`` (1-based, innermost first) is a bipartite block whose destination vertices are
  ``nodes[:hop_nodes[h-1]]`` and whose source vertices are ``nodes[:hop_nodes[h]]``; its edges
  are ``edge_src[e0:e1]`` -> ``edge_dst[e0:e1]`` with ``e0, e1 = hop_edges[h-1], hop_edges[h]``,
  both LOCAL indices into ``nodes``.  A model applies the outermost hop first.
* A link-prediction batch (``--task link``) also carries ``link_pairs``: rows ``(src, dst, label)``
  with ``src``/``dst`` LOCAL indices into the seeds (``nodes[:hop_nodes[0]]``, the pairs'
  endpoints, each once) and ``label`` 1 for an edge, 0 for a negative.  In a training batch its
  positives are removed from the blocks (both directions) and from ``degrees``, so a batch never
  sees the edges it is asked to predict.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import IntEnum
from typing import ClassVar

import numpy as np

__all__ = ["PROTOCOL_VERSION", "MsgKind", "Message", "SampledBatch", "FeatureBatch", "ErrorReply",
           "MESSAGE_TYPES", "StoreRequest", "StoreReply", "STORE_OPS", "STORE_STAT_FIELDS",
           "HaloRequest", "AdjacencyRows", "FeatureRows", "HALO_WHAT"]

PROTOCOL_VERSION = 9
"""2: SampledBatch carries dst_ptr (the blocks' CSR offsets); 3: and link_pairs (link prediction);
4: edge weights (SampledBatch.edge_weight, weighted_degrees; AdjacencyRows.weights, weighted_degrees);
5: FeatureBatch.feature_cache (rows the trainer caches are left out of ``features``);
6: HaloRequest.values and the trainers' ``embeddings``/``embedding_grads`` requests;
7: FeatureBatch.ring, ring_slot, ring_seq, ring_bytes (the rows wait in a shared-memory ring);
8: relations (SampledBatch.edge_type; AdjacencyRows.types) of a typed store;
9: SampledBatch.claimed_at (when the work item was claimed: the trainer measures the pipeline's latency)."""


class MsgKind(IntEnum):
    # 1 and 5 were a handshake and a death notice that nothing sent; the numbers stay retired
    SAMPLED_BATCH = 2
    FEATURE_BATCH = 3
    ERROR = 4
    STORE_REQUEST = 6
    STORE_REPLY = 7
    HALO_REQUEST = 8
    ADJACENCY_ROWS = 9
    FEATURE_ROWS = 10


@dataclass
class Message:
    """Base of all wire structs. Subclasses set ``KIND``; ndarray fields travel as frames."""

    KIND: ClassVar[MsgKind]
    ARRAYS: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def scalar_fields(cls) -> list[str]:
        return [f.name for f in fields(cls) if f.name not in cls.ARRAYS]


@dataclass
class ErrorReply(Message):
    """A request failed; the request id and a sentence saying why (never a serialized exception)."""

    KIND: ClassVar[MsgKind] = MsgKind.ERROR
    request_id: str = ""
    code: str = ""
    message: str = ""


@dataclass
class SampledBatch(Message):
    """Sampler -> loader: the multi-hop neighbourhood of one mini-batch of seeds.

    Shapes:
        nodes: int64[N] global ids (seeds first, hop by hop); hop_nodes: int64[H + 1]
        cumulative node counts; degrees: int32[N] full-graph degree of each node;
        edge_src, edge_dst: int32[E] local ids; hop_edges: int64[H + 1] edge offsets per hop;
        dst_ptr: int32[sum_h (hop_nodes[h-1] + 1)] hop by hop (innermost first), the offsets of each
        destination's edges within its hop (edges are grouped by destination): the block's CSR,
        so the trainer aggregates without building it (empty: not sent, the trainer builds it);
        link_pairs: int32[P, 3] ``(src, dst, label)`` of a link-prediction batch, local seed
        indices (empty ``(0, 3)`` for node classification).
        edge_weight: float32[E] the store's weight of each sampled edge (the entry of ``edge_dst``'s
        row for ``edge_src``) and weighted_degrees: float32[N] each node's full-graph sum of edge
        weights -- both empty for an unweighted store or a job that ignores the weights.
    """

    KIND: ClassVar[MsgKind] = MsgKind.SAMPLED_BATCH
    ARRAYS: ClassVar[tuple[str, ...]] = ("nodes", "hop_nodes", "degrees", "edge_src", "edge_dst", "hop_edges",
                                         "dst_ptr", "link_pairs", "edge_weight", "weighted_degrees", "edge_type")
    job: str = ""
    epoch: int = 0
    phase: str = "train"
    """``train`` (forward + backward + step) or ``eval`` (forward only, count correct)."""
    batch_id: int = 0
    work_stream: str = ""
    work_id: str = ""
    """Redis stream key and entry id of the work item, acknowledged by the trainer."""
    trainer_rank: int = 0
    part: int = 0
    remote_neighbors: int = 0
    """Sampled neighbours owned by a part this sampler does not serve."""
    sampler_id: str = ""
    sample_seconds: float = 0.0
    claimed_at: float = 0.0
    """Wall time (``time.time()``, the sampler's clock) the sampler claimed the work item; 0 = not
    stamped.  The trainer's batch age (apply minus claim) sizes the re-claim deadline
    (:meth:`~shared.coord.Coordinator.reclaim_deadline`)."""
    nodes: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    hop_nodes: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    degrees: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))
    edge_src: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))
    edge_dst: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))
    hop_edges: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    dst_ptr: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))
    link_pairs: np.ndarray = field(default_factory=lambda: np.empty((0, 3), np.int32))
    edge_weight: np.ndarray = field(default_factory=lambda: np.empty(0, np.float32))
    weighted_degrees: np.ndarray = field(default_factory=lambda: np.empty(0, np.float32))
    edge_type: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))

    @property
    def weighted(self) -> bool:
        return bool(self.weighted_degrees.shape[0])

    @property
    def num_seeds(self) -> int:
        return int(self.hop_nodes[0])

    @property
    def num_sampled_edges(self) -> int:
        return int(self.edge_src.shape[0])


@dataclass
class FeatureBatch(SampledBatch):
    """Loader -> trainer: a :class:`SampledBatch` plus input features and seed labels.

    Shapes:
        features: float32|float16[N, F] rows aligned with ``nodes``, or, when ``feature_cache`` is
        set, float32|float16[M, F]: the rows of the M nodes the trainer's cache lacks, in node order
        (:meth:`shared.hot_rows.HotRows.lookup`: the receiver derives which, nothing on the wire
        says so), or, when ``ring`` is set, float32|float16[0, F]: the rows are in the sender's
        shared-memory ring instead (:mod:`shared.shm_ring`); labels: int64[B] for the seeds.
    """

    KIND: ClassVar[MsgKind] = MsgKind.FEATURE_BATCH
    ARRAYS: ClassVar[tuple[str, ...]] = SampledBatch.ARRAYS + ("features", "labels")
    loader_id: str = ""
    load_seconds: float = 0.0
    remote_feature_rows: int = 0
    """Feature rows read from a part other than the seeds' part (the halo)."""
    feature_cache: str = ""
    """Digest of the trainer's feature cache (:class:`shared.hot_rows.HotRows`) whose rows were left
    out of ``features``; "" = every row is sent."""
    ring: str = ""
    """The loader's shared-memory ring holding the feature rows (a file name in the trainer's ring
    directory, :mod:`shared.shm_ring`); "" = the rows travel inline in ``features``."""
    ring_slot: int = 0
    """The ring's slot holding the rows."""
    ring_seq: int = 0
    """The slot's sequence number (rises with every batch the ring carries: a reference is used once)."""
    ring_bytes: int = 0
    """Bytes of the rows in the slot (the rows ``features`` would carry, times F, times the dtype's width)."""
    features: np.ndarray = field(default_factory=lambda: np.empty((0, 0), np.float32))
    labels: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))


MESSAGE_TYPES: dict[int, type[Message]] = {
    cls.KIND: cls for cls in (ErrorReply, SampledBatch, FeatureBatch)}


# --------------------------------------------------------------------------- offload-store service
STORE_OPS = frozenset({"ping", "put", "get", "gather", "scatter_add", "prefetch", "pin", "unpin", "release",
                       "release_layer", "flush", "stats", "plan", "begin_epoch", "sync"})
"""Operations of the full-graph offload store served over ZeroMQ."""

STORE_STAT_FIELDS: tuple[str, ...] = (
    "hits", "misses", "hit_bytes", "miss_bytes", "bytes_read", "bytes_written", "evictions", "bypass_writes",
    "bypass_reads", "prefetch_loads", "prefetch_dropped", "prefetch_waits", "resident_bytes",
    "peak_resident_bytes", "disk_bytes", "peak_disk_bytes", "unplanned_accesses", "peak_pending_bytes",
    "peak_staged_bytes", "write_seconds", "read_seconds", "write_wait_seconds", "file_bytes", "peak_file_bytes")
"""Counters of the offload store, in the order :attr:`StoreReply.stats` carries them."""


@dataclass
class StoreRequest(Message):
    """Trainer -> offload store: one block operation.

    Blocks are keyed by ``(kind, layer, part)``. ``table`` rows name several blocks at once, with
    column 0 an index into ``kinds`` (a comma-separated list of kind names):
    ``gather``: ``[kind, part, row_count]`` per source (``row_count`` -1 = the whole block, else the
    next ``row_count`` entries of ``rows``); ``prefetch``/``pin``/``unpin``: ``[kind, layer, part]``;
    ``plan``: ``[kind, layer, part, op]`` with op 0 = read, 1 = write.

    Shapes:
        data: [r, f] block contents (``put``) or values (``scatter_add``); rows: int64[k];
        table: int64[s, 3 | 4].
    """

    KIND: ClassVar[MsgKind] = MsgKind.STORE_REQUEST
    ARRAYS: ClassVar[tuple[str, ...]] = ("data", "rows", "table")
    request_id: int = 0
    op: str = ""
    kind: str = ""
    layer: int = 0
    part: int = 0
    num_rows: int = -1
    """Rows of a block ``scatter_add`` creates (-1 = as many as ``data``)."""
    has_rows: bool = False
    """``scatter_add``: add into ``rows`` (else into the whole block)."""
    flag: bool = False
    """``stats``: reset the counters; ``plan``: the schedule repeats every epoch (cyclic)."""
    kinds: str = ""
    data: np.ndarray = field(default_factory=lambda: np.empty((0, 0), np.float32))
    rows: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    table: np.ndarray = field(default_factory=lambda: np.empty((0, 3), np.int64))


@dataclass
class StoreReply(Message):
    """Offload store -> trainer: the answer to one :class:`StoreRequest`.

    ``ok`` False carries ``code`` (``bad_request``, ``not_found``, ``cache_budget``, ``disk_budget``,
    ``store_error``, ``internal``) and a sentence in ``message``.

    Shapes:
        data: [r, f] (``get``, ``gather``); stats: float64[len(STORE_STAT_FIELDS)] (``stats``).
    """

    KIND: ClassVar[MsgKind] = MsgKind.STORE_REPLY
    ARRAYS: ClassVar[tuple[str, ...]] = ("data", "stats")
    request_id: int = 0
    ok: bool = True
    code: str = ""
    message: str = ""
    value: int = 0
    """``flush``: bytes written."""
    data: np.ndarray = field(default_factory=lambda: np.empty((0, 0), np.float32))
    stats: np.ndarray = field(default_factory=lambda: np.empty(0, np.float64))


MESSAGE_TYPES.update({cls.KIND: cls for cls in (StoreRequest, StoreReply)})


# --------------------------------------------------------------------------- halo exchange
HALO_WHAT = frozenset({"adjacency", "degree", "features", "labels", "embeddings", "embedding_grads"})
"""What a :class:`HaloRequest` asks the owner of some vertices for (the last two: a trainer asks the
trainer owning their rows of learned node embeddings, :mod:`services.trainer.embedding_shards`)."""


@dataclass
class HaloRequest(Message):
    """Sampler -> sampler or loader -> loader: rows of vertices the receiver owns, one request per
    owner and per hop (never per vertex).

    ``what``: ``adjacency`` (CSR rows), ``degree`` (row lengths only), ``features`` or ``labels``;
    between trainers, ``embeddings`` (rows of learned node embeddings) or ``embedding_grads``
    (their gradients, ``values``, for the owner to apply).
    ``epoch`` and ``host`` only attribute the traffic (bytes per epoch, same host or not).

    Shapes:
        ids: int64[m] global vertex ids, all owned by the receiver; values: float32[m, D] for
        ``embedding_grads`` (empty ``(0, 0)`` otherwise).
    """

    KIND: ClassVar[MsgKind] = MsgKind.HALO_REQUEST
    ARRAYS: ClassVar[tuple[str, ...]] = ("ids", "values")
    request_id: int = 0
    what: str = ""
    epoch: int = 0
    host: str = ""
    ids: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    values: np.ndarray = field(default_factory=lambda: np.empty((0, 0), np.float32))


@dataclass
class AdjacencyRows(Message):
    """Owner -> requester: the adjacency rows (``adjacency``) or only their lengths (``degree``).

    Shapes:
        indptr: int64[m + 1] row offsets in request order; indices: int32|int64[indptr[-1]]
        global neighbour ids (empty for ``degree``); weights: float32[indptr[-1]] aligned with
        ``indices`` and weighted_degrees: float32[m] -- a weighted store's, else empty;
        types: int32[indptr[-1]] the relation of each entry -- a typed store's, else empty.
    """

    KIND: ClassVar[MsgKind] = MsgKind.ADJACENCY_ROWS
    ARRAYS: ClassVar[tuple[str, ...]] = ("indptr", "indices", "weights", "weighted_degrees", "types")
    request_id: int = 0
    indptr: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    indices: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    weights: np.ndarray = field(default_factory=lambda: np.empty(0, np.float32))
    weighted_degrees: np.ndarray = field(default_factory=lambda: np.empty(0, np.float32))
    types: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))


@dataclass
class FeatureRows(Message):
    """Owner -> requester: feature rows (``features``) or labels (``labels``) in request order.

    Shapes:
        features: float32|float16[m, F] (``(0, F)`` for ``labels``); labels: int64[m] (empty for ``features``).
    """

    KIND: ClassVar[MsgKind] = MsgKind.FEATURE_ROWS
    ARRAYS: ClassVar[tuple[str, ...]] = ("features", "labels")
    request_id: int = 0
    features: np.ndarray = field(default_factory=lambda: np.empty((0, 0), np.float32))
    labels: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))


MESSAGE_TYPES.update({cls.KIND: cls for cls in (HaloRequest, AdjacencyRows, FeatureRows)})
