"""How many threads the partitioner's streamed passes use (``argosy partition --threads``).

Why this module exists: GREM's label-propagation clustering passes, its cut counts and the
store writer read independent chunks; with ``threads > 1`` they read and process several chunks
at once (numba kernels release the GIL), one chunk per worker at a time, so a worker that the
scheduler parks does not hold the others back (no barrier inside a pass).  One setting for all.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, Optional, TypeVar

__all__ = ["get_threads", "set_threads", "using_threads", "map_chunks", "default_threads"]

T = TypeVar("T")

_threads: Optional[int] = None


def default_threads() -> int:
    """The cores this process may run on (its CPU affinity), or ``ARGOSY_THREADS`` if set."""
    from argosy.shared import envs
    env = envs.get(envs.PARTITION_THREADS)
    if env:
        return max(1, env)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def get_threads() -> int:
    """Threads the streamed passes use now (default: :func:`default_threads`)."""
    return default_threads() if _threads is None else _threads


def set_threads(n: Optional[int]) -> None:
    """Use ``n`` threads (None: back to the default)."""
    global _threads
    if n is not None and int(n) < 1:
        raise ValueError(f"threads must be >= 1 (got {n})")
    _threads = None if n is None else int(n)


@contextmanager
def using_threads(n: Optional[int]) -> Iterator[None]:
    """``set_threads(n)`` for the duration of a ``with`` block (None: leave it as it is)."""
    global _threads
    old = _threads
    if n is not None:
        set_threads(n)
    try:
        yield
    finally:
        _threads = old


def map_chunks(fn: Callable[[int], T], chunks: Iterable[int], threads: Optional[int] = None) -> Iterator[T]:
    """``fn(i)`` for every chunk index, on up to ``threads`` worker threads, results in order.

    ``fn`` must do its work in GIL-releasing code (numba ``nogil`` kernels, file reads) for the
    threads to overlap.  One thread: a plain loop, nothing started."""
    t = get_threads() if threads is None else threads
    chunks = list(chunks)
    if t <= 1 or len(chunks) <= 1:
        for i in chunks:
            yield fn(i)
        return
    with ThreadPoolExecutor(min(t, len(chunks))) as pool:
        yield from pool.map(fn, chunks)
