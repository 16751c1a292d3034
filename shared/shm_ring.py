"""Shared-memory rings: a loader hands a trainer on its host the feature rows without the socket.

A loader whose trainer runs on the same kernel and listens in a shared-memory directory
(:func:`~shared.transport.bind_local`, :func:`~shared.transport.local_ring_dir`) creates one ring
file there per trainer, ``ring-<loader pid>-<16 hex digits>`` (mode 0600, in the trainer's 0700
directory): a 4 KiB header, then ``slots`` slots of :attr:`~shared.validate.BatchBounds.ring_slot_bytes`
each, a layout both ends derive from the job (the trainer never reads it from the file)::

    [0, 4096)                       header; u64 at 64 + 8 i: the last sequence number the trainer
                                    released in slot i (the trainer writes it, with pwrite)
    [4096 + i * S, 4096 + (i+1) * S)  slot i: one batch's feature rows

The loader (:class:`RingWriter`, the file's writer) gathers a batch's rows straight into a free
slot of its memory map, and sends the batch's header over the socket with a reference
``(ring, ring_slot, ring_seq, ring_bytes)`` instead of the rows.  The trainer's ingest thread
(:class:`RingReader`) validates the header as usual, then copies the slot into its own buffer
with ``pread`` while checking that every value is finite (:func:`~shared.validate.read_finite`:
one pass, no memory map, so a truncated file cannot SIGBUS it and a loader rewriting the slot
afterwards cannot change what was checked), and releases the slot by writing its sequence number
into the header.  The loader reuses a slot only after that (:meth:`RingWriter.acquire` waits for
one, which is also the back-pressure), so slots are reused and their pages faulted in once.

A bad reference (a name that is not a ring file of this directory, a slot outside the layout, a
sequence number the slot already had, a file of the wrong size or shorter than the slot, NaN or
inf in the rows) raises :class:`~shared.errors.InvalidMessageError`: the receiver strikes the sender
(:meth:`~shared.transport.Receiver.strike`) and drops the batch, whose work item is re-claimed.
A trainer that dies takes its directory with it (a new one is swept by the next
:func:`~shared.transport.bind_local`); the loader makes a fresh ring for its successor.
"""
from __future__ import annotations

import contextlib
import logging
import mmap
import os
import secrets
import stat
import threading
import time
from typing import Callable, NamedTuple

import numpy as np

from argosy.shared.errors import InvalidMessageError
from argosy.shared.protocol import FeatureBatch, Message
from argosy.shared.validate import RING_NAME, BatchBounds, nonfinite_features, read_finite

__all__ = ["RingWriter", "RingReader", "Lease", "HEADER_BYTES", "ring_file_bytes"]

logger = logging.getLogger(__name__)

HEADER_BYTES = 4096
RELEASED_AT = 64
"""Offset of the released sequence numbers (u64 per slot) in the header."""
_MAGIC = b"ARGRING1"


def ring_file_bytes(slots: int, slot_bytes: int) -> int:
    """Size of a ring file of ``slots`` slots of ``slot_bytes``."""
    return HEADER_BYTES + slots * slot_bytes


class Lease(NamedTuple):
    """A slot the loader writes one batch into: its index and the batch's sequence number."""

    slot: int
    seq: int


class RingWriter:
    """A loader's ring towards one trainer (see the module docstring); one thread uses it.

    Args:
        directory: the trainer's ring directory (:func:`~shared.transport.local_ring_dir`).
        slots: batches in flight at most (``loader.shm_ring_slots``).
        slot_bytes: bytes of a slot (:attr:`~shared.validate.BatchBounds.ring_slot_bytes`).

    Raises:
        OSError: the file cannot be made (no directory, no space): send the rows inline instead.
    """

    def __init__(self, directory: str, slots: int, slot_bytes: int):
        if not 1 <= slots <= (HEADER_BYTES - RELEASED_AT) // 8 or slot_bytes <= 0 or slot_bytes % 4096:
            raise ValueError(f"a ring needs 1..{(HEADER_BYTES - RELEASED_AT) // 8} slots of whole pages "
                             f"(got {slots} slots of {slot_bytes} bytes)")
        self.name = f"ring-{os.getpid()}-{secrets.token_hex(8)}"
        self.path = os.path.join(directory, self.name)
        self.slots, self.slot_bytes = slots, slot_bytes
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, ring_file_bytes(slots, slot_bytes))      # sparse: slots get memory as they are used
            os.posix_fallocate(fd, 0, HEADER_BYTES)
            os.pwrite(fd, _MAGIC + np.array([slots, slot_bytes], np.uint64).tobytes(), 0)
            self._map = mmap.mmap(fd, ring_file_bytes(slots, slot_bytes))
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            raise
        self._fd = fd
        self.released = np.frombuffer(self._map, np.uint64, slots, RELEASED_AT)
        """The trainer's releases, read through the map (it writes them with pwrite)."""
        self.written = np.zeros(slots, np.uint64)
        """Sequence number of the batch last written to each slot (0: none in flight)."""
        self._backed = [0] * slots
        """Bytes of each slot backed by memory so far (``posix_fallocate``: a full /dev/shm is an
        error here, never a SIGBUS on the first write)."""
        self._seq = 0
        self._next = 0

    def in_flight(self) -> int:
        """Slots holding a batch the trainer has not released (0 once closed)."""
        return 0 if self.released is None else int(np.count_nonzero(self.released < self.written))

    def acquire(self, nbytes: int, timeout: float, stop: threading.Event | None = None) -> Lease | None:
        """A free slot for a batch of ``nbytes``, waiting up to ``timeout`` seconds for the trainer to
        release one; None when ``nbytes`` does not fit, no memory backs the slot, ``stop`` is set or
        the wait timed out (the caller sends the rows inline)."""
        if not 0 < nbytes <= self.slot_bytes:
            return None
        deadline, delay = time.monotonic() + timeout, 0.0002
        while True:
            free = np.flatnonzero(self.released >= self.written)
            if free.shape[0]:
                later = free[free >= self._next]
                i = int(later[0] if later.shape[0] else free[0])        # round robin: the oldest release first
                if self._backed[i] < nbytes:
                    try:
                        os.posix_fallocate(self._fd, HEADER_BYTES + i * self.slot_bytes, nbytes)
                    except OSError as e:
                        logger.warning("ring %s: no memory for a %d-byte slot (%s); sending the rows inline",
                                       self.path, nbytes, e)
                        return None
                    self._backed[i] = nbytes
                self._seq += 1
                self.written[i] = self._seq
                self._next = (i + 1) % self.slots
                return Lease(i, self._seq)
            if (stop is not None and stop.is_set()) or time.monotonic() > deadline:
                return None
            time.sleep(delay)
            delay = min(2 * delay, 0.005)

    def rows(self, lease: Lease, shape: tuple[int, ...], dtype) -> np.ndarray:
        """The leased slot as an array of ``shape`` (written in place: the gather's output)."""
        return np.ndarray(shape, dtype, buffer=self._map, offset=HEADER_BYTES + lease.slot * self.slot_bytes)

    def cancel(self, lease: Lease) -> None:
        """Give back a slot whose batch was not sent (the trainer will never release it)."""
        if int(self.written[lease.slot]) == lease.seq:
            self.written[lease.slot] = 0

    def alive(self) -> bool:
        """Whether the file is still in the trainer's directory (else make a new ring)."""
        try:
            return os.fstat(self._fd).st_nlink > 0
        except OSError:
            return False

    def close(self) -> None:
        """Remove the file; its memory goes when the trainer closes it too."""
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        self.released = None
        with contextlib.suppress(BufferError, ValueError):
            self._map.close()                    # a slot's rows still referenced: freed with them
        with contextlib.suppress(OSError):
            os.close(self._fd)


class _Open:
    """A ring file the reader has open: its fd and each slot's last released sequence number."""

    __slots__ = ("fd", "last", "used")

    def __init__(self, fd: int, slots: int):
        self.fd, self.last, self.used = fd, [0] * slots, time.monotonic()


class RingReader:
    """The trainer's side: resolve ring references of received batches (see the module docstring).

    Args:
        directory: this trainer's ring directory (its :func:`~shared.transport.bind_local` directory).
        bounds: the job's bounds (the layout: ``ring_slots`` x ``ring_slot_bytes``; the feature dtype and width).
    """

    def __init__(self, directory: str, bounds: BatchBounds):
        self.dir, self.slots, self.slot_bytes = directory, int(bounds.ring_slots), bounds.ring_slot_bytes
        self.dtype, self.width = np.dtype(bounds.feature_dtype), int(bounds.feature_dim)
        self.file_bytes = ring_file_bytes(self.slots, self.slot_bytes)
        self.rings: dict[str, _Open] = {}
        self.batches = 0
        """Batches whose rows came through a ring."""
        self._warm()

    def _warm(self) -> None:
        """Load the read kernel now, not on the first batch."""
        fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        try:
            read_finite(fd, 0, np.empty((1, max(self.width, 1)), self.dtype))
        finally:
            os.close(fd)

    def wrap(self, validate: Callable[[Message], Message]) -> Callable[[Message], Message]:
        """``validate`` (a :class:`~shared.validate.MessageValidator` built with ``rings=True``) followed,
        for a batch with a ring reference, by :meth:`take`; a refused batch's slot is still released."""
        def check(msg: Message) -> Message:
            if not isinstance(msg, FeatureBatch) or not msg.ring:
                return validate(msg)
            try:
                msg = validate(msg)
            except InvalidMessageError:
                self._release_refused(msg)
                raise
            return self.take(msg)
        return check

    def take(self, fb: FeatureBatch) -> FeatureBatch:
        """Copy the batch's rows out of its slot into a buffer of this process (checking that they
        are finite on the way), release the slot, and set ``fb.features``.  ``fb``'s reference is
        well formed (:func:`~shared.validate.check_ring_ref`)."""
        ring = self._open(fb)
        slot, seq = fb.ring_slot, fb.ring_seq
        if seq <= ring.last[slot]:
            raise self._bad(fb, f"slot {slot} of ring {fb.ring} was already released at sequence number "
                                f"{ring.last[slot]} (got {seq}: a stale or replayed reference)")
        out = np.empty((fb.ring_bytes // (self.width * self.dtype.itemsize), self.width), self.dtype)
        try:
            got, finite = read_finite(ring.fd, HEADER_BYTES + slot * self.slot_bytes, out)
        except OSError as e:
            raise self._bad(fb, f"reading slot {slot} of ring {fb.ring} failed ({e})") from None
        finally:
            self._release(ring, slot, seq)
        if got < out.nbytes:
            raise self._bad(fb, f"slot {slot} of ring {fb.ring} holds {got} of the {out.nbytes} bytes referenced "
                                "(the file was truncated)")
        if not finite:
            raise nonfinite_features(fb)
        fb.features = out
        self.batches += 1
        return fb

    def sweep(self, idle: float = 30.0) -> None:
        """Close rings their loader removed (idle for ``idle`` s), and remove the rings of dead loaders."""
        now = time.monotonic()
        for name, ring in list(self.rings.items()):
            try:
                gone = os.fstat(ring.fd).st_nlink == 0
            except OSError:
                gone = True
            if gone and now - ring.used > idle:
                self._close(name)
        try:
            names = [n for n in os.listdir(self.dir) if RING_NAME.fullmatch(n)]
        except OSError:
            return
        for name in names:
            try:
                os.kill(int(name.split("-")[1]), 0)
            except ProcessLookupError:               # its loader was killed: nothing will reference it again
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self.dir, name))
                if name in self.rings and now - self.rings[name].used > idle:
                    self._close(name)
            except (OSError, ValueError):
                continue

    def close(self) -> None:
        for name in list(self.rings):
            self._close(name)

    # ---- internals ------------------------------------------------------------------------------
    @staticmethod
    def _bad(fb: FeatureBatch, what: str) -> InvalidMessageError:
        return InvalidMessageError(f"FeatureBatch batch {fb.batch_id!r}: {what}")

    def _close(self, name: str) -> None:
        ring = self.rings.pop(name, None)
        if ring is not None:
            with contextlib.suppress(OSError):
                os.close(ring.fd)

    def _open(self, fb: FeatureBatch) -> _Open:
        ring = self.rings.get(fb.ring)
        if ring is None:
            if len(self.rings) >= 256:
                self.sweep(idle=0.0)
            path = os.path.join(self.dir, fb.ring)          # a plain file name (RING_NAME), never a path
            try:
                fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
            except FileNotFoundError:
                raise self._bad(fb, f"ring {fb.ring} does not exist in {self.dir}") from None
            except OSError as e:
                raise self._bad(fb, f"ring {fb.ring} cannot be opened ({e.strerror})") from None
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size != self.file_bytes:
                os.close(fd)
                raise self._bad(fb, f"ring {fb.ring} is not this job's ring file: a regular file of this user "
                                    f"of {self.file_bytes} bytes ({self.slots} slots of {self.slot_bytes}; got "
                                    f"{st.st_size} bytes, mode {st.st_mode:o}, uid {st.st_uid})")
            ring = self.rings[fb.ring] = _Open(fd, self.slots)
        ring.used = time.monotonic()
        return ring

    def _release(self, ring: _Open, slot: int, seq: int) -> None:
        ring.last[slot] = seq
        try:
            os.pwrite(ring.fd, int(seq).to_bytes(8, "little"), RELEASED_AT + 8 * slot)
        except OSError as e:
            logger.warning("cannot release slot %d of a ring: %s", slot, e)

    def _release_refused(self, fb: FeatureBatch) -> None:
        """Release the slot of a batch the validator refused, when its reference names one: the
        loader must not wait for it forever (never raises)."""
        try:
            if (isinstance(fb.ring, str) and RING_NAME.fullmatch(fb.ring) and isinstance(fb.ring_slot, int)
                    and 0 <= fb.ring_slot < self.slots and isinstance(fb.ring_seq, int) and 0 < fb.ring_seq < 2**62):
                ring = self._open(fb)
                if fb.ring_seq > ring.last[fb.ring_slot]:
                    self._release(ring, fb.ring_slot, fb.ring_seq)
        except InvalidMessageError:
            pass
