"""Part ownership: which sampler or loader holds which parts, derived from the registry.

Ownership (:func:`assign_parts`) is a pure function of the live members of a tier, so every
process computes the same answer from the registry: parts go to *hosts* first (balanced
rendezvous hashing: a host joining or leaving moves few parts), and every replica on a host holds
all of its host's parts, so halo requests only cross hosts.  A process publishes what it actually
holds (``held``) and its halo endpoint in its registry entry (:class:`Membership` reads them back).
"""
from __future__ import annotations

import socket
import threading
import time
import zlib

from argosy.shared import envs

__all__ = ["host_label", "assign_parts", "Membership"]


def host_label() -> str:
    """The host this process runs on, as ownership and accounting see it (``ARGOSY_HOST`` or the host name)."""
    return envs.get(envs.HOST_LABEL) or socket.gethostname()


def _score(host: str, part: int) -> int:
    return zlib.crc32(f"{host}/{part}".encode())


def assign_parts(num_parts: int, members: list[tuple[str, str]]) -> dict[str, list[int]]:
    """Deal ``num_parts`` parts to the ``(host, service_id)`` members of one tier.

    Parts go to hosts by balanced rendezvous hashing (each part to its highest-scoring host that
    has fewer than ``ceil(parts / hosts)``), and every replica on a host gets all of that host's
    parts (they share one memory map of them; work items of a part are claimed by whichever replica
    is free).  Deterministic: every process derives the same answer from the same members.

    Example:
        >>> assign_parts(4, [("h0", "sampler-0"), ("h0", "sampler-1")])
        {'sampler-0': [0, 1, 2, 3], 'sampler-1': [0, 1, 2, 3]}
    """
    out: dict[str, list[int]] = {sid: [] for _, sid in members}
    if not members:
        return out
    hosts = sorted({h for h, _ in members})
    cap = -(-num_parts // len(hosts))
    load = dict.fromkeys(hosts, 0)
    host_parts: dict[str, list[int]] = {h: [] for h in hosts}
    for p in range(num_parts):
        for h in sorted(hosts, key=lambda h: (-_score(h, p), h)):
            if load[h] < cap:
                load[h] += 1
                host_parts[h].append(p)
                break
    for h, sid in members:
        out[sid] = list(host_parts[h])
    return out


class Membership:
    """One tier's live members, their assigned parts and the parts they publish as held."""

    def __init__(self, coord, role: str, num_parts: int, self_id: str, self_host: str):
        self.coord, self.role, self.num_parts = coord, role, num_parts
        self.self_id, self.self_host = self_id, self_host
        self.assigned: dict[str, list[int]] = {}
        self.members: dict[str, dict] = {}

    def refresh(self) -> None:
        live = {s["id"]: s for s in self.coord.services(self.role)}
        live.setdefault(self.self_id, {"id": self.self_id, "host_label": self.self_host})
        self.members = live
        self.assigned = assign_parts(self.num_parts, [(s.get("host_label", "?"), sid) for sid, s in live.items()])

    def wait_for(self, expected: int, stop: threading.Event | None = None, settle: float = 10.0) -> None:
        """A newcomer's first step: wait (at most ``settle`` s) until ``expected`` members are live,
        so it loads its final share of the parts once instead of everything and then shrinking."""
        deadline = time.monotonic() + settle
        while True:
            self.refresh()
            if len(self.members) >= expected or time.monotonic() > deadline or (stop is not None and stop.is_set()):
                return
            time.sleep(0.2)

    def mine(self) -> list[int]:
        return self.assigned.get(self.self_id, [])

    def on_my_host(self) -> int:
        """Live members on this process's host, itself included."""
        return sum(1 for s in self.members.values() if s.get("host_label", self.self_host) == self.self_host)

    def owners_of(self, part: int) -> list[str]:
        """The members assigned ``part`` (every replica on its host), by id."""
        return sorted(sid for sid, parts in self.assigned.items() if part in parts)

    def holders(self, part: int) -> list[str]:
        """Live members that publish ``part`` as loaded (assigned owners first, then by id)."""
        hs = sorted(sid for sid, s in self.members.items() if part in (s.get("held") or []))
        own = set(self.owners_of(part))
        return sorted(hs, key=lambda sid: sid not in own)
