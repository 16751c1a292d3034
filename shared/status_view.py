"""``argosy status``: one table of a job's services, rates, queues and heartbeats (text or JSON).

:func:`status_dict` gathers everything from Redis; :func:`render_status` formats it;
:func:`watch_status` redraws it every ``interval`` seconds with plain ANSI (``rich`` is not
needed), keeping a :class:`~shared.metrics.RateTracker` so rates are over the last few seconds
instead of since the start.

Per-service rates appear when services publish their own totals (``ServiceMetrics.publish``);
otherwise each row shows its tier's rate divided by the live replicas (marked ``~``).
"""
from __future__ import annotations

import json
import sys
import time

from argosy.shared.records import best_so_far
from argosy.shared.metrics import RateTracker, read_autoscale_decisions, read_autoscale_replicas, work_queue_depths

__all__ = ["status_dict", "render_status", "watch_status", "edge_weights_of"]

ROLES = ("trainer", "loader", "sampler")
_TIER = {"sampler": ("sampler_batches", "sample_seconds"), "loader": ("loader_batches", "load_seconds"),
         "trainer": ("trainer_batches", "trainer_compute_seconds")}
"""Per role: (batches field, busy-seconds field) of ``ServiceMetrics`` totals."""


def edge_weights_of(coord) -> bool | str | None:
    """Whether the job trains with edge weights (:meth:`TrainerConfig.edge_weights_used`), from its
    spec in Redis and its store's manifest; None when the job has no spec."""
    from argosy.shared.errors import ArgosyError
    from argosy.shared.store.manifest import Manifest
    try:
        spec = coord.get_spec()
    except ArgosyError:
        return None
    try:
        weighted = Manifest.load(spec.store).edge_weights
    except (ArgosyError, OSError, ValueError):
        weighted = None
    return spec.trainer.edge_weights_used(weighted)


def _svc_rates(prev: dict | None, cur: dict | None, key: str) -> float | None:
    if not cur or key not in cur:
        return None
    if prev and key in prev and cur.get("t", 0) > prev.get("t", 0):
        return (cur[key] - prev[key]) / (cur["t"] - prev["t"])
    span = cur.get("t", 0) - cur.get("started", 0)
    return cur[key] / span if span > 0 else None


def status_dict(coord, now: float | None = None, tracker: RateTracker | None = None,
                prev_services: dict | None = None) -> dict:
    """Everything ``argosy status --json`` prints.

    Args:
        coord: Coordinator of the job.
        now: wall-clock time (default ``time.time()``).
        tracker: a RateTracker fed by previous calls (rates over its window); None = rates since
            the oldest live service started.
        prev_services: previous call's ``{id: metrics}`` for per-service rates.

    Returns:
        ``{"job", "state", "phase", "epochs_done", "last_epoch", "best", "metrics", "rates", "queues",
        "services", "missing", "autoscale", "edge_weights"}``.
    """
    now = time.time() if now is None else now
    counters = coord.metrics()
    if tracker is not None:
        tracker.add(now, counters)
    services = []
    for role in ROLES:
        for s in coord.services(role, include_dead=True):
            s["heartbeat_age"] = round(now - s["heartbeat"], 2) if "heartbeat" in s else None
            services.append(s)
    started = [s["started"] for s in services if s.get("alive") and "started" in s]
    span = now - min(started) if started else 0.0

    def rate(key: str) -> float:
        if tracker is not None and tracker.span() > 0:
            return tracker.rate(key)
        return counters.get(key, 0.0) / span if span > 0 else 0.0

    rates = {"sampler_batches_per_second": rate("sampler_batches"), "loader_batches_per_second": rate("loader_batches"),
             "sampled_edges_per_second": rate("sampled_edges"), "feature_bytes_per_second": rate("feature_bytes"),
             "sampler_busy": rate("sample_seconds"), "loader_busy": rate("load_seconds")}
    if "trainer_idle_seconds" in counters:
        di, dc, dw = rate("trainer_idle_seconds"), rate("trainer_compute_seconds"), rate("trainer_train_seconds")
        rates["trainer_idle_fraction"] = (min(1.0, di / dw) if dw > 0 else di / (di + dc) if di + dc > 0 else None)
    edges = counters.get("sampled_edges", 0.0)
    rates["remote_fraction"] = counters.get("remote_neighbors", 0.0) / edges if edges else None
    backlog, pending = work_queue_depths(coord)
    n_epochs, last, best = coord.epochs_count(), coord.last_epoch(), coord.best_epoch()   # O(1): Redis keeps a window
    live = {r: sum(1 for s in services if s["role"] == r and s["alive"]) for r in ROLES}
    for s in services:
        m = s.get("metrics")
        role = s["role"]
        batches_key, busy_key = _TIER[role]
        r = _svc_rates((prev_services or {}).get(s["id"]), m, batches_key) if m else None
        b = _svc_rates((prev_services or {}).get(s["id"]), m, busy_key) if m else None
        if r is None and s["alive"] and live[role]:
            tier = rates.get(f"{role}_batches_per_second")
            busy = rates.get(f"{role}_busy")
            r = None if tier is None else tier / live[role]
            b = None if busy is None else busy / live[role]
            s["rate_estimated"] = True
        s["batches_per_second"] = r
        s["busy_fraction"] = None if b is None else min(1.0, max(0.0, b))
    return {"job": coord.job, "state": coord.get_state(), "phase": coord.get_phase(), "epochs_done": n_epochs,
            "last_epoch": last.to_dict() if last else None, "best": best_so_far([best] if best else []) or None, "metrics": counters, "rates": rates,
            "queues": {"work_backlog": backlog, "in_flight": pending}, "services": services,
            "missing": [s["id"] for s in services if not s["alive"]],
            "autoscale": {"replicas": read_autoscale_replicas(coord), "last_decisions": read_autoscale_decisions(coord, 3)},
            "edge_weights": edge_weights_of(coord)}


def _f(x, fmt="{:.1f}", none="-") -> str:
    return none if x is None else fmt.format(x)


def render_status(coord, now: float | None = None, tracker: RateTracker | None = None,
                  prev_services: dict | None = None, data: dict | None = None) -> str:
    """The status table as text (no ANSI codes); see :func:`status_dict` for the arguments."""
    d = data if data is not None else status_dict(coord, now, tracker, prev_services)
    r, q, ph = d["rates"], d["queues"], d["phase"] or {}
    lines = [f"job {d['job']}: {d['state']}   epoch {ph.get('epoch', '-')} {ph.get('phase', '')}   "
             f"epochs done {d['epochs_done']}"]
    lines.append(f"sampler {r['sampler_batches_per_second']:.1f} batches/s ({r['sampled_edges_per_second'] / 1e6:.2f} M edges/s)"
                 f"   loader {r['loader_batches_per_second']:.1f} batches/s ({r['feature_bytes_per_second'] / 2**20:.1f} MiB/s)"
                 f"   work backlog {q['work_backlog']}  in flight {q['in_flight']}")
    e = d["last_epoch"] or {}
    idle_live = r.get("trainer_idle_fraction")
    lines.append(f"trainer idle {_f(idle_live, '{:.0%}')} now, {_f(e.get('trainer_idle_fraction'), '{:.0%}')} last epoch"
                 f"   remote fraction {_f(r.get('remote_fraction'), '{:.3f}')}"
                 f"   last epoch {_f(e.get('batches_per_second'))} batches/s, loss {_f(e.get('train_loss'), '{:.3f}')}")
    b = d.get("best") or {}
    lines.append(f"accuracy: val {_f(e.get('val_accuracy'), '{:.3f}')} last epoch; best val "
                 f"{_f(b.get('val_accuracy'), '{:.3f}')} at epoch {b.get('best_epoch', '-')} "
                 f"(test {_f(b.get('test_accuracy'), '{:.3f}')}, the weights in best.pt)"
                 f"   edge weights: {json.dumps(d.get('edge_weights'))}")
    lines.append("")
    lines.append(f"{'role':8s} {'id':18s} {'host':12s} {'pid':>7s} {'batches/s':>10s} {'busy':>6s} {'heartbeat':>10s}  status")
    for s in d["services"]:
        age = "-" if s["heartbeat_age"] is None else f"{s['heartbeat_age']:.1f}s ago"
        rate = _f(s.get("batches_per_second"))
        if s.get("rate_estimated") and rate != "-":
            rate = "~" + rate
        status = "MISSING" if not s["alive"] else ("stale" if (s["heartbeat_age"] or 0) > 3 else "alive")
        lines.append(f"{s['role']:8s} {str(s['id'])[:18]:18s} {str(s.get('host', '-'))[:12]:12s} {str(s.get('pid', '-')):>7s} "
                     f"{rate:>10s} {_f(s.get('busy_fraction'), '{:.0%}'):>6s} {age:>10s}  {status}")
    a = d["autoscale"]
    if a["replicas"] or a["last_decisions"]:
        lines.append("")
        lines.append("autoscaler: replicas " + (", ".join(f"{k} {v}" for k, v in sorted(a["replicas"].items())) or "-"))
        for dec in a["last_decisions"]:
            when = time.strftime("%H:%M:%S", time.localtime(dec.get("t", 0)))
            lines.append(f"  {when} {'(dry run) ' if dec.get('dry_run') else ''}{dec.get('reason', '')}")
    return "\n".join(lines)


def watch_status(coord, interval: float = 2.0, as_json: bool = False, out=None, iterations: int | None = None) -> None:
    """Redraw the status every ``interval`` seconds until Ctrl-C (or ``iterations`` redraws).

    With ``as_json`` one JSON line per refresh is written instead (for piping into ``jq``).
    """
    out = out or sys.stdout
    tracker = RateTracker(window=max(5.0, 3 * interval))
    prev: dict = {}
    n = 0
    try:
        while iterations is None or n < iterations:
            d = status_dict(coord, time.time(), tracker, prev)
            prev = {s["id"]: s.get("metrics") for s in d["services"] if s.get("metrics")}
            if as_json:
                out.write(json.dumps(d, default=str) + "\n")
            else:
                text = render_status(coord, data=d)
                if out.isatty():
                    out.write("\x1b[H\x1b[2J")                 # home + clear screen
                out.write(text + f"\n\n(refreshing every {interval:g} s; Ctrl-C to quit)\n")
            out.flush()
            n += 1
            if iterations is not None and n >= iterations:
                break
            time.sleep(interval)
    except KeyboardInterrupt:
        pass
