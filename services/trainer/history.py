"""The trainer's epoch history: a count, the newest records and running sums, not every record.

Every record of the run is in the run dir (:data:`~argosy.shared.rundir.HISTORY_FILE`, one JSON line
each, appended by rank 0) and Redis keeps the newest :data:`~argosy.shared.coord.MAX_EPOCH_RECORDS`.
The trainer itself needs only what its summary (the job's result) is computed from; keeping every
record as a dict (~3 KB each) made its memory grow with the epochs for as long as the job ran.
"""
from __future__ import annotations

from collections import deque

from argosy.shared.coord import MAX_EPOCH_RECORDS

__all__ = ["EpochHistory"]

TOTALS = ("epoch_seconds", "batches", "sampled_edges", "seeds_planned", "seeds_trained", "duplicates",
          "duplicate_arrivals", "seeds_dropped")
"""Fields every record has, summed over the run."""
SECONDS = ("idle_seconds", "compute_seconds", "ingest_seconds", "copy_seconds")
"""Train-phase seconds (0 where a record lacks them), summed over the run."""
COUNTS = ("out_of_order_batches",)
"""Train-phase counts (0 where a record lacks them: records of older runs resumed from), summed."""


class EpochHistory:
    """``append`` each epoch's record; ``len``, ``last``, ``newest`` (up to ``keep`` records) and the
    sums :meth:`summary` needs.  Sums run in record order from 0, as ``sum()`` over the list did, so
    the figures are the same to the last bit."""

    def __init__(self, keep: int = MAX_EPOCH_RECORDS):
        self.n = 0
        self.newest: deque[dict] = deque(maxlen=keep)
        self.tot = dict.fromkeys(TOTALS + SECONDS + COUNTS, 0)
        self.weighted = dict.fromkeys(("idle", "cache_hit_rate", "bytes_per_batch", "remote_fraction"), 0)
        self.final_test_accuracy = None
        self.best: dict | None = None
        """The newest record with a test accuracy (the best-validation epoch)."""

    def append(self, rec: dict) -> None:
        self.n += 1
        self.newest.append(rec)
        for k in TOTALS:
            self.tot[k] += rec[k]
        for k in SECONDS:
            self.tot[k] += rec.get(k, 0.0)
        for k in COUNTS:
            self.tot[k] += rec.get(k, 0)
        w = self.weighted
        w["idle"] += rec["trainer_idle_fraction"] * rec["epoch_seconds"]
        w["cache_hit_rate"] += rec.get("cache_hit_rate", 0.0) * rec["batches"]
        w["bytes_per_batch"] += rec.get("bytes_per_batch", 0.0) * rec["batches"]
        w["remote_fraction"] += rec["remote_fraction"] * rec["sampled_edges"]
        if rec.get("test_accuracy") is not None:
            self.final_test_accuracy, self.best = rec["test_accuracy"], rec

    def __len__(self) -> int:
        return self.n

    @property
    def last(self) -> dict:
        return self.newest[-1]

    def summary(self) -> dict:
        """The run's figures over every epoch (what ``TrainerProc._summary`` reports)."""
        t, w = self.tot, self.weighted
        secs = t["epoch_seconds"]
        return {"epochs": self.n, "final_test_accuracy": self.final_test_accuracy,
                "final_val_accuracy": self.last["val_accuracy"],
                "epoch_seconds": secs / self.n, "batches_per_second": t["batches"] / max(secs, 1e-9),
                "sampled_edges_per_second": t["sampled_edges"] / max(secs, 1e-9),
                "trainer_idle_fraction": w["idle"] / max(secs, 1e-9),
                **{k: t[k] for k in SECONDS},
                "cache_hit_rate": w["cache_hit_rate"] / max(t["batches"], 1),
                "bytes_per_batch": w["bytes_per_batch"] / max(t["batches"], 1),
                "remote_fraction": w["remote_fraction"] / max(t["sampled_edges"], 1),
                **{k: t[k] for k in ("seeds_planned", "seeds_trained", "duplicates", "duplicate_arrivals",
                                     "seeds_dropped", *COUNTS)}}
