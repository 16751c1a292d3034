"""Re-claim deadline against a real Redis server: per-item backoff, the trainers' published batch
age, the deadline samplers derive from it, and the claim stamp batches carry to the trainer."""
import dataclasses
import logging
import math
import time
from types import SimpleNamespace

import pytest

from argosy.shared import keys
from argosy.shared.config import JobConfig, SamplerConfig
from argosy.shared.coord import (BATCH_AGE_MAX, RECLAIM_AGE_FACTOR, RECLAIM_BACKOFF_CAP, reclaim_backoff)
from argosy.shared.errors import InvalidMessageError
from argosy.shared.metrics import ServiceMetrics
from argosy.shared.store import PartitionStore
from argosy.shared.validate import MessageValidator, job_plan
from argosy.shared.wire import decode, encode
from argosy.services.sampler.core import SamplerCore
from argosy.services.sampler.service import SamplerProc
from argosy.services.trainer.batch_age import BatchAges


def _idle_ms(coord, part: int = 0) -> dict[str, tuple[int, int]]:
    """``{entry id: (idle ms, times delivered)}`` of a stream's pending items."""
    rows = coord.r.xpending_range(keys.work_stream(coord.job, part), keys.WORK_GROUP, min="-", max="+", count=100)
    return {x["message_id"].decode(): (int(x["time_since_delivered"]), int(x["times_delivered"])) for x in rows}


def _wait_idle(coord, ms: int) -> None:
    while min(i for i, _ in _idle_ms(coord).values()) < ms:
        time.sleep(0.02)


def test_backoff_doubles_and_is_capped():
    assert [reclaim_backoff(d) for d in range(1, 7)] == [1, 2, 4, 8, 8, 8]
    assert reclaim_backoff(0) == 1 and reclaim_backoff(10**6) == RECLAIM_BACKOFF_CAP


def test_item_delivered_twice_waits_twice_the_deadline(coord):
    coord.ensure_groups(1)
    coord.publish_work([(0, {"b": 1, "count": 5})])
    [(_, eid, _)] = coord.claim([0], "s1", count=1, block_ms=100)
    _wait_idle(coord, 200)
    assert [e for _, e, _ in coord.reclaim([0], "s2", min_idle_ms=100)] == [eid]     # first re-claim: after 1x
    assert _idle_ms(coord)[eid][1] == 2
    _wait_idle(coord, 600)
    # Idle ~I ms, delivered twice: not taken at min_idle I/1.6 (2x that is above I), taken at I/2.4.
    idle = _idle_ms(coord)[eid][0]
    assert coord.reclaim([0], "s3", min_idle_ms=int(idle / 1.6)) == []
    got = coord.reclaim([0], "s3", min_idle_ms=int(idle / 2.4))
    assert [(e, f["b"]) for _, e, f in got] == [(eid, 1)]
    assert _idle_ms(coord)[eid][1] == 3
    ev = [e for e in coord.events() if e["event"] == "reclaim"]
    assert [(e["sid"], e["items"], e["held_by"], e["seeds"], e["redelivered"]) for e in ev] == [
        ("s2", 1, {"s1": 1}, 5, 0), ("s3", 1, {"s2": 1}, 5, 1)]


def test_backed_off_items_do_not_hide_due_ones(coord):
    """The oldest pending item was re-delivered often and is backing off; a younger one, claimed once,
    is due: it is the one taken, with count=1 (XPENDING reads past the backed-off head)."""
    coord.ensure_groups(1)
    coord.publish_work([(0, {"b": i, "count": 1}) for i in range(6)])
    first = coord.claim([0], "s1", count=1, block_ms=100)
    for _ in range(4):                           # the head: delivered 5 times (backoff 8x: 800 ms below)
        _wait_idle(coord, 20)
        assert [e for _, e, _ in coord.reclaim([0], "s1", min_idle_ms=1)] == [first[0][1]]
    assert _idle_ms(coord)[first[0][1]][1] == 5
    rest = coord.claim([0], "s2", count=5, block_ms=100)
    _wait_idle(coord, 150)
    got = coord.reclaim([0], "s3", min_idle_ms=100, count=1)
    assert len(got) == 1 and got[0][1] == rest[0][1]


def test_reclaim_counts_only_what_it_took(coord):
    """Two samplers racing for the same idle items: each item is taken once, and the events' counts
    add up to the items taken (the ``reclaimed_batches`` counter's figure)."""
    coord.ensure_groups(1)
    coord.publish_work([(0, {"b": i, "count": 2}) for i in range(3)])
    coord.claim([0], "dead", count=3, block_ms=100)
    _wait_idle(coord, 120)
    a = coord.reclaim([0], "s1", min_idle_ms=100, count=2)
    b = coord.reclaim([0], "s2", min_idle_ms=100, count=4)
    assert len(a) == 2 and len(b) == 1
    assert sorted(e for _, e, _ in a + b) == sorted(_idle_ms(coord))
    ev = [e for e in coord.events() if e["event"] == "reclaim"]
    assert sum(e["items"] for e in ev) == 3 and sum(e["seeds"] for e in ev) == 6
    assert all(e["held_by"] == {"dead": e["items"]} for e in ev)


def test_published_age_sets_the_deadline(coord):
    assert coord.batch_age(2) is None
    assert coord.reclaim_deadline(3.0, trainers=2) == 3.0                 # nothing published: claim timeout
    coord.publish_batch_age(1, 0.5)
    assert coord.reclaim_deadline(3.0, trainers=2) == 3.0                 # a fast pipeline: unchanged
    coord.publish_batch_age(0, 4.0)
    assert coord.batch_age(2) == 4.0
    assert coord.reclaim_deadline(3.0, trainers=2) == pytest.approx(RECLAIM_AGE_FACTOR * 4.0)
    assert coord.reclaim_deadline(3.0, trainers=1) == pytest.approx(RECLAIM_AGE_FACTOR * 4.0)
    coord.publish_batch_age(0, -3.0)                                      # a clock behind: no age
    coord.publish_batch_age(1, 1e9)                                       # a clock far ahead: capped
    assert coord.batch_age(2) == BATCH_AGE_MAX


def test_published_age_expires(coord):
    coord.publish_batch_age(0, 30.0, ttl=1.0)
    assert coord.reclaim_deadline(3.0, trainers=1) == pytest.approx(RECLAIM_AGE_FACTOR * 30.0)
    time.sleep(1.2)
    assert coord.batch_age(1) is None and coord.reclaim_deadline(3.0, trainers=1) == 3.0


def test_batch_ages_window_quantile_and_rate():
    ages = BatchAges(window=10.0, every=2.0, quantile=0.9)
    assert ages.due(0.0) is None                          # nothing applied yet
    ages.add(claimed_at=0.0, applied_at=50.0, now=0.0)    # unstamped (an older sampler): skipped
    ages.add(claimed_at=100.0, applied_at=99.0, now=0.0)  # the sampler's clock ahead: age 0
    assert ages.due(0.0) == 0.0 and ages.due(1.0) is None
    for i in range(20):
        ages.add(claimed_at=100.0, applied_at=100.0 + i, now=0.1)
    assert ages.due(0.3) is None                          # risen, but 0.5 s have not passed
    assert ages.due(0.5) == 17.0                          # nearest-rank p90 of 0, 0, 1..19
    assert ages.due(2.4) is None and ages.due(2.5) == 17.0
    assert ages.due(20.0) is None                         # the window emptied: nothing to say


def test_sampler_deadline_follows_the_trainers_and_is_logged_once(coord, caplog):
    proc = SimpleNamespace(cfg=JobConfig(job=coord.job, num_trainers=1), _deadline_logged=False,
                           ctx=SimpleNamespace(coord=coord, metrics=ServiceMetrics("sampler", "sampler-0", coord.job)))
    proc.cfg.coord.claim_timeout = 3.0
    deadline = SamplerProc._update_deadline.__get__(proc)
    with caplog.at_level(logging.INFO, logger="argosy.services.sampler.service"):
        assert deadline() == 3.0
        coord.publish_batch_age(0, 8.0)
        assert deadline() == pytest.approx(20.0) and deadline() == pytest.approx(20.0)
    lines = [r.getMessage() for r in caplog.records if "claim timeout" in r.getMessage()]
    assert lines == ["batches take 8.0 s from claim to apply (trainers' 90th percentile): re-claiming work items "
                     "after 20.0 s instead of the 3.0 s claim timeout (logged once; gauge argosy_reclaim_deadline_seconds)"]
    assert proc.ctx.metrics.gauges["reclaim_deadline"] == pytest.approx(20.0)
    assert "argosy_reclaim_deadline_seconds" in proc.ctx.metrics.exposition()


@pytest.fixture
def sampled(small_store):
    _, path = small_store
    cfg = JobConfig(job="vjob", store=str(path), sampler=SamplerConfig(fanouts=(5, 5), batch_size=16))
    store = PartitionStore(path)
    it = job_plan(cfg, store, 0, "train")[0]
    sb = SamplerCore(store).sample_item(it, cfg.sampler.fanouts)
    sb.job, sb.work_stream, sb.work_id = "vjob", keys.work_stream("vjob", it.part), "1700000000000-3"
    return cfg, sb


def test_claim_stamp_crosses_the_wire_and_is_checked(sampled):
    cfg, sb = sampled
    v = MessageValidator(cfg, "loader", job="vjob")
    sb.claimed_at = 1_790_000_000.25
    assert v(decode([bytes(f) for f in encode(sb)])).claimed_at == 1_790_000_000.25
    for bad in (math.nan, math.inf, -1.0):
        with pytest.raises(InvalidMessageError, match=f"claimed_at {bad!r} is not a wall time"):
            v(dataclasses.replace(sb, claimed_at=bad))
