"""Regrouping an edge stream by source through on-disk buckets (an external counting sort):
vertex-aligned, globally deduplicated chunks from any stream (:class:`GroupedEdgeStream`).

Why this module exists: edge lists arrive in any order, with duplicates across chunks; GREM's
exact gains, LDG/Fennel's vertex stream and the store writer all want every vertex's whole
adjacency list in one chunk.  :func:`~.core.partition_stream` regroups multi-chunk edge lists
first, in O(chunk) memory and about the stream's entries x 2 ids of disk.
"""

from __future__ import annotations

import logging
import math
import mmap
import os
import threading
import time
from typing import Iterator, Optional

import numba
import numpy as np

from argosy.shared.read_ahead import read_ahead

from .stream import Chunk, EdgeStream, GroupedChunk
from .threads import get_threads

logger = logging.getLogger("argosy.partitioner")

__all__ = ["GroupedEdgeStream"]


@numba.njit(cache=True, nogil=True)
def _scatter_buckets(u, v, shift, nb, sym, pairs, offsets):
    """Counting sort of one raw chunk into ``nb`` source-id ranges of width ``2**shift``.

    Drops self loops and, if ``sym``, emits both directions.  Returns the entries written
    to ``pairs`` (grouped by bucket; bucket ``b`` is ``pairs[offsets[b]:offsets[b + 1]]``).
    """
    offsets[:] = 0
    for i in range(u.size):
        a = u[i]
        b = v[i]
        if a == b:
            continue
        offsets[(a >> shift) + 1] += 1
        if sym:
            offsets[(b >> shift) + 1] += 1
    for q in range(nb):
        offsets[q + 1] += offsets[q]
    pos = offsets[:-1].copy()
    for i in range(u.size):
        a = u[i]
        b = v[i]
        if a == b:
            continue
        j = pos[a >> shift]
        pairs[j, 0] = a
        pairs[j, 1] = b
        pos[a >> shift] = j + 1
        if sym:
            j = pos[b >> shift]
            pairs[j, 0] = b
            pairs[j, 1] = a
            pos[b >> shift] = j + 1
    return offsets[nb]


# most bits per pass of the radix sort of a bucket's targets (4,096 counters: 32 KB, in L1)
RADIX_BITS = 12
# a bucket is first split by source into ranges of about this many entries, each sorted while it
# is in cache (8 bytes a key, twice: 4 MB): sorting a whole 2.7M-entry bucket at once went to
# memory for every pass (one thread: 20M road-like graph 15.7 -> 11.1 ns an entry, geometric
# 11.8 -> 9.2, DC-SBM 11.9 -> 9.8, R-MAT 11.0 -> 9.0)
SORT_RANGE_ENTRIES = 1 << 18


@numba.njit(cache=True, nogil=True)
def _sort_range(k, t, u0, nv, dbits, byu, v0, src, dst, starts, w, ng):
    """Sort the keys ``k`` (sources ``u0 .. u0 + nv - 1`` of the bucket, ``t`` as long: scratch),
    append their distinct entries to ``src``/``dst`` from ``w`` and their groups to ``starts``
    from ``ng``; return the new ``(w, ng)``.  See :func:`_sort_bucket`."""
    c = k.size
    passes = -(-dbits // RADIX_BITS)
    bits = -(-dbits // passes)  # e.g. 24-bit ids: 2 passes of 12 bits, not 11 + 11 + 2
    mask = (1 << bits) - 1
    low = (np.int64(1) << dbits) - 1
    cnt = np.zeros(mask + 2, np.int64)
    sh = 0
    while sh < dbits:
        cnt[:] = 0
        for i in range(c):
            cnt[((k[i] >> sh) & mask) + 1] += 1
        for q in range(mask + 1):
            cnt[q + 1] += cnt[q]
        for i in range(c):
            q = (k[i] >> sh) & mask
            j = cnt[q]
            t[j] = k[i]
            cnt[q] = j + 1
        k, t = t, k
        sh += bits
    byu[:nv + 1] = 0  # stable counting sort by source
    for i in range(c):
        byu[(k[i] >> dbits) - u0 + 1] += 1
    for u in range(nv):
        byu[u + 1] += byu[u]
    for i in range(c):
        u = (k[i] >> dbits) - u0
        t[byu[u]] = k[i] & low
        byu[u] += 1  # ends as the end of list u
    a = 0
    for u in range(nv):  # each list sorted: drop repeats
        b = byu[u]
        if b == a:
            continue
        starts[ng] = w
        ng += 1
        prev = -1
        for i in range(a, b):
            x = t[i]
            if x != prev:
                src[w] = u0 + u + v0
                dst[w] = x
                w += 1
                prev = x
        a = b
    return w, ng


@numba.njit(cache=True, nogil=True)
def _sort_bucket(pairs, v0, nv, dbits, key, tmp, byu, src, dst, starts):
    """Sort one bucket's entries by (src, dst), drop duplicates into ``src``, ``dst`` and the
    vertex-group ``starts``; return how many entries and groups.  ``key``, ``tmp`` (int64, at
    least the bucket's entries), ``byu`` (int64, ``nv + 1``) are scratch, and the outputs are
    the caller's arrays too: one set per thread, reused from bucket to bucket, not fresh pages
    faulted in for each.  ``pairs`` may lie in ``tmp``'s memory: every pair is read into ``key``
    before ``tmp`` is first written.

    One counting pass splits the bucket (``nv`` consecutive sources from ``v0``) into source
    ranges of about :data:`SORT_RANGE_ENTRIES` entries, as ``(src - v0) << dbits | dst`` keys
    (targets below ``2**dbits``).  Each range is then sorted in cache by an LSD radix sort: the
    targets by :data:`RADIX_BITS`-bit digits, each pass stable, then a counting sort by source,
    which leaves every adjacency list sorted without one comparison.  (Sorting each list after
    a counting sort by source took 0.99 s of CPU for the 20M-edge DC-SBM's 40M entries, 0.73 s
    of it in the lists' comparison sorts; the radix sort, 0.55 s.)
    """
    c = pairs.shape[0]
    vb = 0
    while (1 << vb) < nv:
        vb += 1
    sbits = 0  # 2**sbits source ranges of 2**rsh sources each
    while (c >> sbits) > SORT_RANGE_ENTRIES and sbits < vb:
        sbits += 1
    rsh = vb - sbits
    nr = ((max(nv, 1) - 1) >> rsh) + 1
    off = np.zeros(nr + 1, np.int64)
    for i in range(c):
        off[((pairs[i, 0] - v0) >> rsh) + 1] += 1
    for r in range(nr):
        off[r + 1] += off[r]
    pos = off[:-1].copy()
    for i in range(c):
        s = np.int64(pairs[i, 0] - v0)
        r = s >> rsh
        key[pos[r]] = (s << dbits) | np.int64(pairs[i, 1])
        pos[r] += 1
    w = 0
    ng = 0
    for r in range(nr):
        u0 = r << rsh
        w, ng = _sort_range(key[off[r]:off[r + 1]], tmp[off[r]:off[r + 1]], u0,
                            min(nv, (r + 1) << rsh) - u0, dbits, byu, v0, src, dst, starts, w,
                            ng)
    starts[ng] = w
    return w, ng + 1


def _open_file_limit() -> int:
    """Raise the soft open-files limit to the hard one; return the usable number of files."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            target = 65536 if hard == resource.RLIM_INFINITY else hard
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        return max(16, int(soft) - 128)
    except (ImportError, ValueError, OSError):  # pragma: no cover - platform dependent
        return 512


class GroupedEdgeStream(EdgeStream):
    """Vertex-aligned, globally deduplicated view of any edge stream, via on-disk buckets.

    One pass distributes every entry ``(u, v)`` of ``base`` (read with
    :meth:`EdgeStream.iter_raw`, i.e. unsorted) into one of ``B`` bucket files by source-id
    range with a numba counting sort; then each bucket is sorted by ``(u, v)`` (a radix sort
    per source range, :func:`_sort_bucket`), deduplicated, and written back once as three arrays:
    ``src``, ``dst`` and the vertex-group ``starts``.  Later passes only read those files, so
    every vertex's whole adjacency list arrives in one chunk (``grouped``), duplicates across
    the original chunks are removed, chunks come in vertex-id order, and
    :meth:`iter_groups` needs no sorting at all.  Ids are stored as int32 when ``n < 2**31``.
    Memory: one bucket (~``chunk_edges`` entries); disk: about the stream's entries x 2 ids.

    Args:
        base (EdgeStream): the stream to regroup (typically a symmetrised edge list).
        tmpdir (str): directory for the bucket files (created; removed by :meth:`close`).
        chunk_edges (int, optional): target entries per bucket (default ``base.chunk_edges``).

    Raises:
        OSError: if the bucket files cannot be written (e.g. a full disk); the partial files
            are removed.
    """

    def __init__(self, base: EdgeStream, tmpdir: str, chunk_edges: Optional[int] = None):
        self.base = base
        self.num_nodes = int(base.num_nodes)
        self.chunk_edges = int(chunk_edges or base.chunk_edges)
        self.symmetric = base.symmetric
        self.grouped = True
        self.seekable = True
        self._dir = str(tmpdir)
        os.makedirs(self._dir, exist_ok=True)
        self.workdir = self._dir
        n = max(self.num_nodes, 1)
        want = max(1, min(n, -(-int(base.stream_entries) // self.chunk_edges)))
        want = min(want, _open_file_limit())
        # bucket b holds sources [b << shift, (b + 1) << shift): a shift instead of a division;
        # a bucket's sort keys are (source offset, target) in 63 bits (_sort_bucket)
        self._dbits = max(1, (n - 1).bit_length())
        self._shift = shift = min(max(0, int(math.ceil(math.log2(-(-n // want))))),
                                  63 - self._dbits)
        self._nb = nb = -(-n // (1 << shift))
        self._dtype = np.int32 if n < 2 ** 31 else np.int64
        try:
            self._build(base, n, nb, shift)
        except BaseException:
            self.close()
            raise

    def _build(self, base: EdgeStream, n: int, nb: int, shift: int) -> None:
        t0 = time.perf_counter()
        logger.info("regrouping %d entries by source into %d buckets in %s",
                    base.stream_entries, nb, self._dir)
        offsets = np.zeros(nb + 1, np.int64)
        self._sizes = np.zeros((nb, 2), np.int64)  # per bucket: entries, group starts
        count = 0
        sym = bool(base.symmetrize)
        files = [open(self._path(b), "wb") for b in range(nb)]
        # the next raw chunk is read (and its ids checked) on a helper thread while this one is
        # scattered and written: 20M-row .npy, 0.28 s of reading beside 0.14 s here
        raw = base.iter_raw()
        if get_threads() > 1:
            raw = read_ahead(raw, name="argosy-regroup-read")
        scratch = np.empty(0, self._dtype)  # one buffer for every chunk's pairs (no fresh pages each time)
        try:
            for u, v in raw:
                rows = u.size * (2 if sym else 1)
                if scratch.size < 2 * rows:
                    scratch = np.empty(2 * rows, self._dtype)
                pairs = scratch[:2 * rows].reshape(-1, 2)
                count += int(_scatter_buckets(u, v, shift, nb, sym, pairs, offsets))
                for b in np.flatnonzero(np.diff(offsets)):
                    files[b].write(memoryview(pairs[offsets[b]:offsets[b + 1]]))
        finally:
            for f in files:
                f.close()
        # sort + deduplicate every bucket once, so later passes only read.  Buckets are
        # independent and the kernel releases the GIL: one per thread at a time (memory: that
        # many buckets).  The output does not depend on the thread count.
        del scratch
        t_scatter = time.perf_counter() - t0
        dbits = self._dbits
        w = np.dtype(self._dtype).itemsize
        most = max(os.path.getsize(self._path(b)) for b in range(nb)) // (2 * w)
        local = threading.local()  # each sorting thread's buffers, sized for the largest bucket

        def sort_one(b: int) -> int:
            v0 = b << shift
            v1 = min(n, (b + 1) << shift)
            if not hasattr(local, "key"):
                # the bucket is read into the radix sort's second key array (its pairs are turned
                # into keys before that array is first written), so the read costs no buffer of its own
                local.raw = np.empty(most * max(8, 2 * w), np.uint8)
                local.tmp = local.raw[:8 * most].view(np.int64)
                local.key = np.empty(most, np.int64)
                local.src, local.dst = np.empty(most, self._dtype), np.empty(most, self._dtype)
                local.byu, local.starts = np.empty(1 + (1 << shift), np.int64), np.empty(1 + (1 << shift), np.int64)
            with open(self._path(b), "rb") as f:
                c = f.readinto(memoryview(local.raw)) // (2 * w)
            pairs = local.raw[:2 * w * c].view(self._dtype).reshape(-1, 2)
            m, g = _sort_bucket(pairs, v0, v1 - v0, dbits, local.key, local.tmp, local.byu,
                                local.src, local.dst, local.starts)
            del pairs
            # raw, sizes kept here: one read, no headers.  Written over the bucket's pages in
            # place, then cut to length: truncating first ("wb") freed the file's blocks and
            # allocated them again (20M road-like graph: 0.7 -> 0.15 s of CPU)
            with open(self._path(b), "r+b") as f:
                for a in (local.src[:m], local.dst[:m], local.starts[:g]):
                    f.write(memoryview(a).cast("B"))
                f.truncate()
            self._sizes[b] = (m, g)
            return int(m)

        workers = min(get_threads(), nb)
        if workers > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(workers) as pool:
                total = sum(pool.map(sort_one, range(nb)))
        else:
            total = sum(sort_one(b) for b in range(nb))
        self.num_edges = total
        self.input_entries = count
        logger.info("regrouped: %d distinct entries (of %d) in %.1f s (%.1f s reading and bucketing, "
                    "%.1f s sorting)", total, count, time.perf_counter() - t0, t_scatter,
                    time.perf_counter() - t0 - t_scatter)

    def _path(self, b: int) -> str:
        return os.path.join(self._dir, f"bucket_{b:06d}.bin")

    @property
    def num_chunks(self) -> int:
        return self._nb

    def read_groups(self, i: int) -> GroupedChunk:
        """Chunk ``i`` as ``(src, dst, starts)`` (ids int32 when they fit), read-only: the bucket
        file mapped whole and viewed as its three arrays (``np.load`` of three ``.npy`` headers
        cost ~90 us each, ~1 s per run of the 20M road-like graph's ~10k bucket reads).  Mapped,
        not read into fresh memory: a read faulted in (and zeroed) a new page for every 4 KB of
        every pass, ~0.1 s of system time per pass over 40M entries; the mapping shares the page
        cache's pages, 64 KB per fault, and copies nothing."""
        m, g = (int(x) for x in self._sizes[i])
        w = np.dtype(self._dtype).itemsize
        want = 2 * m * w + 8 * g
        with open(self._path(i), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size != want:
                raise OSError(f"{self._path(i)}: {size} bytes, expected {want} "
                              "(a scratch bucket changed on disk)")
            buf = np.frombuffer(mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ), np.uint8) \
                if size else np.empty(0, np.uint8)
        return (buf[:m * w].view(self._dtype), buf[m * w:2 * m * w].view(self._dtype),
                buf[2 * m * w:].view(np.int64))

    def read_chunk(self, i: int) -> Chunk:
        src, dst, _ = self.read_groups(i)
        return src, dst

    def iter_groups(self, chunk_order: Optional[np.ndarray] = None) -> Iterator[GroupedChunk]:
        for i in (range(self._nb) if chunk_order is None else chunk_order):
            yield self.read_groups(int(i))

    def drain(self) -> Iterator[Chunk]:
        """Yield every chunk once, deleting each bucket file as soon as it is read (a last pass
        whose reader writes elsewhere, the store writer: disk use does not double)."""
        for i in range(self._nb):
            src, dst, _ = self.read_groups(i)
            os.remove(self._path(i))
            yield src, dst

    def close(self) -> None:
        """Delete the bucket files."""
        for b in range(self._nb):
            try:
                os.remove(self._path(b))
            except FileNotFoundError:
                pass
        try:
            os.rmdir(self._dir)
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
