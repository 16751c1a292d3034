"""Per-layer and per-step compute on CPU: Argosy's layers against the per-edge formula they
replaced, PyG's layers and DGL's (its own venv, ``bench/layers_dgl.py``), on the same blocks.

* layer: one synthetic sampled block, 35k sources, 20k destinations, 300k edges grouped by
  destination (15 each on average), 128 input features -> 256 (SAGE mean, GCN; GAT 8 heads x 32);
  forward + backward of the layer's output sum, input and parameter gradients.
* step: forward + backward + Adam step of a 3-layer model (Argosy in float32, and in bfloat16 mixed
  precision as ``--precision auto`` trains on a CPU with native bfloat16; DGL 2.1's CPU kernels
  crash under bfloat16 autocast (a segfault in ``gspmm``), so DGL runs float32) (hidden 256; GAT 8 x 32), on real
  batches of soc-slashdot (batch 1024, fanouts 15,10,5 in DGL's order, i.e. ``--fanouts 5,10,15``)
  with random 128-d features and 10 random classes.

The "per-edge" column is the formula of ``shared/models.py`` before it aggregated through the
block's CSR (kept here, verbatim, as the baseline): one gathered feature row per edge + index_add_.
PyG runs its convs as PyG users do on a sampled subgraph: SAGE on the bipartite block, GCN and GAT
on the square subgraph of the 35k sources (self loops added, every source row computed).  DGL runs
its SAGEConv / GraphConv(norm="both") / GATConv on ``dgl.create_block`` blocks (no self loops).
Each figure is the median of ``--reps`` runs; the whole comparison runs ``--rounds`` times, Argosy's
process and DGL's alternating, and the table keeps each column's best round (the machine is shared).

Usage: python bench/layers.py [--threads 2] [--rounds 2] [--clock wall|cpu] [--dgl-python /work/dgl-venv/bin/python]
Writes bench/results/layers.{json,md}.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "bench" / "results"
WORK = Path("/tmp/argosy-bench-layers")
from argosy.shared.envs import datasets_dir  # noqa: E402

DATASET = datasets_dir() / "soc-slashdot.npz"

import numba  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from argosy.shared.models import Blocks, GATConv, GCNConv, GNN, SAGEConv  # noqa: E402


# ----------------------------------------------------------------------------- the old formula (baseline)
def per_edge_conv(layer, x, src, dst, num_dst, degrees):
    """``shared/models.py``'s layers before the CSR kernels, verbatim."""
    if isinstance(layer, SAGEConv):
        cnt = torch.bincount(dst, minlength=num_dst).to(x.dtype)
        project_first = layer.lin_neigh.out_features < layer.lin_neigh.in_features
        h = layer.lin_neigh(x) if project_first else x
        agg = torch.zeros(num_dst, h.shape[1], dtype=h.dtype, device=h.device).index_add_(0, dst, h[src])
        if layer.aggr == "gcn":
            agg = (agg + h[:num_dst]) / (cnt + 1)[:, None]
            return (agg if project_first else layer.lin_neigh(agg)) + layer.bias
        agg = agg / cnt.clamp_(min=1)[:, None]
        return layer.lin_self(x[:num_dst]) + (agg if project_first else layer.lin_neigh(agg))
    if isinstance(layer, GCNConv):
        x = layer.lin(x)
        d1 = degrees + 1.0
        sampled = torch.bincount(dst, minlength=num_dst).to(x.dtype)
        scale = torch.where(sampled > 0, degrees[:num_dst] / sampled.clamp(min=1), torch.zeros_like(sampled))
        w = scale[dst] * torch.rsqrt(d1[src] * d1[dst])
        out = torch.zeros(num_dst, x.shape[1], dtype=x.dtype, device=x.device).index_add_(0, dst, x[src] * w[:, None])
        return out + x[:num_dst] / d1[:num_dst, None] + layer.bias
    H, C = layer.heads, layer.out_dim
    h = layer.lin(x).view(-1, H, C)
    loops = torch.arange(num_dst, device=x.device)
    src, dst = torch.cat([src, loops]), torch.cat([dst, loops])
    a_src = (h * layer.att_src).sum(-1)
    a_dst = (h[:num_dst] * layer.att_dst).sum(-1)
    e = F.leaky_relu(a_src[src] + a_dst[dst], 0.2)
    idx = dst[:, None].expand(-1, H)
    e_max = torch.full((num_dst, H), float("-inf"), dtype=e.dtype, device=e.device)
    e_max = e_max.scatter_reduce(0, idx, e, "amax", include_self=True)
    w = torch.exp(e - e_max[dst])
    denom = torch.zeros(num_dst, H, dtype=e.dtype, device=e.device).index_add_(0, dst, w)
    alpha = F.dropout(w / denom[dst], layer.attn_dropout, layer.training)
    out = torch.zeros(num_dst, H, C, dtype=h.dtype, device=h.device).index_add_(0, dst, h[src] * alpha[..., None])
    out = out.reshape(num_dst, H * C) if layer.concat else out.mean(1)
    return out + layer.bias


def per_edge_model(model: GNN, x, blocks: Blocks):
    """``GNN.forward`` with the per-edge convs."""
    H = blocks.num_hops
    h = x[:blocks.hop_nodes[H]]
    for i in range(len(model.layers)):
        src, dst, _, num_dst = blocks.hop(H - i)
        h = per_edge_conv(model.layers[i], F.dropout(h, model.dropout, model.training), src, dst, num_dst,
                          blocks.degrees)
        if i < len(model.layers) - 1:
            h = F.elu(h) if model.kind == "gat" else F.relu(h)
    return h


# ----------------------------------------------------------------------------- inputs
def layer_block(seed: int = 0, ns: int = 35_000, nd: int = 20_000, edges: int = 300_000, fin: int = 128) -> dict:
    rng = np.random.default_rng(seed)
    deg = rng.multinomial(edges, np.ones(nd) / nd)           # ~15 per destination
    dst = np.repeat(np.arange(nd), deg).astype(np.int32)
    src = rng.integers(0, ns, edges).astype(np.int32)
    return {"layer_src": src, "layer_dst": dst, "layer_num_src": ns, "layer_num_dst": nd, "layer_out": 256,
            "layer_x": rng.standard_normal((ns, fin)).astype(np.float32),
            "layer_degrees": (np.bincount(src, minlength=ns) + rng.integers(0, 30, ns)).astype(np.int32)}


def step_batches(num: int, fanouts=(5, 10, 15), batch: int = 1024, fin: int = 128, classes: int = 10) -> list:
    """Sampled batches of soc-slashdot (Argosy's sampler) with random features and labels."""
    from argosy.shared.store import PartitionStore
    from argosy.services.sampler.core import SamplerCore
    store = WORK / "store"
    if not (store / "manifest.json").exists():
        subprocess.run([sys.executable, "-m", "argosy.services.partitioner", str(DATASET), "--parts", "1", "--method",
                        "random", "--out", str(store), "--overwrite"], check=True, cwd=ROOT, capture_output=True)
    s = PartitionStore(store)
    core, rng = SamplerCore(s, seed=0), np.random.default_rng(1)
    out = []
    for i in range(num):
        sb = core.sample(rng.choice(s.manifest.num_nodes, batch, replace=False), fanouts, rng_seed=i)
        n = sb.nodes.shape[0]
        out.append((sb, rng.standard_normal((n, fin)).astype(np.float32), rng.integers(0, classes, batch)))
    return out


def to_blocks(sb) -> Blocks:
    hn = sb.hop_nodes.tolist()
    return Blocks(hop_nodes=hn, hop_edges=sb.hop_edges.tolist(), edge_src=torch.from_numpy(sb.edge_src).long(),
                  edge_dst=torch.from_numpy(sb.edge_dst).long(), degrees=torch.from_numpy(sb.degrees).float(),
                  dst_ptr=list(torch.from_numpy(sb.dst_ptr).split([n + 1 for n in hn[:-1]])))


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


# ----------------------------------------------------------------------------- Argosy + PyG side
def argosy_round(z: dict, batches: list, reps: int) -> dict:
    import torch_geometric.nn as pyg
    from torch_geometric.nn import models as pygm
    from argosy.shared.models import EdgeIndexModel
    ns, nd = z["layer_num_src"], z["layer_num_dst"]
    src, dst = torch.from_numpy(z["layer_src"]).long(), torch.from_numpy(z["layer_dst"]).long()
    ptr = torch.zeros(nd + 1, dtype=torch.long)
    ptr[1:] = torch.bincount(dst, minlength=nd).cumsum(0)
    deg = torch.from_numpy(z["layer_degrees"]).float()
    x = torch.from_numpy(z["layer_x"]).requires_grad_()
    square = torch.stack([src, dst])
    fin, fout = x.shape[1], z["layer_out"]
    res = {"layer": {}, "step": {}}
    for kind in ("sage", "gcn", "gat"):
        torch.manual_seed(0)
        ours = {"sage": lambda: SAGEConv(fin, fout), "gcn": lambda: GCNConv(fin, fout),
                "gat": lambda: GATConv(fin, fout // 8, heads=8)}[kind]()
        theirs = {"sage": lambda: pyg.SAGEConv(fin, fout), "gcn": lambda: pyg.GCNConv(fin, fout),
                  "gat": lambda: pyg.GATConv(fin, fout // 8, heads=8)}[kind]()
        def bf16(f):
            with torch.autocast("cpu", torch.bfloat16):
                return f()
        runs = {"per-edge": lambda: per_edge_conv(ours, x, src, dst, nd, deg),
                "argosy": lambda: ours(x, src, dst, nd, deg, ptr),
                "argosy-bf16": lambda: bf16(lambda: ours(x, src, dst, nd, deg, ptr)),
                "pyg": (lambda: theirs((x, x[:nd]), square, size=(ns, nd))) if kind == "sage"
                else (lambda: theirs(x, square))}
        row = {}
        for name, f in runs.items():
            def fb(f=f):
                x.grad = None
                ours.zero_grad(set_to_none=True)
                theirs.zero_grad(set_to_none=True)
                f().float().sum().backward()
            row[name] = median_ms(fb, reps)
        res["layer"][kind] = row
    prepared = [(torch.from_numpy(xb), to_blocks(sb), torch.from_numpy(yb)) for sb, xb, yb in batches]
    classes = 10
    for kind in ("sage", "gcn", "gat"):
        hidden, heads = (32, 8) if kind == "gat" else (256, 8)
        row = {}
        for name in ("per-edge", "argosy", "argosy-bf16", "pyg"):
            torch.manual_seed(0)
            if name == "pyg":
                inner = {"sage": lambda: pygm.GraphSAGE(fin, 256, 3, classes, dropout=0.5),
                         "gcn": lambda: pygm.GCN(fin, 256, 3, classes, dropout=0.5),
                         "gat": lambda: pygm.GAT(fin, 256, 3, classes, dropout=0.5, heads=8)}[kind]()
                model = EdgeIndexModel(inner, input_dropout=0.5)
            else:
                model = GNN(kind, fin, hidden, classes, 3, dropout=0.5, heads=heads)
            forward = (lambda xb, bl, m=model: per_edge_model(m, xb, bl)) if name == "per-edge" else model
            opt = torch.optim.Adam(model.parameters(), lr=0.003)
            model.train()

            amp = name == "argosy-bf16"         # the trainer's --precision bf16 (auto on a CPU with native bf16)

            def epoch():
                for xb, bl, yb in prepared:
                    opt.zero_grad(set_to_none=True)
                    with torch.autocast("cpu", torch.bfloat16, enabled=amp):
                        out = forward(xb, bl)
                    F.cross_entropy(out.float(), yb).backward()
                    opt.step()
            row[name] = median_ms(epoch, max(3, reps // 2), warm=1) / len(prepared)
        res["step"][kind] = row
    return res


def write_npz(path: Path, z: dict, batches: list, hidden: int = 256, classes: int = 10) -> None:
    arrays = {k: np.asarray(v) for k, v in z.items()}
    for i, (sb, xb, yb) in enumerate(batches):
        arrays.update({f"b{i}_hop_nodes": sb.hop_nodes, f"b{i}_hop_edges": sb.hop_edges, f"b{i}_edge_src": sb.edge_src,
                       f"b{i}_edge_dst": sb.edge_dst, f"b{i}_x": xb, f"b{i}_y": yb})
    np.savez(path, num_batches=len(batches), num_classes=classes, hidden=hidden, **arrays)


def best(rounds: list[dict]) -> dict:
    out: dict = {}
    for r in rounds:
        for part in ("layer", "step"):
            for kind, row in r.get(part, {}).items():
                cell = out.setdefault(part, {}).setdefault(kind, {})
                for name, v in (row.items() if isinstance(row, dict) else [("dgl", row)]):
                    cell[name] = min(cell.get(name, float("inf")), v)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--dgl-python", default="/work/dgl-venv/bin/python")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: count each run's process CPU time (use with --threads 1 on a shared machine)")
    args = ap.parse_args()
    os.environ["ARGOSY_BENCH_CLOCK"] = args.clock       # read by median_ms here and in layers_dgl.py
    from argosy.shared.malloc import keep_heap
    keep_heap()         # the heap policy Argosy's trainer process runs with (shared/lifecycle.py); DGL's side: glibc's default
    torch.set_flush_denormal(True)      # as TrainerCore sets it; DGL's side: torch's default
    torch.set_num_threads(args.threads)
    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    WORK.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    z, batches = layer_block(), step_batches(args.batches)
    npz = WORK / "blocks.npz"
    write_npz(npz, z, batches)
    ours, theirs = [], []
    for r in range(args.rounds):
        print(f"round {r + 1}: argosy / per-edge / pyg ...", file=sys.stderr)
        ours.append(argosy_round(z, batches, args.reps))
        if Path(args.dgl_python).exists():
            print(f"round {r + 1}: dgl ...", file=sys.stderr)
            p = subprocess.run([args.dgl_python, str(ROOT / "bench" / "layers_dgl.py"), str(npz), "--threads",
                                str(args.threads), "--reps", str(args.reps)], capture_output=True, text=True,
                               env={**os.environ, "DGLBACKEND": "pytorch"})
            if p.returncode:
                raise RuntimeError(p.stderr[-2000:])
            theirs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    table = best(ours + theirs)
    sb = batches[0][0]
    res = {"threads": args.threads, "clock": args.clock, "rounds": args.rounds, "reps": args.reps, "torch": torch.__version__,
           "dgl": theirs[0]["dgl"] if theirs else None, "load_average": os.getloadavg(),
           "step_batch": {"hop_nodes": sb.hop_nodes.tolist(), "hop_edges": sb.hop_edges.tolist()},
           "table": table, "rounds_raw": {"argosy": ours, "dgl": theirs}}
    (OUT / "layers.json").write_text(json.dumps(res, indent=1))
    cols = ["per-edge", "argosy", "argosy-bf16", "pyg", "dgl"]
    md = [f"# Layer and step compute, CPU ({time.strftime('%Y-%m-%d %H:%M')}, {args.threads} threads, "
          f"load avg {res['load_average'][0]:.1f}; {args.clock} ms, best of {args.rounds} rounds of medians)", ""]
    for part, title in (("layer", "forward + backward of one layer (35k src, 20k dst, 300k edges, 128 -> 256)"),
                        ("step", "train step, 3 layers hidden 256, soc-slashdot batch 1024, fanouts 15,10,5")):
        md += [f"**{title}**", "", "| model | " + " | ".join(cols) + " | argosy / dgl | argosy-bf16 / dgl |",
               "|---" * (len(cols) + 3) + "|"]
        for kind, row in table.get(part, {}).items():
            ratios = [f"{row[c] / row['dgl']:.2f}" if c in row and "dgl" in row else "-" for c in ("argosy", "argosy-bf16")]
            md.append(f"| {kind} | " + " | ".join(f"{row[c]:.1f}" if c in row else "-" for c in cols)
                      + f" | {' | '.join(ratios)} |")
        md.append("")
    (OUT / "layers.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
