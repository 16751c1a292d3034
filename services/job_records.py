"""What a job's report reads back at its end: every epoch record and every counter, from Redis and
the run dir, and the best epoch of a job stopped early.

Why this module exists: Redis keeps a bounded window (the newest epoch records, the recent
per-epoch counters); the rest lives in the run dir's history files, and these functions put the
two back together for ``train`` and ``submit --wait`` alike.
"""
from __future__ import annotations

import logging
from pathlib import Path

from argosy.shared import rundir
from argosy.shared.records import best_so_far

__all__ = ["job_epochs", "job_metrics", "keep_best"]

logger = logging.getLogger("argosy")


def job_epochs(coord, run_dir: Path | None) -> list:
    """Every epoch record of the job, for its report: Redis keeps only the newest
    (:data:`~argosy.shared.coord.MAX_EPOCH_RECORDS`), the older ones come from the run dir's
    :data:`~argosy.shared.rundir.HISTORY_FILE`.  When that file is not here (``submit``: the trainer
    writes it on another volume) the report has the records Redis kept, and says so in a warning."""
    first, kept = coord.epochs_from(0)
    if first == 0:
        return kept
    older = rundir.read_history(run_dir, first)
    if len(older) == first:
        return older + kept
    logger.warning("the report holds epochs %d on only: Redis keeps the newest %d records and %s has %d of "
                   "the %d before them", first, len(kept), rundir.HISTORY_FILE, len(older), first)
    return kept


def job_metrics(coord, run_dir: Path | None) -> dict[str, float]:
    """The job's metrics hash with the per-epoch counters trainer rank 0 moved to the run dir put back
    (:data:`~argosy.shared.rundir.EPOCH_COUNTERS_FILE`); without that file, epochs whose counters
    left Redis read as unknown (``per_epoch_values``), never as 0."""
    from argosy.shared.coord import EPOCH_COUNTERS_MOVED
    metrics = coord.metrics()
    moved = rundir.read_epoch_counters(run_dir) if metrics.get(EPOCH_COUNTERS_MOVED) else None
    if moved is not None:
        for k, v in moved.items():
            metrics[k] = metrics.get(k, 0.0) + v
        metrics.pop(EPOCH_COUNTERS_MOVED)
    return metrics


def keep_best(result: dict, epochs, run_dir: Path, best_record=None) -> dict:
    """A job stopped before it finished (``argosy down``, Ctrl-C, a failure) still reports the best
    accuracy so far: the best-validation epoch's figures, whose weights are in ``best.pt``.
    ``best_record``: Redis's copy of the best record (``Coordinator.best_epoch``), for when ``epochs``
    holds only the newest records."""
    if result.get("test_accuracy") is not None:
        return result
    best = best_so_far(epochs) or (best_so_far([best_record]) if best_record is not None else {})
    if not best:
        return result
    out = {**best, **{k: v for k, v in result.items() if v is not None}}
    if rundir.best_path(run_dir).exists():
        out.setdefault("best_checkpoint", str(rundir.best_path(run_dir)))
    return out
