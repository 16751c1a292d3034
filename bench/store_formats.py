"""Store-writing time from every input format of the same graph.

``python bench/store_formats.py --npy g.npy [--feature-dim 16] [--parts 16] [--text]`` converts a
``.npy`` edge list (``argosy generate --out g.npy``) into an ``.npz`` CSR (with features, labels
and masks as members; stored and deflated) and side files for the ``.npy``, then runs
``argosy partition --method hash`` (the cheapest partitioner, so the store dominates) on each and
reports the store-writing seconds, total seconds and peak RSS, as ratios to the ``.npy`` run
measured in the same invocation.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def convert(npy: Path, d: Path, feature_dim: int, text: bool) -> dict:
    """Write the .npz versions and the side files next to ``npy`` (once)."""
    from argosy.shared.graphio import csr_from_edges
    d.mkdir(parents=True, exist_ok=True)
    e = np.load(npy, mmap_mode="r")
    n = int(e.max()) + 1
    rng = np.random.default_rng(0)
    side = {"features": d / "features.npy", "labels": d / "labels.npy", "train_mask": d / "train_mask.npy"}
    if not (d / "g.npz").exists():
        g = csr_from_edges(np.asarray(e[:, 0]), np.asarray(e[:, 1]), num_nodes=n)
        feats = rng.standard_normal((n, feature_dim), dtype=np.float32)
        labels = rng.integers(0, 16, n)
        train = rng.random(n) < 0.1
        np.save(side["features"], feats)
        np.save(side["labels"], labels)
        np.save(side["train_mask"], train)
        np.savez(d / "g.npz", indptr=g.indptr, indices=g.indices, features=feats, labels=labels, train_mask=train)
        np.savez_compressed(d / "gz.npz", indptr=g.indptr, indices=g.indices, features=feats, labels=labels,
                            train_mask=train)
        del g
    if text and not (d / "g.txt").exists():
        with open(d / "g.txt", "w") as f:
            for a in range(0, e.shape[0], 1 << 22):
                np.savetxt(f, np.asarray(e[a:a + (1 << 22)]), fmt="%d")
    return side


def run(path: Path, parts: int, out: Path, extra: list[str]) -> dict:
    import shutil
    shutil.rmtree(out, ignore_errors=True)
    cmd = ["/usr/bin/time", "-f", "MAXRSS %M", sys.executable, "-m", "argosy.services.partitioner", str(path),
           "--parts", str(parts), "--method", "hash", "--json", "--out", str(out), *extra]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{path}: exit {r.returncode}\n{r.stderr[-2000:]}")
    res = json.loads(r.stdout.strip().splitlines()[-1])
    rss = int(next(ln.split()[1] for ln in r.stderr.splitlines() if ln.startswith("MAXRSS"))) * 1024
    shutil.rmtree(out, ignore_errors=True)
    return {"store_s": res["store_seconds"], "wall_s": wall, "peak_rss_mb": rss / 2**20, "m": res["m"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--npy", required=True, type=Path)
    ap.add_argument("--parts", type=int, default=16)
    ap.add_argument("--feature-dim", type=int, default=16)
    ap.add_argument("--text", action="store_true", help="also a text edge list (slow to write)")
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args(argv)
    d = a.npy.parent / "formats"
    side = convert(a.npy, d, a.feature_dim, a.text)
    side_args = ["--features", str(side["features"]), "--labels", str(side["labels"]),
                 "--train-mask", str(side["train_mask"])]
    cases = [("npy (edges only)", a.npy, []), ("npy + side files", a.npy, side_args),
             ("npz stored", d / "g.npz", []), ("npz deflated", d / "gz.npz", [])]
    if a.text:
        cases.append(("text + side files", d / "g.txt", side_args))
    print(f"load average {os.getloadavg()[0]:.1f}; k={a.parts}; features dim {a.feature_dim}", flush=True)
    rows = []
    for name, path, extra in cases:
        for _ in range(a.repeat):
            r = run(path, a.parts, d / "store", extra)
            rows.append((name, r))
            print(f"{name:20s} store {r['store_s']:7.1f} s  wall {r['wall_s']:7.1f} s  peak RSS "
                  f"{r['peak_rss_mb']:7.0f} MiB  m={r['m']:,}", flush=True)
    base = next(r for n, r in rows if n == "npy + side files")
    print("ratios to npy + side files (store time, peak RSS):")
    for name, r in rows:
        print(f"  {name:20s} {r['store_s'] / base['store_s']:.2f}x  {r['peak_rss_mb'] / base['peak_rss_mb']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
