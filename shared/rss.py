"""The one process memory probe: current and peak resident set size, and what a holder reports.

Every figure Argosy reports about memory (a sampler's or loader's peak and base RSS, the
full-graph modes' "above imports" peaks, the partition bench) comes from these two functions.
"""
from __future__ import annotations

import resource

__all__ = ["rss_bytes", "peak_rss_bytes", "memory_fields"]


def _status_kib(field: str) -> int | None:
    """``field`` (``VmRSS``, ``VmHWM``) of ``/proc/self/status`` in KiB, or None off Linux."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (VmHWM, else ``ru_maxrss``), in bytes."""
    kib = _status_kib("VmHWM")
    if kib is None:
        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(kib) * 1024


def rss_bytes() -> int:
    """Resident set size of this process now (VmRSS, else the peak), in bytes."""
    kib = _status_kib("VmRSS")
    return int(kib) * 1024 if kib is not None else peak_rss_bytes()


def memory_fields(service_id: str, baseline: int) -> dict[str, float]:
    """What a sampler/loader reports once, at exit: its peak RSS and its RSS before it loaded any part."""
    return {f"peak_rss_bytes:{service_id}": float(peak_rss_bytes()), f"base_rss_bytes:{service_id}": float(baseline)}
