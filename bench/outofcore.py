"""A graph bigger than memory, end to end on one box, under an enforced memory ceiling.

Every step (``argosy generate`` of the papers100M-shaped DC-SBM, ``argosy partition`` with GREM
writing the store, optionally ``argosy train`` with its Redis and every service) runs as a child
process inside one cgroup-v1 memory cgroup (``/sys/fs/cgroup/memory/argosy-oc-PID``) whose
``memory.limit_in_bytes`` is ``--memory-limit``: page cache written or read by the job counts
against it, so the job either finishes under the ceiling or is stopped by the kernel.

Per step: seconds, peak RSS (``ru_maxrss`` of the step's process tree, from ``wait4``), bytes
read from and written to disk (``ru_inblock`` / ``ru_oublock`` x 512: the block-layer counters
``/proc/PID/io`` reports as ``read_bytes`` / ``write_bytes``, summed over the tree), major page
faults, the cgroup's ``memory.max_usage_in_bytes`` and ``memory.failcnt`` (reset before each
step) and its ``pgmajfault`` delta, throughput.  A features-only MLP on the same splits is the
accuracy floor a GNN must clear.

Usage (big jobs one at a time, niced; the work dir needs ~1.1 KB per vertex free)::

    nice -n 10 python bench/outofcore.py --scale 0.001 --memory-limit 1G --work /work/oc
    nice -n 10 python bench/outofcore.py --scale 0.1 --memory-limit 1.25G --work /work/oc --train-batches 300
    python bench/outofcore.py --render           # bench/results/outofcore.md from the records
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
RECORDS = RESULTS / "outofcore.jsonl"
CGROUP_ROOT = Path("/sys/fs/cgroup/memory")
# DGL GraphBolt, disk-based feature example: 3-layer GraphSAGE on ogbn-papers100M, ~190 s per epoch
# (1,207,179 training seeds) on a 32-core 128 GB machine with one A10G, 10 GB CPU feature cache
GRAPHBOLT = {"epoch_seconds": 190.0, "train_seeds": 1_207_179, "cores": 32}


class MemoryCgroup:
    """A cgroup-v1 memory cgroup with a hard limit; children join it before they exec."""

    def __init__(self, limit_bytes: int, name: str | None = None):
        if not (CGROUP_ROOT / "memory.limit_in_bytes").exists():
            raise RuntimeError(f"no cgroup-v1 memory controller at {CGROUP_ROOT} (this bench needs it, and root)")
        self.path = CGROUP_ROOT / (name or f"argosy-oc-{os.getpid()}")
        self.path.mkdir(exist_ok=True)
        self._write("memory.limit_in_bytes", limit_bytes)
        self.limit = int(self._read("memory.limit_in_bytes"))

    def _write(self, name: str, value) -> None:
        (self.path / name).write_text(str(value))

    def _read(self, name: str) -> str:
        return (self.path / name).read_text()

    def join(self) -> None:
        """``preexec_fn``: put the calling (child) process into the cgroup."""
        self._write("cgroup.procs", os.getpid())

    def reset(self) -> None:
        self._write("memory.max_usage_in_bytes", 0)
        self._write("memory.failcnt", 0)

    def stat(self) -> dict:
        out = {"max_usage_bytes": int(self._read("memory.max_usage_in_bytes")),
               "usage_bytes": int(self._read("memory.usage_in_bytes")),
               "failcnt": int(self._read("memory.failcnt"))}
        for line in self._read("memory.stat").splitlines():
            key, val = line.split()
            if key in ("total_pgmajfault", "total_cache", "total_rss", "total_mapped_file"):
                out[key.replace("total_", "")] = int(val)
        for line in self._read("memory.oom_control").splitlines():
            key, val = line.split()
            if key == "oom_kill":
                out["oom_kills"] = int(val)
        return out

    def close(self) -> None:
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.2)


def parse_bytes(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = text.strip().upper().rstrip("IB").rstrip("B") if text[-1:].upper() == "B" else text.strip().upper()
    if t and t[-1] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


def run_step(name: str, argv: list[str], cg: MemoryCgroup | None, log: Path) -> dict:
    """Run one step in the cgroup; its resource record (see the module docstring)."""
    if cg is not None:
        cg.reset()
        before = cg.stat()
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=cg.join if cg is not None else None)
        try:
            _, status, ru = os.wait4(proc.pid, 0)
        except BaseException:            # interrupted: the step's whole process group goes too
            os.killpg(proc.pid, signal.SIGKILL)
            os.waitpid(proc.pid, 0)
            raise
    seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    rec = {"step": name, "rc": proc.returncode, "seconds": round(seconds, 2),
           "peak_rss_bytes": ru.ru_maxrss * 1024, "read_bytes": ru.ru_inblock * 512,
           "write_bytes": ru.ru_oublock * 512, "major_faults": ru.ru_majflt,
           "cpu_seconds": round(ru.ru_utime + ru.ru_stime, 2)}
    if cg is not None:
        after = cg.stat()
        rec["cgroup"] = {"max_usage_bytes": after["max_usage_bytes"], "failcnt": after["failcnt"],
                         "pgmajfault": after.get("pgmajfault", 0) - before.get("pgmajfault", 0),
                         "oom_kills": after.get("oom_kills", 0) - before.get("oom_kills", 0)}
    tail = log.read_text()[-3000:]
    rec["last_line"] = tail.strip().splitlines()[-1] if tail.strip() else ""
    if proc.returncode != 0:
        print(f"{name} failed (rc {proc.returncode}):\n{tail}", file=sys.stderr)
    return rec


def _json_line(text: str) -> dict:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return {}


def mlp_baseline(graph_dir: Path, seed: int = 0, epochs: int = 200, max_rows: int = 50_000) -> float:
    """Test accuracy of a features-only 2-layer MLP trained on the train split (the floor), full
    batch on at most ``max_rows`` training and test vertices (a seeded sample: 200 full-batch epochs
    over the 1/4 preset's 302k training rows took >20 min of this shared 2-core box)."""
    import torch

    feats = np.load(graph_dir / "features.npy", mmap_mode="r")
    labels = np.load(graph_dir / "labels.npy", mmap_mode="r")
    rng = np.random.default_rng(seed)
    tr = np.flatnonzero(np.load(graph_dir / "train_mask.npy"))
    te = np.flatnonzero(np.load(graph_dir / "test_mask.npy"))
    tr, te = (np.sort(rng.choice(a, max_rows, replace=False)) if a.shape[0] > max_rows else a for a in (tr, te))
    x_tr, x_te = (torch.from_numpy(np.asarray(feats[i], np.float32)) for i in (tr, te))
    y_tr, y_te = (torch.from_numpy(np.asarray(labels[i], np.int64)) for i in (tr, te))
    torch.manual_seed(seed)
    c = int(labels.max()) + 1 if labels.size < 50_000_000 else int(json.loads((graph_dir / "dataset.json").read_text())["num_classes"])
    model = torch.nn.Sequential(torch.nn.Linear(x_tr.shape[1], 256), torch.nn.ReLU(), torch.nn.Dropout(0.5),
                                torch.nn.Linear(256, c))
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for _ in range(epochs):
        model.train()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x_tr), y_tr).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        return float((model(x_te).argmax(1) == y_te).float().mean())


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=0.001, help="fraction of the papers100m preset")
    ap.add_argument("--memory-limit", default="2G", help="the cgroup's memory.limit_in_bytes (page cache included)")
    ap.add_argument("--no-cgroup", action="store_true", help="run without a ceiling (baseline)")
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--classes", type=int, default=None, help="override the preset's 172 label classes (small "
                                                               "scales: ~7 training vertices per class at 1/1000)")
    ap.add_argument("--work", default="/tmp/argosy-oc", help="directory for the graph, the store and the run")
    ap.add_argument("--train-batches", type=int, default=0, help="train GraphSAGE for at least this many batches "
                                                                 "(whole epochs; 0 = no training step)")
    ap.add_argument("--fanouts", default="15,10,5")
    ap.add_argument("--eval-fanouts", default=None, help="validation/test fanouts (default: the training ones, as "
                                                          "GraphBolt's papers100M example samples its evaluation; "
                                                          "full neighbourhoods of a power-law graph's hubs are "
                                                          "millions of rows per batch)")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--generate-only", action="store_true", help="stop after the generate step")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--reuse", action="store_true", help="train on the graph and store a --keep run left in --work "
                                                         "(no generate and partition steps)")
    ap.add_argument("--memory-budget", default=None, help="argosy train --memory-budget (default: the cgroup limit)")
    ap.add_argument("--epochs", type=int, default=None, help="train exactly this many epochs (default: enough "
                                                              "for --train-batches)")
    ap.add_argument("--out", default=str(RECORDS))
    ap.add_argument("--render", action="store_true")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))     # finally: clean up, record what ran
    if args.render:
        render()
        return 0
    work = Path(args.work) / f"s{args.scale:g}"
    graph, store, tmp = work / "graph", work / "store", work / "tmp"
    reuse = args.reuse and (store / "manifest.json").exists() and (graph / "dataset.json").exists()
    if args.reuse and not reuse:
        raise SystemExit(f"--reuse: no graph and store from a --keep run in {work}")
    if not reuse:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        tmp.mkdir()
    limit = parse_bytes(args.memory_limit)
    cg = None if args.no_cgroup else MemoryCgroup(limit)
    py = sys.executable
    steps = []
    rec = {"scale": args.scale, "parts": args.parts, "memory_limit_bytes": None if cg is None else cg.limit,
           "fanouts": args.fanouts, "batch_size": args.batch_size, "memory_budget": args.memory_budget,
           "host": platform.node(), "cores": os.cpu_count(), "load_before": os.getloadavg()[0],
           "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    try:
        if reuse:
            rec["reused"] = str(work)
            ds = json.loads((graph / "dataset.json").read_text())
            rec["dataset"] = {k: ds.get(k) for k in ("num_nodes", "num_edges", "feature_dim", "feature_dtype",
                                                     "num_classes", "splits")}
            rec["graph_bytes"], rec["store_bytes"] = du(graph), du(store)
            rec["feature_bytes"] = (graph / "features.npy").stat().st_size
            _train(args, rec, steps, cg, work, graph, store, ds)
            raise SystemExit(0 if steps[-1]["rc"] == 0 else 1)
        s = run_step("generate", [py, "-m", "argosy.services.launch", "generate", "--preset", "papers100m",
                                  "--scale", str(args.scale), "--out", str(graph), "--json",
                                  *(["--classes", str(args.classes)] if args.classes else [])], cg, work / "generate.log")
        steps.append(s)
        ds = _json_line((work / "generate.log").read_text())
        rec["dataset"] = {k: ds.get(k) for k in ("num_nodes", "num_edges", "feature_dim", "feature_dtype",
                                                 "num_classes", "splits")}
        rec["graph_bytes"] = du(graph)
        rec["feature_bytes"] = (graph / "features.npy").stat().st_size
        s["throughput"] = {"edge_rows_per_s": round(ds.get("num_edges", 0) / max(s["seconds"], 1e-9))}
        if s["rc"] != 0 or args.generate_only:
            raise SystemExit(0 if s["rc"] == 0 else 1)
        from argosy.shared.synthetic_big import partition_argv
        s = run_step("partition+store", [py, "-m", "argosy.services.partitioner", *partition_argv(graph),
                                         "--parts", str(args.parts), "--method", "grem", "--feature-dtype",
                                         ds["feature_dtype"], "--out", str(store), "--tmpdir", str(tmp), "--json"],
                     cg, work / "partition.log")
        steps.append(s)
        pr = _json_line((work / "partition.log").read_text())
        s["result"] = {k: pr.get(k) for k in ("n", "m", "edge_cut_fraction", "balance", "edge_balance",
                                              "partition_seconds", "store_seconds")}
        s["throughput"] = {"edges_per_s": round((pr.get("m") or 0) / max(s["seconds"], 1e-9))}
        rec["store_bytes"] = du(store)
        if s["rc"] != 0:
            raise SystemExit(1)
        if args.train_batches or args.epochs:
            _train(args, rec, steps, cg, work, graph, store, ds)
    finally:
        rec["steps"] = steps
        rec["load_after"] = os.getloadavg()[0]
        if cg is not None:
            rec["cgroup_final"] = cg.stat()
            cg.close()
        RESULTS.mkdir(parents=True, exist_ok=True)
        with open(args.out, "a") as f:
            f.write(json.dumps(rec) + "\n")
        print(json.dumps(rec, indent=1))
        if not (args.keep or reuse):
            shutil.rmtree(work, ignore_errors=True)
    return 0 if all(s["rc"] == 0 for s in steps) else 1


def _train(args, rec: dict, steps: list, cg, work: Path, graph: Path, store: Path, ds: dict) -> None:
    """The train step: GraphSAGE on the store for whole epochs, every service inside the cgroup."""
    py = sys.executable
    train = ds["splits"]["train"]
    per_epoch = math.ceil(train / args.batch_size)
    epochs = args.epochs or max(1, math.ceil(args.train_batches / per_epoch))
    shutil.rmtree(work / "run", ignore_errors=True)
    s = run_step("train", [py, "-m", "argosy.services.launch", "train", "--store", str(store),
                           "--model", "sage", "--fanouts", args.fanouts, "--batch-size", str(args.batch_size),
                           "--eval-fanouts", args.eval_fanouts or args.fanouts,
                           "--epochs", str(epochs), "--patience", "0", "--run-dir", str(work / "run"),
                           *(["--memory-budget", args.memory_budget] if args.memory_budget else []),
                           "--json"], cg, work / "train.log")
    steps.append(s)
    tr = _json_line((work / "train.log").read_text())
    batches = per_epoch * epochs
    sps = train * epochs / max(s["seconds"], 1e-9)
    s["result"] = {"test_accuracy": tr.get("test_accuracy"), "epochs": epochs, "batches": batches,
                   "batches_per_epoch": per_epoch, "epoch_seconds": tr.get("epoch_seconds"),
                   **{k: tr.get(k) for k in ("out_of_order_batches", "disk_read_bytes", "disk_read_bytes_per_epoch", "major_faults",
                                             "major_faults_per_epoch", "row_cache_hit_rate",
                                             "row_cache_hit_rate_per_epoch", "peak_rss_bytes", "wall_seconds")}}
    s["throughput"] = {"batches_per_s": round(batches / max(s["seconds"], 1e-9), 3),
                       "seeds_per_s_per_core": round(sps / (os.cpu_count() or 1), 1),
                       "graphbolt_seeds_per_s_per_core": round(GRAPHBOLT["train_seeds"] / GRAPHBOLT["epoch_seconds"]
                                                               / GRAPHBOLT["cores"], 1),
                       "projected_epoch_seconds_full_size": round(GRAPHBOLT["train_seeds"] / sps, 1)}
    rec["mlp_test_accuracy"] = mlp_baseline(graph)


def _gib(b) -> str:
    return "" if b is None else f"{b / 2**30:.2f}"


def _mib(b) -> str:
    return "" if b is None else f"{b / 2**20:,.0f}"


def render(records: Path = RECORDS) -> None:
    recs = sorted((json.loads(line) for line in records.read_text().splitlines() if line.strip()),
                  key=lambda r: (r["scale"], r["time"]))
    out = ["# Out of core on one box (bench/outofcore.py)", "",
           "papers100M-shaped DC-SBM (`argosy generate --preset papers100m --scale S`), GREM into the store, "
           "every step a child process in one cgroup-v1 memory cgroup with the limit shown (page cache "
           "included). Peak RSS: `ru_maxrss` of the step's process tree. Read/written: block-layer bytes "
           "of the tree (`/proc/PID/io` read_bytes/write_bytes, via rusage). cg max: "
           "`memory.max_usage_in_bytes` during the step; failcnt: `memory.failcnt` (times the limit was hit "
           "and the kernel reclaimed page cache; nothing was killed unless oom says so). Load: 1-minute load "
           "average before the run (2 cores, shared).", "",
           "| scale | n | edge rows | features GiB | limit GiB | step | s | peak RSS MiB | read MiB | written MiB | "
           "cg max GiB | failcnt | oom | maj. faults | throughput | load |",
           "|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for r in recs:
        d = r.get("dataset", {})
        for s in r["steps"]:
            cgs = s.get("cgroup", {})
            thr = ", ".join(f"{k} {v:,}" for k, v in s.get("throughput", {}).items())
            out.append(f"| {r['scale']:g} | {d.get('num_nodes', 0):,} | {d.get('num_edges', 0):,} | "
                       f"{_gib(r.get('feature_bytes'))} | {_gib(r.get('memory_limit_bytes'))} | {s['step']}"
                       f"{'' if s['rc'] == 0 else ' (FAILED rc %d)' % s['rc']} | {s['seconds']:,.1f} | "
                       f"{_mib(s['peak_rss_bytes'])} | {_mib(s['read_bytes'])} | {_mib(s['write_bytes'])} | "
                       f"{_gib(cgs.get('max_usage_bytes'))} | {cgs.get('failcnt', '')} | {cgs.get('oom_kills', '')} | "
                       f"{cgs.get('pgmajfault', s['major_faults']):,} | {thr} | {r.get('load_before', 0):.1f} |")
    out += ["", "Peak RSS (MiB) against graph size, per step (the memory bound in docs/out-of-core.md):", "",
            "| scale | n | edge rows | generate | partition+store | per vertex above the 1/1000 run, B |",
            "|---:|---:|---:|---:|---:|---:|"]
    peaks: dict = {}
    for r in recs:
        d = r.get("dataset", {})
        row = peaks.setdefault(r["scale"], {"n": d.get("num_nodes"), "m": d.get("num_edges")})
        for s in r["steps"]:
            row[s["step"]] = s["peak_rss_bytes"]
    base = peaks.get(min(peaks)) if peaks else None
    for scale, row in sorted(peaks.items()):
        extra = ""
        if base is not None and row is not base and row.get("n") and "partition+store" in row:
            extra = f"{(row['partition+store'] - base['partition+store']) / (row['n'] - base['n']):.0f}"
        out.append(f"| {scale:g} | {row['n'] or 0:,} | {row['m'] or 0:,} | {_mib(row.get('generate'))} | "
                   f"{_mib(row.get('partition+store'))} | {extra} |")
    out.append("")
    for r in recs:
        if r.get("note"):
            out.append(f"- scale {r['scale']:g} ({r['time']}): {r['note']}")
        for s in r["steps"]:
            if s["step"] == "partition+store" and s.get("result"):
                x = s["result"]
                out.append(f"- scale {r['scale']:g}: GREM k={r['parts']} cut {100 * (x['edge_cut_fraction'] or 0):.2f} %, "
                           f"balance {x['balance']:.3f}, edge balance {x['edge_balance']:.3f}; partition "
                           f"{x['partition_seconds']:.1f} s, store {x['store_seconds']:.1f} s; store "
                           f"{_gib(r.get('store_bytes'))} GiB on disk")
            if s["step"] == "train" and s.get("result"):
                x = s["result"]
                mlp = r.get("mlp_test_accuracy")
                disk = x.get("disk_read_bytes_per_epoch") or []
                hit = x.get("row_cache_hit_rate")
                out.append(f"- scale {r['scale']:g}{' (FAILED)' if s['rc'] else ''}: GraphSAGE fanouts "
                           f"{r.get('fanouts', '?')}, {x['batches']} batches ({x['epochs']} epochs), epoch "
                           f"{x.get('epoch_seconds') or 0:.0f} s, test accuracy {x['test_accuracy']}, features-only "
                           f"MLP {'n/a' if mlp is None else f'{mlp:.3f}'}; disk read per epoch "
                           f"{', '.join(_gib(b) for b in disk)} GiB, major faults per epoch "
                           f"{x.get('major_faults_per_epoch')}, row-cache hit rate "
                           f"{'n/a (parts fit)' if hit is None else f'{hit:.3f}'}; "
                           f"{s['throughput']['seeds_per_s_per_core']} seeds/s/core (GraphBolt's published "
                           f"papers100M figure: {s['throughput']['graphbolt_seeds_per_s_per_core']} per core, "
                           f"32 cores + A10G; a reference, not a same-machine ratio)")
    (RESULTS / "outofcore.md").write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    sys.exit(main())
