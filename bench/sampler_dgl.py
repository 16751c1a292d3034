"""DGL side of ``bench/sampler.py``: the same seed batches through DGL's ``NeighborSampler``.

Run by ``bench/sampler.py`` with DGL's own interpreter (``/work/dgl-venv/bin/python``, torch 2.2.1 +
dgl 2.1.0); imports only dgl, torch and numpy.  Reads the graph (symmetric CSR ``.npz``) and the seed
batches that the Argosy side samples, samples every batch ``--passes`` times on one thread and prints
one JSON line: the sum over batches of each batch's smallest CPU time (``time.process_time``) and
the sampled edges of every batch (all blocks together).

Usage: python bench/sampler_dgl.py GRAPH.npz SEEDS.npy --fanouts 15,10,5 [--passes 3]
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
import dgl


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("graph")
    ap.add_argument("seeds", help="int64[batches, batch] seed ids (.npy)")
    ap.add_argument("--fanouts", default="15,10,5", help="DGL's order: input layer first")
    ap.add_argument("--passes", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    z = np.load(a.graph)
    indptr = torch.from_numpy(z["indptr"].astype(np.int64))
    indices = torch.from_numpy(z["indices"].astype(np.int64))
    g = dgl.graph(("csc", (indptr, indices, torch.empty(0, dtype=torch.int64))), num_nodes=len(indptr) - 1)
    g = g.formats("csc")                  # sampling in-edges reads the CSC; no conversion per batch
    sampler = dgl.dataloading.NeighborSampler([int(f) for f in a.fanouts.split(",")])
    batches = [torch.from_numpy(s) for s in np.load(a.seeds)]
    sampler.sample_blocks(g, batches[0])   # warm up
    best = np.full(len(batches), np.inf)
    for _ in range(a.passes):
        for i, s in enumerate(batches):
            t0 = time.process_time()
            sampler.sample_blocks(g, s)
            best[i] = min(best[i], time.process_time() - t0)
    edges = [int(sum(b.num_edges() for b in sampler.sample_blocks(g, s)[2])) for s in batches]
    print(json.dumps({"seconds": float(best.sum()), "edges": edges, "dgl": dgl.__version__, "torch": torch.__version__,
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
