"""Overhead of carrying edge weights: sampler batches/s and wire bytes per batch, with vs without,
on the same weighted store in the same run (ratios, never absolute asserts).  The two cores take
turns batch by batch (the order alternating), so load from other processes on a shared machine
falls on both alike; the ratio reported is the median over rounds of per-round time ratios.

    .venv/bin/python bench/edge_weights.py [--nodes 200000] [--edges 2000000] [--batches 200]
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from argosy.services.sampler.core import SamplerCore
from argosy.shared.graphio import csr_from_edges
from argosy.shared.store import PartitionStore, write_store
from argosy.shared.wire import encode


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=200_000)
    ap.add_argument("--edges", type=int, default=2_000_000)
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--fanouts", default="15,10")
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    fan = tuple(int(f) for f in a.fanouts.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        g = csr_from_edges(rng.integers(0, a.nodes, a.edges), rng.integers(0, a.nodes, a.edges), a.nodes,
                           weights=rng.random(a.edges).astype(np.float32))
        write_store(g, rng.integers(0, a.parts, a.nodes), Path(tmp) / "s", num_parts=a.parts)
        store = PartitionStore(Path(tmp) / "s")
        cores = {"weighted": SamplerCore(store, seed=0), "unweighted": SamplerCore(store, seed=0, edge_weights=False)}
        seeds = [rng.choice(a.nodes, a.batch, replace=False) for _ in range(a.batches)]
        for c in cores.values():                     # compile and warm the page cache
            c.sample(seeds[0], fan, rng_seed=0)
        secs = {k: [] for k in cores}
        nbytes = {k: 0 for k in cores}
        names = list(cores)
        for _ in range(a.rounds):
            t = dict.fromkeys(cores, 0.0)
            for i, s in enumerate(seeds):
                for k in (names if i % 2 == 0 else names[::-1]):
                    t0 = time.perf_counter()
                    b = cores[k].sample(s, fan, rng_seed=i)
                    t[k] += time.perf_counter() - t0
                    if i == len(seeds) - 1:
                        nbytes[k] = sum(len(f) for f in encode(b))   # bytes of the last batch (same seeds both ways)
            for k in cores:
                secs[k].append(t[k])
        rate = {k: a.batches / min(v) for k, v in secs.items()}
        out = {"nodes": a.nodes, "edges": a.edges, "parts": a.parts, "batch": a.batch, "fanouts": list(fan),
               "batches_per_s": rate, "bytes_per_batch": nbytes,
               "rate_ratio_weighted_over_unweighted": float(np.median(np.array(secs["unweighted"])
                                                                      / np.array(secs["weighted"]))),
               "bytes_ratio_weighted_over_unweighted": nbytes["weighted"] / nbytes["unweighted"]}
        print(json.dumps(out))


if __name__ == "__main__":
    main()
