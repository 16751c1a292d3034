"""The phase plan: every seed once, in a random order per epoch, ranks dealt so no stream runs ahead for one rank."""
from __future__ import annotations

import numpy as np

from argosy.shared.plan import plan_phase, split_order
from argosy.shared.store import PartitionStore


def test_plan_covers_every_seed_with_ranks_dealt_per_stream(small_store):
    _, path = small_store
    store = PartitionStore(path)
    plan = plan_phase(store, "train", 3, 8, 2)
    # every training seed of every part exactly once
    for p in range(store.num_parts):
        mine = sorted((it.offset, it.count) for it in plan if it.part == p)
        n = split_order(store, p, "train", 0, 3).shape[0]
        assert [o for o, _ in mine] == list(range(0, n, 8)) and sum(c for _, c in mine) == n
    # within each part's stream the ranks alternate, so a loader's sequence never runs ahead for one rank
    for p in range(store.num_parts):
        ranks = [it.trainer_rank for it in plan if it.part == p]
        assert all(a != b for a, b in zip(ranks, ranks[1:]))
    totals = np.bincount([it.trainer_rank for it in plan], minlength=2)
    assert abs(totals[0] - totals[1]) <= store.num_parts
    # deterministic per epoch, another order in another epoch; one trainer gets everything
    again = plan_phase(store, "train", 3, 8, 2)
    assert [(it.batch_id, it.trainer_rank) for it in again] == [(it.batch_id, it.trainer_rank) for it in plan]
    assert [it.batch_id for it in plan_phase(store, "train", 4, 8, 2)] != [it.batch_id for it in plan]
    assert {it.trainer_rank for it in plan_phase(store, "train", 0, 8, 1)} == {0}
