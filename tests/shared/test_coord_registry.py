"""The service registry after a service's key expired (its heartbeats lost on a bad link), on a real Redis.

In a soak, 20 % packet loss on a host let a loader's registry key expire; the loader's next
``update_info`` (a bare HSET) re-created it with only the updated fields and no TTL, and the
launcher's FleetWatch crashed on it (``KeyError: 'id'``), ending the job.
"""
import json
import time

import pytest

from argosy.shared import keys
from argosy.shared.coord import Coordinator
from argosy.shared.fleet import FleetWatch


@pytest.fixture
def coord(redis_url, request):
    c = Coordinator(redis_url, f"t-{request.node.name}")
    c.delete_job()
    yield c
    c._hb_stop.set()
    c.delete_job()
    c.close()


def test_update_info_after_the_key_expired_writes_the_whole_entry_with_its_ttl(coord):
    coord.register("loader", "loader-1", {"endpoint": "tcp://x:1"}, interval=0.1, ttl=0.5)
    time.sleep(0.3)
    coord._hb_stop.set()                       # heartbeats stop (the link is lossy)
    key = keys.service(coord.job, "loader", "loader-1")
    deadline = time.time() + 5
    while coord.r.exists(key) and time.time() < deadline:
        time.sleep(0.05)
    assert not coord.r.exists(key)
    coord.update_info("loader", "loader-1", held=[1, 3])
    h = {k.decode(): json.loads(v) for k, v in coord.r.hgetall(key).items()}
    assert h["id"] == "loader-1" and h["held"] == [1, 3] and h["endpoint"] == "tcp://x:1"
    assert coord.r.pttl(key) > 0                # it expires again unless heartbeats resume


def test_a_partial_entry_does_not_break_the_registry_or_fleetwatch(coord):
    coord.r.sadd(keys.members(coord.job, "loader"), "loader-9")
    coord.r.hset(keys.service(coord.job, "loader", "loader-9"), mapping={"held": json.dumps([0])})
    got = coord.services("loader")
    assert [(s["id"], s["role"], s["held"]) for s in got] == [("loader-9", "loader", [0])]
    FleetWatch(coord).watch()                   # crashed with KeyError: 'id'
