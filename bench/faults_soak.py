"""Soak: one long ``argosy train --hosts 2`` job with a random fault of the matrix every few minutes.

Every 10 s, RSS, open file descriptors and sockets of every process of the job (launcher, Redis,
samplers, loaders, trainers, replacements included) are sampled from ``/proc``; each epoch's
throughput comes from the job's report; each fault's window is recorded.  At the end the job is
stopped (SIGTERM, as an operator would) and the analysis checks: every completed epoch trained
each of its seeds exactly once; RSS slope after warm-up (percent of the process's mean per 10
minutes, least squares); fds and sockets after warm-up; throughput of fault-free epochs against
the median of all fault-free epochs.

Writes bench/results/soak.jsonl (samples), soak_faults.json, soak_epochs.json, soak.md and,
with ``--plot`` (needs matplotlib), soak_rss.png (log axis), soak_rss_change.png (% since warm-up),
soak_fds.png, soak_throughput.png; soak_redis.json: Redis memory by key group after warm-up and at
the end (which keys grow with the epochs).  ``--name NAME`` writes NAME.jsonl ... instead of soak*.
Usage: python bench/faults_soak.py --minutes 60 [--every 150] [--hosts 2] [--name soak60]
       PROBE_DIR=D PYTHONPATH=bench/memprobe python bench/faults_soak.py --minutes 13 --faults none --name N
           # the short fault-free run that shows the trainer's heap spreading (bench/results/soak_rss_issue44.md),
           # with each trainer's and loader's heap in use / extent, CPU and page faults per epoch in N.md
       python bench/faults_soak.py --plot [--name soak60]   # plots and table from the files above
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results"
SOAK_FAULTS = ("host-kill", "link-10", "link-flap", "loss-5", "loss-20", "slow-link", "redis-link",
               "stop-trainer", "stop-loader", "hang-trainer", "hang-loader")
WARMUP_S = 300.0
PROC_WARMUP_S = WARMUP_S  # a replacement gets the warm-up the job's first processes get: a fresh trainer's heap
                          # fills over its first minutes as the first one's did (soak60e: trainer-0-r1 1,203 ->
                          # 1,356 MB from minute 2 to 12 of its life; trainer-0 1,050 -> 1,217 MB in the job's first 5)
PEAK_BLOCK_S = 120.0    # the peak-slope's blocks: twice the trainer's heap-trim period (HEAP_TRIM_EVERY_S)
NAME = "soak"           # file names under bench/results (--name)


def proc_sample(pid: int) -> dict | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        kb = {ln.split(":")[0]: int(ln.split()[1]) * 1024 for ln in status.splitlines()
              if ln.startswith(("VmRSS:", "RssAnon:", "RssFile:", "RssShmem:"))}
        rss = kb["VmRSS"]
        fds = os.listdir(f"/proc/{pid}/fd")
        socks = 0
        for fd in fds:
            try:
                socks += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
            except OSError:
                pass
        # RssAnon: heap and anonymous mappings (what can leak); RssFile: mapped files (the store's feature
        # files, shared libraries), bounded by their size and dropped by the kernel under pressure
        return {"rss": rss, "anon": kb.get("RssAnon"), "file": kb.get("RssFile"), "fds": len(fds), "sockets": socks}
    except (OSError, KeyError):
        return None


def sampler(job, stop: threading.Event, path: Path) -> None:
    from argosy.services.stack import StackFile
    with open(path, "w") as f:
        while not stop.is_set() and job.proc.poll() is None:
            try:
                info = StackFile(job.job).read()
                pids = {**info.pids, "launcher": job.proc.pid}
                pids["redis"] = job.redis_pid()
            except Exception:
                pids = {"launcher": job.proc.pid}
            t = time.time()
            load1 = os.getloadavg()[0]      # the machine's: the job's own processes and everyone else's
            for sid, pid in pids.items():
                s = proc_sample(pid) if pid else None
                if s:
                    f.write(json.dumps({"t": t, "sid": sid, "pid": pid, **s,
                                        **({"load1": load1} if sid == "launcher" else {})}) + "\n")
            try:               # Redis's own count of its data (RSS also holds the allocator's slack)
                used = int(job.coord.r.info("memory")["used_memory"])
                f.write(json.dumps({"t": t, "sid": "redis used_memory", "pid": 0, "rss": used, "fds": 0,
                                    "sockets": 0, "epochs": len(job.epoch_times)}) + "\n")
            except Exception:
                pass
            f.flush()
            stop.wait(10.0)


def redis_keys(job) -> dict:
    """Redis memory by key group (digits of a key's name replaced by N: one group per kind of key), with
    the job's epoch count: two snapshots show which keys grow with the epochs."""
    import re
    groups: dict[str, list[int]] = {}
    r = job.coord.r
    for k in r.scan_iter(match=f"argosy:{job.job}:*", count=1000):
        g = re.sub(r"\d+", "N", k.decode().split(":", 2)[-1])
        n = groups.setdefault(f"{g} ({r.type(k).decode()})", [0, 0])
        n[0] += 1
        n[1] += int(r.memory_usage(k, samples=0) or 0)     # exact: the default samples 5 elements of a list
    return {"t": time.time(), "epochs": job.coord.epochs_count(),
            "used_memory": int(r.info("memory")["used_memory"]), "groups": groups}


def run(args) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    import faults
    work = Path(tempfile.mkdtemp(prefix="argosy-soak-"))
    store = work / "store"
    faults.partition(store)
    job = faults.Job(store, f"soak-{os.getpid()}", work / "run", epochs=1_000_000, hosts=args.hosts).start()
    stop = threading.Event()
    th = threading.Thread(target=sampler, args=(job, stop, OUT / f"{NAME}.jsonl"), daemon=True)
    th.start()
    rng = random.Random(args.seed)
    t_end = job.t0 + args.minutes * 60
    tail = min(90.0, args.minutes * 6)            # the last stretch runs without faults (recovery visible)
    log = []
    job.wait_epochs(3)
    snaps: list[dict] = []

    def snap() -> None:
        try:
            snaps.append(redis_keys(job))
            (OUT / f"{NAME}_redis.json").write_text(json.dumps(snaps, indent=1))
        except Exception as e:
            print(f"redis snapshot failed: {e!r}", file=sys.stderr)
    while time.time() < t_end - tail and job.proc.poll() is None:
        if not args.faults:
            time.sleep(min(10.0, max(0.0, t_end - tail - time.time())))
            if not snaps and time.time() - job.t0 >= WARMUP_S:
                snap()
            continue
        if not snaps and time.time() - job.t0 >= WARMUP_S:
            snap()
        wait = args.every * (0.7 + 0.6 * rng.random())
        time.sleep(max(0.0, min(wait, t_end - tail - time.time())))
        if time.time() >= t_end - tail or job.proc.poll() is not None:
            break
        sc = rng.choice(args.faults)
        try:
            fault = faults.FAULTS[sc](job, rng)
            fault["scenario"] = sc
        except Exception as e:                   # a fault that could not be injected is reported, not hidden
            fault = {"scenario": sc, "error": repr(e), "t_inject": time.time(), "t_end": time.time()}
        log.append(fault)
        print(json.dumps(fault), file=sys.stderr, flush=True)
        (OUT / f"{NAME}_faults.json").write_text(json.dumps(log, indent=1))
    while time.time() < t_end and job.proc.poll() is None:
        time.sleep(1)
    snap()
    t_stop = time.time()
    job.proc.send_signal(15)                          # the operator stops the job
    res = job.finish(timeout=300)
    stop.set()
    th.join(15)
    time.sleep(1)
    orphans = faults.job_processes(job.job)
    left = faults.namespaces(f"ag{job.proc.pid}")
    rp, hist = work / "run" / "report.json", work / "run" / "checkpoint.epochs.jsonl"
    if rp.exists():
        epochs = json.loads(rp.read_text())["epochs"]
    else:                     # the launcher died without a report: the trainer's history file has the epochs
        print(f"no {rp}: epochs read from {hist}", file=sys.stderr)
        epochs = [json.loads(ln) for ln in hist.read_text().splitlines() if ln.strip()] if hist.exists() else []
    for i, e in enumerate(epochs):
        e["t_end"] = job.epoch_times[i] if i < len(job.epoch_times) else None
    (OUT / f"{NAME}_epochs.json").write_text(json.dumps({"epochs": epochs, "rc": job.proc.returncode, "orphans": orphans,
                                                      "namespaces_left": left, "t0": job.t0, "t_stop": t_stop,
                                                      "result": {k: res.get(k) for k in (
                                                          "seeds_planned", "seeds_trained", "duplicates",
                                                          "seeds_dropped", "seeds_redelivered", "restarts",
                                                          "trainer_restarts", "error", "wall_seconds")}}, indent=1))
    for f in log:                                     # timed now: recovery needs the epochs after each fault
        if "error" not in f:
            f.update(faults.timings(job, f))
    (OUT / f"{NAME}_faults.json").write_text(json.dumps(log, indent=1))
    print(summarize(args.probe), file=sys.stderr)


def _slope_pct_per_10min(ts, ys) -> float:
    n = len(ts)
    mt, my = sum(ts) / n, sum(ys) / n
    var = sum((t - mt) ** 2 for t in ts)
    if var == 0 or my == 0:
        return 0.0
    b = sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / var
    return 100.0 * b * 600.0 / my


def _peak_slope(w: list[dict], key: str, per_mb: bool = False) -> float | None:
    """Slope (% of the mean per 10 min) of the highest ``key`` in each whole :data:`PEAK_BLOCK_S` block of
    ``w``: the trainer's RSS is a sawtooth (it hands its free heap back every ``HEAP_TRIM_EVERY_S`` and the
    next batches fault those pages in again), whose least-squares slope over a few sawteeth depends on
    where the window starts.  Each block holds a whole tooth, so its peak is the tooth's top; growth of the
    heap lifts the tops as much as the mean, so it is not hidden.  None with fewer than 3 blocks."""
    t_first, pts = w[0]["t"], {}
    for s in w:
        k = int((s["t"] - t_first) // PEAK_BLOCK_S)
        if s.get(key) is not None:
            pts.setdefault(k, []).append(s[key])
    last = int((w[-1]["t"] - t_first) // PEAK_BLOCK_S)
    blocks = [(k, max(v)) for k, v in sorted(pts.items()) if k < last or (w[-1]["t"] - t_first) % PEAK_BLOCK_S >= PEAK_BLOCK_S - 10]
    if len(blocks) < 3:
        return None
    if per_mb:                   # MB per 10 min instead of %
        ts, ys = [(k + 0.5) * PEAK_BLOCK_S for k, _ in blocks], [y / 2**20 for _, y in blocks]
        mt, my = sum(ts) / len(ts), sum(ys) / len(ys)
        return 600.0 * sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / sum((t - mt) ** 2 for t in ts)
    return _slope_pct_per_10min([(k + 0.5) * PEAK_BLOCK_S for k, _ in blocks], [y for _, y in blocks])


def probe_rows(probe_dir: Path, t0: float, t_stop: float, epoch_ends: list[float]) -> list[str]:
    """A table of the memory probe's files (``bench/memprobe/sitecustomize.py``, one per trainer or loader
    process) over the same window as the RSS slopes: glibc's heap in use (``uordblks``) and extent
    (``arena - keepcost``: what the heap spans below its trimmable top), their peak slopes in MB per 10 min,
    and the process's CPU milliseconds and minor page faults per epoch (the throughput side of a heap
    setting: fresh pages cost faults and CPU)."""
    rows = ["| probe file | glibc settings | heap in use MB first / last, MB/10 min | heap extent MB first / last, MB/10 min "
            "| CPU ms / epoch | minor faults / epoch |", "|---|---|---|---|---|---|"]
    for f in sorted(probe_dir.glob("*.jsonl")):
        ss = [json.loads(ln) for ln in f.read_text().splitlines() if ln.strip()]
        for s in ss:
            if "uordblks" in s:
                s["inuse"], s["extent"] = s["uordblks"], s["arena"] - s["keepcost"]
        w = [s for s in ss if "inuse" in s and s["t"] >= max(t0 + WARMUP_S, ss[0]["t"] + PROC_WARMUP_S) and s["t"] < t_stop]
        if len(w) < 3:
            continue
        n_ep = sum(w[0]["t"] <= t < w[-1]["t"] for t in epoch_ends)
        fmt = lambda x: "-" if x is None else f"{x:+.1f}"  # noqa: E731
        per = lambda k, scale: f"{(w[-1][k] - w[0][k]) * scale / n_ep:.1f}" if n_ep else "-"  # noqa: E731
        rows.append(f"| {f.name} | {w[-1].get('mallopt') or 'as shipped'} | {w[0]['inuse'] / 2**20:.0f} / {w[-1]['inuse'] / 2**20:.0f}, "
                    f"{fmt(_peak_slope(w, 'inuse', per_mb=True))} | {w[0]['extent'] / 2**20:.0f} / {w[-1]['extent'] / 2**20:.0f}, "
                    f"{fmt(_peak_slope(w, 'extent', per_mb=True))} | {per('cpu_s', 1000.0)} | {per('minflt', 1.0)} |")
    return rows


def summarize(probe_dir: Path | None = None) -> str:
    samples = [json.loads(ln) for ln in (OUT / f"{NAME}.jsonl").read_text().splitlines() if ln.strip()]
    ep = json.loads((OUT / f"{NAME}_epochs.json").read_text())
    flt = json.loads((OUT / f"{NAME}_faults.json").read_text())
    t0 = ep["t0"]
    by: dict[str, list[dict]] = {}
    for s in samples:
        by.setdefault(s["sid"], []).append(s)
    rows = ["| process | samples | span min | RSS first/last MB | RSS slope %/10 min: all samples / "
            f"{PEAK_BLOCK_S / 60:.0f}-min peaks | anon (heap) MB/10 min, {PEAK_BLOCK_S / 60:.0f}-min peaks | anon / file / shmem MB, last | fds min-max | sockets min-max |",
            "|---|---|---|---|---|---|---|---|---|"]
    t_stop = ep.get("t_stop", float("inf"))      # after the SIGTERM: shutdown (the report is written), not the soak
    for sid, ss in sorted(by.items()):
        w = [s for s in ss if s["t"] >= max(t0 + WARMUP_S, ss[0]["t"] + PROC_WARMUP_S) and s["t"] < t_stop]
        if len(w) < 3:
            rows.append(f"| {sid} | {len(w)} | - | - | - (lived {len(ss) * 10} s) | - | - | - | - |")
            continue
        slope = _slope_pct_per_10min([s["t"] for s in w], [s["rss"] for s in w])
        peak = _peak_slope(w, "rss")
        anon = _peak_slope(w, "anon", per_mb=True) if w[-1].get("anon") is not None else None
        split = "-" if w[-1].get("anon") is None else \
            f"{w[-1]['anon'] / 2**20:.0f} / {w[-1]['file'] / 2**20:.0f} / {(w[-1]['rss'] - w[-1]['anon'] - w[-1]['file']) / 2**20:.0f}"
        fmt = lambda x: "-" if x is None else f"{x:+.2f}"  # noqa: E731
        rows.append(f"| {sid} | {len(w)} | {(w[-1]['t'] - w[0]['t']) / 60:.1f} | {w[0]['rss'] / 2**20:.0f} / "
                    f"{w[-1]['rss'] / 2**20:.0f} | {slope:+.2f} / {fmt(peak)} | {fmt(anon)} | {split} | "
                    f"{min(s['fds'] for s in w)}-{max(s['fds'] for s in w)} | "
                    f"{min(s['sockets'] for s in w)}-{max(s['sockets'] for s in w)} |")
    # epochs that ended after the SIGTERM were cut short by the shutdown (soak60f: 3, all at its last second)
    epochs = [e for e in ep["epochs"] if e.get("t_end") and e["t_end"] < t_stop]
    faulted = []
    for e in epochs:
        start = e["t_end"] - (e.get("epoch_seconds") or 0) - (e.get("val_seconds") or 0) - (e.get("test_seconds") or 0)
        e["faulted"] = any(f["t_inject"] - 1 <= e["t_end"] and start <= f["t_end"] + 10 for f in flt)
        faulted.append(e["faulted"])
    clean = [e["batches_per_second"] for e in epochs if not e["faulted"] and e["t_end"] - t0 >= WARMUP_S]
    med = sorted(clean)[len(clean) // 2] if clean else 0
    windows = []
    for k in range(0, 1000):
        lo, hi = WARMUP_S + k * 300, WARMUP_S + (k + 1) * 300
        xs = sorted(e["batches_per_second"] for e in epochs if not e["faulted"] and lo <= e["t_end"] - t0 < hi)
        if not xs and lo > (epochs[-1]["t_end"] - t0 if epochs else 0):
            break
        if lo > t_stop - t0 - 150:      # under half a window before the stop: not a window (soak60f: 2 epochs)
            break
        ld = sorted(s["load1"] for s in by.get("launcher", []) if "load1" in s and lo <= s["t"] - t0 < hi)
        if xs:
            windows.append((lo / 60, xs[len(xs) // 2], (ld[0], ld[len(ld) // 2], ld[-1]) if ld else None, len(xs)))
    bad = [e for e in ep["epochs"] if e.get("seeds_trained") != e.get("seeds_planned") or e.get("duplicates")
           or e.get("seeds_dropped")]
    complete = [e for e in ep["epochs"]]
    lines = ["# Soak", "",
             f"{len(complete)} epochs completed in {(epochs[-1]['t_end'] - t0) / 60 if epochs else 0:.1f} min, "
             f"{len(flt)} faults; launcher exit {ep['rc']} (stopped with SIGTERM at the end), orphans {len(ep['orphans'])}, "
             f"namespaces left {len(ep['namespaces_left'])}.",
             f"Epochs with a seed not trained exactly once: {len(bad)} "
             f"(job totals: {ep['result']}).", "",
             "## Faults", "", "| t (min) | scenario | detect s | recover s | note |", "|---|---|---|---|---|"]
    for f in flt:
        lines.append(f"| {(f['t_inject'] - t0) / 60:.1f} | {f['scenario']} | {f.get('detect_s')} | {f.get('recover_s')} | "
                     f"{f.get('note') or f.get('error')} |")
    lines += ["", f"## Memory, descriptors, sockets (after {WARMUP_S / 60:.0f} min warm-up, sampled every 10 s)", "",
              f"Samples: after the job's {WARMUP_S / 60:.0f}-minute warm-up and a replacement's first {PROC_WARMUP_S / 60:.0f} "
              "minutes, before the stop.  RSS slopes in % of the process's mean per 10 min, least squares: over all samples, "
              f"and over the highest sample of each {PEAK_BLOCK_S / 60:.0f}-minute block (robust to the trainer's heap-trim "
              "sawtooth, blind to nothing that lifts the tops).  anon = RssAnon (heap and anonymous maps: where a leak shows), "
              "file = RssFile (mapped files: libraries, the store's features), shmem = the rest (a loader's shared-memory ring "
              "towards its trainer: pages touched so far, at most the ring file's size).", "", *rows,
              "", "## Throughput", "",
              f"Fault-free epochs after warm-up: {len(clean)}, median {med:.1f} batches/s; "
              f"epochs touched by a fault: {sum(faulted)}.", "",
              f"Load: the machine's 1-minute load average ({os.cpu_count()} cores here), sampled with the RSS: the job's "
              "own processes and any other work on the machine.", "",
              "| window start (min) | fault-free epochs | median batches/s of fault-free epochs | / overall median | load min / median / max |",
              "|---|---|---|---|---|"]
    for m, x, ld, count in windows:
        lines.append(f"| {m:.0f} | {count} | {x:.1f} | {x / med if med else 0:.2f} | "
                     f"{'-' if ld is None else f'{ld[0]:.1f} / {ld[1]:.1f} / {ld[2]:.1f}'} |")
    if probe_dir is not None and probe_dir.is_dir():
        lines += ["", f"## Heap (memory probe, {probe_dir.name}; same window)", "",
                  *probe_rows(probe_dir, t0, t_stop, [e["t_end"] for e in epochs])]
    rpath = OUT / f"{NAME}_redis.json"
    snaps = json.loads(rpath.read_text()) if rpath.exists() else []
    if len(snaps) >= 2:
        a, b = snaps[0], snaps[-1]
        de = max(1, b["epochs"] - a["epochs"])
        lines += ["", f"## Redis keys (MEMORY USAGE by key group, at {(a['t'] - t0) / 60:.0f} and {(b['t'] - t0) / 60:.0f} min)",
                  "", f"used_memory {a['used_memory'] / 2**20:.1f} -> {b['used_memory'] / 2**20:.1f} MB over {de} epochs "
                  f"({(b['used_memory'] - a['used_memory']) / de:.0f} bytes/epoch).", "",
                  "| key group | keys | bytes at first | bytes at last | growth bytes/epoch |", "|---|---|---|---|---|"]
        for g in sorted(set(a["groups"]) | set(b["groups"]), key=lambda g: -b["groups"].get(g, [0, 0])[1]):
            x, y = a["groups"].get(g, [0, 0]), b["groups"].get(g, [0, 0])
            lines.append(f"| {g} | {x[0]} -> {y[0]} | {x[1]} | {y[1]} | {(y[1] - x[1]) / de:+.1f} |")
    md = "\n".join(lines) + "\n"
    (OUT / f"{NAME}.md").write_text(md)
    return md


def plot() -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    samples = [json.loads(ln) for ln in (OUT / f"{NAME}.jsonl").read_text().splitlines() if ln.strip()]
    ep = json.loads((OUT / f"{NAME}_epochs.json").read_text())
    flt = json.loads((OUT / f"{NAME}_faults.json").read_text())
    t0 = ep["t0"]
    by: dict[str, list[dict]] = {}
    for s in samples:
        by.setdefault(s["sid"], []).append(s)

    def shade(ax):
        for i, f in enumerate(flt):
            ax.axvspan((f["t_inject"] - t0) / 60, (f["t_end"] - t0) / 60, color="tab:red", alpha=0.12,
                       label="fault" if i == 0 else None)
        ax.axvline(WARMUP_S / 60, color="0.5", ls=":", label="end of warm-up")
        if ep.get("t_stop"):
            ax.axvline((ep["t_stop"] - t0) / 60, color="k", ls="--", lw=0.8, label="end of the job")

    for key, name, ylabel, scale in (("rss", f"{NAME}_rss.png", "RSS (MiB)", 2**20),
                                     ("fds", f"{NAME}_fds.png", "open file descriptors", 1)):
        fig, ax = plt.subplots(figsize=(11, 5))
        for sid, ss in sorted(by.items()):
            ax.plot([(s["t"] - t0) / 60 for s in ss], [s[key] / scale for s in ss], label=sid, lw=1.2)
            if key == "fds":
                ax.plot([(s["t"] - t0) / 60 for s in ss], [s["sockets"] for s in ss], lw=0.8, ls="--",
                        color=ax.lines[-1].get_color())
        shade(ax)
        if key == "rss":                  # 10 MB (Redis) to 1.5 GB (the trainer): a log axis shows them all
            ax.set_yscale("log")
        ax.set_xlabel("minutes since the job started")
        ax.set_ylabel(ylabel + (" (solid) / sockets (dashed)" if key == "fds" else ""))
        ax.set_title(f"soak: {ylabel} per process, every 10 s")
        ax.legend(fontsize=7, ncol=3, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        fig.tight_layout()
        fig.savefig(OUT / name, dpi=110)
        plt.close(fig)
    # RSS relative to each process's first sample after warm-up: the growth the slope table measures
    fig, ax = plt.subplots(figsize=(11, 5))
    for sid, ss in sorted(by.items()):
        w = [s for s in ss if s["t"] >= max(t0 + WARMUP_S, ss[0]["t"] + PROC_WARMUP_S)
             and s["t"] < ep.get("t_stop", float("inf"))]
        if len(w) >= 3:
            ax.plot([(s["t"] - t0) / 60 for s in w], [100.0 * (s["rss"] / w[0]["rss"] - 1) for s in w], label=sid, lw=1.2)
    shade(ax)
    ax.axhline(0, color="0.3", lw=0.6)
    ax.set_xlabel("minutes since the job started")
    ax.set_ylabel("RSS change since the end of warm-up (%)")
    ax.set_title("soak: RSS of every process relative to its first sample after warm-up (goal: flat)")
    ax.legend(fontsize=7, ncol=3, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(OUT / f"{NAME}_rss_change.png", dpi=110)
    plt.close(fig)
    epochs = [e for e in ep["epochs"] if e.get("t_end")]
    fig, ax = plt.subplots(figsize=(11, 5))
    x = [(e["t_end"] - t0) / 60 for e in epochs]
    ax.scatter(x, [e["batches_per_second"] for e in epochs], s=4, label="epoch (train phase batches/s)")
    shade(ax)
    ax.set_xlabel("minutes since the job started (epoch end)")
    ax.set_ylabel("batches/s")
    ax.set_title("soak: throughput of every epoch; red = a fault's window")
    ax.legend(fontsize=8, loc="lower left")
    ld = [s for s in by.get("launcher", []) if "load1" in s]
    if ld:                              # the machine's load: other work on the machine moves the throughput
        ax2 = ax.twinx()
        ax2.plot([(s["t"] - t0) / 60 for s in ld], [s["load1"] for s in ld], color="tab:green", lw=1.0,
                 label=f"load average, 1 min ({os.cpu_count()} cores)")
        ax2.set_ylabel("machine load average (1 min)", color="tab:green")
        ax2.set_ylim(bottom=0)
        ax2.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(OUT / f"{NAME}_throughput.png", dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--every", type=float, default=150, help="mean seconds between faults (uniform 0.7x-1.3x)")
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--faults", default=",".join(SOAK_FAULTS),
                    help="comma-separated scenarios to draw from (default: all of the soak's); 'none': no fault")
    ap.add_argument("--plot", action="store_true", help="only the plots and the table, from the files written")
    ap.add_argument("--probe", type=Path, default=Path(os.environ["PROBE_DIR"]) if os.environ.get("PROBE_DIR") else None,
                    help="the memory probe's directory (default: $PROBE_DIR): adds its heap table to NAME.md")
    ap.add_argument("--name", default="soak", help="file names under bench/results: NAME.jsonl, NAME.md, NAME_rss.png ...")
    args = ap.parse_args()
    global NAME
    NAME = args.name
    args.faults = [f for f in args.faults.split(",") if f and f != "none"]
    if any(f not in SOAK_FAULTS for f in args.faults):
        ap.error(f"--faults: one of {', '.join(SOAK_FAULTS)} or none")
    if args.plot:
        print(summarize(args.probe))
        plot()
        return
    sys.path.insert(0, str(ROOT))
    run(args)


if __name__ == "__main__":
    main()
