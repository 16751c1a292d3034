"""The job driver's restart policy (``services.restart_policy.decide``) replayed on recorded histories.

Each history is a list of observations as the launcher saw them; the test feeds them one by one
with the exits seen before, the way ``JobDriver.step`` does, and checks every decision.
"""
from __future__ import annotations

import pytest

from argosy.services.restart_policy import Decision, Exit, Observation, Phase, RestartPolicy, decide
from argosy.shared.lifecycle import EXIT_CANNOT_START
from argosy.shared.records import JobState

S, R, D, F = JobState.STARTING, JobState.RUNNING, JobState.DONE, JobState.FAILED


def replay(observations: list[Observation], policy: RestartPolicy = RestartPolicy(),
           orchestrated: bool = False) -> list[Decision]:
    history, trainer_restarts, out = [], 0, []
    for obs in observations:
        d = decide(obs, history, trainer_restarts, policy, orchestrated=orchestrated)
        history += obs.exits
        trainer_restarts += d.restart_trainers
        out.append(d)
        if d.phase in (Phase.DONE, Phase.FAILED):
            break
    return out


def test_quiet_job_goes_starting_running_done():
    ds = replay([Observation(0, S), Observation(1, R), Observation(2, R), Observation(3, D)])
    assert [d.phase for d in ds] == [Phase.STARTING, Phase.RUNNING, Phase.RUNNING, Phase.DONE]
    assert not any(d.restart or d.restart_trainers for d in ds)


def test_killed_loader_is_replaced_once():
    ds = replay([Observation(0, R), Observation(1, R, (Exit("loader-1", -9, 1.0),)), Observation(2, R),
                 Observation(9, D)])
    assert ds[1] == Decision(Phase.RESTARTING, restart=("loader-1",), reason="replacing loader-1")
    assert [d.phase for d in ds] == [Phase.RUNNING, Phase.RESTARTING, Phase.RUNNING, Phase.DONE]


def test_loader_that_cannot_open_the_store_fails_the_job_fast():
    """Recorded: a store without features made the loader exit every ~0.6 s (264 restarts in 150 s)."""
    line = "ValueError: store has no features"
    obs = [Observation(0.0, S)] + [Observation(0.6 * i, S, (Exit(f"loader-r{i}", 1, 0.6 * i, line),))
                                   for i in range(1, 264)]
    ds = replay(obs)
    assert [d.phase for d in ds[1:5]] == [Phase.RESTARTING] * 4
    assert ds[-1].phase == Phase.FAILED and len(ds) == 6
    assert "loader keeps exiting (5 times in 60 s)" in ds[-1].reason and line in ds[-1].reason


def test_exit_code_cannot_start_fails_at_once_with_the_logged_reason():
    ds = replay([Observation(0, S), Observation(1, S, (Exit("sampler-0", EXIT_CANNOT_START, 1, "bad fanouts"),))])
    assert ds[-1] == Decision(Phase.FAILED, reason="sampler-0 cannot start: bad fanouts")


def test_crashes_spread_over_time_are_restarted_forever():
    obs = [Observation(100.0 * i, R, (Exit(f"sampler-r{i}", 1, 100.0 * i),)) for i in range(1, 30)]
    ds = replay(obs)
    assert len(ds) == 29 and all(d.phase == Phase.RESTARTING for d in ds)


def test_scaled_away_replicas_are_not_restarted():
    ds = replay([Observation(1, R, (Exit("sampler-1", -15, 1, wanted=False),))])
    assert ds == [Decision(Phase.RUNNING)]


def test_replicas_that_drained_after_a_trainer_failure_come_back():
    """Recorded: rank 0 set ``failed``; the sampler and loader saw it and exited with 0 while the
    trainers restarted, and the restarted trainer starved."""
    ds = replay([Observation(1, F, error="PeerDeadError: no batch for 6 s"),
                 Observation(2, S, (Exit("sampler-0", 0, 2), Exit("loader-0", 0, 2))),
                 *[Observation(3 + i, S, (Exit(f"sampler-r{i}", 0, 3 + i),)) for i in range(8)]])
    assert ds[0].restart_trainers and ds[1].restart == ("sampler-0", "loader-0")
    assert all(d.phase == Phase.RESTARTING for d in ds[2:])    # clean exits never count as a crash loop


def test_trainer_death_restarts_the_world_until_the_limit():
    """Recorded: a trainer OOM-killed on every attempt."""
    policy = RestartPolicy(max_trainer_restarts=3)
    obs = [Observation(i, R, (Exit("trainer-0", -9, i, "Killed"),)) for i in range(1, 6)]
    ds = replay(obs, policy)
    assert [d.restart_trainers for d in ds] == [True, True, True, False]
    assert ds[-1].phase == Phase.FAILED and "after 3 restarts" in ds[-1].reason and "Killed" in ds[-1].reason


def test_failed_state_uses_the_trainers_error_and_restarts():
    ds = replay([Observation(1, F, error="RuntimeError: peer timeout"), Observation(2, S), Observation(3, R)])
    assert ds[0] == Decision(Phase.RESTARTING, restart_trainers=True, reason="RuntimeError: peer timeout")
    assert ds[2].phase == Phase.RUNNING


def test_trainer_exit_wins_over_replica_restarts():
    d = decide(Observation(1, R, (Exit("loader-0", 1, 1), Exit("trainer-1", 1, 1, "boom"))), [], 0)
    assert d.restart_trainers and d.restart == () and "trainer-1 exited with code 1: boom" == d.reason


@pytest.mark.parametrize("state", [None, "bogus"])
def test_unknown_state_is_starting(state):
    from argosy.services.driver import _state
    assert decide(Observation(0, _state(state)), [], 0).phase == Phase.STARTING


def replay_orchestrated(observations: list[Observation]) -> list[Decision]:
    return replay(observations, orchestrated=True)


def test_orchestrated_trainer_crash_is_left_to_the_orchestrator():
    """Under compose/Kubernetes a crashed trainer pod is restarted by the orchestrator and resumes from
    its checkpoint: one crash neither fails the job nor asks the driver to restart anything itself."""
    ds = replay_orchestrated([Observation(0, R), Observation(1, R, (Exit("trainer-abc", 1, 1.0, "OOM"),)),
                              Observation(2, R), Observation(3, D)])
    assert [d.phase for d in ds] == [Phase.RUNNING, Phase.RESTARTING, Phase.RUNNING, Phase.DONE]
    assert not any(d.restart_trainers for d in ds)


def test_orchestrated_trainer_that_keeps_crashing_fails_the_job():
    obs = [Observation(float(t), R, (Exit("trainer-abc", 1, float(t), "RuntimeError: boom"),)) for t in range(5)]
    ds = replay_orchestrated(obs)
    assert ds[-1].phase == Phase.FAILED and "trainer keeps exiting (5 times" in ds[-1].reason
    assert "RuntimeError: boom" in ds[-1].reason


def test_orchestrated_cannot_start_fails_at_once():
    ds = replay_orchestrated([Observation(0, S, (Exit("trainer-abc", EXIT_CANNOT_START, 0.0,
                                                      "ValueError: --model m:f: cannot import m"),))])
    assert ds == [Decision(Phase.FAILED, reason="trainer-abc cannot start: ValueError: --model m:f: cannot import m")]
