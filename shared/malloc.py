"""The process heap (glibc malloc), set once per process for what the process is for.

* :func:`keep_heap`, throughput processes (trainer, sampler, loader): freed tensors stay in the heap
  and the next batch's tensors reuse their pages instead of faulting fresh ones in.
* :func:`configure_malloc` + :func:`trim_heap`, the memory-bounded full-graph modes and the offload
  store: every large tensor is its own mapping, handed back when freed.

The RSS probes the full-graph memory ratios are measured with are :mod:`argosy.shared.rss`.
"""

from __future__ import annotations

__all__ = ["keep_heap", "configure_malloc", "trim_heap"]


def _libc():
    import ctypes

    return ctypes.CDLL("libc.so.6")


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8


def keep_heap(mmap_threshold: int = 32 << 20, trim_threshold: int = 1 << 30) -> bool:
    """Serve allocations up to ``mmap_threshold`` (glibc's maximum, 32 MiB) from the heap and keep
    up to ``trim_threshold`` of freed heap instead of returning it (call before threads start).

    By default glibc maps a tensor above its (dynamic) threshold and unmaps it when freed, so every
    batch's activations, gradients and dropout masks fault fresh zeroed pages in: on this project's
    VM that made element-wise ops run at ~0.7 GB/s and a SAGE train step on a soc-slashdot batch
    take 126-158 ms of CPU instead of 99-103 ms (one thread, same batches; docs/compute.md).  The
    cost: the heap's high-water mark (about one step's tensors) stays resident.  Returns whether
    both settings were applied (False off glibc).
    """
    try:
        libc = _libc()
        return bool(libc.mallopt(M_MMAP_THRESHOLD, int(mmap_threshold))) and bool(libc.mallopt(M_TRIM_THRESHOLD, int(trim_threshold)))
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


def trim_heap() -> None:
    """Return free heap pages to the OS (``malloc_trim(0)``); a no-op off glibc.

    Called by the offloaded trainer when a layer's blocks are released, so
    peak RSS tracks live data rather than the allocator's high-water mark.
    """
    try:
        _libc().malloc_trim(0)
    except (OSError, AttributeError):
        pass
