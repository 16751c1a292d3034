"""The offload store: tensor blocks keyed by (kind, layer, part), host cache + spill files.

Why this module exists: full-graph training of a graph whose activations do
not fit in memory keeps per-layer activations and gradients as *compact*
per-part blocks (GriNNder's rule: never store a gathered/expanded tensor).
The store keeps as many blocks as a byte budget allows in host RAM and spills
the rest to one file per block on local disk (NVMe in production). Because a
layer-by-layer, part-by-part epoch has a known access order, the store takes
that order as a :class:`~services.offload.policy.Schedule` and runs Belady's
optimal eviction with exact prefetch; LRU is the baseline.

Guarantees: nothing is silently dropped. A block that cannot be kept in the
cache is written to disk; if there is no spill directory, or the disk budget
or the disk itself is full, the call raises :class:`CacheBudgetError` or
:class:`DiskBudgetError` naming the sizes involved.

Threading: every public method is thread-safe. Disk reads for prefetches run
on one background I/O thread outside the lock; ``*_async`` methods queue work
on that same FIFO thread and return futures. A synchronous read of a key with
a queued async write waits for that write, so read-after-write order holds.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

import numpy as np
import torch

from argosy.shared.errors import BlockNotFoundError, CacheBudgetError, DiskBudgetError, OffloadError

from .policy import INF, Access, BlockKey, Schedule, block_key as _key
from .spill import Block, SpillFiles, file_path, read_file, write_file

__all__ = ["OffloadStore", "StoreStats"]

logger = logging.getLogger(__name__)


@dataclass
class StoreStats:
    """Counters of one store. Hit rate is byte-weighted over demand reads.

    A demand read (``get``, each source block of ``gather``, the target of
    ``scatter_add``) is a *hit* when the block is resident or already being
    prefetched (``prefetch_waits`` counts the latter: the caller waited for an
    in-flight prefetch), a *miss* when it has to issue the disk read itself.
    """

    hits: int = 0
    misses: int = 0
    hit_bytes: int = 0
    miss_bytes: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    evictions: int = 0
    bypass_writes: int = 0
    bypass_reads: int = 0
    prefetch_loads: int = 0
    prefetch_dropped: int = 0
    prefetch_waits: int = 0
    resident_bytes: int = 0
    peak_resident_bytes: int = 0
    disk_bytes: int = 0
    """Bytes of the blocks whose current contents are on disk."""
    peak_disk_bytes: int = 0
    file_bytes: int = 0
    """Bytes of the spill files on disk: the blocks' plus released keys' files kept for the key's next block."""
    peak_file_bytes: int = 0
    unplanned_accesses: int = 0
    peak_pending_bytes: int = 0
    """Most bytes held at once by queued write-behind (``*_async``) writes: the spill buffers."""
    peak_staged_bytes: int = 0
    """Most bytes held at once by prefetched blocks waiting in staging buffers."""
    write_seconds: float = 0.0
    """Time spent writing spill files (bytes_written / write_seconds: the disk's write bandwidth used)."""
    read_seconds: float = 0.0
    """Time spent reading spill files (demand reads and prefetches)."""
    write_wait_seconds: float = 0.0
    """Time callers of ``*_async`` writes waited for the write-behind queue to drain (back-pressure)."""

    @property
    def hit_rate(self) -> float:
        tot = self.hit_bytes + self.miss_bytes
        return self.hit_bytes / tot if tot else 1.0

    def as_dict(self) -> dict:
        d = asdict(self)
        d["hit_rate"] = self.hit_rate
        return d




class OffloadStore:
    """Blocks of tensors in a budgeted host cache backed by spill files.

    Args:
        cache_bytes: host-RAM budget for resident blocks.
        spill_dir: directory for spill files; None = no disk (exceeding the
            cache budget raises). A temporary directory is made for ``"auto"``.
        disk_bytes: spill budget in bytes (None = unlimited).
        policy: ``belady`` (needs :meth:`plan`; falls back to LRU order without
            one) or ``lru``.
        prefetch: with ``belady``, load upcoming planned reads in the background.
        prefetch_window: staging buffers for prefetched blocks (outside the cache
            budget, like GriNNder's pinned staging ring), i.e. how far ahead of
            the plan's cursor reads are issued.
        max_pending_bytes: bound on bytes held by queued ``*_async`` writes
            (back-pressure: a caller blocks until the I/O thread catches up);
            default a quarter of ``cache_bytes``.

    Shapes:
        Blocks are CPU tensors of any shape/dtype; ``gather``/``scatter_add``
        work on 2-D ``[rows, features]`` blocks.

    Example:
        >>> s = OffloadStore(cache_bytes=1 << 20)
        >>> s.put("act", 0, 0, torch.ones(4, 2))
        >>> s.gather("act", 0, [(0, None), (0, np.array([1]))]).shape
        torch.Size([5, 2])
        >>> s.close()
    """

    def __init__(self, cache_bytes: int, spill_dir: str | None = None, disk_bytes: int | None = None,
                 policy: str = "belady", prefetch: bool = True, prefetch_window: int = 2,
                 max_pending_bytes: int | None = None) -> None:
        if policy not in ("belady", "lru"):
            raise ValueError(f"policy must be belady|lru (got {policy!r})")
        if cache_bytes < 0:
            raise ValueError(f"cache_bytes must be >= 0 (got {cache_bytes})")
        self.cache_bytes = int(cache_bytes)
        self.disk_budget = None if disk_bytes is None else int(disk_bytes)
        self.policy = policy
        self.prefetch_enabled = bool(prefetch) and policy == "belady"
        self.prefetch_window = int(prefetch_window)
        self._own_dir = spill_dir == "auto"
        self.spill_dir = tempfile.mkdtemp(prefix="argosy-offload-") if self._own_dir else spill_dir
        if self.spill_dir is not None:
            os.makedirs(self.spill_dir, exist_ok=True)
        self._blocks: dict[BlockKey, Block] = {}
        self._last_use: dict[BlockKey, int] = {}
        self._clock = 0
        self._schedule: Schedule | None = None
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="offload-io")
        self._pf_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="offload-prefetch")
        self._files = SpillFiles(self.spill_dir or "")
        self._pending: dict[BlockKey, int] = {}
        self._pending_bytes = 0
        self._writing_bytes = 0  # evicted blocks being written (out of the cache's count, still in memory)
        self._staged_bytes = 0
        self.max_pending_bytes = int(max_pending_bytes if max_pending_bytes is not None
                                     else max(1, self.cache_bytes // 4))
        self._stats = StoreStats()
        self._closed = False
        self._failed: BaseException | None = None  # the first queued write that failed: the store lost it

    # ------------------------------------------------------------------ planning
    def plan(self, accesses: Iterable[Access] | Schedule, cyclic: bool = True) -> None:
        """Give the store the access order of the coming pass (drives Belady + prefetch)."""
        with self._lock:
            self._schedule = accesses if isinstance(accesses, Schedule) else Schedule(accesses, cyclic)

    def begin_epoch(self) -> None:
        """Rewind the plan's cursor (the same pass starts again)."""
        with self._lock:
            if self._schedule is not None:
                self._schedule.reset()

    # ------------------------------------------------------------------ public sync API
    def put(self, kind: str, layer: int, part: int, tensor: torch.Tensor, _touch: bool = True) -> None:
        """Store (or overwrite) a block. The store takes ownership of a CPU tensor.

        Shapes:
            tensor: any shape; moved to CPU (GPU tensors are copied).
        """
        key = _key(kind, layer, part)
        data = tensor.detach()
        if data.device.type != "cpu":
            data = data.to("cpu")
        data = data.contiguous()
        # a view would keep its whole base tensor alive in the cache: copied if the cache keeps it
        # (a block that goes straight to disk is written from the view)
        view = data.untyped_storage().nbytes() > data.nelement() * data.element_size()
        with self._lock:
            self._check_open()
            if _touch:
                self._wait_pending(key)  # a sync put lands after queued async writes of the key
            old = self._blocks.get(key)
            if old is not None:
                self._wait_loading(old)
                self._drop(old)
            blk = Block(key, tuple(data.shape), data.dtype)
            self._blocks[key] = blk
            if _touch:
                self._touch(key)
            self._admit(blk, data, dirty=True, copy=view)
            self._after_access()

    def get(self, kind: str, layer: int, part: int) -> torch.Tensor:
        """Read a block (do not modify the returned tensor; it may be the cached copy).

        Raises:
            BlockNotFoundError: never written or already released.
        """
        key = _key(kind, layer, part)
        data, _cached = self._acquire(key, pin=False)
        with self._lock:
            self._after_access()
        return data

    def gather(self, kind: str, layer: int, sources: Sequence[tuple], out: torch.Tensor | None = None
               ) -> torch.Tensor:
        """Concatenate rows of several blocks of one layer: a part's expanded input.

        Args:
            kind, layer: which blocks.
            sources: ``(part, rows)`` or ``(kind, part, rows)`` in output order;
                ``rows`` None = the whole block.
            out: optional preallocated output.

        Shapes:
            each block ``[n_q, f]``; rows ``int64[b_q]``; returns ``[sum b_q, f]``.

        Every piece is written straight into the output: a block on disk is read into its rows
        (no staging buffer, no concatenation), a cached or prefetched one copied once.
        """
        return self._gather(kind, layer, sources, out, True)

    def gather_async(self, kind: str, layer: int, sources: Sequence[tuple], out: torch.Tensor | None = None
                     ) -> Future:
        """:meth:`gather` on the I/O thread, after the writes queued before it; the reads count as
        happening now (the plan's order is the caller's program order, whenever the thread runs them)."""
        with self._lock:
            self._check_open()
            for src in sources:
                k, part, _ = src if len(src) == 3 else (kind, *src)
                self._touch(_key(k, layer, part))
        return self._pool.submit(self._gather, kind, layer, sources, out, False)

    def _gather(self, kind: str, layer: int, sources: Sequence[tuple], out: torch.Tensor | None,
                touch: bool) -> torch.Tensor:
        srcs = []
        for src in sources:
            k, part, rows = src if len(src) == 3 else (kind, *src)
            srcs.append((_key(k, layer, part), rows))
        with self._lock:
            self._check_open()
            for k, _ in srcs:
                self._wait_pending(k)  # a queued write of the block creates or replaces it
            missing = [k for k, _ in srcs if k not in self._blocks]
            if missing:
                raise BlockNotFoundError(f"offload store has no block {missing[0]} (never written or released)")
            shapes = [self._blocks[k].shape for k, _ in srcs]
            dtype = self._blocks[srcs[0][0]].dtype if srcs else torch.float32
        lens = [sh[0] if rows is None else len(rows) for sh, (_, rows) in zip(shapes, srcs)]
        tail = tuple(shapes[0][1:]) if shapes else (0,)
        if out is None:
            out = torch.empty((sum(lens),) + tail, dtype=dtype)
        elif out.shape[0] != sum(lens):
            raise ValueError(f"gather: out has {out.shape[0]} rows, the sources {sum(lens)}")
        off = 0
        for (key, rows), k in zip(srcs, lens):
            dst = out[off:off + k]
            off += k
            data, _ = self._acquire(key, pin=False, touch=touch,
                                    into=dst if rows is None and dst.is_contiguous() else None)
            if data is not dst:
                if rows is None:
                    dst.copy_(data)
                else:
                    torch.index_select(data, 0, torch.as_tensor(rows, dtype=torch.int64), out=dst)
            with self._lock:
                self._after_access()
        return out

    def scatter_add(self, kind: str, layer: int, part: int, rows: np.ndarray | torch.Tensor | None,
                    src: torch.Tensor, num_rows: int | None = None, _touch: bool = True) -> None:
        """Accumulate ``src`` into rows of a block, creating a zero block if absent.

        Args:
            rows: ``int64[k]`` target rows, or None to add ``src`` to the whole block.
            src: ``[k, f]`` values (moved to CPU).
            num_rows: row count of the block if it must be created (default: ``k``).
        """
        key = _key(kind, layer, part)
        src = src.detach().to("cpu")
        created = False
        with self._lock:
            self._check_open()
            self._wait_pending(key)
            if key not in self._blocks:
                created = True
                n = int(num_rows if num_rows is not None else src.shape[0])
                data = torch.zeros((n,) + tuple(src.shape[1:]), dtype=src.dtype)
                blk = Block(key, tuple(data.shape), data.dtype)
                self._blocks[key] = blk
                if _touch:
                    self._touch(key)
                self._admit(blk, data, dirty=True)
                cached = blk.data is not None
                if cached:
                    blk.pins += 1
        if not created:
            data, cached = self._acquire(key, pin=True, touch=_touch)
        try:
            if rows is None:
                data.add_(src)
            else:
                data.index_add_(0, torch.as_tensor(rows, dtype=torch.int64), src)
        finally:
            with self._lock:
                b = self._blocks[key]
                if cached:
                    b.pins -= 1
                    b.dirty = True
                else:  # read-through (not admitted): write the update back now
                    self._write(b, data)
                    b.on_disk = True
                self._after_access()

    def release(self, kind: str, layer: int, part: int) -> None:
        """Forget a block (memory and spill file); releasing a missing block is a no-op."""
        key = _key(kind, layer, part)
        with self._lock:
            self._wait_pending(key)
            blk = self._blocks.get(key)
            if blk is not None:
                self._wait_loading(blk)
                self._drop(blk)

    def release_layer(self, kind: str, layer: int) -> None:
        """Release every block of one (kind, layer), including ones still queued for writing."""
        with self._lock:
            if not threading.current_thread().name.startswith("offload-io"):
                while any(k[0] == kind and k[1] == layer for k in self._pending):
                    self._cond.wait()
            keys = [k for k in self._blocks if k[0] == kind and k[1] == layer]
        for k in keys:
            self.release(*k)

    def pin(self, keys: Iterable[BlockKey]) -> None:
        """Make blocks resident and exempt from eviction until :meth:`unpin`."""
        for k in keys:
            self._acquire(_key(*k), pin=True, count=False, must_pin=True)

    def unpin(self, keys: Iterable[BlockKey]) -> None:
        with self._lock:
            for k in keys:
                b = self._blocks.get(_key(*k))
                if b is not None and b.pins > 0:
                    b.pins -= 1

    def flush(self, kind: str | None = None, layer: int | None = None) -> int:
        """Write dirty resident blocks to disk (they stay cached, now clean). Returns bytes written."""
        self.sync()
        written = 0
        with self._lock:
            if self.spill_dir is None:
                return 0
            for b in list(self._blocks.values()):
                if (kind is None or b.key[0] == kind) and (layer is None or b.key[1] == layer) \
                        and b.data is not None and (b.dirty or not b.on_disk):
                    self._write(b, b.data)
                    b.on_disk, b.dirty = True, False
                    written += b.nbytes
        return written

    def contains(self, kind: str, layer: int, part: int) -> bool:
        with self._lock:
            return _key(kind, layer, part) in self._blocks

    def is_resident(self, kind: str, layer: int, part: int) -> bool:
        with self._lock:
            b = self._blocks.get(_key(kind, layer, part))
            return b is not None and b.data is not None

    def stats(self, reset: bool = False) -> dict:
        """Counters as a dict (see :class:`StoreStats`); ``reset`` zeroes the traffic counters."""
        with self._lock:
            self._stats.unplanned_accesses = self._schedule.unplanned if self._schedule else 0
            self._stats.file_bytes = self._files.bytes  # also after files were freed for room
            d = self._stats.as_dict()
            if reset:
                keep = (self._stats.resident_bytes, self._stats.disk_bytes, self._stats.file_bytes)
                self._stats = StoreStats(resident_bytes=keep[0], peak_resident_bytes=keep[0],
                                         disk_bytes=keep[1], peak_disk_bytes=keep[1],
                                         file_bytes=keep[2], peak_file_bytes=keep[2])
                if self._schedule:
                    self._schedule.unplanned = 0
            return d

    # ------------------------------------------------------------------ async API
    def put_async(self, kind: str, layer: int, part: int, tensor: torch.Tensor) -> Future:
        """Queue :meth:`put` on the I/O thread; reads of the key wait for it."""
        return self._submit_write(_key(kind, layer, part), tensor.nelement() * tensor.element_size(),
                                  self.put, kind, layer, part, tensor, False)

    def scatter_add_async(self, kind: str, layer: int, part: int, rows, src: torch.Tensor,
                          num_rows: int | None = None) -> Future:
        """Queue :meth:`scatter_add` on the I/O thread (FIFO with other async work)."""
        return self._submit_write(_key(kind, layer, part), src.nelement() * src.element_size(),
                                  self.scatter_add, kind, layer, part, rows, src, num_rows, False)

    def get_async(self, kind: str, layer: int, part: int) -> Future:
        return self._pool.submit(self.get, kind, layer, part)

    def prefetch(self, keys: Iterable[BlockKey]) -> list[Future]:
        """Load blocks into the cache in the background (explicit prefetch)."""
        futs = []
        with self._lock:
            for k in keys:
                b = self._blocks.get(_key(*k))
                if b is not None and b.data is None and not b.loading and b.staged is None and b.on_disk:
                    b.loading = True
                    futs.append(self._pf_pool.submit(self._load_prefetch, b.key))
        return futs

    def sync(self) -> None:
        """Wait for all queued async work and prefetches."""
        self._pool.submit(lambda: None).result()
        self._pf_pool.submit(lambda: None).result()
        with self._lock:
            self._check_open()  # a queued write that failed is reported here at the latest

    def close(self) -> None:
        """Stop the I/O thread and delete spill files (and an ``auto`` spill dir)."""
        if self._closed:
            return
        self._pool.shutdown(wait=True)
        self._pf_pool.shutdown(wait=True)
        with self._lock:
            for b in list(self._blocks.values()):
                self._drop(b)
            self._closed = True
            self._files.free(None, lambda key: False)
        if self._own_dir and self.spill_dir:
            shutil.rmtree(self.spill_dir, ignore_errors=True)

    def __enter__(self) -> "OffloadStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _check_open(self) -> None:
        if self._closed:
            raise OffloadError("offload store is closed")
        if self._failed is not None:  # every later call says so: a block the caller queued is not stored
            raise OffloadError(f"a queued write of the offload store failed: "
                               f"{type(self._failed).__name__}: {self._failed}") from self._failed

    def _submit_write(self, key: BlockKey, nbytes: int, fn, *args) -> Future:
        with self._cond:
            self._check_open()
            t0 = time.perf_counter()
            while self._pending_bytes > 0 and self._pending_bytes + nbytes > self.max_pending_bytes:
                self._cond.wait()  # back-pressure: never queue unbounded memory
            self._stats.write_wait_seconds += time.perf_counter() - t0
            self._pending_bytes += nbytes
            self._stats.peak_pending_bytes = max(self._stats.peak_pending_bytes, self._pending_bytes)
            self._pending[key] = self._pending.get(key, 0) + 1
            self._touch(key)  # the plan follows program order, not I/O-thread order

        def run():
            try:
                return fn(*args)
            except BaseException as e:
                with self._lock:
                    self._failed = self._failed or e
                raise
            finally:
                with self._cond:
                    self._pending_bytes -= nbytes
                    self._pending[key] -= 1
                    if not self._pending[key]:
                        del self._pending[key]
                    self._cond.notify_all()
        return self._pool.submit(run)

    def _wait_pending(self, key: BlockKey) -> None:
        if threading.current_thread().name.startswith("offload-io"):
            return  # the I/O thread runs queued work in order
        while self._pending.get(key, 0) > 0:
            self._cond.wait()

    def _wait_loading(self, blk: Block) -> None:
        while blk.loading:
            self._cond.wait()

    def _touch(self, key: BlockKey) -> None:
        self._clock += 1
        self._last_use[key] = self._clock
        if self._schedule is not None:
            self._schedule.advance(key)

    def _path(self, b: Block) -> str:
        assert self.spill_dir is not None
        return file_path(self.spill_dir, b.key)

    def _next_use(self, key: BlockKey) -> float:
        if self.policy == "belady" and self._schedule is not None:
            return self._schedule.next_use(key)
        return INF

    def _acquire(self, key: BlockKey, pin: bool, count: bool = True,
                 must_pin: bool = False, touch: bool = True,
                 into: torch.Tensor | None = None) -> tuple[torch.Tensor, bool]:
        """Resident data of ``key`` (reading it from disk on a miss). Returns (data, cached).

        With ``pin`` a resident block is pinned (caller unpins); a block that
        cannot be admitted is returned uncached (read-through) unless
        ``must_pin``, which raises :class:`CacheBudgetError` instead.  With
        ``into`` (a contiguous tensor of the block's shape; not with ``pin``) a
        miss is read straight into it and ``into`` returned (copied into the
        cache only if the policy admits the block).
        """
        with self._lock:
            self._check_open()
            self._wait_pending(key)
            blk = self._blocks.get(key)
            if blk is None:
                raise BlockNotFoundError(f"offload store has no block {key} (never written or released)")
            if count and touch:
                self._touch(key)
            if blk.loading:
                if count:
                    self._stats.prefetch_waits += 1
                self._wait_loading(blk)
            if blk.data is None and blk.staged is not None:  # prefetched: decide admission now (MIN)
                data = self._unstage(blk)
                if count:
                    self._stats.hits += 1
                    self._stats.hit_bytes += blk.nbytes
                return self._settle(blk, data, pin, must_pin)
            if blk.data is not None:
                if count:
                    self._stats.hits += 1
                    self._stats.hit_bytes += blk.nbytes
                if pin:
                    blk.pins += 1
                return blk.data, True
            if count:  # (a dropped prefetch still counts as a miss)
                self._stats.misses += 1
                self._stats.miss_bytes += blk.nbytes
            blk.loading = True
        try:
            data = self._read(blk, into)
        except BaseException:
            with self._cond:
                blk.loading = False
                self._cond.notify_all()
            raise
        with self._cond:
            blk.loading = False
            self._cond.notify_all()
            if data is into:  # the caller's buffer: the cache keeps its own copy, if it keeps one
                self._admit(blk, into, dirty=False, copy=True)
                if blk.data is None:
                    self._stats.bypass_reads += 1
                return into, blk.data is not None
            return self._settle(blk, data, pin, must_pin)

    def _settle(self, blk: Block, data: torch.Tensor, pin: bool, must_pin: bool) -> tuple[torch.Tensor, bool]:
        """Admit freshly read data (or read through it) and pin it if asked. Lock held."""
        self._admit(blk, data, dirty=False, allow_bypass=not must_pin)
        if blk.data is None:
            if must_pin:
                raise CacheBudgetError(
                    f"cannot pin block {blk.key} of {blk.nbytes} bytes: cache budget {self.cache_bytes} "
                    f"bytes, {self._stats.resident_bytes} resident, {self._pinned_bytes()} pinned")
            self._stats.bypass_reads += 1
        elif pin:
            blk.pins += 1
        return data, blk.data is not None

    def _unstage(self, blk: Block) -> torch.Tensor:
        data, blk.staged = blk.staged, None
        self._staged_bytes -= blk.nbytes
        return data

    def _pinned_bytes(self) -> int:
        return sum(b.nbytes for b in self._blocks.values() if b.pins and b.data is not None)

    def _load_prefetch(self, key: BlockKey) -> None:
        with self._lock:
            blk = self._blocks.get(key)
            if blk is None or blk.data is not None or blk.staged is not None:
                if blk is not None:
                    blk.loading = False
                    self._cond.notify_all()
                return
            version = blk.version
        try:
            data = self._read(blk)
        except BaseException:
            logger.exception("prefetch of %s failed", key)
            with self._cond:
                blk.loading = False
                self._cond.notify_all()
            return
        with self._cond:
            blk.loading = False
            self._stats.prefetch_loads += 1
            # a read-through scatter_add may have written the block while this read ran
            if self._blocks.get(key) is blk and blk.data is None and blk.version == version:
                blk.staged = data  # staging buffer; admission is decided at the demand read
                self._staged_bytes += blk.nbytes
                self._stats.peak_staged_bytes = max(self._stats.peak_staged_bytes, self._staged_bytes)
            self._cond.notify_all()

    def _admit(self, blk: Block, data: torch.Tensor, dirty: bool, allow_bypass: bool = True,
               copy: bool = False) -> None:
        """Make ``data`` (a copy of it with ``copy``) resident for ``blk``, evicting per policy, or bypass to disk."""
        need = blk.nbytes
        my_next = self._next_use(blk.key)
        victims: list[Block] = []
        free = self.cache_bytes - self._stats.resident_bytes
        if need <= self.cache_bytes:
            cands = [b for b in self._blocks.values()
                     if b.data is not None and b.pins == 0 and b is not blk and not b.loading]
            last = self._last_use
            order: list[Block]
            if self.policy == "belady" and self._schedule is not None:
                order = sorted(cands, key=lambda b: (-self._schedule.next_use(b.key), last.get(b.key, 0)))
            else:
                order = sorted(cands, key=lambda b: last.get(b.key, 0))
            for v in order:
                if free >= need:
                    break
                if allow_bypass and self.policy == "belady" and self._schedule is not None \
                        and self._next_use(v.key) <= my_next:
                    break  # Belady: the incoming block is the furthest-used one
                victims.append(v)
                free += v.nbytes
        if free < need or need > self.cache_bytes:
            return self._bypass(blk, data, dirty)
        for v in victims:  # each write runs unlocked: skip a victim another thread took meanwhile
            if v.data is not None and not v.pins and not v.loading and self._blocks.get(v.key) is v:
                self._evict(v)
        if self.cache_bytes - self._stats.resident_bytes < need:
            return self._bypass(blk, data, dirty)
        blk.data = data.clone() if copy else data
        blk.dirty = dirty or not blk.on_disk
        self._stats.resident_bytes += need
        self._stats.peak_resident_bytes = max(self._stats.peak_resident_bytes, self._stats.resident_bytes)

    def _bypass(self, blk: Block, data: torch.Tensor, dirty: bool) -> None:
        """``blk`` stays out of the cache: written to disk unless its file is current."""
        if dirty or not blk.on_disk:
            if self.spill_dir is None:
                raise CacheBudgetError(
                    f"block {blk.key} of {blk.nbytes} bytes does not fit the {self.cache_bytes}-byte cache "
                    f"({self._stats.resident_bytes} resident, evictable victims exhausted) and no "
                    "spill directory is configured")
            self._write(blk, data, unlocked=True)
            blk.on_disk, blk.dirty = True, False
            self._stats.bypass_writes += 1
        blk.data = None

    def _evict(self, v: Block) -> None:
        """Drop ``v`` from the cache, writing it first if its file is not current (its bytes leave the
        cache's count at once: while the write runs they are spill buffers)."""
        if (v.dirty or not v.on_disk) and self.spill_dir is None:
            raise CacheBudgetError(
                f"cache budget of {self.cache_bytes} bytes exceeded and no spill directory is "
                f"configured to evict block {v.key} ({v.nbytes} bytes) to")
        data, v.data = v.data, None
        self._stats.resident_bytes -= v.nbytes
        if v.dirty or not v.on_disk:
            try:
                self._write(v, data, unlocked=True)
            except BaseException:
                v.data = data  # nothing is dropped: the block stays resident
                self._stats.resident_bytes += v.nbytes
                raise
            v.on_disk, v.dirty = True, False
        self._stats.evictions += 1

    def _drop(self, b: Block) -> None:
        if b.staged is not None:
            self._unstage(b)
            self._stats.prefetch_dropped += 1
        if b.data is not None:
            self._stats.resident_bytes -= b.nbytes
            b.data = None
        if b.on_disk:  # the file stays: the key's next block is written over it (:mod:`.spill`)
            self._stats.disk_bytes -= b.nbytes
            b.on_disk = False
        self._blocks.pop(b.key, None)
        self._last_use.pop(b.key, None)

    def _write(self, b: Block, data: torch.Tensor, unlocked: bool = False) -> None:
        """Write ``b``'s file (lock held); with ``unlocked`` the file I/O runs with the lock released
        and ``b`` marked busy (``loading``: readers and :meth:`release` wait for it, eviction and
        prefetch skip it), so other threads' puts, gathers and reads go on meanwhile."""
        if self.spill_dir is None:
            raise CacheBudgetError(f"no spill directory to write block {b.key} to")
        grow = 0 if b.on_disk else b.nbytes
        self._files.adopt(b, self._file_needed(b))
        if self.disk_budget is not None:
            if self._stats.disk_bytes + grow > self.disk_budget:
                raise DiskBudgetError(
                    f"spilling block {b.key} ({b.nbytes} bytes) would exceed the disk budget of "
                    f"{self.disk_budget} bytes ({self._stats.disk_bytes} bytes already spilled)")
            over = self._files.bytes + self._files.growth(b) - self.disk_budget
            if over > 0:
                self._files.free(over, self._file_needed(b))
        try:
            secs = self._write_file(b, data, unlocked)
        except DiskBudgetError:  # the disk is full: give back the kept files of released keys, once
            if not self._files.free(None, self._file_needed(b)):
                raise
            secs = self._write_file(b, data, unlocked)
        b.version += 1
        if b.staged is not None:  # staged from the previous contents
            self._unstage(b)
            self._stats.prefetch_dropped += 1
        self._stats.bytes_written += b.nbytes
        self._stats.write_seconds += secs
        self._stats.disk_bytes += grow
        self._stats.peak_disk_bytes = max(self._stats.peak_disk_bytes, self._stats.disk_bytes)
        self._files.wrote(b)
        self._stats.peak_file_bytes = max(self._stats.peak_file_bytes, self._files.bytes)

    def _file_needed(self, writing: Block):
        """Whether a key's spill file is still needed while ``writing`` is written: its block's contents
        are on disk or being written (lock held when called)."""
        def needed(key: BlockKey) -> bool:
            b = self._blocks.get(key)
            return key == writing.key or (b is not None and (b.on_disk or b.loading))
        return needed

    def _write_file(self, b: Block, data: torch.Tensor, unlocked: bool) -> float:
        """:func:`.spill.write_file` of ``b``; with ``unlocked`` (see :meth:`_write`) the lock is released
        around it. Lock held."""
        if unlocked and not b.loading:
            b.loading = True
            self._writing_bytes += b.nbytes
            self._stats.peak_pending_bytes = max(self._stats.peak_pending_bytes,
                                                 self._pending_bytes + self._writing_bytes)
            self._lock.release()
            try:
                return write_file(self._path(b), b, data)
            finally:
                self._lock.acquire()
                b.loading = False
                self._writing_bytes -= b.nbytes
                self._cond.notify_all()
        return write_file(self._path(b), b, data)

    def _read(self, b: Block, into: torch.Tensor | None = None) -> torch.Tensor:
        buf, secs = read_file(self._path(b), b, into)
        with self._lock:
            self._stats.bytes_read += b.nbytes
            self._stats.read_seconds += secs
        return buf

    def _after_access(self) -> None:
        """Exact prefetch: stage the next planned reads that are on disk (Belady only).

        Staged blocks sit outside the cache budget in at most ``prefetch_window``
        staging buffers; whether a block then enters the cache is decided at its
        demand read by the same MIN rule as an ordinary read, so prefetching
        moves reads earlier without changing which or how many bytes are read.
        """
        if not self.prefetch_enabled or self._schedule is None or self._closed:
            return
        in_flight = sum(1 for b in self._blocks.values() if b.loading or b.staged is not None)
        for key in self._schedule.upcoming_reads(self.prefetch_window):
            if in_flight >= self.prefetch_window:
                break
            b = self._blocks.get(key)
            if b is None or b.data is not None or b.loading or b.staged is not None or not b.on_disk:
                continue
            b.loading = True
            in_flight += 1
            self._pf_pool.submit(self._load_prefetch, key)
