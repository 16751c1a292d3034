"""A long job's Redis does not grow with its epochs' applied-id sets (real Redis).

One set per epoch and phase (``applied:{epoch}:{phase}``) used to stay for the whole job: ~250
bytes an epoch, thousands of keys in an hour-long soak.  The trainer now drops the last epoch's
sets when an epoch ends and sweeps every older one now and then (a late re-delivery of an old
epoch re-creates its set).
"""
from argosy.shared import keys
from argosy.shared.coord import APPLIED_PHASES

import pytest


def _applied_keys(coord) -> set[tuple[int, str]]:
    out = set()
    for k in coord.r.scan_iter(match=keys.prefix(coord.job) + "applied:*", count=1000):
        _, e, ph = k.decode().rsplit(":", 2)
        out.add((int(e), ph))
    return out


def test_drop_applied_forgets_the_last_epoch_only(coord):
    for e in range(4):
        for ph in APPLIED_PHASES:
            assert coord.mark_applied(e, ph, 7)
    assert coord.drop_applied(3) == 3                       # epoch 2's three sets
    assert _applied_keys(coord) == {(e, ph) for e in (0, 1, 3) for ph in APPLIED_PHASES}
    assert coord.mark_applied(3, "train", 7) is False       # the running epoch still de-duplicates
    assert coord.drop_applied(3, sweep=True) == 6           # every set before epoch 3
    assert _applied_keys(coord) == {(3, ph) for ph in APPLIED_PHASES}


def test_applied_sets_stay_bounded_over_a_long_job(coord):
    """The trainer's calls over 1,000 epochs (``drop_applied(E)`` at each end, a sweep every 64), with a
    late re-delivery of an old epoch now and then: the keys stay bounded, not one per epoch."""
    from argosy.services.trainer.service import APPLIED_SWEEP_EVERY
    most = 0
    for e in range(1000):
        for ph in APPLIED_PHASES:
            for b in range(5):
                coord.mark_applied(e, ph, b)
        if e % 37 == 0 and e > 100:
            coord.mark_applied(e - 90, "train", 3)           # a late re-delivery re-creates an old set
        coord.drop_applied(e, sweep=e % APPLIED_SWEEP_EVERY == 0)
        most = max(most, len(_applied_keys(coord)))
    assert most <= 2 * len(APPLIED_PHASES) + 2, most
    coord.drop_applied(1000, sweep=True)
    assert _applied_keys(coord) == set()


def test_fleet_events_are_capped_and_counted(coord):
    """Past ``max_events`` the oldest events are dropped and counted; a poller's index (``events(start)``,
    as FleetWatch reads them) still means the same event."""
    coord.max_events = 50
    for i in range(130):
        coord.record_event("reclaim", "sampler", "sampler-0", n=i)
    assert coord.r.llen(keys.events(coord.job)) == 50 and coord.events_dropped() == 80
    assert [e["n"] for e in coord.events()] == list(range(80, 130))
    assert [e["n"] for e in coord.events(100)] == list(range(100, 130))     # index 100 of the whole history
    assert [e["n"] for e in coord.events(10)] == list(range(80, 130))       # from the oldest one kept
    from argosy.shared.fleet import fleet_summary
    assert fleet_summary(coord)["events_dropped"] == 80
