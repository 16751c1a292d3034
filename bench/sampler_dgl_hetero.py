"""DGL side of ``bench/sampler_hetero.py``: the same paper seed batches through DGL's heterograph
``NeighborSampler``.

Run by ``bench/sampler_hetero.py`` with DGL's own interpreter (``/work/dgl-venv/bin/python``, torch
2.2.1 + dgl 2.1.0); imports only dgl, torch and numpy.  Reads the relations exported from the
Argosy typed store (``GRAPH.npz``: for each canonical edge type ``(src_type, rel, dst_type)`` the
type-local ``src``/``dst`` of its edges, exactly the store's entries, reverses included, so every
vertex has the same in-neighbourhood as in the store) and the seed batches (type-local paper
ids), builds ``dgl.heterograph`` (CSC materialised once: sampling reads in-edges), samples every
batch ``--passes`` times on one thread and prints one JSON line: the sum over batches of each
batch's smallest CPU time (``time.process_time``), the sampled edges of every batch (all blocks,
all edge types) and the sampled edges per edge type (summed over batches).

``--fanouts`` is JSON: a list, input layer first (DGL's order), of per-layer fanouts, each an int
(DGL applies it to *every* edge type: up to that many in-edges per relation) or a dict
``{relation name: fanout}`` naming every edge type (DGL refuses a dict that leaves one out; 0: none,
-1: all).  Also printed: the sampled edges per layer (input layer first).

Usage: python bench/sampler_dgl_hetero.py GRAPH.npz SEEDS.npy --fanouts '[10, 10]' [--passes 3]
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
import dgl


def load_graph(path: str) -> dgl.DGLHeteroGraph:
    z = np.load(path, allow_pickle=False)
    meta = json.loads(str(z["meta"]))
    data = {}
    for i, (s, r, d) in enumerate(meta["relations"]):
        data[(s, r, d)] = (torch.from_numpy(z[f"src{i}"].astype(np.int64)), torch.from_numpy(z[f"dst{i}"].astype(np.int64)))
    g = dgl.heterograph(data, num_nodes_dict={t: int(n) for t, n in meta["num_nodes"].items()})
    g = g.formats("csc")                  # sampling in-edges reads the CSC; no conversion per batch
    g.create_formats_()
    return g


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("graph")
    ap.add_argument("seeds", help="int64[batches, batch] type-local seed ids of --seed-type (.npy)")
    ap.add_argument("--seed-type", default="paper")
    ap.add_argument("--fanouts", default="[10, 10]", help="JSON list, input layer first: ints or {relation: int}")
    ap.add_argument("--passes", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    dgl.seed(0)
    t0 = time.perf_counter()
    g = load_graph(a.graph)
    build_s = time.perf_counter() - t0
    fanouts = json.loads(a.fanouts)
    for i, f in enumerate(fanouts):
        if isinstance(f, dict) and set(f) != set(g.etypes):
            raise SystemExit(f"layer {i}: a dict fanout must name every edge type, {sorted(g.etypes)} "
                             f"(got {sorted(f)})")
    sampler = dgl.dataloading.NeighborSampler(fanouts)
    batches = [{a.seed_type: torch.from_numpy(s.astype(np.int64))} for s in np.load(a.seeds)]
    sampler.sample_blocks(g, batches[0])   # warm up
    best = np.full(len(batches), np.inf)
    for _ in range(a.passes):
        for i, s in enumerate(batches):
            t0 = time.process_time()
            sampler.sample_blocks(g, s)
            best[i] = min(best[i], time.process_time() - t0)
    edges, per_rel = [], dict.fromkeys(g.etypes, 0)
    per_layer = [0] * len(fanouts)
    for s in batches:
        blocks = sampler.sample_blocks(g, s)[2]
        edges.append(int(sum(b.num_edges() for b in blocks)))
        for j, b in enumerate(blocks):
            per_layer[j] += int(b.num_edges())
            for et in b.canonical_etypes:
                per_rel[et[1]] += int(b.num_edges(et))
    print(json.dumps({"seconds": float(best.sum()), "edges": edges, "edges_per_relation": per_rel,
                      "edges_per_layer": per_layer, "fanouts": fanouts, "graph_build_s": build_s,
                      "dgl": dgl.__version__, "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "num_edges": int(g.num_edges())}))


if __name__ == "__main__":
    main()
