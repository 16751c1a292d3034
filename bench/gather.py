"""Feature row gathers of a loader: the compiled kernel against the previous per-part ``np.take``.

The loader fills a batch's feature array (the frame that goes on the wire) from the memory-mapped
feature matrices of its host's parts.  Before: group the ids by part (argsort), ``np.take`` each
part's rows into a temporary, scatter the temporary into the batch array (two copies of every byte).
Now: :func:`services.loader.core.gather_feature_rows`, the same grouping, then one compiled pass
per part straight into the batch array (numba, one thread).  Both read the same memory-mapped .npy files, warm in the
page cache; same ids, same run, so the ratio is what to read.

Usage: python bench/gather.py [--rows 65536] [--dim 128] [--parts 8] [--part-rows 200000] [--dtype float32]
Writes bench/results/gather.md.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from numba import get_num_threads

from argosy.services.loader.core import gather_feature_rows

ROOT = Path(__file__).resolve().parents[1]


def before(feats, parts, rows, out):
    """The previous loader gather: group by part, np.take into a temporary, scatter into ``out``."""
    order = np.argsort(parts.astype(np.int16), kind="stable")
    bounds = np.searchsorted(parts[order], np.arange(len(feats) + 1))
    for p in np.flatnonzero(np.diff(bounds)):
        sel = order[bounds[p]:bounds[p + 1]]
        out[sel] = np.take(feats[p], rows[sel], axis=0)


def best(fn, reps: int) -> float:
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return min(ts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=65536, help="rows per batch (issue 28: ~64k)")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--part-rows", type=int, default=200_000)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    dt = np.dtype(args.dtype)
    with tempfile.TemporaryDirectory() as d:
        maps = []
        for p in range(args.parts):
            path = Path(d) / f"f{p}.npy"
            np.save(path, rng.standard_normal((args.part_rows, args.dim)).astype(dt))
            maps.append(np.asarray(np.load(path, mmap_mode="r")))
        for m in maps:
            m.sum()                                   # warm the page cache and the mappings
        flist = maps
        parts = rng.integers(0, args.parts, args.rows).astype(np.int64)
        rows = rng.integers(0, args.part_rows, args.rows).astype(np.int64)
        dst = np.arange(args.rows, dtype=np.int64)
        a = np.empty((args.rows, args.dim), dt)
        b = np.empty_like(a)
        before(maps, parts, rows, a)
        gather_feature_rows(flist, parts, rows, dst, b)       # compile
        assert np.array_equal(a, b)
        t_old = best(lambda: before(maps, parts, rows, a), args.reps)
        t_new = best(lambda: gather_feature_rows(flist, parts, rows, dst, b), args.reps)
    gb = args.rows * args.dim * dt.itemsize / 1e9
    load = os.getloadavg()[0]
    md = [f"# Loader feature gather: {args.rows} rows x {args.dim} {dt.name} ({gb * 1e3:.1f} MB per batch) "
          f"from {args.parts} memory-mapped parts", "",
          f"{os.cpu_count()} cores, {get_num_threads()} numba threads, load average {load:.1f}; best of {args.reps}.", "",
          "| gather | ms per batch | GB/s | vs before |", "|---|---|---|---|",
          f"| before: per-part np.take + scatter | {t_old * 1e3:.1f} | {gb / t_old:.2f} | 1.00x |",
          f"| kernel straight into the batch array | {t_new * 1e3:.1f} | {gb / t_new:.2f} | {t_old / t_new:.2f}x |"]
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "gather.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
