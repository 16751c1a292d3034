"""Process memory probes (peak and current resident set size).

Why this module exists: the full-graph goals are stated as peak-memory ratios
(offload <= 0.3x in-memory, SAR ~ 1/N per worker), measured "above imports"
as in the SAR measurements, so every mode reports the same two numbers.
"""

from __future__ import annotations

import resource

__all__ = ["peak_rss_bytes", "current_rss_bytes", "tame_malloc"]


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


def tame_malloc(threshold: int = 256 << 10) -> bool:
    """Pin glibc's mmap threshold so freed tensors go back to the OS at once.

    glibc raises its mmap threshold dynamically (up to 32 MiB) after large
    frees; afterwards block-sized tensors come from fragmented heap arenas and
    RSS stays high after they are freed, which would make every peak-memory
    figure measure the allocator rather than the algorithm. Returns whether
    the setting was applied (False off glibc).
    """
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        M_MMAP_THRESHOLD = -3
        return bool(libc.mallopt(M_MMAP_THRESHOLD, int(threshold)))
    except (OSError, AttributeError):
        return False
