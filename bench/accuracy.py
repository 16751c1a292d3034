"""Published-accuracy check with DEFAULT settings, through the full disaggregated pipeline.

Every run is ``argosy.train(DATA, model=MODEL, seed=SEED)`` and nothing else: separate sampler,
loader and trainer processes, early stopping on validation accuracy, the test accuracy of the
best-validation weights.  Mean of 3 seeds per (dataset, model), next to the published figure.
For seed 0, ``argosy.predict`` re-computes the test accuracy from ``best.pt`` with full
neighbourhoods, layer by layer, and the table says whether it matches.

Usage (each group is a few minutes on a busy 2-core machine; results accumulate)::

    nice -n 10 python bench/accuracy.py --datasets cora --models gcn,sage
    python bench/accuracy.py --render          # rewrite bench/results/accuracy.md from the records
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
from argosy.shared.envs import datasets_dir  # noqa: E402

DATASETS = datasets_dir()
RESULTS = ROOT / "bench" / "results"
RECORDS = RESULTS / "accuracy.jsonl"
PYG_SAGE = "torch_geometric.nn.models:GraphSAGE"
PUBLISHED = {  # test accuracy (%): Kipf & Welling 2017; Velickovic et al. 2018; GraphSAGE (mean) on Cora as usually reported
    ("gcn", "cora"): 81.5, ("gcn", "citeseer"): 70.3, ("gcn", "pubmed"): 79.0,
    ("gat", "cora"): 83.0, ("gat", "citeseer"): 72.5, ("gat", "pubmed"): 79.0,
    ("sage", "cora"): 83.0, (PYG_SAGE, "cora"): 83.0,
    # DGL's examples/pytorch/graphsage README (train_full.py: SAGEConv(..., "gcn"), full batch): the ≈83 on Cora
    ("sage-gcn", "cora"): 83.3, ("sage-gcn", "citeseer"): 71.1,
}
VARIANTS = {"sage-gcn": {"model": "sage", "aggregator": "gcn"}}
"""Bench labels for built-in models with a non-default option: the options passed to ``argosy.train``."""


def _commit() -> str:
    import subprocess
    p = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return p.stdout.strip() or "unknown"


def run_one(dataset: str, model: str, seed: int, run_root: Path) -> dict:
    import argosy
    data = DATASETS / f"{dataset}.npz"
    tag = model.split(":")[-1].lower()
    run_dir = run_root / f"acc-{dataset}-{tag}-{seed}"
    t0 = time.time()
    res = argosy.train(data, **VARIANTS.get(model, {"model": model}), seed=seed, run_dir=run_dir)
    rec = {"dataset": dataset, "model": model, "seed": seed, "test_accuracy": res["test_accuracy"],
           "val_accuracy": res["val_accuracy"], "best_epoch": res["best_epoch"], "epochs": res["epochs"],
           "stopped_early": res["stopped_early"], "wall_seconds": time.time() - t0,
           "fingerprint": res["config_fingerprint"], "precision": res.get("precision"), "load_avg": os.getloadavg()[0], "commit": _commit()}
    if seed == 0:
        pred = argosy.predict(run_dir)
        rec["predict_test_accuracy"] = pred["test_accuracy"]
    return rec


def render() -> str:
    rows = [json.loads(l) for l in RECORDS.read_text().splitlines() if l.strip()] if RECORDS.exists() else []
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:                                   # the latest record of each (dataset, model, seed) counts
        groups.setdefault((r["model"], r["dataset"]), [])
        groups[(r["model"], r["dataset"])] = [x for x in groups[(r["model"], r["dataset"])] if x["seed"] != r["seed"]] + [r]
    loads = [r["load_avg"] for rs in groups.values() for r in rs]      # of the records shown
    lines = [
        "# Accuracy with default settings",
        "",
        "`python bench/accuracy.py`: every run is `argosy.train(DATA, model=MODEL, seed=SEED)` with no other option",
        "(separate sampler, loader and trainer processes; defaults from `shared/config.py`: up to 200 epochs,",
        "patience 20 on validation accuracy and loss, fanouts 25,10, batch 512, per-model hidden/dropout/lr, features",
        "row-normalised because they are non-negative). Test accuracy of the best-validation weights, mean of 3 seeds.",
        "`predict = run` checks seed 0: `argosy.predict` on `best.pt` (full neighbourhoods, layer by layer) gives",
        "the same test accuracy as the run reported.",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores shared with other jobs; load average during the runs "
        f"{min(loads, default=0):.1f}–{max(loads, default=0):.1f}, so wall times are upper bounds.",
        "",
        "| model | dataset | Argosy (mean of seeds) | seeds | published | gap | epochs run (best) | wall s | predict = run |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (model, dataset), rs in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        rs = sorted(rs, key=lambda r: r["seed"])
        accs = [100 * r["test_accuracy"] for r in rs]
        mean = statistics.mean(accs)
        pub = PUBLISHED.get((model, dataset))
        gap = f"{mean - pub:+.2f}" + (" ✓" if mean >= pub - 1.5 else " ✗") if pub else "–"
        p0 = next((r for r in rs if "predict_test_accuracy" in r), None)
        same = "–" if p0 is None else ("yes" if abs(p0["predict_test_accuracy"] - p0["test_accuracy"]) < 1e-12 else
                                       f"no ({100 * p0['predict_test_accuracy']:.1f})")
        name = (f"`{model}`" if ":" in model else "SAGE (`--aggregator gcn`)" if model == "sage-gcn"
                else model.upper() if model != "sage" else "SAGE")
        lines.append(f"| {name} | {dataset} | **{mean:.2f}** | {', '.join(f'{a:.1f}' for a in accs)} | "
                     f"{pub if pub else '–'} | {gap} | "
                     f"{statistics.mean(r['epochs'] for r in rs):.0f} ({statistics.mean(r['best_epoch'] for r in rs):.0f}) | "
                     f"{statistics.mean(r['wall_seconds'] for r in rs):.0f} | {same} |")
    lines += [
        "",
        "Pubmed: the offline copy (`shared/datasets/pubmed.npz`) has the graph, labels and split but no features",
        "(the source file could not be obtained), and nothing offline provides them. Argosy refuses to train it",
        "without `--random-features DIM`; with random features a model learns from structure only, which says",
        "nothing about the published 79.0, so no Pubmed row is reported.",
        "",
        "SAGE and PyG GraphSAGE on Citeseer have no published figure set for them; they are shown for completeness.",
        "",
        "Below target (✗), and what is known about it:",
        "",
        "- The ≈83 for GraphSAGE on Cora is DGL's example (`examples/pytorch/graphsage/train_full.py`, README:",
        "  cora ~0.8330, citeseer ~0.7110), and that example uses the **gcn aggregator** (`SAGEConv(..., 'gcn')`:",
        "  the mean over the neighbourhood including the vertex, one weight matrix). Argosy's SAGE offers it as",
        "  `--aggregator gcn` (rows 'SAGE (`--aggregator gcn`)', within 1.5 points of DGL's figures on both graphs)",
        "  and keeps GraphSAGE-mean (a separate self weight, PyG's `SAGEConv` default) as `--model sage`'s default,",
        "  the usual choice on large graphs. A third-party GraphSAGE reimplementation on DGL 0.4.3 reports",
        "  mean ~80.4 and gcn ~83.4 on Cora (full batch): the same gap between the two as here.",
        "- SAGE (mean) on Cora, tried in-process (the same TrainerCore, plans and sampler; 3 seeds): hidden",
        "  16/64/128, dropout 0.5/0.6, lr 0.01/0.005, weight decay 5e-4/1e-3, patience 20/50, Glorot init gave",
        "  80.2–81.7; the default took the best of those (lr 0.005).",
        "- PyG's GraphSAGE (mean aggregator) runs unmodified. PyG's models apply `dropout=` between layers only;",
        "  since this session Argosy also drops the input features of a `MODULE:FACTORY` model, so `--dropout`",
        "  means the same for every model. Before that change: Cora 79.67 (79.6, 79.9, 79.5), Citeseer 70.73",
        "  (70.7, 70.9, 70.6); after it Cora +1.5, Citeseer −1.6 (it overfits at epoch ~19 either way).",
        "",
        "Since commit 4de5712 a single trainer takes one optimizer step per ~batch_size seeds, gathering the",
        "per-part batches (4 of ~30 seeds on a citation graph with 4 parts) into one step; before it, each such",
        "batch was a step of its own, from one community at a time, and GCN on Citeseer gave 68.73 (71.0, 66.4, 68.8) ✗.",
        "Early stopping now also counts a falling validation loss as progress (the full-graph modes' rule).",
        "SAGE with lr 0.01 after that change: 81.0 and 80.7 (seeds 0, 1), no better than the default's.",
        "",
        "GCN rows were re-run after the GCN layer took Glorot init (Kipf & Welling's and PyG's; torch's default",
        "`nn.Linear` init is 2.5x smaller on 3,703 inputs and learnt visibly slower). With torch's init they were",
        "Citeseer 67.93 (69.7, 65.8, 68.3) ✗ and Cora 81.70 (82.1, 80.9, 82.1).",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default="cora,citeseer")
    p.add_argument("--models", default=f"gcn,sage,sage-gcn,gat,{PYG_SAGE}",
                   help="built-in names, MODULE:FACTORY, or sage-gcn (SAGE with --aggregator gcn)")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--run-root", default=str(ROOT / "runs"))
    p.add_argument("--render", action="store_true", help="only rewrite the markdown from the records")
    args = p.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    if not args.render:
        for dataset in args.datasets.split(","):
            with np.load(DATASETS / f"{dataset}.npz") as z:
                if "features" not in z.files:
                    print(f"{dataset}: no features in {DATASETS}; skipped (see the note in accuracy.md)", file=sys.stderr)
                    continue
            for model in args.models.split(","):
                for seed in (int(s) for s in args.seeds.split(",")):
                    rec = run_one(dataset, model, seed, Path(args.run_root))
                    print(json.dumps(rec), flush=True)
                    with RECORDS.open("a") as f:
                        f.write(json.dumps(rec) + "\n")
    (RESULTS / "accuracy.md").write_text(render())
    print((RESULTS / "accuracy.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
