"""Fault injection with real processes: kill -9 a sampler, a loader, a trainer, or Redis mid-run.

Each scenario runs N times (default 5) on Cora through ``argosy train`` and counts a run as
survived when it exits 0 with ``seeds_trained == seeds_planned`` and ``duplicates == 0``; for the
trainer scenario the final test accuracy must also be within 0.5 point of an uninterrupted run
with the same seed (the trainers resume from the last epoch checkpoint).
Writes bench/results/chaos.{json,md}.  Usage: python bench/chaos.py [--runs 5] [--scenarios sampler,loader,trainer,redis]

``--hosts N`` runs the cluster-scale matrix instead (``bench/faults.py``: a whole host killed and
back, links down / flapping / lossy / slow, Redis restarted while a link is down, a trainer or a
loader stopped 60 s, a full staging disk, the partitioner killed and rerun) on N simulated hosts,
and writes bench/results/chaos_hosts.{json,md} (``--out NAME`` for another name; rows are appended
to NAME.jsonl as they finish).  Usage: python bench/chaos.py --hosts 2 [--runs 5] [--scenarios host-kill,link-10]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from argosy.shared.coord import Coordinator  # noqa: E402
from argosy.shared.redis_server import EmbeddedRedis  # noqa: E402

from argosy.shared.envs import datasets_dir  # noqa: E402

DATA = datasets_dir()
EPOCHS = 8


def train_cmd(store, redis_url, job, run_dir, extra=()):
    return [sys.executable, "-m", "argosy.services.launch", "train", "--store", str(store), "--epochs", str(EPOCHS),
            "--batch-size", "16", "--redis", redis_url, "--job", job, "--run-dir", str(run_dir), "--claim-timeout", "3",
            "--peer-timeout", "60", "--model", "gcn", "--fanouts=-1,-1", "--normalize-features", "--json", *extra]


def run_once(scenario, store, work: Path, i: int, baseline: dict | None) -> dict:
    redis = EmbeddedRedis(data_dir=str(work / f"redis-{scenario}-{i}")).start()
    job = f"chaos-{scenario}-{i}"
    extra = {"sampler": ["--samplers", "2"], "loader": ["--loaders", "2"], "trainer": [], "redis": []}[scenario]
    proc = subprocess.Popen(train_cmd(store, redis.url, job, work / job, extra), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    coord = Coordinator(redis.url, job)
    kill_after = random.Random(i).randint(1, EPOCHS - 3)
    injected = None
    t0 = time.time()
    while time.time() - t0 < 300 and injected is None and proc.poll() is None:
        try:
            done = coord.epochs_count()
        except Exception:
            done = 0
        if done >= kill_after:
            time.sleep(random.Random(i).random() * 0.5)          # somewhere inside the next epoch
            if scenario == "redis":
                redis.kill()
                time.sleep(2.0)
                redis.start()
                injected = "redis restarted"
            else:
                victims = [s for s in coord.services(scenario)]
                if victims:
                    os.kill(victims[0]["pid"], signal.SIGKILL)
                    injected = f"killed {victims[0]['id']} (pid {victims[0]['pid']}) in epoch {done}"
        time.sleep(0.1)
    try:
        out, err = proc.communicate(timeout=600)
    finally:
        redis.stop()
    row = {"scenario": scenario, "run": i, "injected": injected, "rc": proc.returncode}
    try:
        res = json.loads(out.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        row.update(survived=False, error=err[-800:])
        return row
    row.update({k: res.get(k) for k in ("seeds_planned", "seeds_trained", "seeds_redelivered", "seeds_dropped",
                                        "duplicates", "duplicate_arrivals", "test_accuracy", "restarts",
                                        "trainer_restarts", "resumed_from_epoch", "wall_seconds")})
    ok = proc.returncode == 0 and res.get("seeds_trained") == res.get("seeds_planned") and res.get("duplicates") == 0
    if scenario == "trainer" and baseline:
        row["accuracy_gap"] = abs(res["test_accuracy"] - baseline["test_accuracy"]) * 100
        ok = ok and row["accuracy_gap"] <= 0.5
    row["survived"] = bool(ok and injected)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--scenarios", default=None)
    ap.add_argument("--hosts", type=int, default=0, help="the cluster-scale matrix on N simulated hosts (bench/faults.py)")
    ap.add_argument("--first-run", type=int, default=0, help="--hosts: index of the first run (its random seed)")
    ap.add_argument("--out", default="chaos_hosts", help="--hosts: results name under bench/results")
    ap.add_argument("--table", nargs="+", metavar="JSONL", help="--hosts: only print the matrix table of these row files")
    args = ap.parse_args()
    if args.table:
        rows = [json.loads(ln) for f in args.table for ln in Path(f).read_text().splitlines() if ln.strip()]
        print(matrix_table(rows, {}), end="")
        return
    if args.hosts:
        return host_matrix(args)
    args.scenarios = args.scenarios or "sampler,loader,trainer,redis"
    work = Path(tempfile.mkdtemp(prefix="argosy-chaos-"))
    store = work / "store"
    subprocess.run([sys.executable, "-m", "argosy.services.partitioner", str(DATA / "cora.npz"), "--parts", "4",
                    "--method", "grem", "--out", str(store)], check=True, cwd=ROOT, capture_output=True)
    with EmbeddedRedis() as r:
        out = subprocess.run(train_cmd(store, r.url, "baseline", work / "baseline"), cwd=ROOT, capture_output=True, text=True)
    baseline = json.loads(out.stdout.strip().splitlines()[-1])
    rows = []
    for sc in args.scenarios.split(","):
        for i in range(args.runs):
            row = run_once(sc, store, work, i, baseline)
            print(json.dumps(row), file=sys.stderr)
            rows.append(row)
    out_dir = ROOT / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "chaos.json").write_text(json.dumps({"baseline": baseline, "runs": rows}, indent=1))
    md = ["# Chaos benchmark", "", f"Cora, GCN, {EPOCHS} epochs, batch 16, claim timeout 3 s; baseline test accuracy "
          f"{100 * baseline['test_accuracy']:.1f}.", "", "| scenario | survived | seeds trained/planned | redelivered | duplicates | notes |",
          "|---|---|---|---|---|---|"]
    for sc in args.scenarios.split(","):
        rs = [r for r in rows if r["scenario"] == sc]
        surv = sum(r["survived"] for r in rs)
        tr = ", ".join(f"{r.get('seeds_trained')}/{r.get('seeds_planned')}" for r in rs)
        red = ", ".join(str(r.get("seeds_redelivered")) for r in rs)
        dup = ", ".join(str(r.get("duplicates")) for r in rs)
        note = ", ".join(f"gap {r['accuracy_gap']:.2f}" for r in rs if "accuracy_gap" in r)
        md.append(f"| {sc} | {surv}/{len(rs)} | {tr} | {red} | {dup} | {note} |")
    (out_dir / "chaos.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


def host_matrix(args) -> None:
    import faults
    scenarios = (args.scenarios or ",".join(faults.SCENARIOS)).split(",")
    unknown = set(scenarios) - set(faults.SCENARIOS)
    if unknown:
        raise SystemExit(f"unknown scenarios {sorted(unknown)}; known: {','.join(faults.SCENARIOS)}")
    work = Path(tempfile.mkdtemp(prefix="argosy-faults-"))
    store = work / "store"
    faults.partition(store)
    out_dir = ROOT / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    log = out_dir / f"{args.out}.jsonl"
    bases: dict[int, dict] = {}
    rows = []
    for i in range(args.first_run, args.first_run + args.runs):       # passes: every scenario once per pass
        for sc in scenarios:
            e = faults.epochs_for(sc)
            if sc != "partitioner-kill" and e not in bases:
                bases[e] = faults.baseline(store, work, e, args.hosts)
                print(json.dumps({"baseline_epochs": e, "test_accuracy": bases[e]["test_accuracy"],
                                  "wall_seconds": bases[e]["wall_seconds"]}), file=sys.stderr)
            row = faults.run_scenario(sc, store, work, i, bases.get(e, {}), args.hosts)
            row["hosts"], row["t"] = args.hosts, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            print(json.dumps(row), file=sys.stderr)
            with open(log, "a") as f:
                f.write(json.dumps(row) + "\n")
            rows.append(row)
            (out_dir / f"{args.out}.md").write_text(matrix_table(rows, bases))
    (out_dir / f"{args.out}.json").write_text(json.dumps({"baselines": bases, "runs": rows}, indent=1))
    md = matrix_table(rows, bases)
    (out_dir / f"{args.out}.md").write_text(md)
    print(md)


def _span(xs) -> str:
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    return f"{min(xs):g}" if min(xs) == max(xs) else f"{min(xs):g}-{max(xs):g}"


def matrix_table(rows: list[dict], bases: dict) -> str:
    """One line per scenario: runs survived, detection / recovery / extra seconds (min-max), redelivered, duplicates."""
    md = ["| scenario | survived | detect s | recover s | lost s | extra wall s | redelivered | duplicates | accuracy gap | not survived: why |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for sc in dict.fromkeys(r["scenario"] for r in rows):
        rs = [r for r in rows if r["scenario"] == sc]
        why = "; ".join(sorted({_why(r) for r in rs if not r["survived"]}))
        md.append(f"| {sc} | {sum(r['survived'] for r in rs)}/{len(rs)} | {_span(r.get('detect_s') for r in rs)} | "
                  f"{_span(r.get('recover_s') for r in rs)} | {_span(r.get('lost_s') for r in rs)} | "
                  f"{_span(r.get('extra_s') for r in rs)} | "
                  f"{_span(r.get('seeds_redelivered') for r in rs)} | {_span(r.get('duplicates') for r in rs)} | "
                  f"{_span(round(r['accuracy_gap'], 2) if r.get('accuracy_gap') is not None else None for r in rs)} | {why} |")
    return "\n".join(md) + "\n"


def _why(r: dict) -> str:
    if not r.get("injected"):
        return "fault not injected"
    if r.get("rc") != 0:
        return f"exit {r.get('rc')}: {str(r.get('error') or (r.get('stderr_tail') or [''])[-1])[:120]}"
    if r.get("orphans") or r.get("namespaces_left"):
        return f"{r.get('orphans')} orphans, {r.get('namespaces_left')} namespaces left"
    if r.get("seeds_trained") != r.get("seeds_planned") or r.get("duplicates") or r.get("seeds_dropped"):
        return f"seeds {r.get('seeds_trained')}/{r.get('seeds_planned')}, dup {r.get('duplicates')}"
    if str(r.get("scenario")).startswith("disk-full") and r.get("restarts"):
        return f"{r['restarts']} restarts: the healthy host's sampler and loader crashed on ENOSPC while staging"
    if str(r.get("scenario")).startswith("hang-"):
        return (f"hung process not handled: named {bool(r.get('hung_line'))}, services_hung {r.get('services_hung')}, "
                f"restarts {r.get('restarts')}, trainer restarts {r.get('trainer_restarts')}")
    if r.get("scenario") == "partitioner-kill":
        return f"same store {r.get('same_store')}, left {r.get('temp_left')}"
    return f"accuracy gap {r.get('accuracy_gap')}"


if __name__ == "__main__":
    main()
