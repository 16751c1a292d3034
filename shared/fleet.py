"""Fleet events of a job: which services joined, left, were lost, and what each cost.

Services record ``join`` when they register and ``leave`` when they deregister (a drain: scaled
down, or the job's end); a sampler records ``reclaim`` when it takes over batches another claimed
and never acknowledged (``Coordinator.reclaim``: a stall of at least the claim timeout). The job's
driver (:class:`FleetWatch`, polled by ``JobDriver.step``) records ``lost`` for a service whose
heartbeat vanished without a leave (``docker kill``, an OOM kill, a node gone) and logs how many of
its role are left: Docker does not restart a killed container, so the job says it runs with fewer.
A local launcher records ``hung`` when it kills a child whose process lived on without a heartbeat
for ``--peer-timeout`` (``JobDriver._kill_hung``).

A leave or a loss costs the training the time until its claimed batches were re-claimed
(each re-claim names who held the batches, so :func:`fleet_events` pairs them); the report lists every event with that
cost (``report.md``, ``report.json``), the result counts them (:func:`fleet_summary`) and
Prometheus exports both (``argosy_fleet_events_total``, ``argosy_fleet_event_cost_seconds_total``).
"""
from __future__ import annotations

import logging
import time

__all__ = ["FleetWatch", "fleet_events", "fleet_summary", "event_counts", "event_lines", "ROLES"]

logger = logging.getLogger("argosy")

ROLES = ("sampler", "loader", "trainer")
PAIR_WINDOW = 300.0
"""A re-claim counts against a leave or loss at most this many seconds after it."""


class FleetWatch:
    """Compares the live services of each role between polls; a service gone without a ``leave``
    event is recorded as ``lost`` (once) and logged with the count left.

    A service that vanished is confirmed lost one poll later, after the events are read again: a
    draining service deletes its registry key and then records its ``leave``
    (:meth:`Coordinator.deregister`), and a poll that read the events before the leave and the
    registry after the delete took a sampler that left at a job's end for a killed one (seen under
    compose: ``sampler-... lost: its heartbeat stopped 1 s ago``). A killed service's key expires
    only its TTL after its last heartbeat, so the extra poll adds nothing that matters to its
    detection, and its cost is still counted from that last heartbeat."""

    def __init__(self, coord, roles=ROLES):
        self.coord, self.roles = coord, tuple(roles)
        self.live: dict[str, dict[str, float]] = {r: {} for r in self.roles}   # sid -> last heartbeat
        self.seen = 0
        self.left: set[str] = set()
        self.gone: dict[tuple[str, str], float] = {}     # (role, sid) -> last heartbeat: vanished at the last poll

    def watch(self) -> list[dict]:
        """One poll; returns the ``lost`` events recorded now."""
        for e in self.coord.events(self.seen):
            self.seen += 1
            if e["event"] in ("leave", "lost"):
                self.left.add(e["sid"])
            elif e["event"] == "join":
                self.left.discard(e["sid"])
        now = {role: {s["id"]: float(s.get("heartbeat") or time.time()) for s in self.coord.services(role)}
               for role in self.roles}
        lost = []
        for (role, sid), beat in sorted(self.gone.items()):
            if sid in self.left or sid in now[role]:
                continue                       # its leave arrived (or it is back): not lost
            self.coord.record_event("lost", role, sid, last_heartbeat=beat)
            self.left.add(sid)
            lost.append({"role": role, "sid": sid, "last_heartbeat": beat})
            logger.warning("%s lost: its heartbeat stopped %.0f s ago and it did not leave (killed?); the job "
                           "runs with %d %s(s) now", sid, time.time() - beat, len(now[role]), role)
        self.gone = {(role, sid): beat for role in self.roles for sid, beat in self.live[role].items()
                     if sid not in now[role] and sid not in self.left}
        self.live = now
        return lost


def fleet_events(coord) -> list[dict]:
    """Every event, oldest first, with ``cost_s``: on a leave or loss, seconds from the leave (or the lost
    service's last heartbeat) until the last of its claimed batches was re-claimed by another sampler
    (``reclaimed``: how many; None: it held none); on a re-claim, how long the oldest of its batches had
    been claimed without an acknowledgement (at least the claim timeout)."""
    events = coord.events()
    reclaims = [e for e in events if e["event"] == "reclaim"]
    for e in events:
        if e["event"] in ("leave", "lost"):
            t0 = float(e.get("last_heartbeat") or e["t"])
            mine = [r for r in reclaims if e["sid"] in (r.get("held_by") or {}) and t0 <= r["t"] <= t0 + PAIR_WINDOW]
            e["cost_s"] = round(mine[-1]["t"] - t0, 2) if mine else None
            e["reclaimed"] = sum(r["held_by"][e["sid"]] for r in mine)
        elif e["event"] == "reclaim":
            e["cost_s"] = e.get("idle_s")
    return events


def event_counts(coord) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], float]]:
    """``{(role, event): count}`` and ``{(role, event): seconds of cost}`` (Prometheus)."""
    counts: dict[tuple[str, str], int] = {}
    costs: dict[tuple[str, str], float] = {}
    for e in fleet_events(coord):
        k = (e["role"], e["event"])
        counts[k] = counts.get(k, 0) + 1
        costs[k] = costs.get(k, 0.0) + float(e.get("cost_s") or 0.0)
    return counts, costs


def fleet_summary(coord) -> dict:
    """Result fields: joins, leaves, losses and re-claims over the job, and the seconds they cost."""
    ev = fleet_events(coord)
    n = {k: sum(1 for e in ev if e["event"] == k) for k in ("join", "leave", "lost", "hung", "reclaim")}
    return {"services_joined": n["join"], "services_left": n["leave"], "services_lost": n["lost"],
            "services_hung": n["hung"], "reclaims": n["reclaim"], "events_dropped": coord.events_dropped(),
            "reclaim_stall_seconds": round(sum(float(e.get("cost_s") or 0.0) for e in ev
                                               if e["event"] in ("leave", "lost")), 2)}


def event_lines(events: list[dict]) -> list[str]:
    """Markdown lines of the report section: one per event, times from the first event."""
    if not events:
        return []
    t0 = events[0]["t"]
    live: dict[str, int] = {}
    out = ["Joins and leaves (scaling, the job's start and end), losses (a service killed: its heartbeat "
           "stopped without a leave) and re-claims (a sampler took over batches claimed longer than the claim "
           "timeout without an acknowledgement: of a service that left or was lost, or its own when the pipeline "
           "stalled). The cost of a leave or loss: seconds until its claimed batches were re-claimed.", ""]
    for e in events:
        role, kind = e["role"], e["event"]
        if kind == "join":
            live[role] = live.get(role, 0) + 1
            what = f"{e['sid']} joined ({live[role]} {role}s)"
        elif kind in ("leave", "lost"):
            live[role] = max(0, live.get(role, 0) - 1)
            verb = "left (drained)" if kind == "leave" else "was lost (heartbeat stopped, no leave: killed?)"
            cost = ("" if e.get("cost_s") is None else
                    f"; its {e.get('reclaimed', 0)} claimed batches re-claimed {e['cost_s']:.1f} s later")
            what = f"{e['sid']} {verb} ({live[role]} {role}s){cost}"
        elif kind == "reclaim":
            held = e.get("held_by") or {}
            whose = ", ".join(f"{n} from {'itself' if sid == e['sid'] else sid}" for sid, n in held.items())
            what = (f"{e['sid']} re-claimed {e.get('items', 0)} batches ({e.get('seeds', 0)} seeds) of part "
                    f"{e.get('part')} ({whose or '?'}), claimed {float(e.get('idle_s') or 0):.1f} s without an ack")
        elif kind == "hung":
            what = (f"{e['sid']} hung (alive, no heartbeat for {float(e.get('silent_s') or 0):.0f} s): "
                    "killed by the launcher")
        else:
            what = f"{e['sid']} {kind}"
        out.append(f"- +{e['t'] - t0:.1f} s: {what}")
    return out
