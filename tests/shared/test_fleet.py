"""Fleet events (issue 45): a killed replica is recorded as lost once and logged with the count
left, a drained one as a leave; each leave or loss is paired with the re-claim of its batches and
that stall is its cost, in the result, the report and Prometheus. A job's end is recorded once."""
from __future__ import annotations

import json
import logging
import time

import pytest

from argosy.shared.coord import Coordinator
from argosy.shared.fleet import FleetWatch, event_counts, fleet_events, fleet_summary
from argosy.shared.records import JobState

pytestmark = pytest.mark.integration


@pytest.fixture
def coord(redis_url):
    c = Coordinator(redis_url, f"fleet-{time.monotonic_ns()}")
    c.delete_job()
    yield c
    c.delete_job()
    c.close()


def _live(coord, role, sid, beat):
    """A registered service with a heartbeat key (what Coordinator.register keeps alive)."""
    from argosy.shared import keys
    coord.r.sadd(keys.members(coord.job, role), sid)
    coord.r.hset(keys.service(coord.job, role, sid), mapping={"id": json.dumps(sid), "heartbeat": json.dumps(beat)})
    coord.record_event("join", role, sid)


def test_killed_replica_is_lost_once_and_its_reclaim_is_its_cost(coord, caplog):
    from argosy.shared import keys
    t = time.time()
    for sid in ("sampler-a", "sampler-b", "sampler-c"):
        _live(coord, "sampler", sid, t)
    watch = FleetWatch(coord)
    assert watch.watch() == []
    coord.deregister("sampler", "sampler-c")                  # scaled down: drained, leaves
    coord.r.delete(keys.service(coord.job, "sampler", "sampler-b"))   # killed: the key expires, no leave
    with caplog.at_level(logging.WARNING, logger="argosy"):
        assert watch.watch() == []                           # vanished: confirmed at the next poll
        lost = watch.watch()
        assert watch.watch() == []                           # recorded once
    assert [e["sid"] for e in lost] == ["sampler-b"]
    assert "sampler-b lost" in caplog.text and "runs with 1 sampler(s)" in caplog.text
    coord.ensure_groups(1)
    coord.publish_work([(0, {"count": 32, "batch": 0})])
    coord.claim([0], "sampler-b", count=1)
    time.sleep(0.3)
    got = coord.reclaim([0], "sampler-a", min_idle_ms=100)
    assert len(got) == 1
    ev = fleet_events(coord)
    kinds = [(e["event"], e["sid"]) for e in ev]
    assert kinds == [("join", "sampler-a"), ("join", "sampler-b"), ("join", "sampler-c"), ("leave", "sampler-c"),
                     ("lost", "sampler-b"), ("reclaim", "sampler-a")]
    lost_ev = next(e for e in ev if e["event"] == "lost")
    assert 0 < lost_ev["cost_s"] == pytest.approx(ev[-1]["t"] - t, abs=0.01)
    assert ev[-1]["items"] == 1 and ev[-1]["seeds"] == 32 and ev[-1]["held_by"] == {"sampler-b": 1}
    assert ev[-1]["idle_s"] >= 0.3 and lost_ev["reclaimed"] == 1
    assert next(e for e in ev if e["event"] == "leave")["cost_s"] is None       # sampler-c held nothing
    s = fleet_summary(coord)
    assert (s["services_joined"], s["services_left"], s["services_lost"], s["reclaims"]) == (3, 1, 1, 1)
    counts, costs = event_counts(coord)
    assert counts[("sampler", "lost")] == 1 and costs[("sampler", "lost")] == lost_ev["cost_s"]


def test_a_service_that_leaves_between_the_reads_of_one_poll_is_not_lost(coord, caplog, monkeypatch):
    """deregister() deletes the registry key, then records the leave: a poll that read the events just
    before and the registry just after took a drained sampler for a killed one (under compose, at a failed
    job's end: ``sampler-... lost: its heartbeat stopped 1 s ago and it did not leave``)."""
    t = time.time()
    for sid in ("sampler-a", "sampler-b"):
        _live(coord, "sampler", sid, t)
    watch = FleetWatch(coord)
    assert watch.watch() == []
    events = coord.events
    calls = []

    def events_then_leave(start=0):
        out = events(start)
        if not calls:                                        # the leave lands between the two reads
            calls.append(1)
            coord.deregister("sampler", "sampler-b")
        return out
    monkeypatch.setattr(coord, "events", events_then_leave)
    with caplog.at_level(logging.WARNING, logger="argosy"):
        assert watch.watch() == [] and watch.watch() == [] and watch.watch() == []
    assert "lost" not in caplog.text
    assert [(e["event"], e["sid"]) for e in fleet_events(coord)][-1] == ("leave", "sampler-b")
    assert fleet_summary(coord)["services_lost"] == 0


def test_events_reach_the_report_and_prometheus(coord, tmp_path):
    from argosy.shared.metrics import metrics_from_redis
    from argosy.shared.report import write_report
    _live(coord, "sampler", "sampler-a", time.time())
    coord.record_event("lost", "sampler", "sampler-b", last_heartbeat=time.time() - 5)
    report = write_report(tmp_path, {"epochs": 1}, [], [], {"job": coord.job, "events": fleet_events(coord)})
    text = report.read_text()
    assert "## Scale, kill and re-claim events" in text and "sampler-b was lost" in text
    assert json.loads((tmp_path / "report.json").read_text())["events"][1]["event"] == "lost"
    from prometheus_client import generate_latest
    out = generate_latest(metrics_from_redis(coord)).decode()
    assert f'argosy_fleet_events_total{{event="lost",job="{coord.job}",role="sampler"}} 1.0' in out, out[-2000:]


def test_a_jobs_end_is_recorded_once(coord):
    assert coord.fail_job("trainer-0 cannot start: ValueError: bad model", terminal=True)
    assert not coord.fail_job("PeerDeadError: received no batch for 120 s")   # a restarted pod's own failure
    assert not coord.set_state(JobState.DONE, {"epochs": 3})
    assert coord.get_state() == "failed"
    assert coord.job_result().error == "trainer-0 cannot start: ValueError: bad model"
    assert coord.set_state(JobState.STARTING)                 # a new submission may follow
    assert coord.set_state(JobState.DONE, {"epochs": 3}) and coord.get_state() == "done"
