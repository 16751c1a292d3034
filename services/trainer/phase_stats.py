"""What one trainer rank observed in one phase of an epoch (:class:`PhaseStats`, summed over ranks),
and what a batch applied (:func:`applied_units`, for the exactly-once count).

Why a module of its own: the epoch driver (:mod:`.service`) fills these and writes epoch records from
them; the counters' meaning (idle = waiting for input, ingest and copy on their own thread) lives here.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from argosy.shared.linkpred import pair_keys
from argosy.shared.protocol import FeatureBatch

__all__ = ["PhaseStats", "LINK_KEYS", "applied_units"]


@dataclass
class PhaseStats:
    """What one rank observed during one phase (summed over ranks with all_reduce)."""

    batches: int = 0
    seeds: int = 0
    correct: int = 0
    labelled: int = 0
    loss_sum: float = 0.0
    sampled_edges: int = 0
    remote_neighbors: int = 0
    feature_rows: int = 0
    remote_feature_rows: int = 0
    duplicate_arrivals: int = 0
    """Batches that arrived again after being applied (re-deliveries), acknowledged and skipped."""
    duplicate_seeds: int = 0
    """Seeds applied more than once in this phase, measured from the applied seed ids (should be 0)."""
    idle_seconds: float = 0.0
    """Compute thread waiting for a batch (input starvation, nothing else)."""
    ingest_seconds: float = 0.0
    """Ingest thread receiving, decoding, validating and claiming (Redis) the batches (not polling)."""
    copy_seconds: float = 0.0
    """Ingest thread staging batches on the device (pinned copy, host-to-device, device check)."""
    cached_rows: int = 0
    """Feature rows served from the trainer's feature cache (of ``feature_rows``, the rows needed)."""
    wire_bytes: int = 0
    """Bytes of the applied batches' messages, as received."""
    compute_seconds: float = 0.0
    """Compute thread in forward/backward/step (or the simulated step)."""
    planned_seeds: int = 0
    out_of_order: int = 0
    """Batches applied before an earlier one of the plan (it was late or lost; the run is then not
    bit-reproducible): the waiting batches filled ``reorder_window`` or ``reorder_bytes``."""
    scores: list | None = None
    """Link val/test: ``(scores, labels)`` per batch (gathered over ranks by :meth:`reduce`)."""

    FIELDS = ("batches", "seeds", "correct", "labelled", "loss_sum", "sampled_edges", "remote_neighbors",
              "feature_rows", "remote_feature_rows", "duplicate_arrivals", "duplicate_seeds", "idle_seconds",
              "ingest_seconds", "copy_seconds", "compute_seconds", "planned_seeds", "cached_rows", "wire_bytes",
              "out_of_order")
    SECONDS = ("loss_sum", "idle_seconds", "ingest_seconds", "copy_seconds", "compute_seconds")

    def reduce(self, world: int) -> "PhaseStats":
        if world == 1:
            return self
        t = torch.tensor([float(getattr(self, f)) for f in self.FIELDS], dtype=torch.float64)
        dist.all_reduce(t)
        scores = None
        if self.scores is not None:
            every: list = [None] * world
            dist.all_gather_object(every, self.scores)
            scores = [x for rank in every for x in rank]
        return PhaseStats(**{f: (float(v) if f in self.SECONDS else int(v))
                             for f, v in zip(self.FIELDS, t.tolist())}, scores=scores)


LINK_KEYS = tuple(f"{p}_{k}" for p in ("val", "test") for k in ("auc", "ap", "hits", "mrr", "hits1", "hits3", "hits10"))
"""A link job's figures of its best epoch, in the result."""


def applied_units(fb: FeatureBatch, num_nodes: int) -> np.ndarray:
    """What a batch applied, for the duplicate count: its seeds, or a link batch's pairs (as keys;
    a training batch's positives only, as its negatives are redrawn each time)."""
    if not fb.link_pairs.shape[0]:
        return np.array(fb.nodes[:fb.num_seeds])
    lp = fb.link_pairs
    if fb.phase == "train":
        lp = lp[lp[:, 2] == 1]
    ends = fb.nodes[lp[:, :2]]
    return pair_keys(ends[:, 0], ends[:, 1], num_nodes) * 2 + lp[:, 2]
