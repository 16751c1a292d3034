"""The autoscaling policy as pure functions: ``decide(observation, state, cfg) -> Decision``.

No Redis, no processes, no clock: the service builds an :class:`Observation` from Redis once per
tick and applies the :class:`Decision`; tests replay recorded series through :func:`decide`.

The rule, in words:

* **Scale up** when the trainers' idle fraction is above ``idle_target`` for ``up_after``
  consecutive *fresh* measurements (a measurement whose window began after the last change had
  settled).  The tier to grow is the bottleneck: the one with the lower capacity, where a tier's
  capacity is its batches per busy-second times its replicas (``sample_seconds`` /
  ``load_seconds`` give the busy time).  If the trainer is idle a fraction ``i`` of the time it could
  consume ``1 / (1 - i)`` times today's rate, so the tier grows to
  ``ceil(n * headroom / (1 - i))`` replicas, at most ``max_step`` at once.
* **Scale down** when idle is below ``idle_low`` (≈ 0) *and* the pipeline's queues have been full
  (in-flight batches / sum of high-water marks ≥ ``queue_full``) for ``down_after`` seconds: the
  trainer is the bottleneck and the CPU tier is over-provisioned.  Remove one replica from the tier
  with the most slack, only if what is left still covers the trainer's rate with headroom.
* A scale-up is checked by the first fresh measurement after it: if the trainers' rate grew by
  less than ``min_gain`` the trainers (or the machine's cores) are the limit, not the tier, and
  scale-ups pause for ``pause`` seconds instead of adding replicas that only compete for CPU.
* Idle means the trainers' compute threads waiting for input, nothing else (their own receive,
  decode and validation run on an ingest thread, counted apart).  If that ingest thread is busy
  ``ingest_saturated`` of the time, the trainer's input path is the limit and nothing is added.
* Between ``idle_low`` and ``idle_target`` nothing happens (the hysteresis band), and any streak
  is reset, so noise around the target does not flap replicas.
* Nothing changes within ``warmup`` seconds of the first observation or ``cooldown`` seconds of
  the last change; replica counts are kept inside ``[min_replicas, max_replicas]`` (a count outside
  is corrected before anything else once the cooldown has passed).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

__all__ = ["ScalerConfig", "Observation", "ScalerState", "Decision", "decide", "tier_capacity", "bottleneck"]

Action = Literal["add", "remove", "hold"]


@dataclass(frozen=True)
class ScalerConfig:
    """Knobs of the policy (all documented; the CLI exposes the common ones)."""

    min_replicas: int = 1
    """Fewest replicas per scaled role."""
    max_replicas: int = 8
    """Most replicas per scaled role."""
    idle_target: float = 0.10
    """Scale up while the trainers' idle fraction is above this."""
    idle_low: float | None = None
    """Scale down only below this (≈ 0); default ``min(0.02, idle_target / 2)``.  The gap to
    ``idle_target`` is the hysteresis band."""
    cooldown: float = 20.0
    """Seconds after a change during which no other change is made."""
    settle: float = 2.0
    """Seconds after a change before a measurement window counts (replicas start and register)."""
    up_after: int = 1
    """Consecutive fresh measurements above ``idle_target`` needed to scale up."""
    down_after: float = 60.0
    """Seconds of idle below ``idle_low`` with full queues needed to scale down."""
    queue_full: float = 0.8
    """In-flight batches / pipeline capacity at or above which the queues count as full."""
    max_step: int = 2
    """Most replicas added in one decision."""
    headroom: float = 1.1
    """Capacity asked for, relative to what the trainers could consume."""
    roles: tuple[str, ...] = ("sampler", "loader")
    """Roles the autoscaler may scale."""
    warmup: float = 10.0
    """Seconds after the first observation during which nothing changes (services register, rates fill)."""
    min_gain: float = 0.05
    """A scale-up whose first fresh measurement shows the trainers' rate grown by less than this
    fraction did not help (the trainers or the machine are the limit): scale-ups pause."""
    pause: float = 120.0
    """Seconds scale-ups stay paused after one that did not help."""
    ingest_saturated: float = 0.9
    """Trainers' ingest-thread busy fraction at or above which their input path, not the CPU
    tier, is the limit: no scale-up however idle the compute threads are."""

    def __post_init__(self):
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise ValueError(f"need 1 <= min_replicas <= max_replicas (got {self.min_replicas}, {self.max_replicas})")
        if not 0 < self.idle_target < 1:
            raise ValueError(f"idle_target must be in (0, 1) (got {self.idle_target})")
        if self.idle_low is not None and not 0 <= self.idle_low <= self.idle_target:
            raise ValueError(f"idle_low must be in [0, idle_target={self.idle_target}] (got {self.idle_low})")

    @property
    def low(self) -> float:
        return min(0.02, self.idle_target / 2) if self.idle_low is None else self.idle_low


@dataclass(frozen=True)
class Observation:
    """What the service measured at time ``t`` (seconds, any clock shared with the state)."""

    t: float
    trainer_idle: float | None
    """Trainers' idle fraction over the measurement window (None = no measurement yet)."""
    idle_window_start: float | None
    """When that window began; a measurement counts only if it began after the last change settled."""
    trainer_rate: float
    """Batches per second the trainers applied over the window."""
    replicas: dict[str, int]
    """Live replicas per role."""
    rates: dict[str, float] = field(default_factory=dict)
    """Batches per second each tier delivered (``sampler``, ``loader``)."""
    busy: dict[str, float] = field(default_factory=dict)
    """Busy seconds per second each tier spent, summed over its replicas."""
    queue_fill: float = 0.0
    """Batches in flight / sum of the pipeline's high-water marks (≥ 1 means every queue is full)."""
    idle_source: str = "epoch"
    """``live`` (trainer idle counters) or ``epoch`` (last per-epoch record)."""
    job_state: str = "running"
    """The job's state in Redis; nothing changes unless it is ``running``."""
    trainer_ingest_busy: float | None = None
    """Fraction of the window the trainers' ingest threads were busy (receive, decode, validate,
    copy to the device; ``trainer_ingest_seconds + trainer_copy_seconds`` / train seconds).
    Near 1 the trainer's own input path is the limit: more samplers or loaders would not help."""


@dataclass(frozen=True)
class ScalerState:
    """What the policy remembers between ticks (returned, never mutated)."""

    last_change_t: float = -math.inf
    first_t: float | None = None
    up_streak: int = 0
    last_window_start: float | None = None
    full_since: float | None = None
    added: str | None = None
    """Role of the last scale-up whose effect has not been measured yet."""
    rate_before: float = 0.0
    """Trainers' batches/s when that scale-up was decided."""
    paused_until: float = -math.inf
    """No scale-up before this time (the last one did not raise throughput)."""


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str
    state: ScalerState
    role: str | None = None
    delta: int = 0
    replicas: int | None = None
    """Target replica count for ``role`` after the change."""
    t: float = 0.0

    def to_json(self, obs: Observation | None = None) -> dict:
        d = {"t": self.t, "action": self.action, "role": self.role, "delta": self.delta, "replicas": self.replicas,
             "reason": self.reason}
        if obs is not None:
            d.update(trainer_idle=obs.trainer_idle, idle_source=obs.idle_source, observed_replicas=dict(obs.replicas),
                     trainer_ingest_busy=obs.trainer_ingest_busy,
                     trainer_rate=obs.trainer_rate, queue_fill=obs.queue_fill,
                     capacity={r: tier_capacity(obs, r) for r in obs.replicas})
        return d


def tier_capacity(obs: Observation, role: str) -> float | None:
    """Batches/s the tier could deliver if all its replicas were busy (None = unknown)."""
    rate, busy, n = obs.rates.get(role, 0.0), obs.busy.get(role, 0.0), obs.replicas.get(role, 0)
    if rate <= 0 or busy <= 0 or n <= 0:
        return None
    return rate / busy * n


def bottleneck(obs: Observation, roles: tuple[str, ...]) -> tuple[str, str]:
    """(role, why): the scaled tier with the lowest capacity; ``roles[0]`` when nothing is known."""
    caps = {r: tier_capacity(obs, r) for r in roles}
    known = {r: c for r, c in caps.items() if c is not None}
    if not known:
        return roles[0], f"no busy-time figures yet, so the {roles[0]} tier is assumed to be the bottleneck"
    role = min(known, key=known.get)
    others = ", ".join(f"{r} {c:.1f}" for r, c in known.items() if r != role)
    return role, (f"{role} tier is the bottleneck ({role} {known[role]:.1f} batches/s capacity"
                  + (f" vs {others})" if others else ")"))


def _fmt_pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def decide(obs: Observation, state: ScalerState, cfg: ScalerConfig) -> Decision:
    """One tick of the policy; see the module docstring for the rule.

    Args:
        obs: the latest observation.
        state: the state returned by the previous call (``ScalerState()`` at the start).
        cfg: the policy's knobs.

    Returns:
        A :class:`Decision`; apply it if ``action != "hold"`` and keep ``decision.state``.

    Example:
        >>> obs = Observation(t=100.0, trainer_idle=0.4, idle_window_start=90.0, trainer_rate=6.0,
        ...                   replicas={"sampler": 1, "loader": 1}, rates={"sampler": 6, "loader": 6},
        ...                   busy={"sampler": 0.9, "loader": 0.2})
        >>> d = decide(obs, ScalerState(), ScalerConfig(warmup=0))
        >>> d.action, d.role, d.replicas
        ('add', 'sampler', 2)
    """
    t = obs.t
    if state.first_t is None:
        state = replace(state, first_t=t)

    def hold(reason: str, st: ScalerState = state) -> Decision:
        return Decision("hold", reason, st, t=t)

    def change(role: str, new: int, reason: str, measure: bool = False) -> Decision:
        cur = obs.replicas.get(role, 0)
        st = ScalerState(last_change_t=t, first_t=state.first_t, paused_until=state.paused_until,
                         added=role if measure and new > cur else None, rate_before=obs.trainer_rate)
        return Decision("add" if new > cur else "remove", reason, st, role=role, delta=new - cur, replicas=new, t=t)

    # 1. job running, warm-up and cooldown, then bounds
    if obs.job_state != "running":
        return hold(f"job is {obs.job_state or 'not started'}, not running")
    if t - state.first_t < cfg.warmup:
        return hold(f"warming up ({t - state.first_t:.0f} of {cfg.warmup:.0f} s)")
    since = t - state.last_change_t
    if since < cfg.cooldown:
        return hold(f"cooldown: last change {since:.0f} s ago < {cfg.cooldown:.0f} s")
    for role in cfg.roles:
        n = obs.replicas.get(role, 0)
        if n < cfg.min_replicas:
            return change(role, cfg.min_replicas, f"{role} replicas {n} < min {cfg.min_replicas}: "
                                                   f"add {cfg.min_replicas - n} {role}(s)")
        if n > cfg.max_replicas:
            return change(role, cfg.max_replicas, f"{role} replicas {n} > max {cfg.max_replicas}: "
                                                   f"remove {n - cfg.max_replicas} {role}(s)")
    # 2. freshness
    if obs.trainer_idle is None or obs.idle_window_start is None:
        return hold("no trainer idle measurement yet")
    if obs.idle_window_start < state.last_change_t + cfg.settle:
        return hold("waiting for an idle measurement taken after the last change")
    fresh = obs.idle_window_start != state.last_window_start
    idle = obs.trainer_idle
    st = replace(state, last_window_start=obs.idle_window_start)
    if state.added is not None and state.rate_before > 0 and obs.trainer_rate > 0:
        # the first measurement after a scale-up: did it raise the trainers' rate?
        gain = obs.trainer_rate / state.rate_before - 1.0
        st = replace(st, added=None)
        if gain < cfg.min_gain:
            st = replace(st, paused_until=t + cfg.pause)
            return hold(f"adding {state.added}s did not raise throughput ({state.rate_before:.1f} -> "
                        f"{obs.trainer_rate:.1f} batches/s, {100 * gain:+.0f}%): the trainers or the machine are the "
                        f"limit; no scale-up for {cfg.pause:.0f} s", st)

    # 3. scale up (only while batches flow: a pipeline that is still starting, e.g. compiling its
    #    kernels, or stalled, shows 100 % idle that more replicas would not fix)
    if idle > cfg.idle_target and obs.trainer_rate <= 0:
        return hold(f"trainer idle {_fmt_pct(idle)} but no batch applied in the window: pipeline starting or stalled",
                    replace(st, up_streak=0))
    busy = obs.trainer_ingest_busy
    if idle > cfg.idle_target and busy is not None and busy >= cfg.ingest_saturated:
        return hold(f"trainer idle {_fmt_pct(idle)} > {_fmt_pct(cfg.idle_target)}, but the trainers' ingest threads "
                    f"are busy {_fmt_pct(busy)} of the time: their input path is the limit, not the CPU tier",
                    replace(st, up_streak=0))
    if idle > cfg.idle_target and t < state.paused_until:
        return hold(f"trainer idle {_fmt_pct(idle)} > {_fmt_pct(cfg.idle_target)}, but scale-ups are paused for "
                    f"{state.paused_until - t:.0f} s more (the last one did not raise throughput)", st)
    if idle > cfg.idle_target:
        streak = state.up_streak + 1 if fresh else state.up_streak
        st = replace(st, up_streak=streak, full_since=None)
        if streak < cfg.up_after:
            return hold(f"trainer idle {_fmt_pct(idle)} > {_fmt_pct(cfg.idle_target)} "
                        f"({streak}/{cfg.up_after} measurements)", st)
        role, why = bottleneck(obs, cfg.roles)
        n = obs.replicas.get(role, 0)
        if n >= cfg.max_replicas:
            return hold(f"trainer idle {_fmt_pct(idle)} > {_fmt_pct(cfg.idle_target)} and {why}, "
                        f"but {role} is at max {cfg.max_replicas}", st)
        want = math.ceil(n * cfg.headroom / max(1.0 - idle, 0.05) - 1e-9)
        new = min(cfg.max_replicas, n + cfg.max_step, max(n + 1, want))
        return change(role, new, f"trainer idle {_fmt_pct(idle)} > {_fmt_pct(cfg.idle_target)} and {why}: "
                                 f"add {new - n} {role}{'s' if new - n > 1 else ''} ({n} -> {new})", measure=True)

    # 4. hysteresis band
    st = replace(st, up_streak=0)
    if idle >= cfg.low:
        return hold(f"trainer idle {_fmt_pct(idle)} within [{_fmt_pct(cfg.low)}, {_fmt_pct(cfg.idle_target)}]: hold",
                    replace(st, full_since=None))

    # 5. scale down: idle ≈ 0 and queues full for a long time
    if obs.queue_fill < cfg.queue_full:
        return hold(f"trainer idle {_fmt_pct(idle)} below {_fmt_pct(cfg.low)} but queues "
                    f"{_fmt_pct(obs.queue_fill)} full (< {_fmt_pct(cfg.queue_full)}): hold", replace(st, full_since=None))
    full_since = state.full_since if state.full_since is not None else t
    st = replace(st, full_since=full_since)
    if t - full_since < cfg.down_after:
        return hold(f"trainer idle {_fmt_pct(idle)} and queues {_fmt_pct(obs.queue_fill)} full for "
                    f"{t - full_since:.0f} s (< {cfg.down_after:.0f} s)", st)
    need = obs.trainer_rate * cfg.headroom
    candidates = []
    for role in cfg.roles:
        n, cap = obs.replicas.get(role, 0), tier_capacity(obs, role)
        if n <= cfg.min_replicas or cap is None:
            continue
        left = cap * (n - 1) / n
        if left >= need:
            candidates.append((left / need, role, n, cap))
    if not candidates:
        return hold(f"trainer idle {_fmt_pct(idle)} and queues full, but no tier can lose a replica and still "
                    f"cover {need:.1f} batches/s", st)
    _, role, n, cap = max(candidates)
    return change(role, n - 1, f"trainer idle {_fmt_pct(idle)} < {_fmt_pct(cfg.low)} and queues "
                               f"{_fmt_pct(obs.queue_fill)} full for {t - full_since:.0f} s; {role} capacity "
                               f"{cap:.1f} batches/s vs trainer {obs.trainer_rate:.1f}: remove 1 {role} ({n} -> {n - 1})")
