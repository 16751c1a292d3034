"""The trainer's step under each allocator: glibc with the heap kept (``keep_heap``, what a trainer ran on
before jemalloc) against jemalloc (``allocator_env``, what it runs on now where installed).

Why: jemalloc was adopted for the trainer's RSS under faults (docs/reliability.md, "Soak"); ``keep_heap``
exists because a step that faults fresh pages in for every batch costs ~25 % more CPU (docs/compute.md).
This checks jemalloc does not bring that cost back: a 3-layer train step (hidden 256, Adam) on
soc-slashdot batches of 1024 seeds (fanouts 5, 10, 15; ``bench/layers.py``'s batches), one thread, each
allocator in its own process, rounds alternating; per step: CPU ms (median), minor page faults, and the
process's RSS at the end.

Usage: python bench/allocator.py [--rounds 3] [--reps 5] [--out bench/results/allocator_step]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def child(reps: int) -> dict:
    """One process: every model's step, under whatever allocator this process was started with."""
    import torch
    import torch.nn.functional as F

    from argosy.shared.malloc import allocator, keep_heap
    from argosy.shared.models import GNN
    from layers import step_batches, to_blocks

    keep_heap()                                      # as lifecycle.run_service does (no effect under jemalloc)
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    batches = step_batches(4)
    prepared = [(torch.from_numpy(xb), to_blocks(sb), torch.from_numpy(yb)) for sb, xb, yb in batches]
    out = {"allocator": allocator()}
    for kind in ("sage", "gcn", "gat"):
        torch.manual_seed(0)
        hidden, heads = (32, 8) if kind == "gat" else (256, 8)
        model = GNN(kind, 128, hidden, 10, 3, dropout=0.5, heads=heads)
        opt = torch.optim.Adam(model.parameters(), lr=0.003)
        model.train()

        def epoch():
            for xb, bl, yb in prepared:
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(model(xb, bl), yb).backward()
                opt.step()
        epoch()
        epoch()                                          # warm: the heap reaches its working size
        cpu, faults = [], []
        for _ in range(reps):
            f0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.process_time()
            epoch()
            cpu.append((time.process_time() - t0) * 1e3 / len(prepared))
            faults.append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / len(prepared))
        cpu.sort()
        faults.sort()
        out[kind] = {"cpu_ms": cpu[len(cpu) // 2], "faults": faults[len(faults) // 2]}
    with open("/proc/self/status") as f:
        out["rss_mb"] = next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024
    return out


def run(which: str, reps: int) -> dict:
    from argosy.shared.malloc import allocator_env
    env = dict(os.environ, ARGOSY_ALLOCATOR=which)
    env.pop("LD_PRELOAD", None)
    env = allocator_env(env)
    p = subprocess.run([sys.executable, __file__, "--child", "--reps", str(reps)], env=env, capture_output=True,
                       text=True, cwd=ROOT)
    if p.returncode:
        raise RuntimeError(p.stderr[-3000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "allocator_step"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.reps)))
        return
    from argosy.shared.malloc import jemalloc_path
    if jemalloc_path() is None:
        sys.exit("jemalloc is not installed (apt-get install libjemalloc2): nothing to compare")
    rows = []
    for r in range(args.rounds):
        for which in (("glibc", "jemalloc") if r % 2 == 0 else ("jemalloc", "glibc")):
            res = run(which, args.reps)
            res.update(round=r, asked=which, load=os.getloadavg()[0])
            print(json.dumps(res), file=sys.stderr)
            rows.append(res)
    lines = ["# Train step CPU under each allocator (`python bench/allocator.py`)", "",
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; one thread, CPU time per step (median of "
             f"{args.reps}), best of {args.rounds} rounds per allocator, rounds alternating; faults: minor page "
             "faults per step; RSS: the process at the end.", "",
             "| model | glibc (keep_heap) ms | jemalloc ms | jemalloc / glibc | glibc faults | jemalloc faults |",
             "|---|---:|---:|---:|---:|---:|"]
    best = {}
    for which in ("glibc", "jemalloc"):
        mine = [r for r in rows if r["asked"] == which]
        best[which] = {k: min(mine, key=lambda r: r[k]["cpu_ms"])[k] for k in ("sage", "gcn", "gat")}
        best[which]["rss_mb"] = min(r["rss_mb"] for r in mine)
        assert all(r["allocator"] == ("jemalloc" if which == "jemalloc" else "system") for r in mine), mine
    for k in ("sage", "gcn", "gat"):
        g, j = best["glibc"][k], best["jemalloc"][k]
        lines.append(f"| {k} | {g['cpu_ms']:.1f} | {j['cpu_ms']:.1f} | {j['cpu_ms'] / g['cpu_ms']:.2f} | "
                     f"{g['faults']:.0f} | {j['faults']:.0f} |")
    lines += ["", f"RSS at the end: glibc {best['glibc']['rss_mb']:.0f} MB, jemalloc {best['jemalloc']['rss_mb']:.0f} MB; "
              f"load average during the runs: {min(r['load'] for r in rows):.1f}-{max(r['load'] for r in rows):.1f}."]
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    Path(args.out + ".jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
