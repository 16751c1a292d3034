"""Traffic accounting: the bytes a process sends and receives, per epoch and across hosts.

Every process counts the bytes it sends and receives to other processes (``ipc_*``), the halo
part of them (``halo_*``) and the part going to processes on *other hosts* (``wire_*``), per epoch
(:class:`WireCounter`); :func:`wire_summary` reads the job's totals back from its metrics hash.
"""
from __future__ import annotations

import threading
from collections import defaultdict

__all__ = ["frames_bytes", "WireCounter", "per_epoch_values", "wire_summary"]


def frames_bytes(frames) -> int:
    return sum(memoryview(f).nbytes if not hasattr(f, "buffer") else f.buffer.nbytes for f in frames)


class WireCounter:
    """Bytes this process sent to / received from other processes, and the part crossing hosts."""

    def __init__(self):
        self._lock = threading.Lock()
        self._c: dict[str, float] = defaultdict(float)

    def add(self, nbytes: int, *, sent: bool, cross_host: bool, epoch: int | None, halo: bool) -> None:
        d = "sent" if sent else "received"
        with self._lock:
            c = self._c
            c[f"ipc_bytes_{d}"] += nbytes
            if halo:
                c[f"halo_bytes_{d}"] += nbytes
            if cross_host:
                c[f"wire_bytes_{d}"] += nbytes
            if sent and epoch is not None:       # per epoch, counted once: at the sender
                c[f"ipc_bytes_e{epoch}"] += nbytes
                if cross_host:
                    c[f"wire_bytes_e{epoch}"] += nbytes
                if halo:
                    c[f"halo_bytes_e{epoch}"] += nbytes

    def count(self, name: str, value: float = 1.0) -> None:
        with self._lock:
            self._c[name] += value

    def drain(self) -> dict[str, float]:
        with self._lock:
            out, self._c = dict(self._c), defaultdict(float)
        return out


def per_epoch_values(metrics: dict[str, float], prefix: str) -> list[float | None]:
    """``[metrics[prefix + "0"], metrics[prefix + "1"], ...]`` up to the last epoch recorded (0 where absent).

    Epochs whose counters trainer rank 0 moved out of Redis (below ``epoch_counters_moved_before``,
    still in ``metrics`` when the run dir's copy was not merged back) are None: unknown, not 0."""
    eps = sorted(int(k[len(prefix):]) for k in metrics if k.startswith(prefix) and k[len(prefix):].isdigit())
    moved = int(metrics.get("epoch_counters_moved_before", 0))
    last = max(eps[-1] + 1 if eps else 0, moved)
    return [None if e < moved else metrics.get(f"{prefix}{e}", 0.0) for e in range(last)]


def wire_summary(metrics: dict[str, float]) -> dict:
    """``wire_bytes`` (cross-host), ``ipc_bytes``, ``halo_bytes``, per epoch and in total, with the
    halo cache hit rate and the batches whose rows went through a shared-memory ring (not counted
    in ``ipc_bytes``), from the job's Redis metrics hash."""
    def per_epoch(prefix: str) -> list[float]:
        return per_epoch_values(metrics, prefix)
    hits = metrics.get("halo_cache_hits", 0.0)
    misses = metrics.get("halo_cache_misses", 0.0)
    return {"wire_bytes": metrics.get("wire_bytes_sent", 0.0), "wire_bytes_per_epoch": per_epoch("wire_bytes_e"),
            "ipc_bytes": metrics.get("ipc_bytes_sent", 0.0), "ipc_bytes_per_epoch": per_epoch("ipc_bytes_e"),
            "halo_bytes": metrics.get("halo_bytes_sent", 0.0), "halo_bytes_per_epoch": per_epoch("halo_bytes_e"),
            "halo_rows": metrics.get("halo_rows", 0.0),
            "ring_batches": metrics.get("loader_ring_batches", 0.0),
            "halo_cache_hit_rate": hits / (hits + misses) if hits + misses else 0.0,
            "peak_rss_bytes": {k.split(":", 1)[1]: v for k, v in metrics.items() if k.startswith("peak_rss_bytes:")},
            "base_rss_bytes": {k.split(":", 1)[1]: v for k, v in metrics.items() if k.startswith("base_rss_bytes:")}}
