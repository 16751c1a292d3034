"""DGL's side of ``bench/layers.py``: the same blocks (an .npz it writes), DGL's own layers.

Run by the DGL venv's interpreter (torch 2.2.1 + dgl 2.1.0), so it imports only dgl, torch and
numpy; prints one JSON object: milliseconds per layer (forward + backward) and per train step.

Usage: /work/dgl-venv/bin/python bench/layers_dgl.py BLOCKS.npz --threads 2 [--reps 7]
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch
import torch.nn.functional as F
import dgl
import dgl.nn as dglnn


def median_ms(fn, reps: int, warm: int = 2) -> float:
    """Median of ``reps`` runs; ``ARGOSY_BENCH_CLOCK=cpu`` (``layers.py --clock cpu``) counts the
    process's CPU time instead of wall time: with one thread, what a shared machine's load leaves
    alone (its wall time measures the scheduler)."""
    clock = time.process_time if os.environ.get("ARGOSY_BENCH_CLOCK") == "cpu" else time.perf_counter
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(reps):
        t0 = clock()
        fn()
        ts.append(clock() - t0)
    return float(np.median(ts) * 1e3)


def layer(kind: str, fin: int, fout: int, last: bool = False) -> torch.nn.Module:
    if kind == "sage":
        return dglnn.SAGEConv(fin, fout, "mean")
    if kind == "gcn":
        return dglnn.GraphConv(fin, fout, norm="both", allow_zero_in_degree=True)
    heads = 1 if last else 8
    return dglnn.GATConv(fin, fout // heads, heads, allow_zero_in_degree=True)


def apply(conv, kind: str, block, h):
    out = conv(block, (h, h[:block.num_dst_nodes()]))
    return out.flatten(1) if kind == "gat" else out


class Model(torch.nn.Module):
    def __init__(self, kind: str, fin: int, hidden: int, classes: int, layers: int, dropout: float = 0.5):
        super().__init__()
        dims = [fin] + [hidden] * (layers - 1) + [classes]
        self.kind, self.dropout = kind, dropout
        self.convs = torch.nn.ModuleList(layer(kind, a, b, i == layers - 1) for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])))

    def forward(self, blocks, x):
        h = x
        for i, (conv, block) in enumerate(zip(self.convs, blocks)):
            h = apply(conv, self.kind, block, F.dropout(h, self.dropout, self.training))
            if i < len(self.convs) - 1:
                h = F.elu(h) if self.kind == "gat" else F.relu(h)
        return h


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("blocks")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    z = np.load(args.blocks)
    res = {"dgl": dgl.__version__, "torch": torch.__version__, "layer": {}, "step": {}}
    ns, nd = int(z["layer_num_src"]), int(z["layer_num_dst"])
    block = dgl.create_block((torch.from_numpy(z["layer_src"]).long(), torch.from_numpy(z["layer_dst"]).long()),
                             num_src_nodes=ns, num_dst_nodes=nd)
    x = torch.from_numpy(z["layer_x"]).requires_grad_()
    fout = int(z["layer_out"])
    for kind in ("sage", "gcn", "gat"):
        torch.manual_seed(0)
        conv = layer(kind, x.shape[1], fout)

        def fb():
            x.grad = None
            conv.zero_grad(set_to_none=True)
            apply(conv, kind, block, x).sum().backward()
        res["layer"][kind] = median_ms(fb, args.reps)
    nb, classes, hidden = int(z["num_batches"]), int(z["num_classes"]), int(z["hidden"])
    batches = []
    for i in range(nb):
        hn, he = z[f"b{i}_hop_nodes"], z[f"b{i}_hop_edges"]
        src, dst = torch.from_numpy(z[f"b{i}_edge_src"]).long(), torch.from_numpy(z[f"b{i}_edge_dst"]).long()
        H = hn.shape[0] - 1
        blocks = [dgl.create_block((src[he[h - 1]:he[h]], dst[he[h - 1]:he[h]]), num_src_nodes=int(hn[h]),
                                   num_dst_nodes=int(hn[h - 1])) for h in range(H, 0, -1)]     # outermost first
        batches.append((blocks, torch.from_numpy(z[f"b{i}_x"]), torch.from_numpy(z[f"b{i}_y"])))
    for kind in ("sage", "gcn", "gat"):
        torch.manual_seed(0)
        model = Model(kind, batches[0][1].shape[1], hidden, classes, len(batches[0][0]))
        opt = torch.optim.Adam(model.parameters(), lr=0.003)
        model.train()

        def epoch():
            for blocks, xb, yb in batches:
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(model(blocks, xb), yb).backward()
                opt.step()
        res["step"][kind] = median_ms(epoch, max(3, args.reps // 2), warm=1) / nb
    print(json.dumps(res))


if __name__ == "__main__":
    main()
