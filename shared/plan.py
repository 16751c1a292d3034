"""The epoch plan: which seeds form which batch, derived identically by driver and samplers.

A work item never carries seed ids.  It says ``(epoch, phase, part, offset, count)`` and every
sampler recomputes the same seeds as ``split_order(store, part, phase, seed, epoch)[offset:offset+count]``
(a seeded permutation of the part's split vertices), so work items stay tiny whatever the graph
size, and a re-claimed item yields exactly the same batch.

Link prediction (``task="link"``) cuts the same way over rows of the part's link arrays (see
:mod:`shared.linkpred`): ``train`` items are ranges of the part's training edges (reshuffled each
epoch), ``val``/``test`` items ranges of its held-out pairs (a fixed order); ``split_order``
then returns row indices into those arrays rather than vertex ids.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from argosy.shared.store import PartitionStore

__all__ = ["WorkItem", "split_order", "plan_phase", "mix_seed", "PHASES"]

PHASES = ("train", "val", "test")


@dataclass
class WorkItem:
    """One batch to sample: ``count`` seeds starting at ``offset`` in the part's split order."""

    epoch: int
    phase: str
    batch_id: int
    part: int
    offset: int
    count: int
    trainer_rank: int
    seq: int = 0
    """Position in the phase's plan (the order the trainers apply batches in): a sampler holding
    several parts takes its claimed items in this order (:meth:`SamplerProc.step`)."""

    def to_fields(self) -> dict:
        return asdict(self)


def mix_seed(*xs: int) -> int:
    """Deterministic 64-bit seed from several integers (splitmix-style), identical in every process."""
    h = 0x9E3779B97F4A7C15
    for x in xs:
        h = ((h ^ (x & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 31
    return h


def split_order(store: PartitionStore, part: int, phase: str, seed: int, epoch: int, task: str = "node") -> np.ndarray:
    """Global ids of ``part``'s ``phase`` vertices in batch order (reshuffled each epoch for train;
    a fixed order for val/test so each epoch evaluates the same subset).  With ``task="link"``:
    row indices into the part's training edges (train) or held-out pairs (val/test)."""
    if task == "link":
        from argosy.shared.linkpred import link_counts
        ids = np.arange(int(link_counts(store, phase)[part]), dtype=np.int64)
    else:
        pd = store.part(part)
        mask = getattr(pd, f"{phase}_mask")
        if mask is None:
            return np.empty(0, np.int64)
        ids = np.asarray(pd.nodes)[np.asarray(mask)]
    rng = np.random.default_rng(mix_seed(seed, PHASES.index(phase), part, epoch if phase == "train" else 0))
    return ids[rng.permutation(ids.shape[0])]


def _counts(store: PartitionStore, phase: str, task: str = "node") -> np.ndarray:
    if task == "link":
        from argosy.shared.linkpred import link_counts
        return link_counts(store, phase)
    out = np.zeros(store.num_parts, np.int64)
    for p in range(store.num_parts):
        mask = getattr(store.part(p), f"{phase}_mask")
        out[p] = 0 if mask is None else int(np.count_nonzero(mask))
    return out


def plan_phase(store: PartitionStore, phase: str, epoch: int, batch_size: int, num_trainers: int,
               max_nodes: int | None = None, first_batch_id: int = 0, task: str = "node") -> list[WorkItem]:
    """Split a phase's seeds into batches, grouped by part, dealt round-robin to trainer ranks.

    For ``val``/``test`` at most ``max_nodes`` seeds are taken, spread over parts in proportion
    to their size.  Batch ids are unique within the job (``first_batch_id`` onwards).  With
    ``task="link"`` the units are training edges and held-out pairs instead of seeds.
    """
    counts = _counts(store, phase, task)
    if max_nodes is not None and counts.sum() > max_nodes:
        counts = np.floor(counts * (max_nodes / counts.sum())).astype(np.int64)
    items: list[WorkItem] = []
    bid = first_batch_id
    for p in range(store.num_parts):
        for off in range(0, int(counts[p]), batch_size):
            items.append(WorkItem(epoch, phase, bid, p, off, int(min(batch_size, counts[p] - off)), 0))
            bid += 1
    # A random order over all parts (not round-robin by part: with GREM's parts the training edges per
    # part differ up to 5x, and a round-robin order ended every epoch on the largest part's batches
    # alone: ca-astroph link job, val AUC 0.77-0.83 instead of 0.91-0.94).
    order = np.random.default_rng(mix_seed(epoch, PHASES.index(phase))).permutation(len(items))
    items = [items[i] for i in order]
    for k, it in enumerate(items):
        it.seq = k
    # Ranks are dealt in turn within each part's stream, each part starting at another rank so the
    # totals stay balanced.  DDP steps the ranks in lockstep: dealt over the whole plan instead, a
    # stream could hold a long run of one rank's batches, which filled that trainer's receive queue
    # while it waited in an all-reduce for a rank whose batches sat behind them in the same loader
    # (a stall until the send timed out).
    turn: dict[int, int] = {}
    for it in items:
        k = turn.get(it.part, it.part)
        it.trainer_rank = k % num_trainers
        turn[it.part] = k + 1
    return items
