"""GPU pipeline benchmark in one script (issue 28): does the CPU tier keep one GPU busy?

In the issue's setting (``argosy generate --nodes 500000 --avg-degree 20 --feature-dim 128``, GREM
8 parts, SAGE hidden 256, fanouts 10,10, batch 1024, ``--epochs 2 --patience 0 --eval-max-nodes
2000``) it measures, in one run on one machine:

1. **GPU ceiling**: ``TrainerCore.train_step`` on 16 pre-loaded batches, (a) host-to-device copy in
   the step (pageable, as the issue measured it) and (b) batches already on the device (the step alone);
2. **in-process loop**: sample, gather, train in one process;
3. **pipeline** ``argosy train`` at samplers+loaders 1+1, 2+2, 4+4, 7+7: train-phase batches/s of
   epoch 1 (epoch 0 compiles), trainer idle (waiting for input only), and the trainer's time split;
   each once per ``--caches`` value (default ``0,auto``: without and with the trainer's feature
   cache, ``--gpu-cache``), with the cache's hit rate and the bytes per batch into the trainer;
4. **autoscale** from 1+1 (``argosy up`` + the autoscaler, ``--autoscale-seconds``): replicas and idle;
5. optionally (``--baseline-rev``, needs git history) the 4+4 pipeline of the baseline code.

Writes ``bench/results/gpu_pipeline.{json,md}`` (or ``--out``).  Never asserts.  Meant to run
once on a GPU machine in under 6 minutes (``../shared/brief/device.md`` says how); test it on the
CPU first with ``--device cpu --small``.

Usage:
    python bench/gpu_pipeline.py --device cuda
    python bench/gpu_pipeline.py --device cpu --small
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
sys.path.insert(0, str(ROOT))
OUT = ROOT / "bench" / "results"


def argosy(*args, env=None, timeout=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "argosy.services.launch", *args], cwd=ROOT, capture_output=True,
                          text=True, env=env, timeout=timeout)


def make_store(a, work: Path) -> tuple[Path, dict]:
    graph = work / f"graph-{a.nodes}-{a.degree:g}-{a.feature_dim}.npz"
    store = work / f"store-{a.nodes}-{a.feature_dim}-{a.parts}-{a.method}"
    info = {}
    if not graph.exists():
        t0 = time.perf_counter()
        p = argosy("generate", "--nodes", str(a.nodes), "--avg-degree", str(a.degree), "--feature-dim", str(a.feature_dim),
                   "--out", str(graph))
        if p.returncode:
            raise SystemExit(p.stderr[-2000:])
        info["generate_seconds"] = time.perf_counter() - t0
    if not (store / "manifest.json").exists():
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "argosy.services.partitioner", str(graph), "--parts", str(a.parts),
                            "--method", a.method, "--out", str(store), "--overwrite"], cwd=ROOT, capture_output=True, text=True)
        if p.returncode:
            raise SystemExit(p.stderr[-2000:])
        info["partition_seconds"] = time.perf_counter() - t0
    return store, info


def _cores(a, store: Path):
    from argosy.shared.config import TrainerConfig
    from argosy.shared.store import PartitionStore
    from argosy.services.loader.core import LoaderCore
    from argosy.services.sampler.core import SamplerCore
    from argosy.services.trainer.core import TrainerCore, pick_device
    s = PartitionStore(store)
    fan = tuple(int(x) for x in a.fanouts.split(","))
    m = s.manifest
    T = TrainerCore(TrainerConfig(hidden=a.hidden, device=a.device), m.feature_dim, max(m.num_classes, 1), len(fan),
                    device=pick_device(a.device))
    return s, SamplerCore(s, seed=0), LoaderCore(s), T, fan


def _sync(dev) -> None:
    import torch
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def ceiling(a, store: Path) -> dict:
    """Steps per second on pre-loaded batches: copy in the step (pageable), and the step alone."""
    from argosy.shared.plan import plan_phase
    s, S, L, T, fan = _cores(a, store)
    plan = plan_phase(s, "train", 0, a.batch_size, 1)[:16]
    fbs = [L.load(S.sample_item(it, fan)) for it in plan]
    out = {"batches": len(fbs), "feature_mb": float(np.mean([fb.features.nbytes for fb in fbs])) / 1e6,
           "feature_rows": float(np.mean([fb.features.shape[0] for fb in fbs]))}
    for fb in fbs[:2]:
        T.train_step(fb)                                          # warm-up (kernels, allocator)
    for name, batches in (("copy_in_step", fbs), ("on_device", None)):
        if batches is None:
            batches = [T.stage(fb) for fb in fbs]                 # already on the device: the step alone
        _sync(T.device)
        t0 = time.perf_counter()
        for _ in range(a.ceiling_rounds):
            for b in batches:
                T.train_step(b, sync=False)
        _sync(T.device)
        out[f"{name}_batches_per_second"] = a.ceiling_rounds * len(batches) / (time.perf_counter() - t0)
    return out


def inprocess(a, store: Path) -> dict:
    from argosy.shared.plan import plan_phase
    s, S, L, T, fan = _cores(a, store)
    plan = plan_phase(s, "train", 0, a.batch_size, 1)
    for it in plan[:2]:
        T.train_step(L.load(S.sample_item(it, fan)))
    n = min(len(plan), a.inproc_batches)
    t0 = time.perf_counter()
    for it in plan[:n]:
        T.train_step(L.load(S.sample_item(it, fan)))
    _sync(T.device)
    return {"batches": n, "batches_per_second": n / (time.perf_counter() - t0)}


def pipeline(a, store: Path, samplers: int, loaders: int, work: Path, env=None, gpu_cache: str | None = None) -> dict:
    run_dir = work / f"run-{samplers}x{loaders}-{int(time.time())}"
    extra = ("--gpu-cache", gpu_cache) if gpu_cache is not None else ()
    p = argosy("train", *extra, "--store", str(store), "--epochs", str(a.epochs), "--patience", "0", "--fanouts", a.fanouts,
               "--eval-fanouts", a.fanouts, "--batch-size", str(a.batch_size), "--hidden", str(a.hidden),
               "--eval-max-nodes", str(a.eval_max_nodes), "--samplers", str(samplers), "--loaders", str(loaders),
               "--device", a.device, "--run-dir", str(run_dir), "--json", env=env, timeout=a.run_timeout)
    if p.returncode != 0:
        return {"samplers": samplers, "loaders": loaders, "error": p.stderr[-1500:]}
    r = json.loads(p.stdout.strip().splitlines()[-1])
    eps = json.loads((run_dir / "report.json").read_text())["epochs"]
    e = eps[-1] if len(eps) > 1 else eps[0]                       # the last epoch (the first compiles)
    row = {"samplers": samplers, "loaders": loaders, "epoch": e["epoch"], "batches_per_second": e["batches_per_second"],
           "trainer_idle_fraction": e["trainer_idle_fraction"], "run_batches_per_second": r.get("batches_per_second"),
           "seeds_trained": r.get("seeds_trained"), "seeds_planned": r.get("seeds_planned"), "duplicates": r.get("duplicates")}
    for k in ("idle_seconds", "compute_seconds", "ingest_seconds", "copy_seconds", "cache_hit_rate", "bytes_per_batch"):
        row[k] = e.get(k)
    row["gpu_cache"], row["feature_cache_rows"] = gpu_cache, r.get("feature_cache_rows")
    return row


def autoscale(a, store: Path, work: Path) -> dict:
    from argosy.shared.coord import Coordinator
    from argosy.shared.metrics import read_autoscale_decisions, read_autoscale_observation
    from argosy.services.stack import StackFile
    job = f"gpu-autoscale-{int(time.time())}"
    p = argosy("up", "--store", str(store), "--samplers", "1", "--loaders", "1", "--epochs", "1000", "--patience", "0",
               "--fanouts", a.fanouts, "--eval-fanouts", a.fanouts, "--batch-size", str(a.batch_size), "--hidden",
               str(a.hidden), "--eval-max-nodes", str(a.eval_max_nodes), "--device", a.device, "--job", job,
               "--run-dir", str(work / job), "--peer-timeout", "600")
    if p.returncode:
        return {"error": p.stderr[-1500:]}
    redis = StackFile(job).read().redis
    coord = Coordinator(redis, job)
    log = open(work / f"{job}-autoscaler.log", "wb")
    scaler = subprocess.Popen([sys.executable, "-m", "argosy.services.autoscaler", "--redis", redis, "--job", job,
                               "--target", "local", "--roles", "sampler,loader", "--min", "1", "--max", str(a.max_replicas),
                               "--idle-target", str(a.idle_target), "--cooldown", "8", "--interval", "1", "--window", "5",
                               "--warmup", "5"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    samples, t0 = [], time.time()
    try:
        while time.time() - t0 < a.autoscale_seconds:
            time.sleep(1.0)
            if coord.get_state() in ("failed", "done"):
                break
            obs = read_autoscale_observation(coord) or {}
            samples.append({"t": time.time() - t0, "samplers": len(coord.services("sampler")),
                            "loaders": len(coord.services("loader")), "idle": obs.get("trainer_idle"),
                            "ingest_busy": obs.get("trainer_ingest_busy"), "rate": obs.get("trainer_rate")})
        epochs = [e.to_dict() for e in coord.epochs()]
        decisions = [d for d in read_autoscale_decisions(coord) if d.get("action") != "hold"]
    finally:
        scaler.send_signal(signal.SIGTERM)
        try:
            scaler.wait(20)
        except subprocess.TimeoutExpired:
            scaler.kill()
        argosy("down", "--job", job, timeout=120)
        coord.close()
    late = [s for s in samples if s["t"] > 0.75 * (samples[-1]["t"] if samples else 0) and s["idle"] is not None]
    return {"seconds": time.time() - t0, "decisions": [{k: d.get(k) for k in ("t", "action", "role", "replicas", "reason")}
                                                       for d in decisions],
            "final": samples[-1] if samples else None, "samples": samples,
            "late_idle": float(np.mean([s["idle"] for s in late])) if late else None,
            "late_batches_per_second": float(np.mean([s["rate"] for s in late if s["rate"]])) if late else None,
            "epochs": [{k: e.get(k) for k in ("epoch", "batches_per_second", "trainer_idle_fraction")} for e in epochs]}


def markdown(res: dict) -> str:
    a, c = res["setting"], res.get("ceiling", {})
    md = [f"# GPU pipeline ({res['when']}, device {res['device_name']}, {res['cpus']} cores)", "",
          f"Graph: {a['nodes']:,} nodes, degree {a['degree']:g}, {a['feature_dim']}-d features, {a['method']} {a['parts']} parts; "
          f"SAGE hidden {a['hidden']}, fanouts {a['fanouts']}, batch {a['batch_size']} (~{c.get('feature_rows', 0):,.0f} rows, "
          f"{c.get('feature_mb', 0):.1f} MB per batch). Whole script: {res.get('script_seconds', 0):.0f} s.", "",
          "| run | batches/s | x ceiling | trainer idle | wait / compute / ingest / copy s (last epoch) | feature cache: hit rate, MB/batch in |",
          "|---|---|---|---|---|---|"]
    top = c.get("copy_in_step_batches_per_second") or float("nan")
    md.append(f"| GPU ceiling, copy in the step (pageable) | {top:.1f} | 1.00 | – | – |")
    md.append(f"| GPU ceiling, batches on the device | {c.get('on_device_batches_per_second', float('nan')):.1f} | "
              f"{c.get('on_device_batches_per_second', float('nan')) / top:.2f} | – | – |")
    if "inprocess" in res:
        md.append(f"| in-process loop | {res['inprocess']['batches_per_second']:.1f} | "
                  f"{res['inprocess']['batches_per_second'] / top:.2f} | – | – |")
    for r in res.get("pipeline", []) + res.get("baseline", []):
        name = f"pipeline {r['samplers']}+{r['loaders']}" + (f" ({r['code']})" if r.get("code") else "") + \
            (f", --gpu-cache {r['gpu_cache']}" if r.get("gpu_cache") is not None else "")
        if "error" in r:
            md.append(f"| {name} | failed | | | {r['error'][-120:]!r} |")
            continue
        split = " / ".join("-" if r.get(k) is None else f"{r[k]:.1f}" for k in ("idle_seconds", "compute_seconds",
                                                                               "ingest_seconds", "copy_seconds"))
        cache = "-" if r.get("cache_hit_rate") is None else \
            f"{r['cache_hit_rate']:.2f}, {(r.get('bytes_per_batch') or 0) / 1e6:.2f} ({r.get('feature_cache_rows') or 0:,} rows)"
        md.append(f"| {name} | {r['batches_per_second']:.1f} | {r['batches_per_second'] / top:.2f} | "
                  f"{r['trainer_idle_fraction']:.2f} | {split} | {cache} |")
    s = res.get("autoscale")
    if s and "error" not in s:
        f = s.get("final") or {}
        md += ["", f"Autoscale from 1+1 (idle target {a['idle_target']:.0%}, {s['seconds']:.0f} s): ended at "
               f"{f.get('samplers')}+{f.get('loaders')}, idle over the last quarter "
               f"{'-' if s['late_idle'] is None else format(s['late_idle'], '.2f')}, "
               f"{'-' if s['late_batches_per_second'] is None else format(s['late_batches_per_second'], '.1f')} batches/s.", ""]
        md += [f"- +{d['t'] - res['autoscale_t0']:.0f} s: {d['reason']}" for d in s["decisions"]] if s["decisions"] else ["- no change"]
    elif s:
        md += ["", f"Autoscale run failed: {s['error'][-300:]!r}"]
    return "\n".join(md) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--nodes", type=int, default=500_000)
    ap.add_argument("--degree", type=float, default=20)
    ap.add_argument("--feature-dim", type=int, default=128)
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--method", default="grem")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--fanouts", default="10,10")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--eval-max-nodes", type=int, default=2000)
    ap.add_argument("--configs", default="1+1,2+2,4+4,7+7", help="samplers+loaders of the pipeline runs")
    ap.add_argument("--caches", default="0,auto",
                    help="--gpu-cache of the pipeline runs, each config once per value (0 = without the feature cache)")
    ap.add_argument("--ceiling-rounds", type=int, default=3)
    ap.add_argument("--inproc-batches", type=int, default=100)
    ap.add_argument("--autoscale-seconds", type=float, default=70)
    ap.add_argument("--idle-target", type=float, default=0.2)
    ap.add_argument("--max-replicas", type=int, default=7)
    ap.add_argument("--baseline-rev", default=None, help="also run the 4+4 pipeline of this git revision (needs .git)")
    ap.add_argument("--skip", default="", help="comma list of: ceiling,inprocess,pipeline,autoscale")
    ap.add_argument("--run-timeout", type=float, default=240)
    ap.add_argument("--work", default="/tmp/argosy-bench-gpu")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--small", action="store_true", help="tiny sizes to test the script (20k nodes, 32-d, batch 256)")
    a = ap.parse_args()
    if a.small:
        a.nodes, a.feature_dim, a.parts, a.method, a.hidden, a.batch_size = 20_000, 32, 4, "random", 32, 256
        a.epochs, a.eval_max_nodes, a.ceiling_rounds, a.inproc_batches, a.autoscale_seconds = 2, 256, 1, 20, 40
        if a.configs == "1+1,2+2,4+4,7+7":
            a.configs = "1+1,2+2"
    t_start = time.perf_counter()
    work, out = Path(a.work), Path(a.out)
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    skip = set(a.skip.split(",")) - {""}
    import torch
    res = {"setting": {k: getattr(a, k) for k in ("nodes", "degree", "feature_dim", "parts", "method", "hidden", "fanouts",
                                                  "batch_size", "epochs", "eval_max_nodes", "idle_target", "device")},
           "when": time.strftime("%Y-%m-%d %H:%M"), "cpus": os.cpu_count(),
           "device_name": torch.cuda.get_device_name() if a.device == "cuda" and torch.cuda.is_available() else "cpu"}

    def save() -> None:
        res["script_seconds"] = time.perf_counter() - t_start
        (out / "gpu_pipeline.json").write_text(json.dumps(res, indent=1))
        (out / "gpu_pipeline.md").write_text(markdown(res))

    print("store ...", file=sys.stderr)
    store, res["store"] = make_store(a, work)
    if "ceiling" not in skip:
        print("GPU ceiling ...", file=sys.stderr)
        res["ceiling"] = ceiling(a, store)
        save()
    if "inprocess" not in skip:
        print("in-process loop ...", file=sys.stderr)
        res["inprocess"] = inprocess(a, store)
        save()
    if "pipeline" not in skip:
        res["pipeline"] = []
        for cfg in a.configs.split(","):
            s, l = (int(x) for x in cfg.split("+"))
            for cache in a.caches.split(","):
                print(f"pipeline {s}+{l}, --gpu-cache {cache} ...", file=sys.stderr)
                res["pipeline"].append(pipeline(a, store, s, l, work, gpu_cache=cache))
                save()
    if a.baseline_rev:
        sys.path.insert(0, str(ROOT / "bench"))
        from ingest import baseline_tree
        try:
            tree = baseline_tree(a.baseline_rev, work)
            env = {**os.environ, "PYTHONPATH": str(tree)}
            print(f"pipeline 4+4 of {a.baseline_rev} ...", file=sys.stderr)
            res["baseline"] = [{**pipeline(a, store, 4, 4, work, env=env), "code": a.baseline_rev}]
        except (subprocess.CalledProcessError, OSError) as e:
            res["baseline"] = [{"samplers": 4, "loaders": 4, "code": a.baseline_rev, "error": f"no baseline tree: {e}"}]
        save()
    if "autoscale" not in skip:
        print("autoscale from 1+1 ...", file=sys.stderr)
        res["autoscale_t0"] = time.time()
        res["autoscale"] = autoscale(a, store, work)
    save()
    print(markdown(res))


if __name__ == "__main__":
    main()
