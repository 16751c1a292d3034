"""The offload store's blocks and their spill files: one file per block key, written and read whole.

Why this module exists: :mod:`.store` decides *which* blocks live in memory and when they move; this
module is *how* a block is described (:class:`Block`) and how its bytes reach and leave the disk.
The file I/O runs without the store's lock held (the store marks the block busy first), so a
trainer thread is never stuck behind another block's write.

A key's file outlives its block: the next block of the key (the same layer and part, next epoch) is
written over it in place. Overwriting page-cache pages is a copy; a new file costs page allocation
and its unlink the pages' freeing as well: 3.8-4.3 ms against 9.5-10 ms per 38 MB block on this
machine's ext4, which was most of the spill I/O thread's time per epoch.
"""

from __future__ import annotations

import errno
import os
import time

import numpy as np
import torch

from argosy.shared.errors import DiskBudgetError, OffloadError

from .policy import BlockKey

__all__ = ["Block", "SpillFiles", "file_path", "unlink", "write_file", "read_file"]

class Block:
    """One block's state in the store (every field is guarded by the store's lock)."""

    __slots__ = ("key", "shape", "dtype", "nbytes", "data", "on_disk", "dirty", "pins", "loading",
                 "staged", "version")

    def __init__(self, key: BlockKey, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        self.key = key
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * torch.empty((), dtype=dtype).element_size()
        self.data: torch.Tensor | None = None
        self.on_disk = False  # the spill file holds the current contents
        self.dirty = False  # resident contents differ from disk
        self.pins = 0
        self.loading = False  # busy: its bytes are moving between memory and its file (read or write)
        self.staged: torch.Tensor | None = None  # prefetched data in a staging buffer, not admitted
        self.version = 0  # bumped by every spill write: a prefetch of an older version is stale



def file_path(spill_dir: str, key: BlockKey) -> str:
    """The spill file of every block of ``key``."""
    return os.path.join(spill_dir, f"{key[0]}-{key[1]}-{key[2]}.blk")


class SpillFiles:
    """The spill directory's files and their bytes on disk: one file per block key, kept after the key's
    block is released so that a later block of the same size, of this key or another, is written over
    it (not thread-safe: the store calls it with its lock held).

    A block whose key has no file takes over a kept file of exactly its size (renamed to its key's
    name): the evaluation pass's blocks then reuse the training step's released files and the next
    step reuses theirs, instead of every key keeping a file of its own.
    """

    def __init__(self, spill_dir: str) -> None:
        self.dir = spill_dir
        self.sizes: dict[BlockKey, int] = {}
        self.bytes = 0
        """Bytes of all the files: the blocks' and the kept ones."""

    def growth(self, b: Block) -> int:
        """Bytes on disk a write of ``b`` adds (negative: its key's kept file was longer)."""
        return b.nbytes - self.sizes.get(b.key, 0)

    def adopt(self, b: Block, needed) -> None:
        """Give ``b``'s key a kept file of exactly ``b.nbytes`` that no block needs (``needed(key)``
        False), when its key has none."""
        if b.key in self.sizes:
            return
        for key, n in list(self.sizes.items()):
            if n == b.nbytes and not needed(key):
                try:
                    os.replace(file_path(self.dir, key), file_path(self.dir, b.key))
                except FileNotFoundError:  # removed underneath: forget it, the write makes a new file
                    self.bytes -= self.sizes.pop(key)
                    continue
                self.sizes[b.key] = self.sizes.pop(key)
                return

    def wrote(self, b: Block) -> None:
        self.bytes += self.growth(b)
        self.sizes[b.key] = b.nbytes

    def free(self, need: int | None, needed) -> int:
        """Unlink files no block needs (``needed(key)`` False) until ``need`` bytes are free (None: every
        such file). Returns the bytes freed."""
        freed = 0
        for key in list(self.sizes):
            if need is not None and freed >= need:
                break
            if not needed(key):
                unlink(file_path(self.dir, key))
                n = self.sizes.pop(key)
                self.bytes -= n
                freed += n
        return freed


def unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def write_file(path: str, b: Block, data: torch.Tensor) -> float:
    """Write ``data`` (``b``'s contents) to ``path``, over the file's old contents in place (cut to
    ``b.nbytes``); returns the seconds it took.

    Raises:
        DiskBudgetError: the disk is full.
    """
    arr = data.contiguous().view(torch.uint8).numpy().reshape(-1) if data.numel() else np.empty(0, np.uint8)
    t0 = time.perf_counter()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            view, off = memoryview(arr), 0
            while off < len(view):
                off += os.pwrite(fd, view[off:], off)
            if os.fstat(fd).st_size > off:
                os.ftruncate(fd, off)
        finally:
            os.close(fd)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskBudgetError(f"disk full while spilling block {b.key} ({b.nbytes} bytes) to "
                                  f"{os.path.dirname(path)}: {e} (free space there, point --spill-dir at a larger "
                                  "disk, or give the cache more memory with --cache-bytes)") from e
        raise
    return time.perf_counter() - t0


def read_file(path: str, b: Block, into: torch.Tensor | None = None) -> tuple[torch.Tensor, float]:
    """``b``'s contents from ``path`` (into ``into`` when given) and the seconds the read took."""
    buf = torch.empty(b.shape, dtype=b.dtype) if into is None else into
    t0 = time.perf_counter()
    if b.nbytes:
        try:
            f = open(path, "rb", buffering=0)
        except FileNotFoundError as e:
            raise OffloadError(f"the spill file of block {b.key} is gone ({path}): was the spill directory "
                               "removed or cleaned while training ran?") from e
        with f:
            n = f.readinto(memoryview(buf.view(torch.uint8).numpy().reshape(-1)))
        if n != b.nbytes:
            raise OffloadError(f"short read of block {b.key}: {n} of {b.nbytes} bytes")
    return buf, time.perf_counter() - t0
