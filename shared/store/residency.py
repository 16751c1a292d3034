"""Whether a process keeps its parts in memory or serves them from disk, and its disk counters.

A host's parts *fit* when the bytes its samplers and loaders read from them (topology, features,
labels, edge weights) are at most :data:`FIT_FRACTION` of the memory budget: ``--memory-budget``
when given, else the memory limit of the cgroup the process runs under (v1 or v2, the tightest of
its ancestors), else none, and then every store fits.  Both roles derive the same answer from the
same parts, so a host is either in memory or out of core as a whole.

* **Fits** (today's path): the part files are mapped and prefetched (``MADV_WILLNEED``).
* **Does not fit**: the files are mapped ``MADV_RANDOM`` (a fault reads its own page, not the
  128 KiB read-around a random row gather would mostly throw away) and each loader keeps a
  byte-budgeted copy of its hottest feature rows (:class:`~argosy.shared.store.row_cache.RowCache`,
  :data:`ROW_CACHE_FRACTION` of the budget split between the host's loaders).  A dense copy of the
  hot rows beats leaving them to the page cache: a 4 KiB page holds 16 rows of a 128-d float16
  matrix, and the hot rows are spread over pages whose other rows are cold.

:class:`DiskCounters` reads what the process has read from block devices (``/proc/self/io``
``read_bytes``: page faults on the maps included) and its major page faults (``getrusage``), so
sampler and loader report both per epoch.
"""
from __future__ import annotations

import mmap
import resource
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["FIT_FRACTION", "ROW_CACHE_FRACTION", "cgroup_memory_limit", "memory_budget", "Residency",
           "plan_residency", "advise", "DiskCounters", "disk_summary", "queue_depth", "tight_budget"]

FIT_FRACTION = 0.5
"""Parts fit when their bytes are at most this fraction of the budget (the rest: processes, buffers)."""
ROW_CACHE_FRACTION = 0.125
"""Out of core, the host's loaders keep hot feature rows worth this fraction of the budget."""
BUDGET_QUEUE_DEPTH = 2
"""Under a memory budget, the batch queues towards and inside a trainer hold at most this many
batches each (ZeroMQ's high-water marks count messages, not bytes; a 3-hop batch can be 100+ MB)."""
UNLIMITED = 1 << 60
"""cgroup v1 reports "no limit" as a page-rounded 2**63 - 1: anything above this is no limit."""

_PART_FILES = ("indptr", "indices", "labels", "edge_weight", "weighted_degree", "edge_type")
"""With the feature files (:meth:`~shared.store.features.FeatureLayout.file_bytes`)."""


def _cgroup_paths(proc_cgroup: str) -> tuple[str | None, str | None]:
    """(v1 memory controller path, v2 unified path) of this process, from ``/proc/self/cgroup``."""
    v1 = v2 = None
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return None, None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if "memory" in parts[1].split(","):
            v1 = parts[2]
        elif parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
    return v1, v2


def _read_limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        v = int(text)
    except ValueError:
        return None
    return v if 0 < v < UNLIMITED else None


def cgroup_memory_limit(proc_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> int | None:
    """The memory limit this process runs under (bytes; the tightest of its cgroup and its ancestors),
    or None when there is none.  cgroup v1 (``memory.limit_in_bytes``) and v2 (``memory.max``)."""
    v1, v2 = _cgroup_paths(proc_cgroup)
    found = []
    for rel, base, name in ((v1, Path(root) / "memory", "memory.limit_in_bytes"), (v2, Path(root), "memory.max")):
        if rel is None or not base.is_dir():
            continue
        p = Path(rel.lstrip("/"))
        for anc in [p, *p.parents]:
            lim = _read_limit(base / anc / name)
            if lim is not None:
                found.append(lim)
    return min(found) if found else None


def memory_budget(configured: int = 0) -> tuple[int | None, str]:
    """``(bytes, where from)``: ``configured`` when > 0, else the cgroup limit, else ``(None, "none")``."""
    if configured and configured > 0:
        return int(configured), "--memory-budget"
    lim = cgroup_memory_limit()
    return (lim, "cgroup limit") if lim is not None else (None, "none")


def tight_budget(configured: int, store) -> int | None:
    """The memory budget when the whole store does not fit it (some host serves parts from disk),
    else None.  What bounds queues, waiting batches and kept heap: a job whose parts fit runs as
    if no budget were set."""
    res = plan_residency(store, range(store.num_parts), configured)
    return None if res.fits else res.budget


def queue_depth(configured: int, budget: int | None) -> int:
    """A batch queue's high-water mark: ``configured``, at most :data:`BUDGET_QUEUE_DEPTH` under a budget."""
    return configured if budget is None else max(1, min(configured, BUDGET_QUEUE_DEPTH))


@dataclass(frozen=True)
class Residency:
    """One host's decision for its parts."""

    budget: int | None
    source: str
    part_bytes: int
    """Bytes of the part files the host's samplers and loaders read (``_PART_FILES``)."""

    @property
    def fits(self) -> bool:
        return self.budget is None or self.part_bytes <= FIT_FRACTION * self.budget

    @property
    def mode(self) -> str:
        return "in-memory" if self.fits else "out-of-core"

    def row_cache_bytes(self, loaders_on_host: int = 1) -> int:
        """A loader's hot-row cache budget: 0 when the parts fit (they are all in memory)."""
        if self.fits:
            return 0
        return int(self.budget * ROW_CACHE_FRACTION) // max(1, loaders_on_host)

    def describe(self) -> str:
        b = "no budget" if self.budget is None else f"budget {self.budget / 2**30:.2f} GiB ({self.source})"
        return f"{self.mode}: held parts {self.part_bytes / 2**30:.2f} GiB, {b}"


def plan_residency(store, parts, configured_budget: int = 0) -> Residency:
    """Whether ``parts`` of ``store`` fit this host's budget (see the module docstring)."""
    budget, source = memory_budget(configured_budget)
    total = 0
    for p in parts:
        d = store.root / store.manifest.parts[int(p)].path
        for name in _PART_FILES:
            f = d / f"{name}.npy"
            if f.exists():
                total += f.stat().st_size
        total += store.features.file_bytes(int(p))
    return Residency(budget=budget, source=source, part_bytes=total)


_ADVICE = {"willneed": "MADV_WILLNEED", "random": "MADV_RANDOM"}


def advise(arr: np.ndarray | None, how: str | None) -> None:
    """``madvise`` a memory-mapped array's whole mapping (``willneed`` | ``random``; None = leave it)."""
    if arr is None or how is None:
        return
    base = arr
    while base is not None and getattr(base, "_mmap", None) is None:
        base = getattr(base, "base", None)
    mm = None if base is None else base._mmap
    flag = getattr(mmap, _ADVICE[how], None)
    if mm is None or flag is None:
        return
    try:
        mm.madvise(flag)
    except (OSError, ValueError):
        pass                                    # best effort: advice never changes results


class DiskCounters:
    """Bytes this process read from block devices and its major page faults, as deltas since the
    last :meth:`take` (threads included)."""

    def __init__(self):
        self._last = self._now()

    @staticmethod
    def _now() -> tuple[int, int]:
        read = 0
        try:
            with open("/proc/self/io") as f:
                for line in f:
                    if line.startswith("read_bytes:"):
                        read = int(line.split()[1])
                        break
        except OSError:
            pass
        return read, resource.getrusage(resource.RUSAGE_SELF).ru_majflt

    def take(self) -> dict[str, float]:
        """``{"disk_read_bytes": ..., "major_faults": ...}`` since the previous call."""
        now = self._now()
        out = {"disk_read_bytes": float(now[0] - self._last[0]), "major_faults": float(now[1] - self._last[1])}
        self._last = now
        return out


def disk_summary(metrics: dict[str, float]) -> dict:
    """What the job's samplers and loaders read from disk, in total and per epoch, with the hot-row
    cache's hit rate (rows of held parts served from it; None when no loader was out of core)."""
    from argosy.shared.traffic import per_epoch_values
    hits, misses = per_epoch_values(metrics, "row_cache_hits_e"), per_epoch_values(metrics, "row_cache_misses_e")
    n = max(len(hits), len(misses))
    hits, misses = hits + [0.0] * (n - len(hits)), misses + [0.0] * (n - len(misses))
    known = lambda a, b: a is not None and b is not None    # noqa: E731 - None: moved out of Redis, unknown
    h, m = metrics.get("row_cache_hits", 0.0), metrics.get("row_cache_misses", 0.0)
    return {"disk_read_bytes": metrics.get("disk_read_bytes", 0.0),
            "disk_read_bytes_per_epoch": per_epoch_values(metrics, "disk_read_bytes_e"),
            "major_faults": int(metrics.get("major_faults", 0.0)),
            "major_faults_per_epoch": [None if v is None else int(v) for v in per_epoch_values(metrics, "major_faults_e")],
            "row_cache_hit_rate": h / (h + m) if h + m else None,
            "row_cache_hit_rate_per_epoch": [a / (a + b) if known(a, b) and a + b else None for a, b in zip(hits, misses)]}
