"""Typed-graph scale figures: an ogbn-mag-shaped graph of >= 2M vertices and >= 20M edges,
partitioned (GREM, random, METIS) and trained on 2 simulated hosts.

Why this file exists: typed (heterogeneous) graphs go through the same partitioner (their types
flattened away) and the same sampled pipeline (R-GCN, each sampled edge carrying its relation).
This bench measures, in one run on one graph:

1. the graph: ``argosy generate --preset mag --scale S`` (or ``--graph DIR``), its vertices per
   node type and edges per relation;
2. partitioning into ``--parts`` (default 2), one child process per run, wall time and peak RSS
   (``os.wait4`` of a small forking launcher, so a child's peak is its own):

   * **end to end**: ``argosy partition DIR --method grem|random|metis --out STORE`` (read the
     typed directory, flatten it, partition, write the typed store with ``edge_type.npy`` and the
     reverse relations);
   * **partitioner alone**: GREM, METIS (pymetis ``METIS_PartGraphKway``) and random on the SAME
     graph flattened (the symmetric, deduplicated CSR of all relations, no types, written once to
     an uncompressed ``.npz``), in ``bench/partition.py``'s worker (imports and a warm-up first,
     then the partitioning call timed; its "extra" RSS is over the process after that);

   GREM's peak RSS and time are reported as ratios to METIS's; a METIS run that does not fit
   the memory available (``estimate_cost``) or runs past ``--timeout`` is recorded as such;
3. training: ``argosy train --store STORE --hosts 2 --epochs E --fanouts 10,5 --patience 0``
   on the GREM store and on the random store (same flags), reporting the remote fraction of
   sampled edges, halo and wire bytes per epoch, and GREM / random ratios.

Prints one JSON line (everything) and a table; writes ``bench/results/hetero_scale.md`` (date,
machine, load, commands, seconds) and keeps the raw record in ``WORK/hetero_scale.json``.

Usage::

    python bench/hetero_scale.py                         # smallest scale with >= 2M V, >= 20M E
    python bench/hetero_scale.py --graph /tmp/mag-2m     # reuse a generated graph
    python bench/hetero_scale.py --scale 0.02 --out-md /tmp/hs.md   # smoke test (seconds)
    python bench/hetero_scale.py --train-extra "--batch-size 1024"  # cap training work
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def _load_partition_bench():
    """bench/partition.py as a module (its child-process worker, launcher and rusage Popen)."""
    spec = importlib.util.spec_from_file_location("argosy_bench_partition", ROOT / "bench" / "partition.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


PB = _load_partition_bench()


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------
def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def _machine() -> dict:
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    with open("/proc/meminfo") as f:
        total = int(next(ln for ln in f if ln.startswith("MemTotal:")).split()[1]) * 1024
    return {"cpus": os.cpu_count(), "cpu": cpu, "mem_total_gib": round(total / 2**30, 1),
            "mem_available_gib": round(_mem_available() / 2**30, 1), "load_1min": _load(),
            "python": platform.python_version(), "kernel": platform.release()}


def shown(cmd: list[str]) -> str:
    """The command as a user types it (``argosy ...`` for the CLI modules)."""
    c = list(cmd)
    if c[:3] == [sys.executable, "-m", "argosy.services.launch"]:
        c = ["argosy"] + c[3:]
    elif c[:3] == [sys.executable, "-m", "argosy.services.partitioner"]:
        c = ["argosy", "partition"] + c[3:]
    elif c and c[0] == sys.executable:
        c = ["python"] + c[1:]
    return " ".join(shlex.quote(x) for x in c)


def run_measured(cmd: list[str], name: str, logs: Path, timeout: float) -> dict:
    """Run ``cmd`` under a small forking launcher (its ``wait4`` gives the command's own peak RSS,
    not this process's carried across exec); stdout/stderr go to ``logs/NAME.{out,err}``.

    Returns:
        dict: ``rc``, ``seconds`` (wall), ``peak_rss_mib`` (max over the process tree, as wait4
        reports it), ``stdout`` (text), ``error`` (on failure: the last stderr lines),
        ``load_before``/``load_after``.
    """
    logs.mkdir(parents=True, exist_ok=True)
    out_p, err_p = logs / f"{name}.out", logs / f"{name}.err"
    rec = {"command": shown(cmd), "load_before": _load()}
    t0 = time.perf_counter()
    with open(out_p, "w") as fo, open(err_p, "w") as fe:
        proc = subprocess.Popen([sys.executable, "-c", PB._LAUNCHER] + cmd, stdout=fo, stderr=fe,
                                cwd=str(ROOT), start_new_session=True)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            # TERM first: `argosy train --hosts` then closes its namespaces itself
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            rec["timed_out"] = True
    rec["seconds"] = round(time.perf_counter() - t0, 2)
    rec["load_after"] = _load()
    rec["rc"] = proc.returncode
    out, err = out_p.read_text(errors="replace"), err_p.read_text(errors="replace")
    ru = [int(x.split()[1]) for x in err.splitlines() if x.startswith("ARGOSY_MAXRSS_KIB ")]
    rec["peak_rss_mib"] = round(ru[-1] / 1024.0, 1) if ru else None
    rec["stdout"] = out
    if rec.get("timed_out"):
        rec["error"] = f"timeout after {timeout:.0f} s"
    elif proc.returncode != 0:
        tail = [ln for ln in err.splitlines() if not ln.startswith("ARGOSY_MAXRSS_KIB ")][-6:]
        rec["error"] = f"exit status {proc.returncode}: " + " | ".join(tail)[-1500:]
    return rec


def _json_line(text: str) -> dict | None:
    lines = [ln for ln in text.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else None


# --------------------------------------------------------------------------------------------
# 1. the graph
# --------------------------------------------------------------------------------------------
def counts_at(scale: float, num_classes: int = 16) -> tuple[int, int]:
    """(vertices, edges) ``argosy generate --preset mag --scale S`` writes (mirrors ``mag_like``)."""
    from argosy.shared.synthetic_hetero import MAG_RELATIONS, OGBN_MAG
    papers = int(round(OGBN_MAG["paper"] * scale))
    f = papers / OGBN_MAG["paper"]
    n = {t: max(num_classes, round(OGBN_MAG[t] * f)) for t in ("author", "institution", "field_of_study")}
    n["paper"] = papers
    m = {r: round(OGBN_MAG[r] * f) for _, r, _ in MAG_RELATIONS}
    m["writes"] = max(m["writes"], n["paper"] + n["author"])
    m["has_topic"] = max(m["has_topic"], n["paper"] + n["field_of_study"])
    m["affiliated_with"] = max(m["affiliated_with"], n["institution"])
    return sum(n.values()), sum(m.values())


def smallest_scale(min_vertices: int, min_edges: int, step: float = 0.005) -> float:
    s = step
    while True:
        v, e = counts_at(s)
        if v >= min_vertices and e >= min_edges:
            return round(s, 6)
        s += step


def describe_graph(path: Path) -> dict:
    """Vertices per node type and edges per relation, from ``graph.yaml`` and the edge files."""
    import yaml
    spec = yaml.safe_load((path / "graph.yaml").read_text())
    types = {t: int(v["count"]) for t, v in spec["node_types"].items()}
    rels = {}
    for r in spec["relations"]:
        e = r["edges"]
        rows = int(np.load(path / e, mmap_mode="r").shape[0]) if str(e).endswith(".npy") else None
        rels["/".join(r["type"])] = rows
    tgt = spec.get("target") or {}
    splits = {}
    for k in ("train_mask", "val_mask", "test_mask"):
        if k in tgt:
            a = np.load(path / tgt[k], mmap_mode="r")
            splits[k.split("_")[0]] = int(a.sum()) if a.dtype == bool else int(a.shape[0])
    feats = {t: v.get("feature_dim") for t, v in spec["node_types"].items() if v.get("features")}
    return {"path": str(path), "name": spec.get("name"), "node_types": types, "relations": rels,
            "vertices": sum(types.values()), "edges": sum(v or 0 for v in rels.values()),
            "features": feats, "splits": splits}


# --------------------------------------------------------------------------------------------
# 2. partitioning
# --------------------------------------------------------------------------------------------
_FLATTEN = (
    "import json, sys, time\n"
    "import numpy as np\n"
    "from argosy.shared.graphio.typed_open import open_typed\n"
    "from argosy.shared.store.typed import typed_flat_graph\n"
    "t0 = time.perf_counter()\n"
    "tg = open_typed(sys.argv[1])\n"
    "g = typed_flat_graph(tg)\n"
    "t1 = time.perf_counter()\n"
    "np.savez(sys.argv[2] + '.tmp.npz', indptr=g.indptr, indices=g.indices)\n"
    "import os; os.replace(sys.argv[2] + '.tmp.npz', sys.argv[2])\n"
    "print(json.dumps({'n': g.num_nodes, 'entries': int(g.indices.size), 'indices_dtype': str(g.indices.dtype),\n"
    "                  'flatten_seconds': t1 - t0, 'total_seconds': time.perf_counter() - t0}))\n")


def flatten(graph: Path, flat: Path, logs: Path, timeout: float) -> dict:
    """The typed graph without its types (``typed_flat_graph``: what GREM cuts) as a CSR ``.npz``."""
    if flat.exists():
        with np.load(flat) as z:
            return {"reused": True, "n": int(z["indptr"].size - 1), "entries": int(z["indices"].size)}
    r = run_measured([sys.executable, "-c", _FLATTEN, str(graph), str(flat)], "flatten", logs, timeout)
    r.update(_json_line(r.pop("stdout")) or {})
    return r


def partition_alone(flat: Path, method: str, k: int, args) -> dict:
    """``bench/partition.py``'s worker on the flat CSR (one child process)."""
    from argosy.services.partitioner.core import estimate_cost
    with np.load(flat) as z:
        n, entries = int(z["indptr"].size - 1), int(z["indices"].size)
    est, est_s = estimate_cost(n, entries, k, method.split("-")[0])
    avail = _mem_available()
    rec = {"method": method, "estimated_peak_mib": round(est / 2**20), "mem_available_mib": round(avail / 2**20),
           "load_before": _load()}
    if method == "metis" and est > 0.9 * avail:
        rec["error"] = (f"not run: METIS's estimated peak {est / 2**30:.1f} GiB exceeds 90 % of the "
                        f"{avail / 2**30:.1f} GiB available")
        return rec
    r = PB.run_one(str(flat), flat.stem, method, k, "file", args.seed, args.eps, 1 << 21, args.timeout)
    r.pop("details", None)
    rec.update(r)
    rec["load_after"] = _load()
    rec["command"] = (f"python bench/partition.py --worker --graph {flat} --graph-name {flat.stem} "
                      f"--method {method} --k {k} --chunk-edges {1 << 21}")
    return rec


def partition_cli(graph: Path, method: str, k: int, store: Path, logs: Path, args) -> dict:
    cmd = [sys.executable, "-m", "argosy.services.partitioner", str(graph), "--parts", str(k),
           "--method", method, "--seed", str(args.seed), "--out", str(store), "--overwrite", "--json",
           "--tmpdir", str(store.parent)]
    r = run_measured(cmd, f"partition-{method}", logs, args.timeout)
    res = _json_line(r.pop("stdout"))
    if res:
        r.update(res)
    if store.exists() and (store / "manifest.json").exists():
        man = json.loads((store / "manifest.json").read_text())
        r["edge_cut"] = man["partition"].get("edge_cut")
        r["part_sizes"] = man["partition"].get("part_sizes")
        r["edge_balance"] = man["partition"].get("edge_balance")
        r["stored_entries"] = [p["num_edges"] for p in man["parts"]]
        r["store_bytes"] = sum(f.stat().st_size for f in store.rglob("*") if f.is_file())
    return r


# --------------------------------------------------------------------------------------------
# 3. training
# --------------------------------------------------------------------------------------------
TRAIN_KEYS = ("remote_fraction", "halo_bytes", "halo_bytes_per_epoch", "wire_bytes", "wire_bytes_per_epoch",
              "ipc_bytes", "halo_rows", "halo_cache_hit_rate", "test_accuracy", "val_accuracy", "epoch_seconds",
              "epochs", "batches_per_second", "sampled_edges_per_second", "trainer_idle_fraction",
              "seeds_trained", "seeds_redelivered", "peak_rss_bytes", "wall_seconds", "precision")


def train_phase_bytes(report: dict) -> dict:
    """Halo and wire bytes of the training phases alone, split from the job's timeline.

    A job's ``halo_bytes_per_epoch`` also counts the epoch's validation and test passes (full
    neighbourhoods by default, often the larger share).  The timeline samples cumulative counters
    every ~0.5 s; epoch ``e``'s training phase ends at the first sample where the trainers hold
    all of its batches (``trainer_batches``, which evaluation does not count) and starts at the
    last sample before epoch ``e``'s first batch arrived (0 for the first epoch).  Approximate by
    one sample (~0.5 s) at each end: samplers and loaders run a little ahead of the trainer.
    """
    tl, epochs = report.get("timeline") or [], report.get("epochs") or []
    if not tl or not epochs or "batches" not in epochs[0]:
        return {}
    cum = np.cumsum([int(e["batches"]) for e in epochs])
    zero = {"t": tl[0]["t"], "halo_bytes_sent": 0.0, "wire_bytes_sent": 0.0}
    per = []
    for e, c in enumerate(cum):
        end = next((x for x in tl if (x.get("trainer_batches") or 0) >= c), None)
        if end is None:
            break
        start = zero if e == 0 else [x for x in tl if (x.get("trainer_batches") or 0) <= cum[e - 1]][-1]
        per.append({"halo": end.get("halo_bytes_sent", 0.0) - start.get("halo_bytes_sent", 0.0),
                    "wire": end.get("wire_bytes_sent", 0.0) - start.get("wire_bytes_sent", 0.0),
                    "span_s": end["t"] - start["t"]})
    if not per:
        return {}
    return {"train_halo_bytes_per_epoch": [p["halo"] for p in per],
            "train_wire_bytes_per_epoch": [p["wire"] for p in per],
            "train_phase_seconds": [round(p["span_s"], 1) for p in per],
            "train_halo_bytes_mean": sum(p["halo"] for p in per) / len(per),
            "train_wire_bytes_mean": sum(p["wire"] for p in per) / len(per)}


def train(store: Path, method: str, run_dir: Path, logs: Path, args) -> dict:
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [sys.executable, "-m", "argosy.services.launch", "train", "--store", str(store),
           "--hosts", str(args.hosts), "--epochs", str(args.epochs), f"--fanouts={args.fanouts}",
           "--patience", "0", "--seed", str(args.seed), "--run-dir", str(run_dir), "--json"]
    cmd += shlex.split(args.train_extra)
    r = run_measured(cmd, f"train-{method}", logs, args.train_timeout)
    res = _json_line(r.pop("stdout"))
    if res:
        r.update({k: res[k] for k in TRAIN_KEYS if k in res})
        ep = max(1, int(res.get("epochs") or 1))
        r["halo_bytes_per_epoch_mean"] = res.get("halo_bytes", 0.0) / ep
        r["wire_bytes_per_epoch_mean"] = res.get("wire_bytes", 0.0) / ep
        rep = run_dir / "report.json"
        if rep.exists():
            report = json.loads(rep.read_text())
            r.update(train_phase_bytes(report))
            epochs = report.get("epochs", [])
            if epochs and "halo_fraction" in epochs[0]:
                r["halo_fraction"] = sum(e["halo_fraction"] for e in epochs) / len(epochs)
            r["epoch_records"] = [{k: e.get(k) for k in ("epoch", "epoch_seconds", "val_seconds", "test_seconds",
                                                          "batches", "remote_fraction", "halo_fraction",
                                                          "train_loss", "val_accuracy") if k in e} for e in epochs]
            r["eval_seconds"] = sum((e.get("val_seconds") or 0) + (e.get("test_seconds") or 0) for e in epochs)
            r["seeds_redelivered"] = res.get("seeds_redelivered")
    return r


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------
def _ratio(a, b):
    return None if a is None or b in (None, 0) else a / b


def _f(x, fmt="{:.2f}", dash="-"):
    return dash if x is None else fmt.format(x)


def ratios(rec: dict) -> dict:
    out = {}
    alone = {r["method"]: r for r in rec["partition_alone"] if "error" not in r}
    cli = {r["method"]: r for r in rec["partition_cli"] if "error" not in r}
    g, m = alone.get("grem"), alone.get("metis")
    if g and m:
        out["alone_grem_over_metis_peak_rss"] = _ratio(g["peak_rss_mib"], m["peak_rss_mib"])
        out["alone_grem_over_metis_extra_rss"] = _ratio(g["extra_rss_mib"], m["extra_rss_mib"])
        out["alone_grem_over_metis_seconds"] = _ratio(g["seconds"], m["seconds"])
        out["alone_grem_over_metis_wall"] = _ratio(g["wall_total"], m["wall_total"])
        out["alone_grem_over_metis_cut"] = _ratio(g["edge_cut"], m["edge_cut"])
    g, m = cli.get("grem"), cli.get("metis")
    if g and m:
        out["cli_grem_over_metis_peak_rss"] = _ratio(g["peak_rss_mib"], m["peak_rss_mib"])
        out["cli_grem_over_metis_seconds"] = _ratio(g["seconds"], m["seconds"])
        out["cli_grem_over_metis_partition_seconds"] = _ratio(g.get("partition_seconds"), m.get("partition_seconds"))
        out["cli_grem_over_metis_cut"] = _ratio(g.get("edge_cut"), m.get("edge_cut"))
    tr = {r["method"]: r for r in rec["train"] if "error" not in r}
    g, rd = tr.get("grem"), tr.get("random")
    if g and rd:
        out["train_grem_over_random_remote_fraction"] = _ratio(g.get("remote_fraction"), rd.get("remote_fraction"))
        out["train_grem_over_random_halo_bytes"] = _ratio(g.get("halo_bytes_per_epoch_mean"),
                                                          rd.get("halo_bytes_per_epoch_mean"))
        out["train_grem_over_random_wire_bytes"] = _ratio(g.get("wire_bytes_per_epoch_mean"),
                                                          rd.get("wire_bytes_per_epoch_mean"))
        out["train_grem_over_random_train_phase_halo_bytes"] = _ratio(g.get("train_halo_bytes_mean"),
                                                                      rd.get("train_halo_bytes_mean"))
        out["train_grem_over_random_train_phase_wire_bytes"] = _ratio(g.get("train_wire_bytes_mean"),
                                                                      rd.get("train_wire_bytes_mean"))
    return out


def _role_peaks(peaks: dict) -> str:
    """Largest sampler and loader peak RSS (GiB) the job itself reports (``peak_rss_bytes``)."""
    out = []
    for role in ("sampler", "loader"):
        v = [b for k, b in peaks.items() if k.startswith(role)]
        out.append(f"{max(v) / 2**30:.2f}" if v else "-")
    return " / ".join(out)


def train_table(rows: list[dict], a: dict, title: str = "Training") -> list[str]:
    L = [f"**{title}** (`argosy train --store STORE --hosts {a['hosts']} --epochs {a['epochs']} "
         f"--fanouts={a['fanouts']} --patience 0{' ' + a['train_extra'] if a['train_extra'] else ''}`; "
         "R-GCN, the launcher's default on a typed store). MB per epoch: *all* = the job's "
         "`halo_bytes`/`wire_bytes` over epochs (training + validation + test passes, re-claimed work "
         "included); *train* = the training phases alone, split from the job's timeline. Sampler / "
         "loader peak: the job's own figures; largest process: `wait4` of the launcher (the trainer's "
         "or another single process's peak).", "",
         "| store | remote fraction | halo MB / epoch (all) | halo MB / epoch (train) | wire MB / epoch (all) "
         "| wire MB / epoch (train) | halo cache hit | epoch s | val+test s | seeds re-claimed | wall s "
         "| sampler / loader peak GiB | largest process GiB | test acc | load |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            L.append(f"| {r['method']} | error: {r['error'][:300]} |" + " |" * 14)
            continue
        mb = lambda x: _f(None if x is None else x / 1e6, "{:,.0f}")  # noqa: E731
        eps = r.get("epoch_records") or []
        ep_s = ", ".join(f"{e['epoch_seconds']:.1f}" for e in eps if e.get("epoch_seconds") is not None) \
            or _f(r.get("epoch_seconds"), "{:.1f}")
        L.append(f"| {r['method']} | {_f(r.get('remote_fraction'), '{:.4f}')} | {mb(r.get('halo_bytes_per_epoch_mean'))} | "
                 f"{mb(r.get('train_halo_bytes_mean'))} | {mb(r.get('wire_bytes_per_epoch_mean'))} | "
                 f"{mb(r.get('train_wire_bytes_mean'))} | {_f(r.get('halo_cache_hit_rate'), '{:.3f}')} | {ep_s} | "
                 f"{_f(r.get('eval_seconds'), '{:.0f}')} | {_f(r.get('seeds_redelivered'), '{:,}')} | {r['seconds']:.0f} | "
                 f"{_role_peaks(r.get('peak_rss_bytes') or {})} | "
                 f"{_f(None if r.get('peak_rss_mib') is None else r['peak_rss_mib'] / 1024, '{:.1f}')} | "
                 f"{_f(r.get('test_accuracy'), '{:.4f}')} | {_f(r.get('load_after'), '{:.1f}')} |")
    g = next((r for r in rows if r["method"] == "grem" and "error" not in r), None)
    rd = next((r for r in rows if r["method"] == "random" and "error" not in r), None)
    if g and rd:
        L += ["", "GREM / random: remote fraction "
              f"**{_f(_ratio(g.get('remote_fraction'), rd.get('remote_fraction')), '{:.3f}')}x**; halo bytes "
              f"all {_f(_ratio(g.get('halo_bytes_per_epoch_mean'), rd.get('halo_bytes_per_epoch_mean')), '{:.3f}')}x, "
              f"train **{_f(_ratio(g.get('train_halo_bytes_mean'), rd.get('train_halo_bytes_mean')), '{:.3f}')}x**; "
              f"wire bytes all {_f(_ratio(g.get('wire_bytes_per_epoch_mean'), rd.get('wire_bytes_per_epoch_mean')), '{:.3f}')}x, "
              f"train **{_f(_ratio(g.get('train_wire_bytes_mean'), rd.get('train_wire_bytes_mean')), '{:.3f}')}x**."]
    return L


def tables(rec: dict) -> list[str]:
    gr = rec["graph"]
    L = [f"Graph `{gr['name']}`: **{gr['vertices']:,} vertices, {gr['edges']:,} edges** "
         f"({len(gr['node_types'])} node types, {len(gr['relations'])} relations; scale {rec['scale']}).", "",
         "| node type | vertices | | relation | edges |", "|---|---:|---|---|---:|"]
    types, rels = list(gr["node_types"].items()), list(gr["relations"].items())
    for i in range(max(len(types), len(rels))):
        t = types[i] if i < len(types) else ("", None)
        r = rels[i] if i < len(rels) else ("", None)
        L.append(f"| {t[0]} | {_f(t[1], '{:,}', '')} | | {r[0]} | {_f(r[1], '{:,}', '')} |")
    fl = rec.get("flatten", {})
    if fl.get("entries"):
        L += ["", f"Flattened (types dropped, symmetric, self loops and duplicates removed): "
                  f"n = {fl['n']:,}, {fl['entries']:,} CSR entries = {fl['entries'] // 2:,} undirected edges"
                  + (f" (reading the typed directory and flattening: {fl['seconds']:.1f} s, peak RSS "
                     f"{_f(fl.get('peak_rss_mib'), '{:,.0f}')} MiB)." if fl.get("seconds") else ".")]
    k = rec["args"]["parts"]
    L += ["", f"**Partitioning into {k} parts**, one child process per run, one at a time.", "",
          "| run | method | seconds | peak RSS MiB | extra RSS MiB | edge cut | cut % | cut / METIS | balance | load |",
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    alone = {r["method"]: r for r in rec["partition_alone"]}
    cli = {r["method"]: r for r in rec["partition_cli"]}
    mcut_a = (alone.get("metis") or {}).get("edge_cut")
    mcut_c = (cli.get("metis") or {}).get("edge_cut")
    for label, rows, mcut in (("partitioner alone (flat CSR)", rec["partition_alone"], mcut_a),
                              ("`argosy partition` typed, end to end", rec["partition_cli"], mcut_c)):
        for r in rows:
            if "error" in r:
                L.append(f"| {label} | {r['method']} | error: {r['error'][:200]} | | | | | | | |")
                continue
            secs = r["seconds"] if "wall_total" not in r else r["seconds"]
            extra = _f(r.get("extra_rss_mib"), "{:,.0f}")
            if "partition_seconds" in r:
                secs_s = f"{r['seconds']:.1f} (partition {r['partition_seconds']:.1f})"
            else:
                secs_s = f"{secs:.1f} (child {r['wall_total']:.1f})"
            L.append(f"| {label} | {r['method']} | {secs_s} | {_f(r['peak_rss_mib'], '{:,.0f}')} | {extra} | "
                     f"{_f(r.get('edge_cut'), '{:,}')} | {_f(100 * r['edge_cut_fraction'] if r.get('edge_cut_fraction') is not None else None, '{:.2f}')} | "
                     f"{_f(_ratio(r.get('edge_cut'), mcut), '{:.3f}')} | {_f(r.get('balance'), '{:.3f}')} | "
                     f"{_f(r.get('load_after'), '{:.1f}')} |")
    if rec["train"]:
        L += [""] + train_table(rec["train"], rec["args"])
    q = rec["ratios"]
    L += ["", "**Ratios**", ""]
    if "alone_grem_over_metis_peak_rss" in q:
        L.append(f"- Partitioner alone, GREM / METIS: peak RSS **{q['alone_grem_over_metis_peak_rss']:.2f}x** "
                 f"(extra RSS over imports {q['alone_grem_over_metis_extra_rss']:.2f}x), partitioning time "
                 f"**{q['alone_grem_over_metis_seconds']:.2f}x** (child wall {q['alone_grem_over_metis_wall']:.2f}x), "
                 f"edge cut **{q['alone_grem_over_metis_cut']:.3f}x**.")
    if "cli_grem_over_metis_peak_rss" in q:
        L.append(f"- `argosy partition` end to end, GREM / METIS: peak RSS **{q['cli_grem_over_metis_peak_rss']:.2f}x**, "
                 f"wall **{q['cli_grem_over_metis_seconds']:.2f}x** (partitioning call "
                 f"{_f(q.get('cli_grem_over_metis_partition_seconds'))}x), edge cut {_f(q.get('cli_grem_over_metis_cut'), '{:.3f}')}x.")
    if "train_grem_over_random_remote_fraction" in q:
        L.append(f"- Training, GREM / random: remote fraction **{q['train_grem_over_random_remote_fraction']:.3f}x**; "
                 f"training-phase halo bytes per epoch **{_f(q.get('train_grem_over_random_train_phase_halo_bytes'), '{:.3f}')}x**, "
                 f"wire bytes **{_f(q.get('train_grem_over_random_train_phase_wire_bytes'), '{:.3f}')}x**; whole epochs "
                 f"(with evaluation) halo {_f(q['train_grem_over_random_halo_bytes'], '{:.3f}')}x, wire "
                 f"{_f(q['train_grem_over_random_wire_bytes'], '{:.3f}')}x.")
    return L


def write_md(rec: dict, path: Path) -> None:
    m = rec["machine"]
    cmds = [rec["generate"].get("command")] if rec.get("generate", {}).get("command") else []
    cmds += [r["command"] for r in rec["partition_cli"] + rec["train"] if r.get("command")]
    L = [f"# Typed-graph scale figures (ogbn-mag-shaped, >= 2M vertices, >= 20M edges)", "",
         f"Run {rec['date']} by `{rec['invocation']}` ({rec['total_seconds']:.0f} s in all).", "",
         f"Machine: {m['cpus']} cores ({m['cpu']}), {m['mem_total_gib']} GiB RAM "
         f"({m['mem_available_gib']} GiB available at the start), shared with other jobs: 1-minute load "
         f"{m['load_1min']} at the start, {rec['load_end']} at the end (per-run loads in the tables), so "
         "times are upper bounds and only comparable within a table. Peak RSS: `wait4` of a small "
         "forking launcher around each child (the whole child tree's maximum). Python "
         f"{m['python']}, kernel {m['kernel']}.", ""]
    gen = rec.get("generate", {})
    if gen.get("command"):
        L += [f"Generating the graph took {gen['seconds']:.1f} s, peak RSS {_f(gen.get('peak_rss_mib'), '{:,.0f}')} MiB.", ""]
    L += tables(rec)
    L += ["", "## Commands", "", "```"] + cmds + ["```", "",
          "The partitioner-alone rows run `bench/partition.py`'s worker (imports and a tiny warm-up run, "
          "peak RSS reset where the kernel allows, then `partition_stream` on the flat CSR `.npz` timed); "
          "`extra RSS` is its peak over the process after that warm-up. The flat CSR is written once by "
          "`typed_flat_graph` (what `argosy partition` itself cuts for a typed input).", ""]
    for c in rec.get("compare", []):
        L += [f"## {c['label']}", "", f"From `{c['path']}` (run {c['date']} by `{c['invocation']}`, same graph and "
              "the same stores' methods; its partitioning figures are not repeated).", ""]
        L += train_table(c["train"], c["args"], "Training") + [""]
    if rec.get("notes"):
        L += ["## Notes", ""] + [f"- {n}" for n in rec["notes"]] + [""]
    path.write_text("\n".join(L) + "\n")


def load_compare(spec: str) -> dict:
    """``JSON[:LABEL[:GREM_REPORT:RANDOM_REPORT]]``: an earlier run's record, its training rows given
    the training-phase split from the named report.json files (the earlier run dirs are reused)."""
    parts = spec.split(":")
    old = json.loads(Path(parts[0]).read_text())
    reports = dict(zip(("grem", "random"), parts[2:4]))
    for r in old.get("train", []):
        rep = reports.get(r.get("method"))
        if rep and Path(rep).exists():
            report = json.loads(Path(rep).read_text())
            r.update(train_phase_bytes(report))
            eps = report.get("epochs", [])
            r["epoch_records"] = [{k: e.get(k) for k in ("epoch", "epoch_seconds", "val_seconds", "test_seconds",
                                                          "batches", "remote_fraction") if k in e} for e in eps]
            r["eval_seconds"] = sum((e.get("val_seconds") or 0) + (e.get("test_seconds") or 0) for e in eps)
            r["seeds_redelivered"] = report.get("result", {}).get("seeds_redelivered")
    return {"label": parts[1] if len(parts) > 1 else parts[0], "path": parts[0], "date": old.get("date"),
            "invocation": old.get("invocation"), "args": old.get("args"), "train": old.get("train", [])}


# --------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--graph", default=None, help="reuse this typed directory (graph.yaml) instead of generating")
    ap.add_argument("--scale", default="auto",
                    help="--preset mag scale; auto (default): the smallest multiple of 0.005 with "
                         ">= --min-vertices vertices and >= --min-edges edges")
    ap.add_argument("--min-vertices", type=int, default=2_000_000)
    ap.add_argument("--min-edges", type=int, default=20_000_000)
    ap.add_argument("--parts", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eps", type=float, default=0.03)
    ap.add_argument("--cli-methods", default="grem,random,metis", help="`argosy partition` runs (typed stores)")
    ap.add_argument("--alone-methods", default="grem,metis,random", help="partitioner-alone runs on the flat CSR")
    ap.add_argument("--train-methods", default="grem,random", help="stores to train on ('' = no training)")
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--fanouts", default="10,5")
    ap.add_argument("--train-extra", default="", help="more `argosy train` flags, e.g. '--batch-size 1024'")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per partitioning child")
    ap.add_argument("--train-timeout", type=float, default=3600.0, help="seconds per training run")
    ap.add_argument("--work", default="/tmp/argosy-hetero-scale")
    ap.add_argument("--keep", action="store_true", help="keep the stores and the flat CSR")
    ap.add_argument("--out-md", default=str(RESULTS / "hetero_scale.md"))
    ap.add_argument("--note", action="append", default=[], help="a line for the report's notes")
    ap.add_argument("--compare", action="append", default=[], metavar="JSON[:LABEL]",
                    help="add the training table of an earlier run's hetero_scale.json (e.g. other train flags); "
                         "its run dirs' report.json are re-read for the training-phase split where given as "
                         "JSON:LABEL:GREM_REPORT:RANDOM_REPORT")
    ap.add_argument("--report-only", default=None, metavar="JSON",
                    help="rebuild --out-md from a saved WORK/hetero_scale.json (with --compare/--note added) "
                         "without running anything")
    args = ap.parse_args(argv)
    if args.report_only:
        rec = json.loads(Path(args.report_only).read_text())
        if args.compare:
            rec["compare"] = [load_compare(c) for c in args.compare]
        rec["notes"] = list(rec.get("notes", [])) + list(args.note)
        rec["ratios"] = ratios(rec)
        Path(args.report_only).write_text(json.dumps(rec, indent=1, default=str))
        write_md(rec, Path(args.out_md))
        print("\n".join(tables(rec)))
        return 0

    t_start = time.perf_counter()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    logs = work / "logs"
    rec = {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "machine": _machine(),
           "invocation": "python bench/hetero_scale.py " + " ".join(shlex.quote(a) for a in
                                                                     (argv if argv is not None else sys.argv[1:])),
           "args": vars(args), "notes": list(args.note)}

    rec["compare"] = [load_compare(c) for c in args.compare]

    # 1. graph
    if args.graph:
        graph = Path(args.graph)
        rec["scale"] = "given"
        rec["generate"] = {"reused": str(graph)}
    else:
        scale = smallest_scale(args.min_vertices, args.min_edges) if args.scale == "auto" else float(args.scale)
        rec["scale"] = scale
        graph = work / f"mag-{scale:g}"
        if (graph / "graph.yaml").exists():
            rec["generate"] = {"reused": str(graph)}
        else:
            r = run_measured([sys.executable, "-m", "argosy.services.launch", "generate", "--preset", "mag",
                              "--scale", f"{scale:g}", "--seed", str(args.seed), "--out", str(graph), "--json"],
                             "generate", logs, args.timeout)
            r.pop("stdout", None)
            rec["generate"] = r
            if "error" in r:
                print(json.dumps(rec), flush=True)
                raise SystemExit(f"generate failed: {r['error']}")
    rec["graph"] = describe_graph(graph)
    g = rec["graph"]
    print(f"graph {graph}: {g['vertices']:,} vertices, {g['edges']:,} edges", file=sys.stderr, flush=True)
    if g["vertices"] < args.min_vertices or g["edges"] < args.min_edges:
        rec["notes"].append(f"the graph is below the target size ({g['vertices']:,} < {args.min_vertices:,} "
                            f"vertices or {g['edges']:,} < {args.min_edges:,} edges)")

    # 2. partitioning: the partitioner alone on the flat CSR, then end to end on the typed input
    flat = work / f"{graph.name}-flat.npz"
    rec["flatten"] = flatten(graph, flat, logs, args.timeout)
    rec["partition_alone"] = []
    for method in filter(None, args.alone_methods.split(",")):
        r = partition_alone(flat, method, args.parts, args)
        rec["partition_alone"].append(r)
        print(json.dumps({k: r.get(k) for k in ("method", "seconds", "wall_total", "peak_rss_mib", "extra_rss_mib",
                                                "edge_cut", "edge_cut_fraction", "balance", "error")}),
              file=sys.stderr, flush=True)
    stores = {}
    rec["partition_cli"] = []
    for method in filter(None, args.cli_methods.split(",")):
        store = work / f"store-{method}"
        r = partition_cli(graph, method, args.parts, store, logs, args)
        r["method"] = method
        rec["partition_cli"].append(r)
        if "error" not in r:
            stores[method] = store
        print(json.dumps({k: r.get(k) for k in ("method", "seconds", "peak_rss_mib", "partition_seconds",
                                                "edge_cut", "edge_cut_fraction", "balance", "error")}),
              file=sys.stderr, flush=True)

    # 3. training
    rec["train"] = []
    for method in filter(None, args.train_methods.split(",")):
        if method not in stores:
            rec["train"].append({"method": method, "error": f"no {method} store (its partitioning failed or was not run)"})
            continue
        r = train(stores[method], method, work / f"run-{method}", logs, args)
        r["method"] = method
        rec["train"].append(r)
        print(json.dumps({k: r.get(k) for k in ("method", "seconds", "remote_fraction", "halo_bytes", "wire_bytes",
                                                "epoch_seconds", "test_accuracy", "error")}),
              file=sys.stderr, flush=True)

    if not args.keep:
        for s in stores.values():
            shutil.rmtree(s, ignore_errors=True)
        flat.unlink(missing_ok=True)
    rec["ratios"] = ratios(rec)
    rec["load_end"] = _load()
    rec["total_seconds"] = time.perf_counter() - t_start
    (work / "hetero_scale.json").write_text(json.dumps(rec, indent=1, default=str))
    out_md = Path(args.out_md)
    out_md.parent.mkdir(parents=True, exist_ok=True)
    write_md(rec, out_md)
    print(json.dumps(rec, default=str), flush=True)
    print("\n".join(tables(rec)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
