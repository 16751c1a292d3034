"""Coordination against a real Redis server: work streams, idempotency, registry, auth."""
import time

import pytest

from argosy.shared.config import JobConfig
from argosy.shared.coord import Coordinator, redact_url
from argosy.shared.errors import CoordinationError
from argosy.shared.redis_server import EmbeddedRedis


def test_spec_round_trip(coord):
    cfg = JobConfig(job="x", num_samplers=3)
    coord.put_spec(cfg)
    got = coord.get_spec()
    assert got == cfg and got.fingerprint() == cfg.fingerprint()


def test_claim_ack_and_reclaim(coord):
    coord.ensure_groups(2)
    coord.publish_work([(0, {"b": 1}), (1, {"b": 2}), (0, {"b": 3})])
    got = coord.claim([0, 1], "s1", count=10, block_ms=100)
    assert sorted(f["b"] for _, _, f in got) == [1, 2, 3]
    assert coord.claim([0, 1], "s2", count=10, block_ms=50) == []       # nothing new for another consumer
    stream, eid, _ = got[0]
    coord.ack(stream, eid)
    assert coord.pending(2) == 2 and coord.backlog(2) == 2
    time.sleep(0.15)
    taken = coord.reclaim([0, 1], "s2", min_idle_ms=100)                  # s1 "died": s2 takes its items
    assert sorted(f["b"] for _, _, f in taken) == sorted(f["b"] for _, _, f in got[1:])
    assert coord.reclaim([0, 1], "s3", min_idle_ms=10_000) == []          # fresh claims are not stolen


def test_mark_applied_is_idempotent(coord):
    assert coord.mark_applied(0, "train", 5)
    assert not coord.mark_applied(0, "train", 5)
    assert coord.mark_applied(1, "train", 5)
    assert coord.applied_count(0, "train") == 1


def test_registry_heartbeat_expires(coord):
    coord.register("sampler", "s-a", {"endpoint": "tcp://x:1"}, interval=0.1, ttl=0.5)
    time.sleep(0.3)
    live = coord.services("sampler")
    assert [s["id"] for s in live] == ["s-a"] and live[0]["endpoint"] == "tcp://x:1"
    coord._hb_stop.set()                                                  # the process "dies"
    time.sleep(0.8)
    assert coord.services("sampler") == []
    assert coord.services("sampler", include_dead=True)[0]["alive"] is False


def test_metrics_and_epochs(coord):
    coord.incr(a=1, b=2.5)
    coord.incr(a=2)
    assert coord.metrics() == {"a": 3.0, "b": 2.5}
    coord.append_epoch({"epoch": 0, "train_loss": 1.5, "wire_bytes": 7})
    (rec,) = coord.epochs()
    assert rec.epoch == 0 and rec.train_loss == 1.5 and rec.extra == {"wire_bytes": 7}
    assert rec.to_dict()["wire_bytes"] == 7 and rec.to_dict()["train_loss"] == 1.5
    with pytest.raises(ValueError, match="needs 'epoch'"):
        coord.append_epoch({"train_loss": 1.0})


def test_password_auth_and_redaction():
    with EmbeddedRedis(password="s3cret") as srv:
        c = Coordinator(srv.url, "auth")
        assert c.r.ping()
        assert "s3cret" not in redact_url(srv.url)
        bad = srv.url.replace("s3cret", "wrong")
        with pytest.raises(CoordinationError, match="refused the credentials|invalid|WRONGPASS") as e:
            Coordinator(bad, "auth", connect_timeout=2)
        assert "wrong" not in str(e.value)


def test_unreachable_redis_fails_clearly():
    with pytest.raises(CoordinationError, match="cannot reach Redis"):
        Coordinator("redis://127.0.0.1:1/0", "x", connect_timeout=1)


def test_claim_carries_acknowledgements_in_one_round_trip(coord):
    """mark_applied(..., acks) acknowledges earlier work items with the claim; the claim's answer is unchanged."""
    coord.ensure_groups(1)
    coord.publish_work([(0, {"b": 1}), (0, {"b": 2})])
    got = coord.claim([0], "t", count=10, block_ms=100)
    assert coord.pending(1) == 2
    assert coord.mark_applied(0, "train", 7, acks=[got[0][:2]])
    assert coord.pending(1) == 1
    assert not coord.mark_applied(0, "train", 7, acks=[got[1][:2]])
    assert coord.pending(1) == 0 and coord.applied_count(0, "train") == 1
