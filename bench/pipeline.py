"""Pipeline benchmark: disaggregated services vs an in-process loop doing the same work.

Measures, on one generated graph:
  1. sampler throughput: sampled edges/s of one SamplerCore on one core (fanouts 15,10,5);
  2. train-phase batches/s of an in-process loop (sample -> gather -> train, one process) and of
     the disaggregated pipeline (separate sampler, loader, trainer processes over ZeroMQ), both
     confined to the same cores with ``taskset`` -- ratio = pipeline / in-process;
  3. pipeline batches/s as samplers go 1 -> 2 -> 4 with a light trainer.
Writes bench/results/pipeline.{json,md}.  Never asserts: figures are reported, not enforced.

Usage: python bench/pipeline.py [--nodes 100000] [--epochs 3] [--quick]
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


def make_store(work: Path, nodes: int, degree: float, parts: int) -> Path:
    from argosy.shared.graphio import save_graph_npz
    from argosy.shared.synthetic import generate_dcsbm
    store = work / f"store-{nodes}"
    if (store / "manifest.json").exists():
        return store
    g = generate_dcsbm(num_nodes=nodes, avg_degree=degree, feature_dim=64, seed=0)
    save_graph_npz(g, work / "graph.npz")
    subprocess.run([sys.executable, "-m", "argosy.services.partitioner", str(work / "graph.npz"), "--parts", str(parts),
                    "--method", "grem", "--out", str(store), "--overwrite"], check=True, cwd=ROOT)
    return store


def sampler_rate(store: Path, fanouts=(15, 10, 5), batch=1024, batches=30) -> dict:
    from argosy.shared.store import PartitionStore
    from argosy.services.sampler.core import SamplerCore
    s = PartitionStore(store)
    core = SamplerCore(s)
    n = s.manifest.num_nodes
    rng = np.random.default_rng(0)
    seeds = [rng.choice(n, batch, replace=False) for _ in range(batches)]
    core.sample(seeds[0], fanouts, 0)                                # compile
    t0 = time.perf_counter()
    edges = sum(core.sample(sd, fanouts, i).num_sampled_edges for i, sd in enumerate(seeds))
    dt = time.perf_counter() - t0
    return {"fanouts": list(fanouts), "batch_size": batch, "edges_per_second": edges / dt,
            "edges_per_batch": edges / batches, "seconds": dt}


INPROC = r"""
import json, sys, time
sys.path.insert(0, {root!r})
from argosy.shared.config import TrainerConfig
from argosy.shared.plan import plan_phase
from argosy.shared.store import PartitionStore
from argosy.services.sampler.core import SamplerCore
from argosy.services.loader.core import LoaderCore
from argosy.services.trainer.core import TrainerCore
s = PartitionStore({store!r}); S = SamplerCore(s, seed=0); L = LoaderCore(s)
fan = tuple({fanouts!r})
T = TrainerCore(TrainerConfig(model={model!r}, hidden={hidden}, precision={precision!r}), L.feature_dim, s.manifest.num_classes, len(fan))
plan = plan_phase(s, "train", 0, {batch}, 1)
for it in plan: T.train_step(L.load(S.sample_item(it, fan)))      # epoch 0: the warm-up, untimed (as DGL's loop)
t0 = time.perf_counter(); n = 0
for ep in range(1, max(2, {epochs})):
    for it in plan_phase(s, "train", ep, {batch}, 1):
        T.train_step(L.load(S.sample_item(it, fan))); n += 1
dt = time.perf_counter() - t0
print(json.dumps({{"batches": n, "seconds": dt, "batches_per_second": n / dt}}))
"""


def inprocess(store, fanouts, model, hidden, batch, epochs, cpus: str, precision: str = "auto") -> dict:
    code = INPROC.format(root=str(ROOT), store=str(store), fanouts=list(fanouts), model=model, hidden=hidden,
                         batch=batch, epochs=epochs, precision=precision)
    out = subprocess.run(["taskset", "-c", cpus, sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def pipeline(store, fanouts, model, hidden, batch, epochs, cpus: str, samplers=1, loaders=1, work=None,
             precision: str = "auto") -> dict:
    cmd = ["taskset", "-c", cpus, sys.executable, "-m", "argosy.services.launch", "train", "--store", str(store),
           "--epochs", str(epochs), "--fanouts", ",".join(map(str, fanouts)), "--model", model, "--hidden", str(hidden),
           "--batch-size", str(batch), "--samplers", str(samplers), "--loaders", str(loaders),
           "--eval-max-nodes", "1000", "--eval-fanouts", ",".join(map(str, fanouts)), "--precision", precision, "--json"]
    if work:
        cmd += ["--run-dir", str(work)]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    r = json.loads(out.stdout.strip().splitlines()[-1])
    # the train batches/s of the epochs after the first (the warm-up), as DGL's loop is measured
    epochs = json.loads(Path(r["report"]).with_suffix(".json").read_text())["epochs"][1:]
    if epochs:
        r["batches_per_second_after_first"] = (sum(e["batches"] for e in epochs)
                                               / sum(e["batches"] / e["batches_per_second"] for e in epochs))
    return {k: r.get(k) for k in ("batches_per_second", "batches_per_second_after_first", "trainer_idle_fraction",
                                  "epoch_seconds", "remote_fraction", "seeds_trained", "seeds_planned",
                                  "sampled_edges_per_second", "precision", "compute_seconds", "ingest_seconds",
                                  "idle_seconds")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--degree", type=float, default=15)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--work", default="/tmp/argosy-bench-pipeline")
    ap.add_argument("--quick", action="store_true", help="small graph, 1 epoch (CI smoke run)")
    args = ap.parse_args()
    if args.quick:
        args.nodes, args.epochs = 20_000, 1
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    store = make_store(work, args.nodes, args.degree, parts=4)
    ncpu = os.cpu_count() or 1
    allcpus = f"0-{ncpu - 1}"
    res = {"nodes": args.nodes, "avg_degree": args.degree, "epochs": args.epochs, "batch_size": args.batch_size,
           "cpus": ncpu, "load_average_at_start": os.getloadavg()}
    print("sampler throughput ...", file=sys.stderr)
    res["sampler"] = sampler_rate(store)
    fan, model, hidden = (10, 10), "sage", 128
    res["workload"] = {"fanouts": list(fan), "model": model, "hidden": hidden}
    rows = []
    for cpus in ("0", allcpus):
        print(f"in-process vs pipeline on cpus {cpus} ...", file=sys.stderr)
        ip = inprocess(store, fan, model, hidden, args.batch_size, args.epochs, cpus)
        pl = pipeline(store, fan, model, hidden, args.batch_size, args.epochs, cpus, work=work / f"run-{cpus}")
        rows.append({"cpus": cpus, "inprocess_bps": ip["batches_per_second"], "pipeline_bps": pl["batches_per_second"],
                     "ratio": pl["batches_per_second"] / ip["batches_per_second"],
                     "trainer_idle_fraction": pl["trainer_idle_fraction"]})
    res["inprocess_vs_pipeline"] = rows
    print("sampler scaling ...", file=sys.stderr)
    light = (15, 10)
    scale = []
    for s in (1, 2, 4):
        pl = pipeline(store, light, "sage", 16, args.batch_size, args.epochs, allcpus, samplers=s, loaders=1,
                      work=work / f"scale-{s}")
        scale.append({"samplers": s, **pl})
    base = scale[0]["batches_per_second"]
    for row in scale:
        row["speedup"] = row["batches_per_second"] / base
    res["sampler_scaling"] = scale
    (OUT / "pipeline.json").write_text(json.dumps(res, indent=1))
    md = [f"# Pipeline benchmark ({time.strftime('%Y-%m-%d %H:%M')}, {ncpu} cores, load avg at start "
          f"{res['load_average_at_start'][0]:.2f})", "",
          f"Graph: DC-SBM, {args.nodes:,} nodes, average degree {args.degree}, 64 features, 4 GREM parts; "
          f"batch {args.batch_size}, {args.epochs} epochs.", "",
          f"**Sampler**: {res['sampler']['edges_per_second'] / 1e6:.1f} M sampled edges/s on one core "
          f"(fanouts 15,10,5, batch 1024, {res['sampler']['edges_per_batch']:,.0f} edges/batch).", "",
          "| cores | in-process batches/s | pipeline batches/s | ratio | trainer idle |", "|---|---|---|---|---|"]
    md += [f"| {r['cpus']} | {r['inprocess_bps']:.2f} | {r['pipeline_bps']:.2f} | {r['ratio']:.2f} | "
           f"{r['trainer_idle_fraction']:.0%} |" for r in rows]
    md += ["", "Sampler scaling (SAGE hidden 16, fanouts 15,10, 1 loader, 1 trainer):", "",
           "| samplers | batches/s | speedup | trainer idle |", "|---|---|---|---|"]
    md += [f"| {r['samplers']} | {r['batches_per_second']:.2f} | {r['speedup']:.2f} | {r['trainer_idle_fraction']:.0%} |"
           for r in scale]
    (OUT / "pipeline.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
