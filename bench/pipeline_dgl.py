"""DGL's single-process training loop, the reference of ``bench/pipeline_vs_dgl.py``.

Run by the DGL venv's interpreter (imports only dgl, torch, numpy): ``NeighborSampler`` +
``DataLoader`` (in-process sampling, no workers) + 3-layer ``SAGEConv("mean")`` on one ``.npz``
graph (``indptr``, ``indices``, ``features``, ``labels``, ``train_mask``); prints one JSON object
with the train batches/s of the epochs after the first (the warm-up).

Usage: /work/dgl-venv/bin/python bench/pipeline_dgl.py GRAPH.npz [--epochs 3] [--threads 2]
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
import torch.nn.functional as F
import dgl
import dgl.nn as dglnn


class SAGE(torch.nn.Module):
    def __init__(self, fin: int, hidden: int, classes: int, layers: int, dropout: float):
        super().__init__()
        dims = [fin] + [hidden] * (layers - 1) + [classes]
        self.convs = torch.nn.ModuleList(dglnn.SAGEConv(a, b, "mean") for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = dropout

    def forward(self, blocks, x):
        h = x
        for i, (conv, block) in enumerate(zip(self.convs, blocks)):
            h = conv(block, F.dropout(h, self.dropout, self.training))
            if i < len(self.convs) - 1:
                h = F.relu(h)
        return h


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("graph")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--fanouts", default="15,10,5", help="DGL's order: the input layer first")
    ap.add_argument("--hidden", type=int, default=256)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    z = np.load(args.graph)
    indptr, indices = torch.from_numpy(z["indptr"].astype(np.int64)), torch.from_numpy(z["indices"].astype(np.int64))
    g = dgl.graph(("csc", (indptr, indices, torch.empty(0, dtype=torch.int64))), num_nodes=indptr.shape[0] - 1)
    x, y = torch.from_numpy(z["features"]), torch.from_numpy(z["labels"].astype(np.int64))
    train = torch.from_numpy(np.flatnonzero(z["train_mask"]))
    fanouts = [int(f) for f in args.fanouts.split(",")]
    sampler = dgl.dataloading.NeighborSampler(fanouts)
    loader = dgl.dataloading.DataLoader(g, train, sampler, batch_size=args.batch_size, shuffle=True, drop_last=False,
                                        num_workers=0)
    model = SAGE(x.shape[1], args.hidden, int(y.max()) + 1, len(fanouts), 0.5)
    opt = torch.optim.Adam(model.parameters(), lr=0.005)
    model.train()
    times, batches = [], 0
    for ep in range(args.epochs):
        t0, n = time.perf_counter(), 0
        for _, seeds, blocks in loader:
            xb = x[blocks[0].srcdata[dgl.NID]]
            yb = y[blocks[-1].dstdata[dgl.NID]]
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(blocks, xb), yb).backward()
            opt.step()
            n += 1
        if ep:
            times.append(time.perf_counter() - t0)
            batches += n
    print(json.dumps({"dgl": dgl.__version__, "batches_per_second": batches / sum(times), "batches": batches,
                      "seconds": sum(times)}))


if __name__ == "__main__":
    main()
