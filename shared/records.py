"""Records and enums that cross process boundaries through Redis, declared once.

A record is written by one role and read by others (the launcher, ``argosy status``, the
autoscaler, the report).  Each has ``to_dict``/``from_dict`` so the JSON on the wire is the
dataclass's fields and nothing else reads it by key.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

__all__ = ["JobState", "Role", "FINAL_STATES", "STOP_STATES", "EpochRecord", "best_so_far", "ServiceInfo", "JobResult"]


class JobState(StrEnum):
    """The job's state in Redis (``keys.state``).

    ``starting``: spec written, trainers not yet running; ``running``: trainer rank 0 started
    the first epoch; ``stopping``: the launcher asked every role to drain (Ctrl-C, SIGTERM,
    ``argosy down``); ``done``/``failed``: set once by trainer rank 0 or the launcher.
    """
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    DONE = "done"
    FAILED = "failed"


FINAL_STATES = frozenset({JobState.DONE, JobState.FAILED})
"""States after which nothing of the job runs any more."""
STOP_STATES = frozenset({JobState.STOPPING, JobState.DONE, JobState.FAILED})
"""States in which samplers, loaders and the autoscaler stop taking new work and exit."""


class Role(StrEnum):
    """The processes of a job; ``python -m argosy.services.<value>`` starts one."""
    TRAINER = "trainer"
    LOADER = "loader"
    SAMPLER = "sampler"


def _split(cls, d: dict) -> tuple[dict, dict]:
    names = {f.name for f in fields(cls)} - {"extra"}
    return {k: v for k, v in d.items() if k in names}, {k: v for k, v in d.items() if k not in names}


@dataclass
class EpochRecord:
    """One epoch as trainer rank 0 appends it to ``keys.epoch_metrics`` (all ranks reduced).

    Fields a role adds that are not declared here travel in ``extra`` and come back out of
    :meth:`to_dict` unchanged.
    """
    epoch: int
    train_loss: float = 0.0
    train_accuracy: float = 0.0
    val_loss: float | None = None
    val_accuracy: float | None = None
    test_loss: float | None = None
    test_accuracy: float | None = None
    epoch_seconds: float = 0.0
    val_seconds: float = 0.0
    test_seconds: float = 0.0
    batches: int = 0
    batches_per_second: float = 0.0
    sampled_edges: int = 0
    sampled_edges_per_second: float = 0.0
    seeds_planned: int = 0
    seeds_trained: int = 0
    seeds_dropped: int = 0
    duplicates: int = 0
    duplicate_arrivals: int = 0
    remote_fraction: float = 0.0
    halo_fraction: float = 0.0
    trainer_idle_fraction: float = 0.0
    """Idle seconds / (train-phase seconds x trainers): the compute thread waiting for input, only."""
    idle_seconds: float = 0.0
    """Train phase, summed over trainers: compute threads waiting for a batch."""
    ingest_seconds: float = 0.0
    """Train phase: ingest threads receiving, decoding, validating, claiming batches."""
    copy_seconds: float = 0.0
    """Train phase: ingest threads staging batches on the device (pinned + host-to-device copy, device check)."""
    compute_seconds: float = 0.0
    """Train phase: compute threads in forward/backward/step."""
    cache_hit_rate: float = 0.0
    """Train phase: feature rows served from the trainers' feature caches / rows the batches needed."""
    bytes_per_batch: float = 0.0
    """Train phase: bytes received by the trainers per applied batch (every frame of the message)."""
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict) -> "EpochRecord":
        known, extra = _split(cls, d)
        if "epoch" not in known:
            raise ValueError(f"an epoch record needs 'epoch' (got keys {sorted(d)})")
        return cls(**known, extra={**d.get("extra", {}), **{k: v for k, v in extra.items() if k != "extra"}})

    def to_dict(self) -> dict:
        d = asdict(self)
        return {**{k: v for k, v in d.items() if k != "extra"}, **self.extra}


def best_so_far(epochs) -> dict:
    """The best-validation epoch among ``epochs`` (records or dicts) as the trainer chose it: the
    last epoch whose test accuracy was evaluated (the trainer evaluates test only when validation
    improved, and then writes ``best.pt``).  ``{}`` when no epoch has been validated yet.

    Returns ``{"best_epoch", "val_accuracy", "test_accuracy", "val_loss"}``: what ``argosy status``
    shows and what a report keeps when the job was stopped before it finished."""
    for e in reversed(list(epochs)):
        d = e.to_dict() if isinstance(e, EpochRecord) else e
        if d.get("test_accuracy") is not None:
            return {"best_epoch": d["epoch"], "val_accuracy": d.get("val_accuracy"),
                    "test_accuracy": d["test_accuracy"], "val_loss": d.get("val_loss")}
    return {}


@dataclass
class ServiceInfo:
    """A registered service as ``coord.services`` sees it (``keys.service``, refreshed by heartbeats).

    ``alive`` is False for a member whose heartbeat key expired (only the id is then known);
    role-specific fields (``endpoint``, ``held``, ``rank``, ``metrics``, ...) are in ``extra``.
    """
    role: str
    id: str
    alive: bool = True
    host: str | None = None
    pid: int | None = None
    started: float | None = None
    heartbeat: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict) -> "ServiceInfo":
        known, extra = _split(cls, d)
        return cls(**known, extra=extra)

    def heartbeat_age(self, now: float) -> float | None:
        return None if self.heartbeat is None else now - self.heartbeat


@dataclass
class JobResult:
    """The job's result (``keys.result``): written by trainer rank 0 when it ends, completed by the
    launcher (``wall_seconds``, ``restarts``, ``report``); ``error`` is set when the job failed or
    was interrupted.  Other summary figures travel in ``extra``."""
    error: str | None = None
    epochs: int | None = None
    test_accuracy: float | None = None
    val_accuracy: float | None = None
    best_epoch: int | None = None
    wall_seconds: float | None = None
    restarts: int = 0
    trainer_restarts: int = 0
    report: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict | None) -> "JobResult":
        known, extra = _split(cls, d or {})
        return cls(**known, extra=extra)

    def to_dict(self) -> dict:
        """Flat JSON (the ``--json`` line, report.json): declared fields that are set, then ``extra``."""
        d = {k: v for k, v in asdict(self).items() if k != "extra" and v is not None}
        return {**self.extra, **d}
