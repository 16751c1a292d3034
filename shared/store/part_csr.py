"""One part's CSR neighbour array from its spill bucket, in bounded memory.

The store writer (:mod:`.writer`) spills each directed entry as (local row, neighbour) into its
source part's bucket file; :func:`part_csr` turns one bucket into the part's ``indices.npy`` (and
``edge_weight.npy`` / ``edge_type.npy`` when the store has them).  A bucket that arrives ordered
(GREM's regrouped stream) is copied slab by slab; any other is sorted and deduplicated in slabs of
at most :data:`SLAB_ENTRIES` entries cut by row range, so memory stays O(slab) however many edges
the part holds.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from numba import njit

from argosy.shared.store.manifest import edge_type_dtype

__all__ = ["WREC", "SLAB_ENTRIES", "ORDERED_SLAB_ENTRIES", "TypeSplitter", "part_csr"]

WREC = np.dtype([("w", "<f4"), ("m", "u1")])
"""A spilled entry's weight and whether symmetrisation added it (see ``coalesce_weights``)."""
SLAB_ENTRIES = 1 << 22
"""Directed entries a part's CSR is sorted and deduplicated in at once (~25 B each at the peak: ~100 MB; a bucket above it costs one more read and write of itself)."""
ORDERED_SLAB_ENTRIES = 1 << 20
"""Entries of an already ordered bucket (GREM's regrouped stream) copied into a part's CSR at once: only
read, counted and copied (~12 B each: 12 MB a thread); 4M-entry slabs were the store's peak on a 2M-vertex
graph (378 vs 312 MiB partitioning it)."""



@njit(cache=True, nogil=True)
def _split_ordered_slab(pairs, counts, nbrs):
    """An ordered slab's (row, neighbour) pairs: each row's entries counted into ``counts``, the
    neighbours copied into ``nbrs`` (no strided or widened temporaries)."""
    for i in range(pairs.shape[0]):
        counts[pairs[i, 0]] += 1
        nbrs[i] = pairs[i, 1]


@njit(cache=True, nogil=True)
def _count_cut(assign, nbrs, p):
    """Entries of part ``p`` whose neighbour is in another part."""
    c = 0
    for i in range(nbrs.size):
        if assign[nbrs[i]] != p:
            c += 1
    return c


def _read_pairs(path: Path, idt, start: int, count: int) -> np.ndarray:
    """Entries ``[start, start + count)`` of a spill file of (local row, neighbour) pairs."""
    item = 2 * np.dtype(idt).itemsize
    return np.fromfile(path, dtype=idt, count=2 * count, offset=start * item).reshape(-1, 2)


def _read_wrec(path: Path | None, start: int, count: int) -> np.ndarray | None:
    """Weight records ``[start, start + count)`` of a spill file (None: unweighted)."""
    if path is None:
        return None
    return np.fromfile(path, dtype=WREC, count=count, offset=start * WREC.itemsize)


def _sorted_unique_slab(pairs: np.ndarray, n: int, idt, wrec: np.ndarray | None = None):
    """Sort a slab's entries by (row, neighbour) and drop duplicates: ``(rows int64, nbrs idt)``,
    plus their merged weights float32 when ``wrec`` is given (``(rows, nbrs, weights)``)."""
    key = pairs[:, 0].astype(np.int64)
    key *= n
    key += pairs[:, 1]
    if wrec is not None:
        from argosy.shared.graphio import coalesce_weights
        key, w = coalesce_weights(key, wrec["w"], wrec["m"])
        rows = key // n
        key -= rows * n
        return rows, key.astype(idt), w
    key.sort()                                           # sort + diff: np.unique is far slower
    if key.size:
        keep = np.empty(key.size, np.bool_)
        keep[0] = True
        np.not_equal(key[1:], key[:-1], out=keep[1:])
        key = key[keep]
    rows = key // n
    key -= rows * n
    return rows, key.astype(idt)


def _npy_header(fh, dtype, n: int) -> None:
    np.lib.format.write_array_header_1_0(fh, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                              "fortran_order": False, "shape": (n,)})


def part_csr(bucket: Path, out: Path, n_p: int, n: int, idt, assign: np.ndarray, p: int,
              ordered: bool = False, wdir: Path | None = None,
              types: "TypeSplitter | None" = None) -> tuple[np.ndarray, int, int]:
    """Build part ``p``'s CSR neighbour array from its spill bucket into ``out`` (``indices.npy``).

    ``ordered``: the bucket's entries are already strictly increasing (row, neighbour), so
    they are copied slab by slab, neither sorted nor deduplicated.

    A bucket of at most ``SLAB_ENTRIES`` entries is sorted whole; a larger one is split by
    row range into slabs of at most that many entries (a row histogram picks the cuts; one row
    never spans two slabs), each slab sorted, deduplicated and appended, so memory stays
    O(slab) however many edges the part holds.

    ``wdir``: the part's directory when the store is weighted: the bucket's weight records
    (``<bucket>.w``) follow their entries into ``edge_weight.npy``, and each row's sum goes to
    ``weighted_degree.npy``.

    ``types``: a typed store: the spilled neighbours are keys ``neighbour * R + relation``, split
    back by ``types`` (relations to ``edge_type.npy``) before they are written; ``idt`` is then the
    spill dtype (int64) and the key width is ``n * R``.

    Returns:
        ``(per-row neighbour counts int64[n_p], entries written, cut entries)``.
    """
    item = 2 * np.dtype(idt).itemsize
    width = n * types.R if types is not None else n
    split = types.split if types is not None else (lambda nbrs: nbrs)
    total = bucket.stat().st_size // item
    counts = np.zeros(n_p, np.int64)
    wb = bucket.with_suffix(".w") if wdir is not None else None
    wdeg = np.zeros(n_p, np.float64) if wdir is not None else None
    wout = open(wdir / "edge_weight.raw", "wb") if wdir is not None else None

    def put_w(rows, w):
        if wout is not None:
            wout.write(np.ascontiguousarray(w, np.float32).tobytes())
            wdeg[:] += np.bincount(rows, weights=w, minlength=n_p)

    try:
        if ordered:
            cut = 0
            with open(out, "wb") as fh:
                _npy_header(fh, types.idt if types is not None else idt, total)
                for s0 in range(0, total, ORDERED_SLAB_ENTRIES):
                    pairs = _read_pairs(bucket, idt, s0, ORDERED_SLAB_ENTRIES)
                    nbrs = np.empty(pairs.shape[0], idt)
                    _split_ordered_slab(pairs, counts, nbrs)
                    nbrs = split(nbrs)
                    cut += _count_cut(assign, nbrs, p)
                    fh.write(nbrs.data)
                    if wb is not None:
                        put_w(pairs[:, 0], _read_wrec(wb, s0, ORDERED_SLAB_ENTRIES)["w"])
            bucket.unlink()
            return counts, total, cut
        if total <= SLAB_ENTRIES:
            res = _sorted_unique_slab(_read_pairs(bucket, idt, 0, total), width, idt, _read_wrec(wb, 0, total))
            rows, nbrs = res[0], split(res[1])
            bucket.unlink()
            counts += np.bincount(rows, minlength=n_p)
            np.save(out, nbrs)
            if wb is not None:
                put_w(rows, res[2])
            return counts, int(nbrs.size), _count_cut(assign, nbrs, p)
        hist = np.zeros(n_p, np.int64)                       # entries per row, duplicates included
        for s0 in range(0, total, SLAB_ENTRIES):
            hist += np.bincount(_read_pairs(bucket, idt, s0, SLAB_ENTRIES)[:, 0], minlength=n_p)
        cum = np.cumsum(hist)
        cuts = [0]                                           # slab row boundaries
        while cum[-1] - (cum[cuts[-1] - 1] if cuts[-1] else 0) > SLAB_ENTRIES:
            base = cum[cuts[-1] - 1] if cuts[-1] else 0
            r = int(np.searchsorted(cum, base + SLAB_ENTRIES, side="right"))
            cuts.append(max(r, cuts[-1] + 1))                 # a row bigger than a slab is a slab
        cuts.append(n_p)
        del hist, cum
        bounds = np.asarray(cuts[1:-1], np.int64)
        slab_files = [bucket.with_suffix(f".s{i}") for i in range(len(cuts) - 1)]
        wslab_files = [bucket.with_suffix(f".ws{i}") for i in range(len(cuts) - 1)] if wb is not None else []
        handles = [open(f, "wb") for f in slab_files + wslab_files]
        ns = len(slab_files)
        try:
            for s0 in range(0, total, SLAB_ENTRIES):
                pairs = _read_pairs(bucket, idt, s0, SLAB_ENTRIES)
                sid = np.searchsorted(bounds, pairs[:, 0], side="right")
                o = np.argsort(sid, kind="stable")
                sb = np.searchsorted(sid[o], np.arange(ns + 1))
                pairs = pairs[o]
                rec = _read_wrec(wb, s0, SLAB_ENTRIES)
                rec = rec[o] if rec is not None else None
                for i in np.flatnonzero(np.diff(sb)):
                    handles[i].write(pairs[sb[i]:sb[i + 1]].tobytes())
                    if rec is not None:
                        handles[ns + i].write(rec[sb[i]:sb[i + 1]].tobytes())
        finally:
            for h in handles:
                h.close()
        bucket.unlink()
        if wb is not None:
            wb.unlink()
        raw = out.with_suffix(".raw")
        entries, cut = 0, 0
        with open(raw, "wb") as fh:
            for i, f in enumerate(slab_files):
                c = f.stat().st_size // item
                res = _sorted_unique_slab(_read_pairs(f, idt, 0, c), width, idt,
                                          _read_wrec(wslab_files[i], 0, c) if wslab_files else None)
                rows, nbrs = res[0], split(res[1])
                f.unlink()
                if wslab_files:
                    wslab_files[i].unlink()
                    put_w(rows, res[2])
                counts += np.bincount(rows, minlength=n_p)
                cut += _count_cut(assign, nbrs, p)
                entries += int(nbrs.size)
                fh.write(nbrs.tobytes())
                del rows, nbrs, res
        with open(out, "wb") as fh, open(raw, "rb") as src:  # .npy header, then the slabs' bytes
            _npy_header(fh, types.idt if types is not None else idt, entries)
            shutil.copyfileobj(src, fh, 16 << 20)
        raw.unlink()
        return counts, entries, cut
    finally:
        if types is not None:
            types.close()
        if wout is not None:
            wout.close()
            _finish_weights(wdir, wdeg)
            if wb is not None and wb.exists():
                wb.unlink()


class TypeSplitter:
    """Splits a typed part's spilled keys ``neighbour * R + relation`` back into neighbours (returned,
    as the store's id dtype) and relations (appended to ``edge_type.raw``, then ``edge_type.npy``)."""

    def __init__(self, pdir: Path, R: int, idt):
        self.pdir, self.R, self.idt = pdir, int(R), np.dtype(idt)
        self.tdt = edge_type_dtype(R)
        self.fh = open(pdir / "edge_type.raw", "wb")
        self.count = 0

    def split(self, keys: np.ndarray) -> np.ndarray:
        keys = np.asarray(keys, np.int64)
        nbrs = keys // self.R
        self.fh.write((keys - nbrs * self.R).astype(self.tdt).tobytes())
        self.count += int(keys.size)
        return nbrs.astype(self.idt)

    def close(self) -> None:
        if self.fh.closed:
            return
        self.fh.close()
        raw = self.pdir / "edge_type.raw"
        with open(self.pdir / "edge_type.npy", "wb") as fh, open(raw, "rb") as src:
            _npy_header(fh, self.tdt, self.count)
            shutil.copyfileobj(src, fh, 16 << 20)
        raw.unlink()


def _finish_weights(pdir: Path, wdeg: np.ndarray) -> None:
    """``edge_weight.raw`` -> ``edge_weight.npy`` (header first), and ``weighted_degree.npy``."""
    raw = pdir / "edge_weight.raw"
    with open(pdir / "edge_weight.npy", "wb") as fh, open(raw, "rb") as src:
        _npy_header(fh, np.float32, raw.stat().st_size // 4)
        shutil.copyfileobj(src, fh, 16 << 20)
    raw.unlink()
    np.save(pdir / "weighted_degree.npy", wdeg.astype(np.float32))
