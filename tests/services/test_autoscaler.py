"""Autoscaler policy on recorded metric series (no processes), plus the control loop on a fake backend."""
from __future__ import annotations

import math

import pytest

from argosy.services.autoscaler.policy import Observation, ScalerConfig, ScalerState, bottleneck, decide, tier_capacity


def _cfg(**kw) -> ScalerConfig:
    """The policy's knobs without the warm-up (10 s by default): these series act from their first tick."""
    kw.setdefault("warmup", 0.0)
    return ScalerConfig(**kw)


def obs(t, idle, samplers=1, loaders=1, rate=None, s_busy=0.9, l_busy=0.3, fill=0.2, start=None):
    """One observation; the tiers deliver ``rate`` batches/s (default 10 per sampler: linear scaling),
    busy ``*_busy`` seconds per second."""
    rate = 10.0 * samplers if rate is None else rate
    return Observation(t=t, trainer_idle=idle, idle_window_start=t - 5 if start is None else start,
                       trainer_rate=rate, replicas={"sampler": samplers, "loader": loaders},
                       rates={"sampler": rate, "loader": rate}, busy={"sampler": s_busy, "loader": l_busy},
                       queue_fill=fill)


def replay(series, cfg, replicas=None, apply=True):
    """Feed observations through decide(), applying changes to the replica counts like a backend would.

    ``series``: list of (t, idle, extra kwargs).  Returns the decisions and replica history.
    """
    state, reps, out, hist = ScalerState(), dict(replicas or {"sampler": 1, "loader": 1}), [], []
    for t, idle, kw in series:
        d = decide(obs(t, idle, samplers=reps["sampler"], loaders=reps["loader"], **kw), state, cfg)
        state = d.state
        if d.action != "hold" and apply:
            reps[d.role] = d.replicas
        out.append(d)
        hist.append(dict(reps))
    return out, hist


def changes(decisions):
    return [d for d in decisions if d.action != "hold"]


def test_rising_idle_scales_up_the_bottleneck_tier():
    cfg = _cfg(cooldown=10)
    d = decide(obs(100, 0.38, rate=12, s_busy=0.95, l_busy=0.4), ScalerState(), cfg)
    assert (d.action, d.role, d.replicas, d.delta) == ("add", "sampler", 2, 1)
    assert "idle 38% > 10%" in d.reason and "sampler tier is the bottleneck" in d.reason
    assert "sampler 12.6" in d.reason and "loader 30.0" in d.reason        # capacity = rate / busy * replicas
    # idle 60 %: needs 1.1 / 0.4 = 2.75 -> 3 samplers, +2 in one step
    d = decide(obs(100, 0.60), ScalerState(), cfg)
    assert (d.role, d.replicas) == ("sampler", 3)


def test_loader_bottleneck_grows_loaders():
    d = decide(obs(100, 0.5, s_busy=0.2, l_busy=0.95), ScalerState(), _cfg())
    assert (d.action, d.role) == ("add", "loader")


def test_idle_below_target_holds():
    cfg = _cfg()
    series = [(t, 0.05, {}) for t in range(0, 200, 1)]
    dec, hist = replay(series, cfg)
    assert not changes(dec)
    assert all("within" in d.reason for d in dec)
    assert hist[-1] == {"sampler": 1, "loader": 1}


def test_starved_series_converges_and_respects_cooldown():
    """A recorded run: idle falls as samplers are added; changes are >= cooldown apart."""
    cfg = _cfg(cooldown=20, idle_target=0.10)
    # idle as a function of samplers (what the bench measured, roughly): 1 -> 55 %, 2 -> 30 %, 3 -> 12 %, 4 -> 4 %
    idle_of = {1: 0.55, 2: 0.30, 3: 0.12, 4: 0.04, 5: 0.03, 6: 0.03}
    state, reps, decisions = ScalerState(), {"sampler": 1, "loader": 1}, []
    last_change = -math.inf
    for t in range(0, 300):
        o = obs(t, idle_of[reps["sampler"]], samplers=reps["sampler"], start=max(last_change + 3, t - 5))
        d = decide(o, state, cfg)
        state = d.state
        if d.action != "hold":
            assert t - last_change >= cfg.cooldown
            last_change = t
            reps[d.role] = d.replicas
            decisions.append(d)
    assert reps["sampler"] in (4, 5) and reps["loader"] == 1
    assert [d.action for d in decisions] == ["add"] * len(decisions)
    assert idle_of[reps["sampler"]] < cfg.idle_target


def test_stale_measurement_after_change_is_ignored():
    cfg = _cfg(cooldown=5)
    d = decide(obs(100, 0.5), ScalerState(), cfg)
    assert d.action == "add"
    # 30 s later the newest measurement still started before the change: do not act on it again
    d2 = decide(obs(130, 0.5, samplers=2, start=95), d.state, cfg)
    assert d2.action == "hold" and "after the last change" in d2.reason
    d3 = decide(obs(131, 0.5, samplers=2, start=110), d2.state, cfg)
    assert d3.action == "add"


def test_hysteresis_band_no_flapping():
    """Idle oscillating around the target inside [low, target] never changes anything; a series that
    alternates above target and inside the band, with up_after=2, never scales either."""
    cfg = _cfg(idle_target=0.10, idle_low=0.02, cooldown=0, up_after=2, down_after=5)
    series = [(t, 0.03 + 0.06 * (t % 2), {"fill": 1.0}) for t in range(100)]       # 3 % / 9 %
    dec, _ = replay(series, cfg)
    assert not changes(dec)
    series = [(t, 0.15 if t % 2 else 0.05, {"fill": 1.0}) for t in range(100)]     # above, band, above, ...
    dec, _ = replay(series, cfg)
    assert not changes(dec)
    series = [(t, 0.15, {}) for t in range(2)]                                      # two fresh in a row: scale
    dec, _ = replay(series, cfg)
    assert [d.action for d in dec] == ["hold", "add"]


def test_up_streak_counts_fresh_measurements_only():
    cfg = _cfg(up_after=2, cooldown=0)
    st = ScalerState()
    d = decide(obs(10, 0.5, start=1.0), st, cfg)
    assert d.action == "hold" and "1/2" in d.reason
    d = decide(obs(11, 0.5, start=1.0), d.state, cfg)           # same epoch record seen again
    assert d.action == "hold" and "1/2" in d.reason
    d = decide(obs(12, 0.5, start=6.0), d.state, cfg)           # a new one
    assert d.action == "add"


def test_bounds_respected():
    cfg = _cfg(max_replicas=3, cooldown=0)
    dec, hist = replay([(t, 0.9, {"start": t - 0.5}) for t in range(0, 50)], cfg)
    assert max(h["sampler"] for h in hist) == 3
    assert any("at max 3" in d.reason for d in dec)
    # below min / above max are corrected before anything else, once the cooldown has passed
    st = ScalerState(last_change_t=99.0)
    d = decide(obs(100, 0.9, samplers=0), st, _cfg(min_replicas=1, cooldown=60))
    assert d.action == "hold" and "cooldown" in d.reason
    d = decide(obs(160, 0.9, samplers=0), st, _cfg(min_replicas=1, cooldown=60))
    assert (d.action, d.role, d.replicas) == ("add", "sampler", 1) and "< min 1" in d.reason
    d = decide(obs(160, 0.0, samplers=5), st, _cfg(max_replicas=4, cooldown=60))
    assert (d.action, d.role, d.replicas) == ("remove", "sampler", 4)
    d = decide(obs(100, 0.9, samplers=2), ScalerState(), _cfg(max_replicas=8, max_step=1))
    assert d.replicas == 3                                       # max_step


def test_scale_down_when_idle_zero_and_queues_full_for_long():
    cfg = _cfg(cooldown=10, down_after=30, min_replicas=1)
    # 4 samplers, each busy 20 % -> capacity 10 / 0.8 * 4 = 50 batches/s; trainer eats 10
    series = [(t, 0.0, {"fill": 1.0, "s_busy": 0.8, "l_busy": 0.5}) for t in range(0, 100)]
    dec, hist = replay(series, cfg, replicas={"sampler": 4, "loader": 1})
    ch = changes(dec)
    assert ch and ch[0].action == "remove" and ch[0].role == "sampler"
    assert ch[0].t >= 30                                         # only after 30 s of full queues
    assert "queues 100% full" in ch[0].reason
    assert hist[-1]["loader"] == 1                               # never below min
    assert all(h["sampler"] >= 1 for h in hist)


def test_no_scale_down_when_queues_not_full_or_idle_in_band():
    cfg = _cfg(cooldown=0, down_after=5)
    dec, _ = replay([(t, 0.0, {"fill": 0.3}) for t in range(50)], cfg, replicas={"sampler": 4, "loader": 2})
    assert not changes(dec)
    dec, _ = replay([(t, 0.05 if t == 4 else 0.0, {"fill": 1.0, "s_busy": 0.4}) for t in range(12)], cfg,
                    replicas={"sampler": 4, "loader": 1})
    # without the band measurement at t=4 the first removal would come at t=5; it restarts the clock
    assert changes(dec)[0].t == 10


def test_no_scale_down_below_what_the_trainer_needs():
    cfg = _cfg(cooldown=0, down_after=1)
    # 2 samplers fully busy: removing one would leave 10 batches/s < 11 needed
    dec, _ = replay([(t, 0.0, {"fill": 1.0, "s_busy": 2.0, "l_busy": 0.9}) for t in range(10)], cfg,
                    replicas={"sampler": 2, "loader": 1})
    assert not changes(dec)
    assert "no tier can lose a replica" in dec[-1].reason


def test_capacity_and_bottleneck_helpers():
    o = obs(0, 0.5, samplers=2, rate=10, s_busy=1.0, l_busy=0.25)
    assert tier_capacity(o, "sampler") == pytest.approx(20.0)
    assert tier_capacity(o, "loader") == pytest.approx(40.0)
    assert bottleneck(o, ("sampler", "loader"))[0] == "sampler"
    unknown = Observation(t=0, trainer_idle=0.5, idle_window_start=0, trainer_rate=0, replicas={"sampler": 1})
    assert bottleneck(unknown, ("sampler", "loader"))[0] == "sampler"


def test_warmup_holds_everything():
    cfg = _cfg(warmup=10, cooldown=0)
    d = decide(obs(100, 0.9, samplers=0), ScalerState(), cfg)
    assert d.action == "hold" and "warming up" in d.reason
    d = decide(obs(105, 0.9, samplers=0), d.state, cfg)
    assert d.action == "hold"
    d = decide(obs(110, 0.9, samplers=0), d.state, cfg)
    assert d.action == "add" and d.state.first_t == 100


def test_no_scale_up_before_batches_flow():
    d = decide(obs(100, 1.0, rate=0.0), ScalerState(), _cfg())
    assert d.action == "hold" and "no batch applied" in d.reason


def test_scale_up_that_does_not_raise_throughput_pauses_scale_ups():
    """On a machine whose cores are all busy, more samplers do not make batches flow faster."""
    cfg = _cfg(cooldown=10, pause=100, min_gain=0.05)
    d = decide(obs(100, 0.3, samplers=1, rate=20), ScalerState(), cfg)
    assert d.action == "add" and d.state.added == "sampler" and d.state.rate_before == 20
    d = decide(obs(115, 0.3, samplers=2, rate=20.5, start=108), d.state, cfg)      # +2.5 %: did not help
    assert d.action == "hold" and "did not raise throughput (20.0 -> 20.5 batches/s, +2%)" in d.reason
    d = decide(obs(150, 0.3, samplers=2, rate=20.5, start=140), d.state, cfg)
    assert d.action == "hold" and "paused" in d.reason
    d = decide(obs(216, 0.3, samplers=2, rate=20.5, start=210), d.state, cfg)      # pause over
    assert d.action == "add"
    # a scale-up that helped leaves scale-ups on
    d = decide(obs(100, 0.5, samplers=1, rate=10), ScalerState(), cfg)
    d = decide(obs(115, 0.3, samplers=2, rate=16, start=108), d.state, cfg)
    assert d.action == "add" and d.replicas == 4                                # ceil(2 * 1.1 / 0.7)


def test_holds_unless_job_running():
    o = Observation(t=0, trainer_idle=0.9, idle_window_start=0, trainer_rate=1, replicas={"sampler": 0, "loader": 0},
                    job_state="starting")
    d = decide(o, ScalerState(), _cfg())
    assert d.action == "hold" and "starting" in d.reason


def test_config_validation():
    with pytest.raises(ValueError, match="min_replicas"):
        _cfg(min_replicas=3, max_replicas=2)
    with pytest.raises(ValueError, match="idle_target"):
        _cfg(idle_target=1.5)
    with pytest.raises(ValueError, match="idle_low"):
        _cfg(idle_low=0.5)


# ---- the control loop against a fake backend and a real Redis ------------------------------------
class FakeBackend:
    """Records calls; starts nothing (so the registry never shows the new replicas)."""

    def __init__(self):
        self.calls: list[tuple[str, int]] = []

    def scale(self, role, replicas):
        self.calls.append((role, replicas))


def test_autoscaler_proc_records_decisions_in_redis(redis_url):
    from argosy.shared.coord import Coordinator
    from argosy.shared.metrics import read_autoscale_decisions, read_autoscale_observation, read_autoscale_replicas
    from argosy.services.autoscaler.service import AutoscalerProc

    coord = Coordinator(redis_url, "as-unit")
    coord.delete_job()
    coord.set_state("running")
    svc = Coordinator(redis_url, "as-unit")               # one live sampler and loader in the registry
    svc.register("sampler", "sampler-0", {}, interval=0.5, ttl=30)
    svc.register("loader", "loader-0", {}, interval=0.5, ttl=30)
    clock = [1000.0]
    be = FakeBackend()
    proc = AutoscalerProc(coord, _cfg(cooldown=5), be, clock=lambda: clock[0])
    # counters as services would push them: sampler busy 95 %, loader 30 %, 10 batches/s; trainer idle 40 %
    for i in range(24):
        coord.incr(sampler_batches=10, loader_batches=10, sample_seconds=0.95, load_seconds=0.3,
                   trainer_idle_seconds=0.4, trainer_compute_seconds=0.6, trainer_batches=10, trainer_train_seconds=1.0)
        d = proc.tick()
        clock[0] += 1.0
    assert be.calls == [("sampler", 2)]                 # once: the asked-for count is believed while it starts
    recs = read_autoscale_decisions(coord)
    assert recs[0]["action"] == "add" and recs[0]["role"] == "sampler" and "bottleneck" in recs[0]["reason"]
    assert read_autoscale_replicas(coord)["sampler"] == 2
    assert read_autoscale_observation(coord)["idle_source"] == "live"
    # the trainers' rate stayed at 10 batches/s after the add: the verdict is recorded, scale-ups pause
    assert recs[-1]["action"] == "hold" and recs[-1]["paused"] and "did not raise throughput" in recs[-1]["reason"]
    # dry run: recommends, never calls the backend
    coord.delete_job()
    coord.set_state("running")
    be2 = FakeBackend()
    dry = AutoscalerProc(coord, _cfg(cooldown=5), be2, dry_run=True, clock=lambda: clock[0])
    for i in range(6):
        coord.incr(sampler_batches=10, loader_batches=10, sample_seconds=0.95, load_seconds=0.3,
                   trainer_idle_seconds=0.4, trainer_compute_seconds=0.6)
        dry.tick()
        clock[0] += 1.0
    assert not be2.calls
    recs = read_autoscale_decisions(coord)
    assert recs and all(r["dry_run"] for r in recs)
    svc.deregister("sampler", "sampler-0")
    svc.deregister("loader", "loader-0")
    svc.close()
    coord.delete_job()
    coord.close()


def test_observer_measures_live_idle_only_once_batches_flow(redis_url):
    from argosy.shared.coord import Coordinator
    from argosy.services.autoscaler.service import Observer

    coord = Coordinator(redis_url, "as-live")
    coord.delete_job()
    ob = Observer(coord, window=10)
    t = 100.0
    for _ in range(10):                  # 10 s of start-up: trainer waits, nothing flows
        coord.incr(trainer_idle_seconds=1.0, trainer_train_seconds=1.0)
        assert ob.observe(t).trainer_idle is None
        t += 1
    for _ in range(6):                   # then 20 % idle with batches flowing
        coord.incr(trainer_idle_seconds=0.2, trainer_train_seconds=1.0, trainer_compute_seconds=0.7, trainer_batches=5)
        o = ob.observe(t)
        t += 1
    assert o.idle_source == "live" and o.trainer_idle == pytest.approx(0.2)
    assert o.trainer_rate == pytest.approx(5.0)
    coord.delete_job()
    coord.close()


def test_observer_uses_epoch_records_without_live_counters(redis_url):
    from argosy.shared.coord import Coordinator
    from argosy.services.autoscaler.service import Observer

    coord = Coordinator(redis_url, "as-epoch")
    coord.delete_job()
    ob = Observer(coord)
    o = ob.observe(100.0)
    assert o.trainer_idle is None and o.idle_source == "none"
    coord.append_epoch({"epoch": 0, "trainer_idle_fraction": 0.9, "epoch_seconds": 4.0})     # start-up epoch: unused
    assert ob.observe(100.5).trainer_idle is None
    coord.append_epoch({"epoch": 1, "trainer_idle_fraction": 0.42, "epoch_seconds": 4.0, "val_seconds": 1.0,
                        "test_seconds": 1.0, "batches_per_second": 7.0})
    o = ob.observe(101.0)
    assert o.trainer_idle == pytest.approx(0.42) and o.idle_source == "epoch"
    assert o.idle_window_start == pytest.approx(95.0) and o.trainer_rate == 7.0
    o2 = ob.observe(102.0)
    assert o2.idle_window_start == o.idle_window_start            # same record: same window, not fresh
    coord.delete_job()
    coord.close()


def test_saturated_trainer_ingest_holds_instead_of_adding():
    from dataclasses import replace
    cfg = ScalerConfig(warmup=0)
    o = obs(100.0, 0.5)
    assert decide(o, ScalerState(), cfg).action == "add"                         # idle, ingest has room: grow a tier
    d = decide(replace(o, trainer_ingest_busy=0.95), ScalerState(), cfg)
    assert d.action == "hold" and "ingest threads are busy 95%" in d.reason
    assert decide(replace(o, trainer_ingest_busy=0.5), ScalerState(), cfg).action == "add"
