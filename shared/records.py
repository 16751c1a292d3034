"""Records and enums that cross process boundaries through Redis, declared once.

A record is written by one role and read by others (the launcher, ``argosy status``, the
autoscaler, the report).  Each has ``to_dict``/``from_dict`` so the JSON on the wire is the
dataclass's fields and nothing else reads it by key.
"""
from __future__ import annotations

from enum import Enum

__all__ = ["JobState", "Role", "FINAL_STATES", "STOP_STATES"]


class JobState(str, Enum):
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

    def __str__(self) -> str:
        return self.value


FINAL_STATES = frozenset({JobState.DONE, JobState.FAILED})
"""States after which nothing of the job runs any more."""
STOP_STATES = frozenset({JobState.STOPPING, JobState.DONE, JobState.FAILED})
"""States in which samplers, loaders and the autoscaler stop taking new work and exit."""


class Role(str, Enum):
    """The processes of a job; ``python -m argosy.services.<value>`` starts one."""
    TRAINER = "trainer"
    LOADER = "loader"
    SAMPLER = "sampler"

    def __str__(self) -> str:
        return self.value
