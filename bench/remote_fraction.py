"""Why the partitioner matters: remote fraction of sampled neighbours in real training runs,
GREM vs random partitioning of the same graph (same seeds, same fanouts).

Runs ``argosy train`` per (graph, K, method) and reads ``remote_fraction`` (sampled neighbours owned
by a part other than the seeds' part) and ``halo_fraction`` (feature rows fetched from other parts)
from the result.  Writes bench/results/remote_fraction.md.

With ``--hosts N`` the runs go on N simulated hosts (network namespaces, root needed), once per
``--halo-cache`` size, and the table gives the halo bytes that crossed hosts and the halo cache's hit
rate: the check that a cache never makes the better partition worse (GREM's halo bytes <= random's
at every cache size).  Writes bench/results/halo_cache.md (or ``--out``).

Usage:
    python bench/remote_fraction.py [--graphs pubmed,cora] [--parts 8] [--epochs 2]
    python bench/remote_fraction.py --graphs citeseer --parts 2 --hosts 2 --fanouts=-1,-1 --epochs 20 \\
        --halo-cache 64M,0 --simulate-gpu-step 1ms --wide-split
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
from argosy.shared.envs import datasets_dir  # noqa: E402

DATA = datasets_dir()


def wide_split(name: str, out: Path) -> Path:
    """The dataset with every labelled vertex outside val/test in the train split (as bench/distributed.py)."""
    import numpy as np
    out.mkdir(parents=True, exist_ok=True)
    dst = out / f"{name}-wide.npz"
    if not dst.exists():
        with np.load(DATA / f"{name}.npz") as z:
            d = {k: z[k] for k in z.files}
        d["train_mask"] = ~(d["val_mask"] | d["test_mask"]) & (d["labels"] >= 0)
        np.savez(dst, **d)
    return dst


def run(graph: str, method: str, parts: int, epochs: int, work: Path, fanouts: str = "10,10", hosts: int = 0,
        cache: str | None = None, gpu_step: str | None = None, wide: bool = False) -> dict:
    tag = f"{graph}-{method}-{parts}" + (f"-h{hosts}-c{cache}" if hosts else "") + ("-wide" if wide else "")
    run_dir = work / tag
    data = wide_split(graph, work) if wide else DATA / f"{graph}.npz"
    cmd = [sys.executable, "-m", "argosy.services.launch", "train", "--data", str(data),
           "--parts", str(parts), "--partition-method", method, "--epochs", str(epochs), "--patience", "0",
           f"--fanouts={fanouts}", "--run-dir", str(run_dir), "--json"]
    if hosts:
        cmd += ["--hosts", str(hosts)]
    if cache is not None:
        cmd += ["--halo-cache", cache]
    if gpu_step:
        cmd += ["--simulate-gpu-step", gpu_step]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    res = json.loads(out.stdout.strip().splitlines()[-1])
    report = json.loads((run_dir / "report.json").read_text())
    halo = sum(e["halo_fraction"] for e in report["epochs"]) / len(report["epochs"])
    cut = json.loads((run_dir / "store" / "manifest.json").read_text())["partition"]["edge_cut_fraction"]
    row = {"graph": graph, "method": method, "parts": parts, "fanouts": fanouts, "epochs": epochs,
           "edge_cut_fraction": cut, "remote_fraction": res["remote_fraction"], "halo_fraction": halo,
           "test_accuracy": res["test_accuracy"], "seconds": round(time.perf_counter() - t0, 1)}
    if hosts:
        row.update(hosts=hosts, halo_cache=cache, halo_bytes=res.get("halo_bytes", 0.0),
                   wire_bytes=res.get("wire_bytes", 0.0), halo_cache_hit_rate=res.get("halo_cache_hit_rate", 0.0),
                   halo_bytes_per_epoch=res.get("halo_bytes_per_epoch", []))
    return row


def remote_table(rows: list[dict], parts: int) -> list[str]:
    md = [f"# Remote fraction in training runs (K = {parts}, fanouts {rows[0]['fanouts']})", "",
          "| graph | partitioner | edge cut | remote neighbours | halo feature rows | ratio vs random |",
          "|---|---|---|---|---|---|"]
    for r in rows:
        base = next(x for x in rows if x["graph"] == r["graph"] and x["method"] == "random")
        md.append(f"| {r['graph']} | {r['method']} | {100 * r['edge_cut_fraction']:.1f}% | {100 * r['remote_fraction']:.1f}% | "
                  f"{100 * r['halo_fraction']:.1f}% | {r['remote_fraction'] / base['remote_fraction']:.2f} |")
    return md


def cache_table(rows: list[dict], args) -> list[str]:
    md = [f"# Halo bytes with and without the halo cache ({args.hosts} simulated hosts, K = {args.parts}, "
          f"fanouts {args.fanouts}, {args.epochs} epochs{', wide train split' if args.wide_split else ''})", "",
          "| graph | halo cache | partitioner | edge cut | halo MB (all epochs) | last epoch MB | cache hit rate "
          "| GREM / random halo bytes |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        base = next(x for x in rows if x["graph"] == r["graph"] and x["halo_cache"] == r["halo_cache"]
                    and x["method"] == "random")
        last = r["halo_bytes_per_epoch"][-1] if r["halo_bytes_per_epoch"] else 0.0
        ratio = r["halo_bytes"] / base["halo_bytes"] if base["halo_bytes"] else float("nan")
        md.append(f"| {r['graph']} | {r['halo_cache']} | {r['method']} | {100 * r['edge_cut_fraction']:.1f}% | "
                  f"{r['halo_bytes'] / 1e6:.1f} | {last / 1e6:.2f} | {100 * r['halo_cache_hit_rate']:.1f}% | {ratio:.2f}x |")
    return md


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphs", default="pubmed,cora")
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--fanouts", default="10,10")
    ap.add_argument("--hosts", type=int, default=0, help="simulated hosts (0: one process tree, no namespaces)")
    ap.add_argument("--halo-cache", default="64M", help="with --hosts: comma-separated cache sizes to compare")
    ap.add_argument("--simulate-gpu-step", default=None, help="with --hosts: trainer step simulated (e.g. 1ms)")
    ap.add_argument("--wide-split", action="store_true",
                    help="train on every labelled vertex outside val/test (as bench/distributed.py)")
    ap.add_argument("--work", default="/tmp/argosy-bench-remote")
    ap.add_argument("--out", default=None, help="results name under bench/results (default remote_fraction / halo_cache)")
    args = ap.parse_args()
    rows = []
    caches = args.halo_cache.split(",") if args.hosts else [None]
    for g in args.graphs.split(","):
        for c in caches:
            for m in ("random", "grem"):
                rows.append(run(g, m, args.parts, args.epochs, Path(args.work), args.fanouts, args.hosts, c,
                                args.simulate_gpu_step if args.hosts else None, args.wide_split))
                print(json.dumps(rows[-1]), file=sys.stderr)
    md = cache_table(rows, args) if args.hosts else remote_table(rows, args.parts)
    name = args.out or ("halo_cache" if args.hosts else "remote_fraction")
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.md").write_text("\n".join(md) + "\n")
    (out / f"{name}.json").write_text(json.dumps(rows, indent=1))
    print("\n".join(md))


if __name__ == "__main__":
    main()
