"""The process heap, set once per process for what the process is for.

* :func:`allocator_env`, the environment trainers, samplers and loaders start with: jemalloc preloaded
  where it is installed.  Under faults glibc's heap spread in a long-lived trainer (soak60f: heap in use
  flat, its extent +22-47 MB per 10 min, RSS +1.5-2.3 %/10 min); on jemalloc it stayed flat
  (``docs/reliability.md``).  Where it is missing, the service says so in its log.
* :func:`keep_heap`, throughput processes (trainer, sampler, loader): freed tensors stay in the heap
  and the next batch's tensors reuse their pages instead of faulting fresh ones in.
  A :class:`HeapTrimmer` hands what fragmentation strands back every minute.
* :func:`configure_malloc` + :func:`trim_heap`, the memory-bounded full-graph modes and the offload
  store: every large tensor is its own mapping, handed back when freed; :func:`huge_page_env`, the
  environment those processes start with, so that faulting such a mapping in is cheap.

The RSS probes the full-graph memory ratios are measured with are :mod:`argosy.shared.rss`.
"""

from __future__ import annotations

import os
import time

__all__ = ["allocator_env", "allocator", "jemalloc_path", "JEMALLOC_LIBS", "JEMALLOC_CONF", "keep_heap",
           "configure_malloc", "trim_heap", "HeapTrimmer", "HEAP_TRIM_EVERY_S", "huge_page_env", "THP_ENV"]


def _libc():
    import ctypes

    return ctypes.CDLL("libc.so.6")


JEMALLOC_LIBS = ("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2",
                 "/usr/lib64/libjemalloc.so.2", "/usr/lib/libjemalloc.so.2", "/usr/local/lib/libjemalloc.so.2")
"""Where Debian/Ubuntu (``libjemalloc2``), Fedora/RHEL (``jemalloc``) and a source build put jemalloc."""

JEMALLOC_CONF = "dirty_decay_ms:-1,muzzy_decay_ms:-1"
"""jemalloc's settings (``MALLOC_CONF``, unless the environment sets its own): freed pages stay in the process
for the next batch, and :class:`HeapTrimmer` hands them back once a minute (:func:`trim_heap`), as on glibc.
jemalloc's default time decay returned a train step's freed tensors between steps: a 3-layer step on
soc-slashdot batches of 1,024 seeds then faulted 20,000-100,000 pages back in and took 1.42-1.75x the CPU
of glibc with its heap kept; with decay off, 0 faults and 0.83-1.01x (``bench/results/allocator_step.md``)."""

_CHOICES = ("auto", "jemalloc", "glibc")


def jemalloc_path() -> str | None:
    """The first of :data:`JEMALLOC_LIBS` installed here, else None."""
    return next((p for p in JEMALLOC_LIBS if os.path.exists(p)), None)


def allocator_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) for a trainer, sampler or loader: jemalloc in ``LD_PRELOAD`` and
    :data:`JEMALLOC_CONF` in ``MALLOC_CONF`` unless ``ARGOSY_ALLOCATOR`` says ``glibc`` or jemalloc is not
    installed (then unchanged; the service logs a warning, :func:`allocator`).  The preload has to be in the
    environment the process starts with: a library loaded later cannot take over malloc.

    Raises :class:`~argosy.shared.errors.ConfigError` for an unknown ``ARGOSY_ALLOCATOR``, or ``jemalloc``
    where it is not installed.
    """
    from argosy.shared import envs
    from argosy.shared.errors import ConfigError

    out = dict(os.environ if env is None else env)
    choice = out.get(envs.ALLOCATOR) or "auto"
    if choice not in _CHOICES:
        raise ConfigError(f"{envs.ALLOCATOR}={choice!r}: expected one of {', '.join(_CHOICES)}")
    if choice == "glibc":
        return out
    lib = jemalloc_path()
    if lib is None:
        if choice == "jemalloc":
            raise ConfigError(f"{envs.ALLOCATOR}=jemalloc, but libjemalloc.so.2 is in none of "
                              f"{', '.join(JEMALLOC_LIBS)} (Debian/Ubuntu: apt-get install libjemalloc2)")
        return out
    preload = [p for p in out.get("LD_PRELOAD", "").replace(" ", ":").split(":") if p]
    if lib not in preload:
        out["LD_PRELOAD"] = ":".join([lib, *preload])
    out.setdefault("MALLOC_CONF", JEMALLOC_CONF)
    return out


_ALLOCATOR: str | None = None


def allocator() -> str:
    """The malloc this process runs with: ``jemalloc`` when libjemalloc is mapped into it, else ``system``
    (glibc's on Linux).  Read once: a preload cannot change while the process runs."""
    global _ALLOCATOR
    if _ALLOCATOR is None:
        try:
            with open("/proc/self/maps") as f:
                _ALLOCATOR = "jemalloc" if any("libjemalloc" in line for line in f) else "system"
        except OSError:
            _ALLOCATOR = "system"
    return _ALLOCATOR


M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -2, -3, -8


def keep_heap(mmap_threshold: int = 32 << 20, trim_threshold: int = 1 << 30, top_pad: int = 0,
              budget: int | None = None) -> bool:
    """glibc's malloc (a no-op under jemalloc, whose own settings are :data:`JEMALLOC_CONF`):
    serve allocations up to ``mmap_threshold`` from the heap and keep up to ``trim_threshold`` of
    freed heap (plus ``top_pad`` on each growth) instead of returning it.

    By default glibc maps a tensor above its (dynamic) threshold and unmaps it when freed, so every
    batch's activations, gradients and dropout masks fault fresh zeroed pages in: on this project's
    VM that made element-wise ops run at ~0.7 GB/s and a SAGE train step on a soc-slashdot batch
    take 126-158 ms of CPU instead of 99-103 ms (one thread, same batches; docs/compute.md).  The
    cost: the heap's high-water mark (about one step's tensors) stays resident.

    ``budget``: the job's memory budget per host (:func:`~argosy.shared.store.residency.memory_budget`),
    when one is in force: then at most a 32nd of it is kept freed, no mapping above 32 MiB comes from
    the heap, and the top pad is at most a 64th (a trainer keeping 2 GB of freed heap was OOM-killed
    in a 3 GiB cgroup).  May be called again later (the settings are global); returns whether all
    settings were applied (False off glibc).
    """
    if budget:
        mmap_threshold = min(mmap_threshold, 32 << 20)
        trim_threshold = min(trim_threshold, budget // 32)
        top_pad = min(top_pad, budget // 64)
    try:
        libc = _libc()
        return (bool(libc.mallopt(M_MMAP_THRESHOLD, int(mmap_threshold)))
                and bool(libc.mallopt(M_TRIM_THRESHOLD, int(trim_threshold)))
                and bool(libc.mallopt(M_TOP_PAD, int(top_pad))))
    except (OSError, AttributeError):
        return False


def configure_malloc(arena_max: int = 1, mmap_threshold: int = 256 << 10) -> bool:
    """Limit glibc to ``arena_max`` malloc arenas and pin its mmap threshold (call before threads start).

    The offload store's I/O threads would otherwise each grow a private arena of block-sized chunks,
    and freed chunks stranded in one arena are never reused by another.  glibc also raises its mmap
    threshold after the first large free, after which activation-sized tensors come from the heap
    and the heap grows from epoch to epoch; pinned, every tensor above ``mmap_threshold`` is its own
    mapping and goes back to the OS when freed (measured: SAR per-worker peak 0.55x -> 0.51x of
    in-memory at N = 2, 0.37x -> 0.28x at N = 4).  Returns whether both settings were applied
    (False off glibc).
    """
    try:
        libc = _libc()
        return bool(libc.mallopt(M_ARENA_MAX, int(arena_max))) and bool(libc.mallopt(M_MMAP_THRESHOLD, int(mmap_threshold)))
    except (OSError, AttributeError):
        return False


THP_ENV = "THP_MEM_ALLOC_ENABLE"
"""torch's switch (read once, at its first allocation) to align CPU tensors of 2 MiB and more to 2 MiB and
``madvise(MADV_HUGEPAGE)`` them."""


def huge_page_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with :data:`THP_ENV` on unless it is set: for a process that
    maps and unmaps every large tensor (:func:`configure_malloc`).

    A fresh mapping is faulted in page by page; with transparent huge pages (``madvise`` mode, the
    kernel's default) a 38 MB tensor is 19 faults instead of 9,300: a fresh 38 MB tensor filled in
    2.6 ms instead of 15.5 ms on this project's VM (a reused one: 1.5 ms), which the offloaded
    schedule pays for every per-part tensor (docs/fullgraph.md).  The flag is read before anything
    else runs, so it has to be in the environment the process starts with.
    """
    out = dict(os.environ if env is None else env)
    out.setdefault(THP_ENV, "1")
    return out


MALLCTL_ARENAS_ALL = 4096
"""jemalloc's index for "every arena" in ``arena.<i>.purge``."""


def trim_heap() -> None:
    """Return free heap pages to the OS: jemalloc's ``arena.<all>.purge`` when this process runs on jemalloc,
    else glibc's ``malloc_trim(0)``; a no-op on neither.

    Called by the offloaded trainer when a layer's blocks are released, so
    peak RSS tracks live data rather than the allocator's high-water mark.
    """
    try:
        if allocator() == "jemalloc":
            import ctypes
            ctypes.CDLL(None).mallctl(f"arena.{MALLCTL_ARENAS_ALL}.purge".encode(), None, None, None, 0)
        else:
            _libc().malloc_trim(0)
    except (OSError, AttributeError):
        pass


HEAP_TRIM_EVERY_S = 60.0
"""Every this many seconds a throughput process (trainer, sampler, loader) hands its free heap pages back.
Its heap is kept on purpose (:func:`keep_heap`: freed batches are reused, not unmapped), but fragmentation
makes that heap spread: in a fault-free 2-host soak (Cora) glibc counted 705-730 MB in use throughout while
the trainer's heap extent grew 1,050 -> 1,217 MB in 5 min (34,000 free chunks), and RSS follows the extent as
freed chunks are touched again; a loader that lived through link faults (its send queues filling and
draining) kept 28 MB in use in a heap that spread 33 -> 41 MB (soak60e).  Measured per trim period on the
trainer (``bench/results/trainer_trim.md``): every epoch, 4 ms a trim plus ~6,700 page faults an epoch,
+13 % trainer CPU (147 vs 130 ms an epoch), RSS flat at 1.10-1.14 GB; every 60 s, 0.07 s a trim and 330
faults an epoch, CPU as without (131 ms), RSS 1.24-1.33 GB; every 5 min, a 1.22-1.40 GB sawtooth."""


class HeapTrimmer:
    """:func:`trim_heap` at most every ``every_s`` seconds: call :meth:`maybe` from a loop at a quiet point
    (an epoch's end, between batches).  One per process; on glibc and on jemalloc alike (:func:`trim_heap`)."""

    def __init__(self, every_s: float = HEAP_TRIM_EVERY_S):
        self.every_s = every_s
        self.last = time.monotonic()
        """When the free heap was last handed back."""
        self.trims = 0

    def maybe(self, now: float | None = None) -> float | None:
        """Trim when ``every_s`` has passed since the last; returns the seconds it took, else None."""
        now = time.monotonic() if now is None else now
        if now - self.last < self.every_s:
            return None
        t0 = time.perf_counter()
        trim_heap()
        self.last = time.monotonic()
        self.trims += 1
        return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    """``python -m argosy.shared.malloc --shell``: the ``export`` lines of :func:`allocator_env` for
    docker/entrypoint.sh, so that containers and the local launcher preload the same way."""
    import argparse
    import shlex
    import sys

    from argosy.shared.errors import ConfigError

    ap = argparse.ArgumentParser(prog="python -m argosy.shared.malloc", description=main.__doc__)
    ap.add_argument("--shell", action="store_true", help="print the export lines (sh) of allocator_env()")
    args = ap.parse_args(argv)
    now = dict(os.environ)
    try:
        env = allocator_env(now)
    except ConfigError as e:
        print(f"argosy: {e}", file=sys.stderr)
        return 2
    for key in ("LD_PRELOAD", "MALLOC_CONF"):
        if args.shell and env.get(key) and env[key] != now.get(key):
            print(f"export {key}={shlex.quote(env[key])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
