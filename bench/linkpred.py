"""Link prediction with DEFAULT settings, through the full disaggregated pipeline.

Citation graphs (GAE's protocol): every run is ``argosy.train(DATA, task="link",
edge_split="0.85,0.05,0.10", seed=SEED)`` and nothing else (the seed draws the edge split, the
negatives and the initialisation); the test AUC/AP of the best-validation-AUC weights, mean and
spread (population std) of 3 seeds, next to GAE's published figures (Kipf & Welling 2016).

``--scorer distmult`` / ``--link-loss margin`` run the same protocol with that scorer or loss (the
only option changed; recorded per run and shown in their own rows).

SNAP graph (``--snap ca-astroph``): no features, so the default is learned node embeddings (64 per
vertex; ``--snap-inputs random`` gives ``random_features=64`` instead, the earlier baseline); Hits@50
with OGB's convention on the store's test pairs (each positive against all test negatives), from
``argosy.predict`` (full neighbourhoods), next to common neighbours and Adamic-Adar computed here
on the same training graph (the store's CSR: held-out edges excluded) for the same pairs.

Usage (a few minutes per group on a busy 2-core machine; results accumulate)::

    nice -n 10 python bench/linkpred.py --datasets cora,citeseer --seeds 0,1,2
    nice -n 10 python bench/linkpred.py --datasets cora --scorer distmult --seeds 0,1,2
    nice -n 10 python bench/linkpred.py --snap ca-astroph --epochs 30
    python bench/linkpred.py --render        # rewrite bench/results/linkpred.md from the records
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
from argosy.shared.envs import datasets_dir  # noqa: E402

DATASETS = datasets_dir()
RESULTS = ROOT / "bench" / "results"
RECORDS = RESULTS / "linkpred.jsonl"
SPLIT = "0.85,0.05,0.10"
PUBLISHED = {"cora": (91.0, 92.0), "citeseer": (89.5, 89.9)}
"""GAE (Kipf & Welling 2016, Variational Graph Auto-Encoders, table 1): test AUC, AP (%)."""


def _commit() -> str:
    import subprocess
    p = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return p.stdout.strip() or "unknown"


def _append(rec: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(RECORDS, "a") as f:
        f.write(json.dumps(rec) + "\n")


def run_citation(dataset: str, seed: int, run_root: Path, options: dict | None = None) -> dict:
    import argosy
    options = options or {}
    run_dir = run_root / f"lp-{dataset}-{seed}"
    shutil.rmtree(run_dir, ignore_errors=True)
    t0 = time.time()
    res = argosy.train(DATASETS / f"{dataset}.npz", task="link", edge_split=SPLIT, seed=seed, run_dir=run_dir, **options)
    pred = argosy.predict(run_dir)                      # the store's test pairs, full neighbourhoods
    return {"kind": "citation", "dataset": dataset, "seed": seed, "options": options, "link_loss": res["link_loss"],
            "test_auc": res["test_auc"], "test_ap": res["test_ap"],
            "val_auc": res["val_auc"], "best_epoch": res["best_epoch"], "epochs": res["epochs"],
            "predict_test_auc": pred["test_auc"], "train_edges": res["seeds_trained"] // max(res["epochs"], 1),
            "wall_seconds": time.time() - t0, "commit": _commit(), "host": platform.node(),
            "cpus": os.cpu_count(), "load_avg": os.getloadavg()}


def heuristics(store, pairs: np.ndarray) -> dict[str, np.ndarray]:
    """Common neighbours and Adamic-Adar of ``pairs`` on the store's (training) graph."""
    import scipy.sparse as sp
    indptr, indices = store.global_csr()
    n = store.manifest.num_nodes
    A = sp.csr_matrix((np.ones(indices.shape[0], np.float32), indices, indptr), shape=(n, n))
    deg = np.diff(indptr).astype(np.float64)
    w = np.where(deg > 1, 1.0 / np.log(np.maximum(deg, 2)), 0.0)
    Aw = A @ sp.diags(w.astype(np.float32))
    out = {"common_neighbours": np.zeros(pairs.shape[0]), "adamic_adar": np.zeros(pairs.shape[0])}
    for a in range(0, pairs.shape[0], 1 << 14):
        u, v = pairs[a:a + (1 << 14), 0], pairs[a:a + (1 << 14), 1]
        out["common_neighbours"][a:a + u.size] = np.asarray(A[u].multiply(A[v]).sum(1)).ravel()
        out["adamic_adar"][a:a + u.size] = np.asarray(Aw[u].multiply(A[v]).sum(1)).ravel()
    return out


def run_snap(dataset: str, seed: int, epochs: int, run_root: Path, inputs: str = "learned", trainers: int = 1) -> dict:
    import argosy
    from argosy.linkpredict import test_pairs
    from argosy.shared.linkmetrics import link_metrics
    from argosy.shared.store import PartitionStore
    run_dir = run_root / f"lp-{dataset}-{seed}"
    shutil.rmtree(run_dir, ignore_errors=True)
    t0 = time.time()
    extra = {"random_features": 64} if inputs == "random" else {}     # else: 64-d learned node embeddings
    if trainers > 1:
        extra["trainers"] = trainers                                  # the table split between them by part
    res = argosy.train(DATASETS / f"{dataset}.npz", task="link", edge_split=SPLIT, seed=seed, run_dir=run_dir,
                       epochs=epochs, **extra)
    train_s = time.time() - t0
    pred = argosy.predict(run_dir)
    store = PartitionStore(run_dir / "store")
    pairs, labels = test_pairs(store)
    rec = {"kind": "snap", "dataset": dataset, "seed": seed, "inputs": inputs, "epochs": res["epochs"],
           "best_epoch": res["best_epoch"], "load_avg": os.getloadavg(),
           "test_pairs": int(pairs.shape[0]), "train_edges": res["seeds_trained"] // max(res["epochs"], 1),
           "train_edges_per_second": res["seeds_trained"] / max(res["epoch_seconds"] * res["epochs"], 1e-9),
           "argosy": {k: pred[f"test_{k}"] for k in ("auc", "ap", "hits", "mrr")}, "wall_seconds": train_s,
           "commit": _commit(), "host": platform.node(), "cpus": os.cpu_count(), "trainers": trainers,
           **{k: res[k] for k in ("node_embedding_rows", "embedding_bytes", "embedding_rows_pulled") if k in res}}
    for name, s in heuristics(store, pairs).items():
        rec[name] = link_metrics(s, labels, 50)
    return rec


def _fmt(xs: list[float]) -> str:
    xs = [100 * x for x in xs]
    return f"{statistics.mean(xs):.1f} ± {statistics.pstdev(xs):.1f}"


def render() -> str:
    recs = [json.loads(line) for line in RECORDS.read_text().splitlines() if line.strip()] if RECORDS.exists() else []
    lines = ["# Link prediction, default settings (bench/linkpred.py)", "",
             f"`argosy.train(DATA, task=\"link\", edge_split=\"{SPLIT}\", seed=S)`, nothing else; test AUC/AP (%) of "
             "the best-validation-AUC epoch, mean ± population std over seeds; `predict` = the test AUC "
             "`argosy.predict` recomputes from best.pt.  Each row names the loss it trained with (the default "
             "is `margin` since 2026-11-27, `bce` before) and any other option given.", "",
             "| dataset | seeds | AUC | AP | GAE AUC / AP | predict AUC = train AUC | best epoch | s per run |",
             "|---|---|---|---|---|---|---|---|"]
    by: dict[str, list[dict]] = {}
    for r in recs:
        if r["kind"] == "citation":
            opts = ", ".join(f"{k}={v}" for k, v in sorted({**r.get("options", {}), "link_loss": r["link_loss"]}.items()))
            name = r["dataset"] + (f" ({opts})" if opts else "")
            by.setdefault(name, {})[r["seed"]] = r              # the latest record of each seed
    for ds, seeds in by.items():
        rs = list(seeds.values())
        pub = PUBLISHED.get(ds.split(" ")[0], ("-", "-"))
        same = all(abs(r["predict_test_auc"] - r["test_auc"]) < 1e-6 for r in rs)
        lines.append(f"| {ds} | {','.join(str(r['seed']) for r in rs)} | {_fmt([r['test_auc'] for r in rs])} | "
                     f"{_fmt([r['test_ap'] for r in rs])} | {pub[0]} / {pub[1]} | {'yes' if same else 'NO'} | "
                     f"{','.join(str(r['best_epoch']) for r in rs)} | {statistics.mean(r['wall_seconds'] for r in rs):.0f} |")
    lines += ["", "Per seed:", "", "| dataset | seed | AUC | AP | val AUC |", "|---|---|---|---|---|"]
    for ds, seeds in by.items():
        for r in seeds.values():
            lines.append(f"| {ds} | {r['seed']} | {100 * r['test_auc']:.2f} | {100 * r['test_ap']:.2f} | "
                         f"{100 * r['val_auc']:.2f} |")
    snaps = [r for r in recs if r["kind"] == "snap"]
    if snaps:
        lines += ["", "SNAP graphs (no features: `argosy (learned)` = 64-d learned node embeddings, the default; "
                  "`argosy (random)` = 64 random features; `epochs` below; Hits@50 OGB-style: each test positive "
                  "against all test negatives, as many as positives; heuristics on the same training graph):", "",
                  "| dataset | seed | test pairs | method | Hits@50 | MRR | AUC | AP | train edges/s | load 1/5/15 min at the end |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in snaps:
            for name in ("argosy", "common_neighbours", "adamic_adar"):
                m = r[name]
                tput = f"{r['train_edges_per_second']:.0f} ({r['epochs']} epochs, best {r['best_epoch']})" \
                    if name == "argosy" else ""
                label = f"argosy ({r.get('inputs', 'random')})" if name == "argosy" else name
                load = "/".join(f"{x:.1f}" for x in r["load_avg"]) if name == "argosy" and "load_avg" in r else ""
                lines.append(f"| {r['dataset']} | {r['seed']} | {r['test_pairs']} | {label} | {100 * m['hits']:.2f} | "
                             f"{100 * m['mrr']:.2f} | {100 * m['auc']:.2f} | {100 * m['ap']:.2f} | {tput} | {load} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="cora,citeseer")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--snap", default=None, help="a SNAP graph in the datasets dir (e.g. ca-astroph)")
    ap.add_argument("--epochs", type=int, default=10, help="--snap: most epochs")
    ap.add_argument("--snap-inputs", default="learned", choices=("learned", "random"),
                    help="--snap: learned node embeddings (default) or 64 random features")
    ap.add_argument("--scorer", default=None, help="citation graphs: this scorer instead of the default")
    ap.add_argument("--link-loss", default=None, help="citation graphs: this loss instead of the default")
    ap.add_argument("--trainers", type=int, default=1, help="--snap: trainers (>1: node embeddings split by part)")
    ap.add_argument("--run-root", default="/tmp/argosy-bench-linkpred")
    ap.add_argument("--render", action="store_true")
    a = ap.parse_args(argv)
    if not a.render:
        root = Path(a.run_root)
        seeds = [int(s) for s in a.seeds.split(",")]
        if a.snap:
            for s in seeds:
                rec = run_snap(a.snap, s, a.epochs, root, a.snap_inputs, a.trainers)
                _append(rec)
                print(json.dumps(rec), flush=True)
        else:
            for ds in a.datasets.split(","):
                for s in seeds:
                    opts = {k: v for k, v in (("scorer", a.scorer), ("link_loss", a.link_loss)) if v}
                    rec = run_citation(ds, s, root, opts)
                    _append(rec)
                    print(json.dumps(rec), flush=True)
    text = render()
    (RESULTS / "linkpred.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
