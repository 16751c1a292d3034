"""Whole training loop against DGL's: soc-slashdot with random 128-d features and 10 random
classes, 3-layer SAGE-256 (mean), fanouts 15,10,5 (DGL's order; Argosy's ``--fanouts 5,10,15``),
batch 1024, on the same cores.

Train batches/s of DGL's single-process loop (``bench/pipeline_dgl.py``, its own venv, float32:
DGL 2.1's CPU kernels crash under bfloat16 autocast), Argosy's in-process loop (sampler, loader
and trainer cores in one process, as in ``bench/pipeline.py``) and ``argosy train`` (1 sampler,
1 loader, 1 trainer process), each with the default ``--precision auto`` (bfloat16 mixed
precision on a CPU with native bfloat16) and with ``--precision fp32`` (like for like with DGL).  The rounds
alternate DGL and Argosy (the machine is shared); the table keeps each one's best round.

Every figure is the train batches/s of the epochs after the first (the warm-up: numba and oneDNN
kernels, first page faults), for DGL as for Argosy; the json keeps Argosy's all-epoch figure too.

Usage: python bench/pipeline_vs_dgl.py [--cpus 0,1] [--epochs 3] [--rounds 2]
Writes bench/results/pipeline_vs_dgl.{json,md}.
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
sys.path.insert(0, str(ROOT / "bench"))
OUT = ROOT / "bench" / "results"
WORK = Path("/tmp/argosy-bench-layers")
from argosy.shared.envs import datasets_dir  # noqa: E402

DATASET = datasets_dir() / "soc-slashdot.npz"

from pipeline import inprocess, pipeline  # noqa: E402

KEYS = ("dgl", "inprocess", "pipeline", "inprocess_fp32", "pipeline_fp32")


def make_inputs(dim: int = 128, classes: int = 10, train: float = 0.2) -> tuple[Path, Path]:
    """The graph with random features, labels and splits (.npz, read by DGL) and its 1-part store."""
    graph, store = WORK / f"slashdot-{dim}.npz", WORK / f"store-{dim}"
    if not graph.exists():
        z = np.load(DATASET)
        n = z["indptr"].shape[0] - 1
        rng = np.random.default_rng(0)
        r = rng.random(n)
        np.savez(graph, indptr=z["indptr"], indices=z["indices"], features=rng.standard_normal((n, dim), np.float32),
                 labels=rng.integers(0, classes, n), train_mask=r < train, val_mask=(r >= train) & (r < train + 0.05),
                 test_mask=(r >= train + 0.05) & (r < train + 0.1))
    if not (store / "manifest.json").exists():
        subprocess.run([sys.executable, "-m", "argosy.services.partitioner", str(graph), "--parts", "1", "--method",
                        "random", "--out", str(store), "--overwrite"], check=True, cwd=ROOT, capture_output=True)
    return graph, store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpus", default="0,1")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dgl-python", default="/work/dgl-venv/bin/python")
    args = ap.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    graph, store = make_inputs()
    threads = len(args.cpus.split(","))
    fan, model, hidden, batch = (5, 10, 15), "sage", 256, 1024
    rounds = []
    for r in range(args.rounds):
        print(f"round {r + 1}: dgl ({threads} intra-op threads, then 1) ...", file=sys.stderr)
        row = {}
        for n, key in ((threads, "dgl_threads"), (1, "dgl_1thread")) if threads > 1 else ((1, "dgl_threads"),):
            p = subprocess.run(["taskset", "-c", args.cpus, args.dgl_python, str(ROOT / "bench" / "pipeline_dgl.py"),
                                str(graph), "--epochs", str(args.epochs), "--threads", str(n)],
                               capture_output=True, text=True, env={**os.environ, "DGLBACKEND": "pytorch"})
            if p.returncode:
                raise RuntimeError(p.stderr[-2000:])
            row[key] = json.loads(p.stdout.strip().splitlines()[-1])["batches_per_second"]
        row["dgl"] = max(row["dgl_threads"], row.get("dgl_1thread", 0.0))   # DGL's better thread count this round
        for prec, tag in (("auto", ""), ("fp32", "_fp32")):
            print(f"round {r + 1}: argosy in-process, --precision {prec} ...", file=sys.stderr)
            ip = inprocess(store, fan, model, hidden, batch, args.epochs, args.cpus, precision=prec)
            print(f"round {r + 1}: argosy train, --precision {prec} ...", file=sys.stderr)
            pl = pipeline(store, fan, model, hidden, batch, args.epochs, args.cpus, work=WORK / f"run-{r}{tag}",
                          precision=prec)
            row.update({f"inprocess{tag}": ip["batches_per_second"],
                        f"pipeline{tag}": pl["batches_per_second_after_first"] or pl["batches_per_second"],
                        f"pipeline_all_epochs{tag}": pl["batches_per_second"],
                        f"trainer_idle_fraction{tag}": pl["trainer_idle_fraction"], f"precision{tag}": pl["precision"]})
        rounds.append(row)
        print(json.dumps(rounds[-1]), file=sys.stderr)
    best = {k: max(r[k] for r in rounds) for k in KEYS}
    res = {"cpus": args.cpus, "epochs": args.epochs, "rounds": rounds, "best": best, "load_average": os.getloadavg()}
    (OUT / "pipeline_vs_dgl.json").write_text(json.dumps(res, indent=1))
    md = [f"# Training loop vs DGL ({time.strftime('%Y-%m-%d %H:%M')}, cpus {args.cpus}, load avg "
          f"{res['load_average'][0]:.1f}; train batches/s, best of {args.rounds} rounds)", "",
          "| loop | batches/s | vs DGL |", "|---|---|---|"]
    prec = rounds[-1]["precision"]
    md[2:2] = [f"DGL's figure is its better thread count of each round ({threads} intra-op threads: "
               + ", ".join(f"{r['dgl_threads']:.2f}" for r in rounds)
               + (("; 1 thread: " + ", ".join(f"{r['dgl_1thread']:.2f}" for r in rounds)) if threads > 1 else "")
               + " batches/s): on a loaded machine its threads wait on each other.", ""]
    for k, name in (("dgl", "DGL 2.1, single process (float32)"),
                    ("inprocess", f"Argosy, in-process loop, default precision ({prec})"),
                    ("pipeline", f"`argosy train` (1 sampler, 1 loader, 1 trainer), default precision ({prec})"),
                    ("inprocess_fp32", "Argosy, in-process loop, `--precision fp32`"),
                    ("pipeline_fp32", "`argosy train`, `--precision fp32`")):
        md.append(f"| {name} | {best[k]:.2f} | {best[k] / best['dgl']:.2f}x |")
    ratios = sorted(r["pipeline"] / r["dgl"] for r in rounds)
    md += ["", f"`argosy train` (default precision) / DGL within each round: "
               + ", ".join(f"{x:.2f}x" for x in ratios) + f" (median {np.median(ratios):.2f}x)."]
    (OUT / "pipeline_vs_dgl.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
