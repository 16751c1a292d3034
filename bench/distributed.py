"""Distributed benchmark: simulated hosts with shaped links, GREM vs random vs hash partitioning.

Why this file exists: issue 11 asks whether a min-cut partition pays off once each host holds only
its own parts and the halo crosses a real (here: simulated, tc-shaped) link.  Every run is one
``argosy train ... --json`` subprocess; nothing is timed inside this process.  Scenarios:

* ``partition``: 4 hosts, 1 Gbit/s links, the same job (same seed) with each partitioner:
  train batches/s, wire bytes (cross-host) per epoch, halo bytes, remote fraction, cache hit rate,
  peak RSS of every sampler/loader vs the whole graph.  The trainer is the simulated GPU
  (``--simulate-gpu-step``), so the CPU trainer is not what limits the pipeline.
* ``overhead``: the same GREM job on 1 simulated host, and with no namespaces at all.
* ``accuracy``: the real trainer, 1 host vs 4 hosts: same test accuracy (batches are deterministic).
* ``kill``: 4 hosts; host h2's sampler and loader are SIGKILLed mid-epoch: parts taken over,
  every seed trained exactly once.
* ``rss`` (opt-in): a generated 1M-vertex DC-SBM graph with 128-d features (0.6 GB), 4 hosts:
  peak RSS of each sampler/loader against the whole graph.
* ``scaling``: no namespaces, simulated GPU, 1 -> 2 samplers (and loaders): batches/s.

The graph is Citeseer (3,327 vertices, 3,703-d features: 49 MB of features, so each batch's
feature rows are large and the halo is expensive) with the train split widened to every vertex
outside the standard val/test sets (2,327 seeds instead of 120), so an epoch has enough batches
to time; ``--graph cora`` is the quick variant.  Results: ``bench/results/distributed.jsonl`` and
a markdown table on stdout (copied into docs/distributed.md).

Usage::

    nice -n 10 python bench/distributed.py                      # every scenario (~10 min on 2 cores)
    nice -n 10 python bench/distributed.py --only partition,overhead --epochs 2
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
from argosy.shared.envs import datasets_dir  # noqa: E402

DATASETS = datasets_dir()
RESULTS = ROOT / "bench" / "results"


def wide_split(name: str, out: Path) -> Path:
    """The dataset with every vertex outside val/test in the train split (more batches per epoch)."""
    out.mkdir(parents=True, exist_ok=True)
    dst = out / f"{name}-wide.npz"
    if dst.exists():
        return dst
    with np.load(DATASETS / f"{name}.npz") as z:
        d = {k: z[k] for k in z.files}
    d["train_mask"] = ~(d["val_mask"] | d["test_mask"]) & (d["labels"] >= 0)
    np.savez(dst, **d)
    return dst


def large_graph(out: Path, nodes: int, train: int) -> Path:
    """A generated DC-SBM graph (``argosy generate``, 128-d features, community structure) with
    ``train`` random train seeds kept (an epoch of a fixed size, whatever the graph size)."""
    out.mkdir(parents=True, exist_ok=True)
    raw, dst = out / f"dcsbm-{nodes}.npz", out / f"dcsbm-{nodes}-t{train}.npz"
    if dst.exists():
        return dst
    if not raw.exists():
        subprocess.run([sys.executable, "-m", "argosy.services.launch", "generate", "--nodes", str(nodes),
                        "--avg-degree", "10", "--feature-dim", "128", "--seed", "0", "--out", str(raw)],
                       cwd=ROOT, check=True)
    with np.load(raw) as z:
        d = {k: z[k] for k in z.files}
    keep = np.random.default_rng(0).permutation(np.flatnonzero(d["train_mask"]))[:train]
    d["train_mask"] = np.zeros_like(d["train_mask"])
    d["train_mask"][keep] = True
    np.savez(dst, **d)
    raw.unlink()
    return dst


def store_bytes(store: Path) -> dict:
    """Bytes of features and topology (indptr + indices) over all parts of a store."""
    feats = topo = 0
    for part in sorted(store.glob("part-*")):
        feats += (part / "features.npy").stat().st_size
        topo += (part / "indptr.npy").stat().st_size + (part / "indices.npy").stat().st_size
    return {"features": feats, "topology": topo, "total": feats + topo}


def train(data: Path, run_dir: Path, *extra: str, kill_after_epoch: int | None = None, timeout: int = 600) -> dict:
    job = f"bench-{run_dir.name}-{os.getpid()}"
    cmd = [sys.executable, "-m", "argosy.services.launch", "train", "--data", str(data), "--json", "--job", job,
           "--run-dir", str(run_dir), "--patience", "0", "--seed", "0", *extra]
    t0 = time.time()
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = None
    if kill_after_epoch is not None:
        killed = _kill_mid_epoch(p, job, kill_after_epoch)
    out, err = p.communicate(timeout=timeout)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err[-3000:]}")
    res = json.loads(out.strip().splitlines()[-1])
    res["bench_wall_seconds"] = time.time() - t0
    res["killed"] = killed
    res["store_bytes"] = store_bytes(run_dir / "store")
    return res


def _kill_mid_epoch(p: subprocess.Popen, job: str, epoch: int) -> list[str]:
    from argosy.services.stack import StackFile
    from argosy.shared.coord import Coordinator
    coord = None
    deadline = time.time() + 300
    while time.time() < deadline and p.poll() is None:
        try:
            info = StackFile(job).read()
            coord = coord or Coordinator(info.redis, job, connect_timeout=5)
            ph = coord.get_phase()
            if ph.get("epoch", -1) >= epoch and ph.get("phase") == "train" and coord.metrics().get("trainer_batches", 0) > 0:
                victims = [s for s in ("sampler-2", "loader-2") if s in info.pids]
                time.sleep(1.0)                                  # well inside the epoch
                for s in victims:
                    os.kill(info.pids[s], signal.SIGKILL)
                return victims
        except Exception:  # noqa: BLE001 - the stack file or Redis may not exist yet
            pass
        time.sleep(0.2)
    return []


def row(name: str, r: dict) -> dict:
    rss = r.get("peak_rss_bytes") or {}
    base = r.get("base_rss_bytes") or {}
    whole = r["store_bytes"]["total"]
    data_rss = {k: rss[k] - base.get(k, 0) for k in rss}
    wpe = r.get("wire_bytes_per_epoch") or [0]
    return {
        "run": name, "test_accuracy": r.get("test_accuracy"), "batches_per_second": r.get("batches_per_second"),
        "wire_bytes_per_epoch": wpe, "wire_MB_per_epoch": float(np.mean(wpe)) / 1e6,
        "halo_MB_per_epoch": float(np.mean(r.get("halo_bytes_per_epoch") or [0])) / 1e6,
        "remote_fraction": r.get("remote_fraction"), "cache_hit_rate": r.get("halo_cache_hit_rate"),
        "max_peak_rss_MB": max(rss.values(), default=0) / 1e6,
        "max_data_rss_MB": max(data_rss.values(), default=0) / 1e6, "whole_graph_MB": whole / 1e6,
        "max_data_rss_over_graph": max(data_rss.values(), default=0) / whole if whole else None,
        "seeds_planned": r.get("seeds_planned"), "seeds_trained": r.get("seeds_trained"),
        "duplicates": r.get("duplicates"), "restarts": r.get("restarts"), "killed": r.get("killed"),
        "simulation": r.get("simulation"), "wall_seconds": r.get("bench_wall_seconds"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graph", default="citeseer")
    ap.add_argument("--only", default="partition,overhead,accuracy,kill,scaling")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--gpu-step", default="5ms", help="simulated GPU step per batch")
    ap.add_argument("--link-rate", default="1gbit")
    ap.add_argument("--halo-cache", default="4M")
    ap.add_argument("--large-nodes", type=int, default=1_000_000, help="rss: vertices of the generated graph")
    ap.add_argument("--large-methods", default="grem", help="rss: partitioners to run on the generated graph")
    args = ap.parse_args()
    from argosy.services.netsim import available
    why = available()
    if why:
        raise SystemExit(f"simulated hosts unavailable here: {why}")
    only = set(args.only.split(","))
    work = RESULTS / "distributed-runs"
    data = wide_split(args.graph, work)
    common = ["--parts", "4", "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
              "--eval-fanouts", "10,10", "--eval-max-nodes", "300", "--halo-cache", args.halo_cache]
    sim = ["--simulate-gpu-step", args.gpu_step]
    hosts4 = ["--hosts", "4", "--link-rate", args.link_rate]
    rows = []
    load = os.getloadavg()[0]

    def run(name, *extra, **kw):
        r = train(data, work / name, *extra, **kw)
        rows.append(row(name, r))
        print(json.dumps(rows[-1]), file=sys.stderr)
        with open(RESULTS / "distributed.jsonl", "a") as f:
            f.write(json.dumps({"t": time.time(), "graph": args.graph, "cores": os.cpu_count(), "load": load,
                                **rows[-1]}) + "\n")

    if "partition" in only:
        for m in ("grem", "random", "hash"):
            run(f"4hosts-{m}", *common, *sim, *hosts4, "--partition-method", m)
    if "overhead" in only:
        run("1host-grem", *common, *sim, "--hosts", "1", "--link-rate", args.link_rate, "--partition-method", "grem")
        run("local-grem", *common, *sim, "--partition-method", "grem")
    if "accuracy" in only:
        run("acc-local", *common, "--partition-method", "grem")
        run("acc-4hosts", *common, *hosts4, "--partition-method", "grem")
    if "kill" in only:
        run("kill-4hosts", *common, *sim, *hosts4, "--partition-method", "grem", "--claim-timeout", "3",
            kill_after_epoch=1)
    if "rss" in only:                      # memory per process on a graph much larger than a batch
        big = large_graph(work, args.large_nodes, 12800)
        for m in args.large_methods.split(","):
            r = train(big, work / f"large-4hosts-{m}", "--parts", "4", "--epochs", "1", "--batch-size", "256",
                      "--eval-fanouts", "10,10", "--eval-max-nodes", "1000", "--halo-cache", "16M", *sim, *hosts4,
                      "--partition-method", m, timeout=1500)
            rows.append(row(f"large-4hosts-{m}", r))
            print(json.dumps(rows[-1]), file=sys.stderr)
            with open(RESULTS / "distributed.jsonl", "a") as f:
                f.write(json.dumps({"t": time.time(), "graph": big.name, "cores": os.cpu_count(), "load": load,
                                    **rows[-1], "peak_rss_bytes": r.get("peak_rss_bytes"),
                                    "base_rss_bytes": r.get("base_rss_bytes"), "store_bytes": r["store_bytes"]}) + "\n")
    if "scaling" in only:
        for n in (1, 2):
            run(f"scale-{n}", *common, *sim, "--partition-method", "random", "--samplers", str(n), "--loaders", str(n))
    cols = ["run", "batches_per_second", "wire_MB_per_epoch", "halo_MB_per_epoch", "remote_fraction", "cache_hit_rate",
            "max_data_rss_over_graph", "test_accuracy", "seeds_trained", "duplicates", "restarts"]
    print(f"\n{args.graph} (wide train split), {os.cpu_count()} cores, load average {load:.1f} at start\n")
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(f"{r[c]:.3g}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |")


if __name__ == "__main__":
    main()
