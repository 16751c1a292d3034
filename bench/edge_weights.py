"""Overhead of carrying edge weights: sampler batches/s and wire bytes per batch, with vs without,
on the same weighted store in the same run (ratios, never absolute asserts).  The two cores take
turns batch by batch (the order alternating), so load from other processes on a shared machine
falls on both alike; the ratio reported is the median over rounds of per-round time ratios.

    .venv/bin/python bench/edge_weights.py [--nodes 200000] [--edges 2000000] [--batches 200]

``--accuracy`` instead shows where weights matter: a planted graph whose heavy edges (weight 1)
join vertices of one class and whose light ones (weight 0.05, more of them) are random noise,
weak features; GCN through ``argosy.train`` with the weights and with ``no_edge_weights=True``,
same seeds, 20 labels per class:

    .venv/bin/python bench/edge_weights.py --accuracy --seeds 0,1,2
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


def planted_graph(n: int = 2000, classes: int = 4, heavy: int = 3, light: int = 8, w_light: float = 0.05,
                  dim: int = 16, signal: float = 0.6, seed: int = 0):
    """(scipy CSR adjacency with weights, features float32[n, dim], labels int64[n]): each vertex
    has ``heavy`` edges of weight 1 to vertices of its class and ``light`` of weight ``w_light`` to
    uniform random vertices (both directions); features are N(0, 1) plus ``signal`` at the class's
    coordinate."""
    import scipy.sparse as sp
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    members = [np.flatnonzero(y == c) for c in range(classes)]
    hs = np.repeat(np.arange(n), heavy)
    hd = np.concatenate([rng.choice(members[c], heavy) for c in y])
    ls = np.repeat(np.arange(n), light)
    ld = rng.integers(0, n, n * light)
    src, dst = np.concatenate([hs, hd, ls, ld]), np.concatenate([hd, hs, ld, ls])
    w = np.concatenate([np.ones(2 * hs.size), np.full(2 * ls.size, w_light)]).astype(np.float32)
    keep = src != dst
    adj = sp.coo_matrix((w[keep], (src[keep], dst[keep])), shape=(n, n)).tocsr()      # duplicates summed
    x = rng.standard_normal((n, dim)).astype(np.float32)
    x[np.arange(n), y] += signal
    return adj, x, y


def accuracy(seeds: list[int]) -> dict:
    """Test accuracy of GCN with and without the edge weights on :func:`planted_graph`, per seed."""
    import argosy
    adj, x, y = planted_graph()
    out = {"with_weights": [], "no_edge_weights": []}
    for seed in seeds:
        for key, off in (("with_weights", False), ("no_edge_weights", True)):
            with tempfile.TemporaryDirectory() as d:
                r = argosy.train(adj, features=x, labels=y, split="per-class:20,200,1000", model="gcn", seed=seed,
                                 epochs=50, patience=10, parts=2, no_edge_weights=off, run_dir=f"{d}/run")
            out[key].append(r["test_accuracy"])
    return {"graph": "planted: 2000 vertices, 4 classes, 3 heavy same-class edges (w 1) + 8 random (w 0.05) each",
            "seeds": seeds, **out, **{f"{k}_mean": float(np.mean(v)) for k, v in out.items()},
            **{f"{k}_std": float(np.std(v)) for k, v in out.items()}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--accuracy", action="store_true", help="GCN accuracy with vs without weights (planted graph)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--nodes", type=int, default=200_000)
    ap.add_argument("--edges", type=int, default=2_000_000)
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--fanouts", default="15,10")
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if a.accuracy:
        print(json.dumps(accuracy([int(x) for x in a.seeds.split(",")])))
        return
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
