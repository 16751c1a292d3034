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
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import IntEnum
from typing import ClassVar

import numpy as np

__all__ = ["PROTOCOL_VERSION", "MsgKind", "Message", "SampledBatch", "FeatureBatch", "ErrorReply",
           "Hello", "Dead", "MESSAGE_TYPES"]

PROTOCOL_VERSION = 1


class MsgKind(IntEnum):
    HELLO = 1
    SAMPLED_BATCH = 2
    FEATURE_BATCH = 3
    ERROR = 4
    DEAD = 5


@dataclass
class Message:
    """Base of all wire structs. Subclasses set ``KIND``; ndarray fields travel as frames."""

    KIND: ClassVar[MsgKind]
    ARRAYS: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def scalar_fields(cls) -> list[str]:
        return [f.name for f in fields(cls) if f.name not in cls.ARRAYS]


@dataclass
class Hello(Message):
    """First message on a new connection, both ways: who is talking and with which config."""

    KIND: ClassVar[MsgKind] = MsgKind.HELLO
    role: str = ""
    service_id: str = ""
    config_fingerprint: str = ""


@dataclass
class Dead(Message):
    """Sent by a dying process so peers fail fast instead of waiting for a timeout."""

    KIND: ClassVar[MsgKind] = MsgKind.DEAD
    service_id: str = ""
    reason: str = ""


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
        edge_src, edge_dst: int32[E] local ids; hop_edges: int64[H + 1] edge offsets per hop.
    """

    KIND: ClassVar[MsgKind] = MsgKind.SAMPLED_BATCH
    ARRAYS: ClassVar[tuple[str, ...]] = ("nodes", "hop_nodes", "degrees", "edge_src", "edge_dst", "hop_edges")
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
    nodes: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    hop_nodes: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    degrees: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))
    edge_src: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))
    edge_dst: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))
    hop_edges: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))

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
        features: float32|float16[N, F] rows aligned with ``nodes``; labels: int64[B] for the seeds.
    """

    KIND: ClassVar[MsgKind] = MsgKind.FEATURE_BATCH
    ARRAYS: ClassVar[tuple[str, ...]] = SampledBatch.ARRAYS + ("features", "labels")
    loader_id: str = ""
    load_seconds: float = 0.0
    remote_feature_rows: int = 0
    """Feature rows read from a part other than the seeds' part (the halo)."""
    features: np.ndarray = field(default_factory=lambda: np.empty((0, 0), np.float32))
    labels: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))


MESSAGE_TYPES: dict[int, type[Message]] = {
    cls.KIND: cls for cls in (Hello, Dead, ErrorReply, SampledBatch, FeatureBatch)}
