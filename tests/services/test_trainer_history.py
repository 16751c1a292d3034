"""The trainer's epoch history keeps a count, the newest records and running sums, not every record,
and its summary is the one computed over every record (to the last bit)."""
import random

from argosy.services.trainer.history import EpochHistory


def _rec(rng: random.Random, e: int) -> dict:
    r = {"epoch": e, "epoch_seconds": rng.uniform(0.05, 2), "batches": rng.randint(1, 50),
         "sampled_edges": rng.randint(0, 10**6), "seeds_planned": 140, "seeds_trained": 140, "duplicates": 0,
         "duplicate_arrivals": rng.randint(0, 3), "seeds_dropped": 0, "trainer_idle_fraction": rng.random(),
         "remote_fraction": rng.random(), "val_accuracy": rng.random(),
         "test_accuracy": rng.random() if rng.random() < 0.1 else None}
    for k in ("idle_seconds", "compute_seconds", "ingest_seconds", "copy_seconds", "cache_hit_rate", "bytes_per_batch"):
        if rng.random() < 0.9:
            r[k] = rng.uniform(0, 1e3)
    if rng.random() < 0.9:                       # absent from records of older runs
        r["out_of_order_batches"] = rng.randint(0, 4)
    return r


def _summary_over_the_list(ep: list[dict]) -> dict:
    """The trainer's summary as it was computed over the whole list of records."""
    tot = lambda k: sum(e[k] for e in ep)  # noqa: E731
    secs = tot("epoch_seconds")
    return {"epochs": len(ep),
            "final_test_accuracy": next((e["test_accuracy"] for e in reversed(ep) if e["test_accuracy"] is not None), None),
            "final_val_accuracy": ep[-1]["val_accuracy"],
            "epoch_seconds": secs / len(ep), "batches_per_second": tot("batches") / max(secs, 1e-9),
            "sampled_edges_per_second": tot("sampled_edges") / max(secs, 1e-9),
            "trainer_idle_fraction": sum(e["trainer_idle_fraction"] * e["epoch_seconds"] for e in ep) / max(secs, 1e-9),
            **{k: sum(e.get(k, 0.0) for e in ep) for k in ("idle_seconds", "compute_seconds", "ingest_seconds", "copy_seconds")},
            "cache_hit_rate": sum(e.get("cache_hit_rate", 0.0) * e["batches"] for e in ep) / max(tot("batches"), 1),
            "bytes_per_batch": sum(e.get("bytes_per_batch", 0.0) * e["batches"] for e in ep) / max(tot("batches"), 1),
            "remote_fraction": sum(e["remote_fraction"] * e["sampled_edges"] for e in ep) / max(tot("sampled_edges"), 1),
            "seeds_planned": tot("seeds_planned"), "seeds_trained": tot("seeds_trained"),
            "duplicates": tot("duplicates"), "duplicate_arrivals": tot("duplicate_arrivals"),
            "seeds_dropped": tot("seeds_dropped"), "out_of_order_batches": sum(e.get("out_of_order_batches", 0) for e in ep)}


def test_summary_equals_the_one_over_every_record_and_memory_is_bounded():
    rng = random.Random(5)
    h, every = EpochHistory(keep=64), []
    for e in range(3000):
        r = _rec(rng, e)
        h.append(r)
        every.append(r)
        if e in (0, 1, 63, 64, 2999):
            assert h.summary() == _summary_over_the_list(every)
    assert len(h) == 3000 and len(h.newest) == 64 and h.last is every[-1]
    assert list(h.newest) == every[-64:]
    assert h.best is next(r for r in reversed(every) if r["test_accuracy"] is not None)


def test_a_resumed_trainer_republishes_its_newest_records_with_the_whole_count(coord):
    rng = random.Random(1)
    h = EpochHistory(keep=coord.max_epoch_records)
    for e in range(700):
        h.append(_rec(rng, e))
    coord.reset_epochs(list(h.newest), total=len(h), best=h.best)
    assert coord.epochs_count() == 700 and coord.epochs_dropped() == 700 - coord.max_epoch_records
    assert coord.epochs(699)[0].epoch == 699 and coord.best_epoch().epoch == h.best["epoch"]
