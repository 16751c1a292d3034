"""Process memory probes (peak and current resident set size).

Why this module exists: the full-graph goals are stated as peak-memory ratios
(offload <= 0.3x in-memory, SAR ~ 1/N per worker), measured "above imports"
as in the SAR measurements, so every mode reports the same two numbers.
"""

from __future__ import annotations

import resource

__all__ = ["peak_rss_bytes", "current_rss_bytes"]


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (VmHWM / ru_maxrss)."""
    kb = _status_kb("VmHWM")
    if kb is None:
        kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(kb) * 1024


def current_rss_bytes() -> int:
    """Current resident set size of this process (VmRSS)."""
    kb = _status_kb("VmRSS")
    return int(kb) * 1024 if kb is not None else peak_rss_bytes()
