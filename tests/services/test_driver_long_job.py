"""A long job's driver keeps bounded state: found preparing the soak (docs/reliability.md).

The metrics hash gains ~3 counters per epoch (``wire_bytes_e{E}`` ...) and the driver samples it
every poll; before, every sample kept all of them and every poll re-read every epoch record.
"""
from __future__ import annotations

from argosy.services import driver as drv
from argosy.services.driver import JobDriver
from argosy.shared.coord import Coordinator
from argosy.shared.records import EpochRecord


def test_timeline_drops_per_epoch_counters_and_stays_bounded(redis_url, monkeypatch):
    coord = Coordinator(redis_url, "long-job-timeline")
    coord.delete_job()
    coord.incr(trainer_batches=5.0, **{f"wire_bytes_e{e}": 1.0 for e in range(500)})
    monkeypatch.setattr(drv, "TIMELINE_MAX", 64)
    d = JobDriver(coord, 1)
    for _ in range(300):
        d._record()
    assert len(d.timeline) <= 64
    assert all(set(s) == {"t", "trainer_batches"} for s in d.timeline)
    ts = [s["t"] for s in d.timeline]
    assert ts == sorted(ts)


def test_epochs_from_an_index_reads_only_the_new_records(redis_url):
    coord = Coordinator(redis_url, "long-job-epochs")
    coord.delete_job()
    for e in range(7):
        coord.append_epoch(EpochRecord(epoch=e))
    assert [r.epoch for r in coord.epochs()] == list(range(7))
    assert [r.epoch for r in coord.epochs(5)] == [5, 6]
    assert coord.epochs(7) == []
