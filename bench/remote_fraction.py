"""Why the partitioner matters: remote fraction of sampled neighbours in real training runs,
GREM vs random partitioning of the same graph (same seeds, same fanouts).

Runs ``argosy train`` twice per (graph, K) and reads ``remote_fraction`` (sampled neighbours owned
by a part other than the seeds' part) and ``halo_fraction`` (feature rows fetched from other parts)
from the result.  Writes bench/results/remote_fraction.md.
Usage: python bench/remote_fraction.py [--graphs pubmed,cora] [--parts 8] [--epochs 2]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("ARGOSY_DATASETS", ROOT.parent / "shared" / "datasets"))


def run(graph: str, method: str, parts: int, epochs: int, work: Path) -> dict:
    run_dir = work / f"{graph}-{method}-{parts}"
    out = subprocess.run([sys.executable, "-m", "argosy.services.launch", "train", "--data", str(DATA / f"{graph}.npz"),
                          "--parts", str(parts), "--partition-method", method, "--epochs", str(epochs),
                          "--fanouts", "10,10", "--run-dir", str(run_dir), "--json"],
                         capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    res = json.loads(out.stdout.strip().splitlines()[-1])
    report = json.loads((run_dir / "report.json").read_text())
    halo = sum(e["halo_fraction"] for e in report["epochs"]) / len(report["epochs"])
    cut = json.loads((run_dir / "store" / "manifest.json").read_text())["partition"]["edge_cut_fraction"]
    return {"graph": graph, "method": method, "parts": parts, "edge_cut_fraction": cut,
            "remote_fraction": res["remote_fraction"], "halo_fraction": halo, "test_accuracy": res["test_accuracy"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphs", default="pubmed,cora")
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--work", default="/tmp/argosy-bench-remote")
    args = ap.parse_args()
    rows = []
    for g in args.graphs.split(","):
        for m in ("random", "grem"):
            rows.append(run(g, m, args.parts, args.epochs, Path(args.work)))
            print(json.dumps(rows[-1]), file=sys.stderr)
    md = [f"# Remote fraction in training runs (K = {args.parts}, fanouts 10,10)", "",
          "| graph | partitioner | edge cut | remote neighbours | halo feature rows | ratio vs random |",
          "|---|---|---|---|---|---|"]
    for r in rows:
        base = next(x for x in rows if x["graph"] == r["graph"] and x["method"] == "random")
        md.append(f"| {r['graph']} | {r['method']} | {100 * r['edge_cut_fraction']:.1f}% | {100 * r['remote_fraction']:.1f}% | "
                  f"{100 * r['halo_fraction']:.1f}% | {r['remote_fraction'] / base['remote_fraction']:.2f} |")
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "remote_fraction.md").write_text("\n".join(md) + "\n")
    (out / "remote_fraction.json").write_text(json.dumps(rows, indent=1))
    print("\n".join(md))


if __name__ == "__main__":
    main()
