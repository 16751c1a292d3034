"""Autoscaling benchmark: a job starts with 1 sampler while the trainer is starved, and the
autoscaler adds samplers until the trainer's idle fraction is below a target.

Steps:
  1. generate a DC-SBM graph (``argosy generate``) and start the job in the background with
     ``argosy up --data ... --samplers 1`` (many epochs, so the job outlives the experiment);
  2. start ``python -m argosy.services.autoscaler --target local`` against it;
  3. every second, record the trainer idle fraction (the autoscaler's observation: live counters
     if trainers publish them, else the newest per-epoch record), the per-epoch records and the
     live sampler/loader replicas;
  4. stop when idle stayed below the target for ``--settle-epochs`` epochs after the last change
     (or at ``--max-seconds``), stop everything, and write bench/results/autoscale.{png,md,json}.

Never asserts: figures are reported.  The CPU tier and the trainer share the same cores here, so
the trainer must be heavy (``--work-factor``) and sampling heavier still per batch for one sampler
to starve it; tune ``--work-factor`` / ``--fanouts`` on a new machine (the .md prints the per-batch
costs to do so).

Usage: python bench/autoscale.py [--nodes 100000] [--work-factor 2] [--idle-target 0.10] [--quick]
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "bench" / "results"


def argosy(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "argosy.services.launch", *args], cwd=ROOT, capture_output=True, text=True, **kw)


def make_graph(a, work: Path) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    graph = work / f"graph-{a.nodes}-{a.feature_dim}.npz"
    if not graph.exists():
        p = argosy("generate", "--nodes", str(a.nodes), "--avg-degree", str(a.avg_degree), "--feature-dim",
                   str(a.feature_dim), "--out", str(graph))
        if p.returncode:
            raise SystemExit(p.stderr)
    return graph


def calibrate(a, work: Path, batches: int = 8) -> dict:
    """Per-batch milliseconds of sampling, feature loading and one training step, in one process.

    One sampler starves the trainer only if its per-batch cycle exceeds the trainer's; these
    figures say whether that can happen with the chosen settings on this machine.
    """
    import numpy as np
    from argosy.shared.config import TrainerConfig
    from argosy.shared.store import PartitionStore
    from argosy.services.loader.core import LoaderCore
    from argosy.services.sampler.core import SamplerCore
    from argosy.services.trainer.core import TrainerCore
    graph = make_graph(a, work)
    store_dir = work / f"store-{a.nodes}-{a.feature_dim}-{a.parts}"
    if not (store_dir / "manifest.json").exists():
        subprocess.run([sys.executable, "-m", "argosy.services.partitioner", str(graph), "--parts", str(a.parts), "--method",
                        "random", "--out", str(store_dir), "--overwrite"], check=True, cwd=ROOT, capture_output=True)
    store = PartitionStore(store_dir)
    fan = tuple(int(x) for x in a.fanouts.split(","))
    sampler, loader = SamplerCore(store, served_parts=list(range(store.num_parts))), LoaderCore(store)
    m = store.manifest
    trainer = TrainerCore(TrainerConfig(hidden=a.hidden, dropout=a.dropout, work_factor=a.work_factor, device=a.device), m.feature_dim,
                          max(m.num_classes, 1), len(fan))
    rng = np.random.default_rng(0)
    tot = {"sample_ms": 0.0, "load_ms": 0.0, "train_ms": 0.0}
    for i in range(batches + 2):
        t0 = time.perf_counter()
        b = sampler.sample(rng.choice(m.num_nodes, a.batch_size, replace=False), fan, i)
        b.epoch, b.phase, b.batch_id, b.part, b.trainer_rank = 0, "train", i, 0, 0
        t1 = time.perf_counter()
        fb = loader.load(b)
        t2 = time.perf_counter()
        trainer.train_step(fb)
        t3 = time.perf_counter()
        if i >= 2:                                          # first two: JIT compilation, allocator warm-up
            tot["sample_ms"] += 1000 * (t1 - t0) / batches
            tot["load_ms"] += 1000 * (t2 - t1) / batches
            tot["train_ms"] += 1000 * (t3 - t2) / batches
    tot["train_over_sample"] = tot["train_ms"] / max(tot["sample_ms"], 1e-9)
    return tot


def start_job(a, work: Path) -> dict:
    graph = make_graph(a, work)
    job = f"autoscale-{time.strftime('%H%M%S')}"
    p = argosy("up", "--data", str(graph), "--parts", str(a.parts), "--samplers", "1", "--loaders", str(a.loaders),
               "--trainers", str(a.trainers),
               "--epochs", "1000", "--patience", "0", "--batch-size", str(a.batch_size), "--fanouts", a.fanouts, "--hidden", str(a.hidden), "--dropout", str(a.dropout),
               "--work-factor", str(a.work_factor), "--eval-max-nodes", str(a.eval_max_nodes), "--job", job,
               "--run-dir", str(work / job), "--peer-timeout", "600", "--device", a.device,
               *(["--simulate-gpu-step", a.simulate_gpu_step] if a.simulate_gpu_step else []))
    if p.returncode:
        raise SystemExit(f"argosy up failed:\n{p.stderr[-3000:]}")
    info = json.loads(p.stdout.strip().splitlines()[-1])
    from argosy.services.stack import StackFile
    return {**info, "redis_url": StackFile(job).read().redis, "graph": str(graph)}


def run(a) -> dict:
    from argosy.shared.coord import Coordinator
    from argosy.shared.metrics import read_autoscale_decisions, read_autoscale_observation
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    job = start_job(a, work)
    coord = Coordinator(job["redis_url"], job["job"])
    scaler_log = open(work / f"{job['job']}-autoscaler.log", "wb")
    scaler = subprocess.Popen([sys.executable, "-m", "argosy.services.autoscaler", "--redis", job["redis_url"], "--job",
                               job["job"], "--target", "local", "--roles", a.roles, "--min", "1", "--max", str(a.max),
                               "--idle-target", str(a.idle_target), "--cooldown", str(a.cooldown),
                               "--interval", "1", "--window", str(a.window), "--warmup", "15"],
                              cwd=ROOT, stdout=scaler_log, stderr=subprocess.STDOUT)
    samples, t0, seen_epochs, epoch_rows = [], time.time(), 0, []
    last_change_t = None
    try:
        while time.time() - t0 < a.max_seconds:
            time.sleep(1.0)
            now = time.time()
            state = coord.get_state()
            if state in ("failed", "done"):
                print(f"job ended early: {state} {coord.get_result()}", file=sys.stderr)
                break
            reps = {r: len(coord.services(r)) for r in ("sampler", "loader", "trainer")}
            obs = read_autoscale_observation(coord) or {}
            epochs = coord.epochs()
            for e in epochs[seen_epochs:]:
                epoch_rows.append({"t": now - t0, "epoch": e.epoch, "samplers": reps["sampler"], "loaders": reps["loader"],
                                   "idle": e.trainer_idle_fraction, "batches_per_second": e.batches_per_second,
                                   "epoch_seconds": e.epoch_seconds, "compute_seconds": e.compute_seconds,
                                   "batches": e.batches})
            seen_epochs = len(epochs)
            decisions = read_autoscale_decisions(coord)
            changes = [d for d in decisions if d.get("action") != "hold"]
            if changes and changes[-1]["t"] != last_change_t:
                last_change_t = changes[-1]["t"]
            samples.append({"t": now - t0, **reps, "observed_idle": obs.get("trainer_idle"),
                            "idle_source": obs.get("idle_source"), "metrics": coord.metrics()})
            new_rows = [r for r in epoch_rows if last_change_t is None or r["t"] + t0 - r["epoch_seconds"] > last_change_t + 2]
            settled = len(new_rows) >= a.settle_epochs and all(r["idle"] < a.idle_target for r in new_rows[-a.settle_epochs:])
            scaled_up = any(d.get("action") == "add" and "idle" in d.get("reason", "") for d in changes)
            quiet_for = now - (last_change_t or t0)
            if settled and (scaled_up or quiet_for > a.min_seconds):
                print(f"idle below {a.idle_target:.0%} for {a.settle_epochs} epochs after the last change; stopping",
                      file=sys.stderr)
                break
            if samples and int(samples[-1]["t"]) % 10 == 0:
                print(f"t={samples[-1]['t']:.0f}s samplers={reps['sampler']} loaders={reps['loader']} "
                      f"idle={obs.get('trainer_idle')} epochs={seen_epochs}", file=sys.stderr)
    finally:
        decisions = read_autoscale_decisions(coord)
        scaler.send_signal(signal.SIGTERM)
        try:
            scaler.wait(30)
        except subprocess.TimeoutExpired:
            scaler.kill()
        argosy("down", "--job", job["job"])
        coord.close()
    return {"job": job, "args": vars(a), "samples": samples, "epochs": epoch_rows, "decisions": decisions,
            "wall_seconds": time.time() - t0, "t0": t0}


def plot(res: dict, path: Path, idle_target: float) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    s, ep = res["samples"], res["epochs"]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.plot([r["t"] for r in ep], [r["idle"] for r in ep], "o-", color="tab:red", label="trainer idle (per epoch)")
    live = [(x["t"], x["observed_idle"]) for x in s if x["observed_idle"] is not None and x["idle_source"] == "live"]
    if live:
        ax.plot(*zip(*live), color="tab:red", alpha=0.35, label="trainer idle (live, autoscaler's view)")
    ax.axhline(idle_target, color="tab:red", ls=":", label=f"idle target {idle_target:.0%}")
    ax.set_ylim(0, 1)
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("trainer idle fraction", color="tab:red")
    ax2 = ax.twinx()
    ax2.step([x["t"] for x in s], [x["sampler"] for x in s], where="post", color="tab:blue", label="samplers")
    ax2.step([x["t"] for x in s], [x["loader"] for x in s], where="post", color="tab:green", ls="--", label="loaders")
    ax2.set_ylabel("live replicas")
    ax2.set_ylim(0, max([x["sampler"] for x in s] + [x["loader"] for x in s] + [1]) + 1)
    for d in res["decisions"]:
        if d.get("action") != "hold":
            ax.axvline(d["t"] - res["t0"], color="grey", lw=0.6, alpha=0.6)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper right", fontsize=8)
    ax.set_title("autoscaler: trainer idle fraction vs replicas")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write_md(res: dict, path: Path, a, png: str = "autoscale.png") -> None:
    ep, dec = res["epochs"], [d for d in res["decisions"] if d.get("action") != "hold" or d.get("paused")]
    first = ep[0] if ep else None
    last = ep[-a.settle_epochs:] if ep else []
    lines = ["# Autoscaling: trainer idle fraction as the autoscaler adds replicas", "",
             f"Job `{res['job']['job']}` on a generated DC-SBM graph ({a.nodes:,} nodes, average degree {a.avg_degree}, "
             f"{a.feature_dim} features, {a.parts} parts), fanouts {a.fanouts}, batch {a.batch_size}, hidden {a.hidden}, "
             f"work factor {a.work_factor}, {a.trainers} trainer(s), device {a.device}; started with 1 sampler and "
             f"{a.loaders} loader(s); autoscaler "
             f"`--target local --idle-target {a.idle_target} --cooldown {a.cooldown} --max {a.max}` (roles {a.roles}).",
             f"Machine: {os.cpu_count()} CPUs, shared with other work while measured (load average "
             f"{os.getloadavg()[0]:.1f} at the end), so figures are noisy.  Wall time {res['wall_seconds']:.0f} s.", "",
             f"![autoscale]({png})", ""]
    if first and last:
        li = sum(r["idle"] for r in last) / len(last)
        lines += ["| | samplers | trainer idle | batches/s |", "|---|---|---|---|",
                  f"| first epoch | {first['samplers']} | {first['idle']:.1%} | {first['batches_per_second']:.1f} |",
                  f"| last {len(last)} epochs | {last[-1]['samplers']} | {li:.1%} | "
                  f"{sum(r['batches_per_second'] for r in last) / len(last):.1f} |", "",
                  f"Idle target {a.idle_target:.0%} {'reached' if li < a.idle_target else 'NOT reached'}.", ""]
    lines += ["## Decisions (from `argosy:{job}:autoscale:decisions`)", ""]
    t0 = res["t0"]
    for d in dec:
        lines.append(f"- t={d['t'] - t0:.0f} s: {d['reason']}")
    if not dec:
        lines.append("- none")
    lines += ["", "## Epochs", "", "| t (s) | epoch | samplers | loaders | idle | batches/s | compute ms/batch |",
              "|---|---|---|---|---|---|---|"]
    for r in ep:
        cms = 1000 * r["compute_seconds"] / max(r["batches"] or 1, 1) if r.get("compute_seconds") else float("nan")
        lines.append(f"| {r['t']:.0f} | {r['epoch']} | {r['samplers']} | {r['loaders']} | {r['idle']:.2f} | "
                     f"{r['batches_per_second']:.1f} | {cms:.1f} |")
    m = res["samples"][-1]["metrics"] if res["samples"] else {}
    c = res.get("calibration") or {}
    lines += ["", "## Per-batch costs", ""]
    if c:
        lines.append(f"In one process, before the run: sampling {c['sample_ms']:.1f} ms, feature loading "
                     f"{c['load_ms']:.1f} ms, one training step {c['train_ms']:.1f} ms (training / sampling = "
                     f"{c['train_over_sample']:.1f}).")
    if m.get("sampler_batches"):
        lines.append(f"During the run (busy time per batch): sampling {1000 * m.get('sample_seconds', 0) / m['sampler_batches']:.1f} ms, "
                     f"feature loading {1000 * m.get('load_seconds', 0) / max(m.get('loader_batches', 1), 1):.1f} ms.")
    lines += ["", "One sampler starves the trainer only when a sampler's per-batch cycle (sampling + claim + encode + "
              "send) is longer than the trainer's (training step + decode + acknowledge); on C cores the idle target is "
              "reachable only if sampling + loading <= about (C - 1) x the training step.  With a CPU trainer the "
              "training step is several times the sampling cost, so the starved start needs a fast (GPU) trainer, "
              "small batches where fixed per-batch costs dominate, or a loaded machine."]
    path.write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=30_000)
    p.add_argument("--avg-degree", type=float, default=12.0)
    p.add_argument("--feature-dim", type=int, default=16)
    p.add_argument("--parts", type=int, default=8)
    p.add_argument("--fanouts", default="10,10")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--work-factor", type=int, default=1)
    p.add_argument("--simulate-gpu-step", default=None, metavar="TIME",
                   help="SIMULATION: trainers wait TIME per batch instead of computing (a stand-in GPU, e.g. 5ms)")
    p.add_argument("--eval-max-nodes", type=int, default=1000)
    p.add_argument("--loaders", type=int, default=1)
    p.add_argument("--trainers", type=int, default=1, help="DDP trainer ranks (each needs its own batches)")
    p.add_argument("--roles", default="sampler,loader")
    p.add_argument("--idle-target", type=float, default=0.10)
    p.add_argument("--cooldown", type=float, default=10.0)
    p.add_argument("--window", type=float, default=10.0)
    p.add_argument("--max", type=int, default=6)
    p.add_argument("--settle-epochs", type=int, default=3)
    p.add_argument("--max-seconds", type=float, default=300.0)
    p.add_argument("--min-seconds", type=float, default=60.0,
                   help="without an idle-driven scale-up, watch at least this long before stopping")
    p.add_argument("--work", default="/tmp/argosy-bench-autoscale")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="trainer device")
    p.add_argument("--calibrate", action="store_true", help="only print per-batch sample/load/train costs")
    p.add_argument("--tag", default="", help="suffix of the output names (autoscale-TAG.md)")
    p.add_argument("--quick", action="store_true", help="small graph, at most 150 s")
    a = p.parse_args(argv)
    if a.quick:
        a.nodes, a.max_seconds, a.settle_epochs = min(a.nodes, 30_000), min(a.max_seconds, 150.0), 2
    OUT.mkdir(parents=True, exist_ok=True)
    cal = calibrate(a, Path(a.work))
    print("per batch: " + ", ".join(f"{k} {v:.1f}" for k, v in cal.items()), file=sys.stderr)
    if a.calibrate:
        return 0
    res = run(a)
    res["calibration"] = cal
    name = "autoscale" + (f"-{a.tag}" if a.tag else "")
    (OUT / f"{name}.json").write_text(json.dumps(res, indent=1, default=str))
    plot(res, OUT / f"{name}.png", a.idle_target)
    write_md(res, OUT / f"{name}.md", a, f"{name}.png")
    print(f"wrote {OUT / (name + '.md')} and {OUT / (name + '.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
