"""Whole-pipeline throughput on a typed (ogbn-mag-shaped) graph: Argosy vs PyG's
``NeighborLoader(HeteroData)`` + ``to_hetero(SAGE)``, on the same cores, back to back.

Graph: ``argosy generate --preset mag --scale S``; PyG gets the same directory through
``read_typed_dir`` -> ``to_hetero_data`` -> ``ToUndirected(merge=False)`` (a ``rev_*`` relation for
every relation, ``cites`` included, as Argosy adds).  Same fanouts, batch size (512 seeds), hidden
width, epochs; featureless types (author, institution, field_of_study) get a learned 64-d row on
both sides.

PyG side: ``NeighborLoader`` is tried first.  Without ``pyg-lib`` or ``torch-sparse`` PyG 2.8's
``NeighborSampler`` raises ImportError on the first batch; the script then records that message
and runs the same loop on a pure-torch emulation of ``NeighborLoader``'s hetero output (uniform
sampling without replacement, ``num_neighbors`` per relation per hop, node relabelling with seeds
first, ``x`` gathered per type).  Its sampling time is measured apart, so the table also gives
the PyG model step alone (an upper bound for PyG with an infinitely fast sampler).

Argosy side: ``argosy train --data DIR --model M --fanouts F --epochs E --patience 0 --hidden H
--json``; seeds/s = ``seeds_trained / epochs / epoch_seconds`` (train phase, mean epoch;
partitioning and evaluation excluded).

Usage: python bench/pipeline_hetero.py [--scale 0.03] [--epochs 2] [--models rgcn,sage]
Prints the full result (also /tmp/pipeline_hetero.json) and a one-line summary; bench/results/pipeline_hetero.md is written from them.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results"


# --------------------------------------------------------------------------------------- PyG side
def _csc(data):
    """Per edge type (s, r, d): colptr over d, src sorted by d."""
    import torch
    out = {}
    for et in data.edge_types:
        src, dst = data[et].edge_index
        n_d = data[et[2]].num_nodes
        order = torch.argsort(dst, stable=True)
        colptr = torch.zeros(n_d + 1, dtype=torch.long)
        colptr[1:] = torch.cumsum(torch.bincount(dst, minlength=n_d), 0)
        out[et] = (colptr, src[order].contiguous())
    return out


def _sample_one(colptr, src_sorted, dst_nodes, k, gen):
    """Uniform without replacement: up to k in-edges of each of dst_nodes (k=-1: all).
    Returns (src global ids, index into dst_nodes)."""
    import torch
    start = colptr[dst_nodes]
    deg = colptr[dst_nodes + 1] - start
    if k >= 0:
        take = torch.clamp(deg, max=k)
    else:
        take = deg
    small = deg <= take  # all neighbours taken
    seg_s = torch.nonzero(small).flatten()
    d_s = deg[seg_s]
    tot = int(d_s.sum())
    if tot:
        rep = torch.repeat_interleave(seg_s, d_s)
        off = torch.cumsum(d_s, 0) - d_s
        pos = start[rep] + torch.arange(tot) - torch.repeat_interleave(off, d_s)
        src_a, dst_a = src_sorted[pos], rep
    else:
        src_a = dst_a = torch.empty(0, dtype=torch.long)
    seg_b = torch.nonzero(~small).flatten()
    if seg_b.numel():
        d_b = deg[seg_b]
        tot = int(d_b.sum())
        rep = torch.repeat_interleave(torch.arange(seg_b.numel()), d_b)
        off = torch.cumsum(d_b, 0) - d_b
        local = torch.arange(tot) - off[rep]
        keys = rep.double() + torch.rand(tot, generator=gen, dtype=torch.double)
        perm = torch.argsort(keys)
        rank = torch.arange(tot) - off[rep[perm]]
        keep = perm[rank < k]
        b_rep = rep[keep]
        src_b = src_sorted[start[seg_b[b_rep]] + local[keep]]
        dst_b = seg_b[b_rep]
        src_a, dst_a = torch.cat([src_a, src_b]), torch.cat([dst_a, dst_b])
    return src_a, dst_a


def _emulated_batches(data, csc, target, seeds_all, fanouts, batch_size, shuffle, gen):
    """Yields (n_id per type, edge_index per type, n seeds), like NeighborLoader's HeteroData."""
    import torch
    g2l = {t: torch.full((data[t].num_nodes,), -1, dtype=torch.long) for t in data.node_types}
    order = seeds_all[torch.randperm(seeds_all.numel(), generator=gen)] if shuffle else seeds_all
    for b in range(0, order.numel(), batch_size):
        seeds = order[b:b + batch_size]
        nodes = {t: [] for t in data.node_types}
        count = {t: 0 for t in data.node_types}
        nodes[target].append(seeds)
        g2l[target][seeds] = torch.arange(seeds.numel())
        count[target] = seeds.numel()
        frontier = {target: seeds}
        rows = {et: [] for et in data.edge_types}
        cols = {et: [] for et in data.edge_types}
        for k in fanouts:
            new = {t: [] for t in data.node_types}
            for et in data.edge_types:
                s, _, d = et
                fd = frontier.get(d)
                if fd is None or fd.numel() == 0:
                    continue
                colptr, src_sorted = csc[et]
                src, di = _sample_one(colptr, src_sorted, fd, k, gen)
                if src.numel() == 0:
                    continue
                loc = g2l[s][src]
                fresh = loc < 0
                if bool(fresh.any()):
                    u = torch.unique(src[fresh])  # sorted; fine for a frontier
                    g2l[s][u] = torch.arange(count[s], count[s] + u.numel())
                    count[s] += u.numel()
                    nodes[s].append(u)
                    new[s].append(u)
                    loc = g2l[s][src]
                rows[et].append(loc)
                cols[et].append(g2l[d][fd[di]])
            frontier = {t: torch.cat(v) for t, v in new.items() if v}
        n_id = {t: (torch.cat(v) if v else torch.empty(0, dtype=torch.long)) for t, v in nodes.items()}
        for t, v in n_id.items():
            g2l[t][v] = -1
        ei = {et: (torch.stack([torch.cat(rows[et]), torch.cat(cols[et])]) if rows[et]
                   else torch.empty(2, 0, dtype=torch.long)) for et in data.edge_types}
        yield n_id, ei, seeds.numel()


def pyg_worker(args) -> dict:
    import torch
    import torch.nn.functional as F
    import torch_geometric
    import torch_geometric.transforms as T
    from torch_geometric.nn import SAGEConv, to_hetero

    from argosy.shared.graphio.hetero_pyg import to_hetero_data
    from argosy.shared.graphio.typed_dir import read_typed_dir

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    fanouts = [int(f) for f in args.fanouts.split(",")]
    t0 = time.perf_counter()
    tg = read_typed_dir(args.data)
    data = to_hetero_data(tg)
    data = T.ToUndirected(merge=False)(data)
    target = tg.target
    res = {"pyg_version": torch_geometric.__version__, "relations": len(data.edge_types),
           "with_pyg_lib": torch_geometric.typing.WITH_PYG_LIB,
           "with_torch_sparse": torch_geometric.typing.WITH_TORCH_SPARSE}
    train_idx = torch.nonzero(data[target].train_mask).flatten()
    # 1) the real NeighborLoader
    try:
        from torch_geometric.loader import NeighborLoader
        loader = NeighborLoader(data, num_neighbors=fanouts, input_nodes=(target, data[target].train_mask),
                                batch_size=args.batch_size, shuffle=True, num_workers=0)
        next(iter(loader))
        res["neighborloader"] = "ran"
    except Exception as e:  # noqa: BLE001
        res["neighborloader"] = f"{type(e).__name__}: {e}"
    # 2) emulation (or the real loader's output shape) + to_hetero(SAGE)
    csc = _csc(data)
    n_cls = int(data[target].y.max()) + 1
    emb_dim = 64
    emb = torch.nn.ModuleDict({t: torch.nn.Embedding(data[t].num_nodes, emb_dim)
                               for t in data.node_types if getattr(data[t], "x", None) is None})

    class SAGE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = SAGEConv((-1, -1), args.hidden)
            self.c2 = SAGEConv((-1, -1), n_cls)

        def forward(self, x, edge_index):
            x = F.dropout(x, 0.5, self.training)
            x = F.relu(self.c1(x, edge_index))
            x = F.dropout(x, 0.5, self.training)
            return self.c2(x, edge_index)

    model = to_hetero(SAGE(), data.metadata(), aggr="sum")
    gen = torch.Generator().manual_seed(0)

    def xdict(n_id):
        return {t: (data[t].x[v] if t not in emb else emb[t](v)) for t, v in n_id.items()}

    with torch.no_grad():  # lazy shapes
        n_id, ei, _ = next(_emulated_batches(data, csc, target, train_idx[:8], fanouts, 8, False, gen))
        model(xdict(n_id), ei)
    opt = torch.optim.Adam(list(model.parameters()) + list(emb.parameters()), lr=args.lr)
    res["setup_seconds"] = time.perf_counter() - t0
    y = data[target].y
    epochs = []
    for ep in range(args.epochs):
        model.train()
        t_ep = time.perf_counter()
        t_samp = 0.0
        seeds = edges = batches = 0
        it = _emulated_batches(data, csc, target, train_idx, fanouts, args.batch_size, True, gen)
        while True:
            ts = time.perf_counter()
            try:
                n_id, ei, bs = next(it)
            except StopIteration:
                t_samp += time.perf_counter() - ts
                break
            x = xdict(n_id)
            t_samp += time.perf_counter() - ts
            opt.zero_grad()
            out = model(x, ei)[target][:bs]
            loss = F.cross_entropy(out, y[n_id[target][:bs]])
            loss.backward()
            opt.step()
            seeds += bs
            batches += 1
            edges += sum(int(e.shape[1]) for e in ei.values())
        secs = time.perf_counter() - t_ep
        epochs.append({"epoch_seconds": secs, "sample_seconds": t_samp, "seeds": seeds, "batches": batches,
                       "edges_per_batch": edges / max(batches, 1), "loss": float(loss.detach())})
    # evaluation: all neighbours (Argosy's default eval fanouts), not timed
    model.eval()
    acc = {}
    with torch.no_grad():
        for split in ("val_mask", "test_mask"):
            idx = torch.nonzero(getattr(data[target], split)).flatten()
            ok = 0
            for n_id, ei, bs in _emulated_batches(data, csc, target, idx, [-1] * len(fanouts), 1024, False, gen):
                pred = model(xdict(n_id), ei)[target][:bs].argmax(-1)
                ok += int((pred == y[n_id[target][:bs]]).sum())
            acc[split.split("_")[0]] = ok / max(idx.numel(), 1)
    secs = sum(e["epoch_seconds"] for e in epochs)
    samp = sum(e["sample_seconds"] for e in epochs)
    seeds = sum(e["seeds"] for e in epochs)
    res.update(epochs=epochs, seeds_per_second=seeds / secs,
               model_only_seeds_per_second=seeds / max(secs - samp, 1e-9),
               sample_fraction=samp / secs, epoch_seconds=secs / len(epochs),
               edges_per_batch=sum(e["edges_per_batch"] for e in epochs) / len(epochs),
               val_accuracy=acc["val"], test_accuracy=acc["test"])
    return res


# ------------------------------------------------------------------------------------ Argosy side
def argosy_run(args, model: str, precision: str = "auto") -> dict:
    cmd = ["taskset", "-c", args.cpus, str(Path(sys.executable).parent / "argosy"), "train", "--data", args.data,
           "--model", model, "--fanouts", args.fanouts, "--epochs", str(args.epochs), "--patience", "0",
           "--hidden", str(args.hidden), "--batch-size", str(args.batch_size), "--precision", precision, "--json"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT.parent)
    wall = time.perf_counter() - t0
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode or not line:
        return {"error": f"rc {p.returncode}: {p.stderr[-800:]}", "cmd": " ".join(cmd)}
    j = json.loads(line[-1])
    sps = j["seeds_trained"] / j["epochs"] / j["epoch_seconds"]
    return {"cmd": " ".join(cmd[3:]), "seeds_per_second": sps, "epoch_seconds": j["epoch_seconds"],
            "batches_per_second": j["batches_per_second"], "seeds_trained": j["seeds_trained"],
            "edges_per_batch": j["sampled_edges_per_second"] / j["batches_per_second"],
            "val_accuracy": j["final_val_accuracy"], "test_accuracy": j["final_test_accuracy"],
            "precision": j.get("precision"), "trainer_idle_fraction": j.get("trainer_idle_fraction"),
            "process_wall_seconds": wall}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=0.03)
    ap.add_argument("--data", default=None)
    ap.add_argument("--fanouts", default="10,5")
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--cpus", default="0,1")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", default="rgcn,sage")
    ap.add_argument("--precisions", default="auto,fp32",
                    help="Argosy --precision values to run (auto = bf16 autocast on a bf16 CPU; PyG runs fp32)")
    ap.add_argument("--pyg-worker", action="store_true")
    ap.add_argument("--pyg-matched-fanouts", default="3,2",
                    help="a second PyG run with these per-relation fanouts (near Argosy's edges per batch); '' = none")
    args = ap.parse_args()
    if args.data is None:
        args.data = f"/tmp/argosy-bench-mag-{args.scale}"
    if args.pyg_worker:
        print(json.dumps(pyg_worker(args)))
        return
    if not Path(args.data, "graph.yaml").exists():
        subprocess.run([str(Path(sys.executable).parent / "argosy"), "generate", "--preset", "mag", "--scale", str(args.scale),
                        "--out", args.data], check=True, cwd=ROOT.parent)
    load = {"start": os.getloadavg()}
    res = {}
    wcmd = ["taskset", "-c", args.cpus, sys.executable, str(Path(__file__).resolve()), "--pyg-worker",
            "--data", args.data, "--fanouts", args.fanouts, "--batch-size", str(args.batch_size),
            "--hidden", str(args.hidden), "--epochs", str(args.epochs), "--lr", str(args.lr),
            "--threads", str(args.threads)]
    for key, fo in (("pyg", args.fanouts), ("pyg_matched", args.pyg_matched_fanouts)):
        if not fo:
            continue
        wc = list(wcmd)
        wc[wc.index("--fanouts") + 1] = fo
        p = subprocess.run(wc, capture_output=True, text=True, cwd=ROOT.parent)
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        res[key] = json.loads(lines[-1]) if lines else {"error": p.stderr[-1500:]}
        res[key]["fanouts"] = fo
        load[f"after_{key}"] = os.getloadavg()
    runs = [(m, pr) for pr in args.precisions.split(",") for m in args.models.split(",")]
    for m, pr in runs:
        key = f"argosy_{m}" + ("" if pr == "auto" else f"_{pr}")
        res[key] = argosy_run(args, m, pr)
        load[f"after_{key}"] = os.getloadavg()
    res["loadavg"] = load
    pyg = res["pyg"].get("seeds_per_second")
    summary = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "scale": args.scale, "fanouts": args.fanouts, "batch_size": args.batch_size, "hidden": args.hidden,
               "epochs": args.epochs, "pyg_seeds_per_second": pyg,
               "pyg_model_only_seeds_per_second": res["pyg"].get("model_only_seeds_per_second")}
    for m in [f"{m}" + ("" if pr == "auto" else f"_{pr}") for m, pr in runs]:
        a = res[f"argosy_{m}"].get("seeds_per_second")
        summary[f"argosy_{m}_seeds_per_second"] = a
        summary[f"ratio_{m}"] = a / pyg if a and pyg else None
        pm = res.get("pyg_matched", {}).get("seeds_per_second")
        summary[f"ratio_{m}_vs_matched"] = a / pm if a and pm else None
    res["summary"] = summary
    res["machine"] = f"{platform.node()} {platform.processor() or platform.machine()}, nproc {os.cpu_count()}, cpus {args.cpus}"
    res["command"] = "python " + " ".join([f"bench/{Path(__file__).name}"] + sys.argv[1:])
    OUT.mkdir(parents=True, exist_ok=True)
    Path("/tmp/pipeline_hetero.json").write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
