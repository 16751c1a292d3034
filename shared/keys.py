"""Every Redis key and stream name, as a function of the job.  Nothing else spells a key.

All keys live under ``argosy:{job}:`` so one Redis can host several jobs and ``down`` can
delete a job by prefix.
"""
from __future__ import annotations

__all__ = ["prefix", "spec", "state", "result", "service", "members", "work_stream", "WORK_GROUP",
           "applied", "metrics", "epoch_metrics", "phase", "dist", "autoscale", "AUTOSCALE_RECORDS", "exits",
           "events", "batch_age"]

WORK_GROUP = "samplers"
"""Consumer group every sampler reads work streams through."""


def prefix(job: str) -> str:
    return f"argosy:{job}:"


def spec(job: str) -> str:
    """JSON job spec (config of every role)."""
    return f"argosy:{job}:spec"


def state(job: str) -> str:
    """A :class:`~argosy.shared.records.JobState` value."""
    return f"argosy:{job}:state"


def result(job: str) -> str:
    """Final result JSON written by trainer rank 0."""
    return f"argosy:{job}:result"


def service(job: str, role: str, service_id: str) -> str:
    """Hash describing a live service; expires unless heartbeats refresh it."""
    return f"argosy:{job}:svc:{role}:{service_id}"


def members(job: str, role: str) -> str:
    """Set of service ids that ever registered for ``role`` (liveness = the service key exists)."""
    return f"argosy:{job}:members:{role}"


def work_stream(job: str, part: int) -> str:
    """Stream of work items (seed batches) for one partition."""
    return f"argosy:{job}:work:{part}"


def batch_age(job: str, rank: int) -> str:
    """Seconds from claim to apply of trainer ``rank``'s recent batches (a float, with a TTL): what
    samplers size their re-claim deadline by (:meth:`~argosy.shared.coord.Coordinator.reclaim_deadline`)."""
    return f"argosy:{job}:batch_age:{rank}"


def applied(job: str, epoch: int, phase: str) -> str:
    """Set of batch ids already applied by a trainer in this epoch/phase (idempotency)."""
    return f"argosy:{job}:applied:{epoch}:{phase}"


def metrics(job: str) -> str:
    """Hash of job-wide counters (batches, seeds, edges, bytes, seconds)."""
    return f"argosy:{job}:metrics"


def epoch_metrics(job: str) -> str:
    """List of per-epoch JSON records appended by trainer rank 0."""
    return f"argosy:{job}:epochs"


def phase(job: str) -> str:
    """JSON of the phase being worked on: epoch, phase, planned batches."""
    return f"argosy:{job}:phase"


def dist(job: str) -> str:
    """torch.distributed rendezvous URL published by trainer rank 0."""
    return f"argosy:{job}:dist"


def exits(job: str) -> str:
    """List of JSON records of service processes that exited with an error (role, id, code,
    message), oldest first: how ``submit --wait`` learns of failures in containers it cannot see."""
    return f"argosy:{job}:exits"


def events(job: str) -> str:
    """List of JSON fleet events, oldest first: services that joined, left (drained), were lost
    (heartbeat gone without leaving: killed) and batches re-claimed; see ``shared/fleet.py``."""
    return f"argosy:{job}:events"


AUTOSCALE_RECORDS = ("decisions", "replicas", "observation")


def autoscale(job: str, what: str) -> str:
    """Autoscaler records: ``decisions`` (list of JSON decisions, oldest first), ``replicas`` (hash
    role -> count last asked for), ``observation`` (JSON of the last observation)."""
    if what not in AUTOSCALE_RECORDS:
        raise ValueError(f"unknown autoscale key {what!r} (expected one of {', '.join(AUTOSCALE_RECORDS)})")
    return f"argosy:{job}:autoscale:{what}"
