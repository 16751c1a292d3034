"""What the launcher does when a job's processes exit: the phases of a job and the pure rule
:func:`decide` (restart a replica, restart the trainers from their checkpoint, or end the job).

Why this module exists: the rule is pure (same observation and history, same decision), so
recorded histories are replayed in tests without processes; :class:`~.driver.JobDriver` observes
the job and carries the decisions out.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Sequence

from argosy.shared.lifecycle import EXIT_CANNOT_START
from argosy.shared.records import JobState

__all__ = ["Phase", "Exit", "Observation", "Decision", "RestartPolicy", "decide"]


class Phase(StrEnum):
    PARTITIONING = "partitioning"
    STARTING = "starting"
    RUNNING = "running"
    RESTARTING = "restarting"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True)
class Exit:
    """A child process that exited: ``sid`` like ``loader-0``; ``wanted`` False if it was scaled away."""
    sid: str
    code: int
    t: float
    last_line: str = ""
    wanted: bool = True

    @property
    def role(self) -> str:
        return self.sid.split("-")[0]


@dataclass(frozen=True)
class Observation:
    """What one step of the driver sees."""
    t: float
    state: JobState | None
    exits: tuple[Exit, ...] = ()
    error: str | None = None          # the job's result error when ``state`` is failed
    terminal: bool = False            # that failure was recorded as one no restart can help (exit 78)


@dataclass(frozen=True)
class RestartPolicy:
    """``max_trainer_restarts``: DDP world restarts from the checkpoint before the job fails.
    ``crash_loop``: failed exits of one replica role within ``crash_window`` seconds that end the job
    (a role that cannot start fails fast instead of being restarted forever)."""
    max_trainer_restarts: int = 3
    crash_loop: int = 5
    crash_window: float = 60.0


@dataclass(frozen=True)
class Decision:
    phase: Phase
    restart_trainers: bool = False
    restart: tuple[str, ...] = ()       # replica ids to replace
    reason: str = ""


def decide(obs: Observation, history: Sequence[Exit], trainer_restarts: int,
           policy: RestartPolicy = RestartPolicy(), orchestrated: bool = False) -> Decision:
    """The next phase and the restarts to do, from this observation and the exits seen before.

    ``orchestrated``: the processes run under compose or Kubernetes, which restart them itself; a
    trainer that crashes is then counted like a replica (the job fails when it keeps crashing)
    instead of restarted here, and an exit that cannot succeed on restart still fails the job at once.

    Pure: the same inputs give the same decision, so recorded histories are replayed in tests.
    """
    if obs.state == JobState.DONE:
        return Decision(Phase.DONE)
    for e in obs.exits:
        if e.code == EXIT_CANNOT_START:
            return Decision(Phase.FAILED, reason=f"{e.sid} cannot start: {e.last_line or 'see its log'}")
    if obs.state == JobState.FAILED and obs.terminal:
        return Decision(Phase.FAILED, reason=obs.error or "failed")
    trainer = None if orchestrated else next((e for e in obs.exits if e.role == "trainer"), None)
    if obs.state == JobState.FAILED or trainer is not None:
        why = (obs.error or "trainer reported failure") if obs.state == JobState.FAILED else \
            f"{trainer.sid} exited with code {trainer.code}" + (f": {trainer.last_line}" if trainer.last_line else "")
        if trainer_restarts >= policy.max_trainer_restarts:
            return Decision(Phase.FAILED, reason=f"{why} (after {trainer_restarts} restarts from the checkpoint)")
        return Decision(Phase.RESTARTING, restart_trainers=True, reason=why)
    restart = []
    for e in obs.exits:
        if not e.wanted:
            continue
        # code 0: the replica drained on its own (it saw the job fail before the trainers restarted)
        recent = [h for h in (*history, *obs.exits) if h.role == e.role and h.code != 0 and h.wanted
                  and obs.t - h.t <= policy.crash_window]
        if e.code != 0 and len(recent) >= policy.crash_loop:
            return Decision(Phase.FAILED, reason=f"{e.role} keeps exiting ({len(recent)} times in "
                                                 f"{policy.crash_window:.0f} s); last: {e.sid} code {e.code}"
                                                 + (f": {e.last_line}" if e.last_line else ""))
        restart.append(e.sid)
    if restart:
        return Decision(Phase.RESTARTING, restart=tuple(restart), reason=f"replacing {', '.join(restart)}")
    return Decision(Phase.RUNNING if obs.state == JobState.RUNNING else Phase.STARTING)
