"""A long job's Redis does not grow with its epochs (real Redis): applied-id sets, epoch records,
per-epoch counters.

One set per epoch and phase (``applied:{epoch}:{phase}``) used to stay for the whole job: ~250
bytes an epoch, thousands of keys in an hour-long soak.  The trainer now drops the last epoch's
sets when an epoch ends and sweeps every older one now and then (a late re-delivery of an old
epoch re-creates its set).  Epoch records (~900 bytes each) and per-epoch counters (~7 an epoch in the
metrics hash) grew the same way; Redis now keeps the newest ``MAX_EPOCH_RECORDS`` records and
``EPOCH_COUNTER_WINDOW`` epochs of counters, and the report reads the rest from the run dir.  On the
code before that, the 1,000-epoch test below grows from 947 KB at 600 epochs to 1.48 MB at 1,000.
"""
import json

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


# ---- epoch records and per-epoch counters ------------------------------------------------------
PER_EPOCH = ("ipc_bytes", "wire_bytes", "halo_bytes", "disk_read_bytes", "major_faults", "row_cache_hits",
             "row_cache_misses")
"""The per-epoch counters samplers and loaders add to the metrics hash (``{name}_e{E}``)."""


def _record(e: int) -> dict:
    """An epoch record the size of a real one (~900 bytes of JSON): every 10th epoch is a best epoch."""
    return {"epoch": e, "train_loss": 1.0 / (e + 1), "train_accuracy": 0.5, "val_loss": 0.9, "val_accuracy": 0.7,
            "test_loss": 0.8 if e % 10 == 3 else None, "test_accuracy": 0.8 + e * 1e-5 if e % 10 == 3 else None,
            "epoch_seconds": 0.31, "val_seconds": 0.04, "test_seconds": 0.03, "batches": 9, "batches_per_second": 29.0,
            "sampled_edges": 51234, "sampled_edges_per_second": 165271.0, "seeds_planned": 140, "seeds_trained": 140,
            "seeds_dropped": 0, "duplicates": 0, "duplicate_arrivals": e % 3, "remote_fraction": 0.123456,
            "halo_fraction": 0.0345, "trainer_idle_fraction": 0.41234, "idle_seconds": 0.1234, "ingest_seconds": 0.0456,
            "copy_seconds": 0.0123, "compute_seconds": 0.1567, "cache_hit_rate": 0.0, "bytes_per_batch": 123456.7,
            "val_pairs": 0, "note": "x" * 200}


def _job_bytes(coord) -> tuple[int, int]:
    """(keys, bytes) of the job in Redis (MEMORY USAGE of every key)."""
    ks = list(coord.r.scan_iter(match=keys.prefix(coord.job) + "*", count=1000))
    return len(ks), sum(int(coord.r.memory_usage(k, samples=0) or 0) for k in ks)


def _run_epochs(coord, run_dir, first: int, last: int) -> None:
    """What a job does per epoch: a sampler/loader flush of per-epoch counters (and a late one of an
    older epoch now and then), trainer rank 0's record, its history line and its counter move."""
    from argosy.services.trainer.service import COUNTERS_MOVE_EVERY, TrainerProc
    from argosy.shared.coord import EPOCH_COUNTER_WINDOW
    from argosy.shared.rundir import HISTORY_FILE

    class _T:                                   # the two attributes _move_epoch_counters uses
        class ctx:
            pass
    t = _T()
    t.ctx.coord, t.cfg = coord, type("cfg", (), {"run_dir": str(run_dir)})
    with open(run_dir / HISTORY_FILE, "a") as hist:
        for e in range(first, last):
            coord.incr(trainer_batches=9.0, **{f"{k}_e{e}": 10.0 + e for k in PER_EPOCH})
            if e % 23 == 0 and e > 200:
                coord.incr(**{f"wire_bytes_e{e - 150}": 1.0})       # a late flush of an old epoch
            rec = _record(e)
            hist.write(json.dumps(rec) + "\n")
            coord.append_epoch(rec)
            if e % COUNTERS_MOVE_EVERY == 0 and e >= EPOCH_COUNTER_WINDOW:
                TrainerProc._move_epoch_counters(t, e - EPOCH_COUNTER_WINDOW)


def test_epoch_records_and_counters_stay_bounded_over_a_long_job(coord, tmp_path):
    """1,000 epochs: Redis holds at most MAX_EPOCH_RECORDS records and EPOCH_COUNTER_WINDOW (+ the move
    period) epochs of counters; its bytes stop growing once the window is full; yet every reader
    sees the whole job (count, last, best, the report's records and per-epoch counters, exactly)."""
    from argosy.services.job_records import job_epochs, job_metrics
    from argosy.shared.coord import EPOCH_COUNTER_WINDOW, MAX_EPOCH_RECORDS
    from argosy.shared.traffic import wire_summary
    from argosy.shared.store.residency import disk_summary

    _run_epochs(coord, tmp_path, 0, 600)
    n600, b600 = _job_bytes(coord)
    _run_epochs(coord, tmp_path, 600, 1000)
    n1000, b1000 = _job_bytes(coord)
    assert coord.r.llen(keys.epoch_metrics(coord.job)) == MAX_EPOCH_RECORDS
    per_epoch = [k for k in coord.metrics() if k.rsplit("_e", 1)[-1].isdigit()]
    assert len(per_epoch) <= len(PER_EPOCH) * (EPOCH_COUNTER_WINDOW + 16 + 1), len(per_epoch)
    assert n1000 == n600 and b1000 < 1.05 * b600, (b600, b1000)          # 400 more epochs: no growth
    assert b1000 < 800_000, b1000                                        # ~512 records of ~900 bytes

    # the readers: counts and the newest/best records in O(1), indexes of the whole history
    assert coord.epochs_count() == 1000 and coord.epochs_dropped() == 1000 - MAX_EPOCH_RECORDS
    assert coord.last_epoch().epoch == 999 and coord.best_epoch().epoch == 993
    assert [r.epoch for r in coord.epochs(995)] == [995, 996, 997, 998, 999]
    first, recs = coord.epochs_from(10)                                   # a poller that fell behind
    assert first == 1000 - MAX_EPOCH_RECORDS and recs[0].epoch == first
    # the report: every record, every epoch's counters (the late flushes added to their epochs)
    eps = job_epochs(coord, tmp_path)
    assert [e["epoch"] if isinstance(e, dict) else e.epoch for e in eps] == list(range(1000))
    m = job_metrics(coord, tmp_path)
    w, d = wire_summary(m), disk_summary(m)
    late = {e - 150 for e in range(201, 1000) if e % 23 == 0}
    assert w["wire_bytes_per_epoch"] == [10.0 + e + (e in late) for e in range(1000)]
    assert w["halo_bytes_per_epoch"] == [10.0 + e for e in range(1000)]
    assert d["major_faults_per_epoch"] == [10 + e for e in range(1000)]
    assert len(d["row_cache_hit_rate_per_epoch"]) == 1000
    assert m["trainer_batches"] == 9000.0
    # without the run dir's files: the records Redis kept, and moved counters read as unknown, not 0
    assert len(job_epochs(coord, None)) == MAX_EPOCH_RECORDS
    wn = wire_summary(job_metrics(coord, None))["wire_bytes_per_epoch"]
    assert len(wn) == 1000 and wn[0] is None and wn[-1] == 1009.0


def test_a_resumed_trainer_republishes_only_the_newest_records(coord):
    coord.max_epoch_records = 50
    coord.reset_epochs([_record(e) for e in range(300)])
    assert coord.r.llen(keys.epoch_metrics(coord.job)) == 50 and coord.epochs_count() == 300
    assert coord.epochs(0)[0].epoch == 250 and coord.best_epoch().epoch == 293
    coord.append_epochs([_record(300), _record(301)])
    assert coord.epochs_count() == 302 and coord.epochs(300)[0].epoch == 300
    coord.reset_epochs([_record(e) for e in range(10)])                  # resumed from an earlier checkpoint
    assert coord.epochs_count() == 10 and coord.epochs_dropped() == 0 and coord.best_epoch().epoch == 3
