"""Partitioner benchmark: GREM vs streaming baselines vs METIS (and KaMinPar if installed).

Why this file exists: issue 3 asks whether GREM reaches METIS-like edge cuts with less memory
and time.  Each (graph, method, k) runs in its own subprocess, so wall time and peak RSS
(``os.wait4`` rusage of that child, plus the child's own RSS right after imports) are measured
per run and cannot leak between runs.  Results go to ``bench/results/partition.jsonl``, a
markdown report ``partition.md`` (cut ratio vs METIS per graph and k, geometric means at
k = 8, 16, 32, worst ratio, times, peak RSS) and a PNG of edge cut vs k.

Usage::

    python bench/partition.py                                  # everything (7 graphs x 5 k)
    python bench/partition.py --graphs cora,road-ny --ks 8,32 --methods grem,metis
    python bench/partition.py --scale --scale-n 10000000 --scale-m 100000000   # lead only

``--scale`` writes a degree-corrected SBM graph chunk by chunk into an (m, 2) int32 ``.npy``
memmap (never held in memory), then partitions it with GREM and with METIS (if METIS's
estimated memory does not fit, the comparison is repeated at the largest size that fits) and
reports peak-RSS ratio, time ratio and edges/s.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from argosy.shared.rss import peak_rss_bytes, rss_bytes

ROOT = Path(__file__).resolve().parents[1]
from argosy.shared.envs import datasets_dir  # noqa: E402

DATASETS = datasets_dir()
RESULTS = ROOT / "bench" / "results"

__all__ = ["main", "run_one", "generate_dcsbm_npy"]


# --------------------------------------------------------------------------------------------
# worker (runs in the child process)
# --------------------------------------------------------------------------------------------
def _parhip_path(path: str) -> str:
    return str(path) + ".parhip"


def _write_parhip(path: str) -> str:
    """ParHIP binary twin of a graph (KaMinPar's fast input; 64-bit ids): written once, next to
    the graph, streamed from its CSR so that the KaMinPar worker's peak is its own."""
    from argosy.services.partitioner.baselines import gather_csr
    from argosy.services.partitioner.file_streams import open_edge_stream

    out = _parhip_path(path)
    if os.path.exists(out):
        return out
    indptr, indices = gather_csr(open_edge_stream(path, chunk_edges=1 << 22))
    n, m = indptr.size - 1, indices.size
    with open(out + ".tmp", "wb") as fh:
        np.array([3, n, m], np.uint64).tofile(fh)
        ((3 + n + 1) * 8 + indptr.astype(np.uint64) * 8).astype(np.uint64).tofile(fh)
        for a in range(0, m, 1 << 24):
            indices[a:a + (1 << 24)].astype(np.uint64).tofile(fh)
    os.replace(out + ".tmp", out)
    return out


def _kaminpar(path: str, k: int, eps: float, seed: int, preset: str):
    """KaMinPar (optional, benchmark only), single thread, on the ParHIP twin of the graph
    (TeraPart presets load it compressed, as TeraPart is meant to run).

    Returns:
        tuple: ``(stream, part, partition seconds, load seconds)``.
    """
    import kaminpar

    from argosy.services.partitioner.file_streams import open_edge_stream

    st = open_edge_stream(path)
    f = _parhip_path(path)
    t0 = time.perf_counter()
    g = kaminpar.load_graph(f, kaminpar.GraphFileFormat.PARHIP,
                            compress=preset.startswith("terapart"))
    t_load = time.perf_counter() - t0
    kaminpar.reseed(seed)
    ctx = getattr(kaminpar, f"{preset}_context")()
    solver = kaminpar.KaMinPar(num_threads=1, ctx=ctx)
    t0 = time.perf_counter()
    part = np.asarray(solver.compute_partition(g, k, eps), dtype=np.int32)
    secs = time.perf_counter() - t0
    return st, part, secs, t_load


def _method_options(method: str) -> dict:
    """Options a method name carries after its base: ``grem-fast`` / ``grem-default`` /
    ``grem-best`` (the effort), ``grem-stream`` (streaming clustering forced on graphs that fit
    in memory), ``grem-t1`` (threads), ``grem-anytree`` (tree refinement whatever the first-level
    clusters' share, as before ``grem.TREE_MIN_CLUSTER_SHARE``), ``grem-fmkeep`` (the streamed FM
    round whatever the LP pass before it removed, as before ``grem.FM_MIN_LP_GAIN``); e.g.
    ``grem-fast-t1``, ``grem-default-fmkeep``."""
    opts = {"threads": None} if method.startswith("grem") else {}  # every core, as the CLI
    for tok in method.split("-")[1:]:
        if tok in ("fast", "default", "best"):
            opts["effort"] = tok
        elif tok == "stream":
            opts["whole_graph"] = False
        elif tok.startswith("t") and tok[1:].isdigit():
            opts["threads"] = int(tok[1:])
        elif tok == "anytree":  # the tree refinement without its cluster-share gate
            opts["_any_tree"] = True
        elif tok == "fmkeep":  # the FM round without its LP-gain gate
            opts["fm_min_lp_gain"] = 0.0
    return opts


def _warm_up(method: str) -> None:
    """Load/compile the numba kernels on a tiny graph so the timed run excludes JIT/cache load."""
    from argosy.services.partitioner.core import partition_stream
    from argosy.services.partitioner.stream import ArrayEdgeStream

    n = 400
    u = np.arange(n)
    src = np.r_[u, u]
    dst = np.r_[(u + 1) % n, (u + 7) % n]
    partition_stream(ArrayEdgeStream(src, dst, num_nodes=n, chunk_edges=256), 4,
                     method=method if method in ("grem", "fennel", "ldg", "metis", "hash",
                                                 "random") else "grem")


def _reset_peak() -> bool:
    try:  # Linux >= 4.0: "5" resets the peak RSS (VmHWM) of this process
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _worker(args) -> None:
    base_kib = rss_bytes() // 1024
    from argosy.services.partitioner.core import evaluate_partition, partition_stream
    from argosy.services.partitioner.file_streams import open_edge_stream

    if args.method.startswith("kaminpar"):
        _write_parhip(args.graph)
        import gc

        gc.collect()
    else:
        _warm_up(args.method)
    reset = _reset_peak()
    import_kib = rss_bytes() // 1024
    rec = {"graph": args.graph_name, "method": args.method, "k": args.k, "order": args.order,
           "seed": args.seed, "eps": args.eps, "chunk_edges": args.chunk_edges}
    t0 = time.perf_counter()
    if args.method.startswith("kaminpar"):
        preset = args.method.split("-", 1)[1] if "-" in args.method else "default"
        st, part, secs, t_load = _kaminpar(args.graph, args.k, args.eps, args.seed, preset)
        ev = evaluate_partition(st, part, args.k)
        rec.update(seconds=secs, load_seconds=t_load, edge_cut=int(ev["edge_cut"]),
                   edge_cut_fraction=ev["edge_cut_fraction"], balance=ev["balance"],
                   edge_balance=ev["edge_balance"], n=st.num_nodes, entries=st.num_edges)
    else:
        st = open_edge_stream(args.graph, chunk_edges=args.chunk_edges)
        t_open = time.perf_counter() - t0  # edge lists: one scan for the largest id
        opts = _method_options(args.method)
        if opts.pop("_any_tree", False):
            from argosy.services.partitioner import grem

            grem.TREE_MIN_CLUSTER_SHARE = 0.0
        r = partition_stream(st, args.k, method=args.method.split("-")[0], order=args.order,
                             seed=args.seed, eps=args.eps, **opts)
        det = {key: v for key, v in r.details.items() if key != "cycles"}
        if "cycles" in r.details:
            det["cycles"] = [{kk: (round(vv, 4) if isinstance(vv, float) else vv)
                              for kk, vv in c.items()} for c in r.details["cycles"]]
        det["open_seconds"] = round(t_open, 3)
        if r.method == "grem":
            from argosy.services.partitioner.core import phase_seconds
            rec["phases"] = dict(phase_seconds(r.details, r.seconds), open=round(t_open, 3))
            from argosy.services.partitioner.threads import default_threads
            rec["threads"] = opts.get("threads") or default_threads()
        rec.update(seconds=r.seconds + t_open, edge_cut=r.edge_cut,
                   edge_cut_fraction=r.edge_cut_fraction, balance=r.balance,
                   edge_balance=r.edge_balance, n=st.num_nodes, entries=st.num_edges,
                   details=json.loads(json.dumps(det, default=lambda o: str(o))))
    rec["wall_in_child"] = time.perf_counter() - t0
    rec["rss_start_kib"] = base_kib
    rec["rss_after_import_kib"] = import_kib
    rec["loadavg_1min"] = os.getloadavg()[0]
    rec["peak_rss_self_kib"] = peak_rss_bytes() // 1024
    rec["peak_reset"] = reset
    print("RESULT " + json.dumps(rec), flush=True)


# --------------------------------------------------------------------------------------------
# parent
# --------------------------------------------------------------------------------------------
def run_one(graph: str, name: str, method: str, k: int, order: str = "file", seed: int = 0,
            eps: float = 0.03, chunk_edges: int = 1 << 16, timeout: float = 1800.0) -> dict:
    """Run one (graph, method, k) in a fresh subprocess; return its record (or an error)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--graph", graph,
           "--graph-name", name, "--method", method, "--k", str(k), "--order", order,
           "--seed", str(seed), "--eps", str(eps), "--chunk-edges", str(chunk_edges)]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    proc = _RusagePopen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            cwd=str(ROOT), text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return {"graph": name, "method": method, "k": k, "error": f"timeout after {timeout}s"}
    finally:
        wall = time.perf_counter() - t0
    # communicate() reaped the child; rusage comes from the wait4 inside Popen when possible
    ru = getattr(proc, "_argosy_rusage", None)
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        return {"graph": name, "method": method, "k": k,
                "error": (err.strip().splitlines() or ["failed"])[-1][:500]}
    rec = json.loads(lines[-1][7:])
    rec["wall_total"] = wall
    peak = rec.get("peak_rss_self_kib", 0)
    rec["wait4_maxrss_kib"] = ru
    if ru is not None and not rec.get("peak_reset"):
        peak = max(peak, ru)
    rec["peak_rss_mib"] = peak / 1024.0
    rec["extra_rss_mib"] = (peak - rec.get("rss_after_import_kib", 0)) / 1024.0
    return rec


def _median_run(runs: list) -> dict:
    """The run of median time among a cell's repeats (the first error, if one failed), with every
    repeat's seconds in ``repeat_seconds``: single runs of 2-8 s move by 10-30 % on a shared box."""
    if any("error" in r for r in runs):
        return next(r for r in runs if "error" in r)
    r = dict(sorted(runs, key=lambda x: x["seconds"])[(len(runs) - 1) // 2])
    r["repeat_seconds"] = [round(x["seconds"], 3) for x in runs]
    return r


def _fmt(x, nd=2):
    return "-" if x is None else f"{x:.{nd}f}"


def _geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def write_report(records, out_md: Path, out_png: Path, header: str) -> dict:
    """Markdown tables + summary (geomean cut ratio vs METIS at k=8,16,32) and the PNG plot."""
    ok = [r for r in records if "error" not in r]
    graphs = list(dict.fromkeys(r["graph"] for r in ok))
    methods = list(dict.fromkeys(r["method"] for r in ok))
    ks = sorted({r["k"] for r in ok})
    by = {(r["graph"], r["method"], r["k"]): r for r in ok}
    lines = [header, ""]
    loads = [r["loadavg_1min"] for r in ok if "loadavg_1min" in r]
    if loads:
        lines += [f"1-minute load average at the end of the runs: {min(loads):.1f} to "
                  f"{max(loads):.1f} (2 cores): times are only comparable within a column.", ""]
    # summary
    summary = {}
    ratios_all = {}
    for m in methods:
        if m == "metis":
            continue
        rs = []
        for g in graphs:
            for k in (8, 16, 32):
                a, b = by.get((g, m, k)), by.get((g, "metis", k))
                if a and b:
                    rs.append((a["edge_cut"] / max(b["edge_cut"], 1), g, k))
        if rs:
            worst = max(rs)
            ratios_all[m] = rs
            summary[m] = {"geomean_ratio_k8_16_32": _geomean([x for x, _, _ in rs]),
                          "worst_ratio": worst[0], "worst_at": f"{worst[1]} k={worst[2]}",
                          "cells": len(rs)}
    if summary:
        lines += ["## Summary: edge cut relative to METIS at k = 8, 16, 32", "",
                  "| method | geomean cut / METIS | worst | worst at | cells |",
                  "|---|---:|---:|---|---:|"]
        for m, s in summary.items():
            lines.append(f"| {m} | {_fmt(s['geomean_ratio_k8_16_32'], 3)} | "
                         f"{_fmt(s['worst_ratio'], 3)} | {s['worst_at']} | {s['cells']} |")
        lines.append("")
        per_k = []
        for m in summary:
            row = [m]
            for k in (8, 16, 32):
                row.append(_fmt(_geomean([x for x, g, kk in ratios_all[m] if kk == k]), 3))
            per_k.append("| " + " | ".join(row) + " |")
        lines += ["| method | geomean k=8 | geomean k=16 | geomean k=32 |", "|---|---:|---:|---:|"]
        lines += per_k + [""]
    # per graph tables
    for g in graphs:
        r0 = next(r for r in ok if r["graph"] == g)
        lines += [f"### {g} (n={r0.get('n')}, stored entries={r0.get('entries')})", "",
                  "Each cell: cut % / cut vs METIS / balance / seconds / peak RSS MiB "
                  "(extra MiB over the process after imports and a warm-up run).", "",
                  "| method | " + " | ".join(f"k={k}" for k in ks) + " |",
                  "|---|" + "---:|" * len(ks)]
        for m in methods:
            cells = []
            for k in ks:
                r = by.get((g, m, k))
                if not r:
                    cells.append("-")
                    continue
                b = by.get((g, "metis", k))
                ratio = r["edge_cut"] / max(b["edge_cut"], 1) if b else None
                cells.append(f"{100 * r['edge_cut_fraction']:.3f} / {_fmt(ratio, 3)} / "
                             f"{r['balance']:.3f} / {r['seconds']:.2f} / "
                             f"{r['peak_rss_mib']:.0f} ({r['extra_rss_mib']:.0f})")
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        lines.append("")
    errs = [r for r in records if "error" in r]
    if errs:
        lines += ["## Failed runs", ""] + [f"- {r['graph']} {r['method']} k={r['k']}: "
                                            f"{r['error']}" for r in errs] + [""]
    out_md.write_text("\n".join(lines))
    # plot
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        cols = min(4, len(graphs)) or 1
        rows = math.ceil(len(graphs) / cols) or 1
        fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
        for ax, g in zip(axes.ravel(), graphs):
            for m in methods:
                xs = [k for k in ks if (g, m, k) in by]
                ys = [100 * by[(g, m, k)]["edge_cut_fraction"] for k in xs]
                if xs:
                    ax.plot(xs, ys, marker="o", label=m)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(g)
            ax.set_xlabel("k")
            ax.set_ylabel("edge cut %")
            ax.grid(alpha=0.3)
        for ax in axes.ravel()[len(graphs):]:
            ax.axis("off")
        axes.ravel()[0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out_png, dpi=110)
        plt.close(fig)
    except Exception as exc:  # pragma: no cover - plotting is best effort
        print(f"plot failed: {exc}", file=sys.stderr)
    return summary


# --------------------------------------------------------------------------------------------
# synthetic graphs for --scale
# --------------------------------------------------------------------------------------------
def generate_dcsbm_npy(path: str, n: int, m: int, seed: int = 0) -> int:
    """Write the scale benchmark's DC-SBM edge list (m rows, int32) to ``path``.

    1024 equal communities, 10 % of edges leave their community, Pareto(1.5) propensities,
    ids randomly relabelled: see :func:`shared.synthetic.write_dcsbm_edge_list`.
    """
    sys.path.insert(0, str(ROOT))
    from argosy.shared.synthetic import write_dcsbm_edge_list

    return write_dcsbm_edge_list(path, n, m, num_communities=1024, mixing=0.1, power_law=1.5,
                                 seed=seed)


def _mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def _scale_table(recs) -> list:
    lines = ["| graph | method | n | undirected edges | seconds | peak RSS MiB | edges/s | cut % | "
             "balance | load |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in recs:
        if "error" in r:
            lines.append(f"| {r['graph']} | {r['method']} | | | error: {r['error']} | | | | | |")
            continue
        und = r.get("details", {}).get("undirected_edges", r["entries"])
        lines.append(f"| {r['graph']} | {r['method']} | {r['n']:,} | {und:,} | "
                     f"{r['seconds']:.1f} | {r['peak_rss_mib']:,.0f} | {und / r['seconds']:.3g} | "
                     f"{100 * r['edge_cut_fraction']:.3f} | {r['balance']:.3f} | "
                     f"{r.get('loadavg_1min', float('nan')):.1f} |")
    return lines


def scale_mode(args) -> None:
    """Generate (once) and partition a large DC-SBM edge list with GREM and METIS.

    Every record is appended to ``partition_scale.jsonl``; ``partition_scale.md`` is rebuilt
    from the newest record per (graph, method), with the ratios per graph where both ran.
    """
    sys.path.insert(0, str(ROOT))
    from argosy.services.partitioner.core import estimate_cost

    results = Path(args.out)
    results.mkdir(parents=True, exist_ok=True)
    work = Path(args.scale_dir)
    work.mkdir(parents=True, exist_ok=True)
    n, m, k = args.scale_n, args.scale_m, args.scale_k

    def gen(n_, m_):
        p = work / f"dcsbm_n{n_}_m{m_}.npy"
        if not p.exists():
            t0 = time.perf_counter()
            generate_dcsbm_npy(str(p), n_, m_, seed=args.seed)
            print(f"generated {p} in {time.perf_counter() - t0:.1f}s", flush=True)
        return p

    def run(p, method):
        if args.scale_format == "npz":
            p = _npz_twin(p)
        r = run_one(str(p), p.stem if p.suffix == ".npy" else p.name, method, k, args.order,
                    args.seed, args.eps,
                    args.scale_chunk, args.timeout)
        r["loadavg_1min"] = os.getloadavg()[0]
        print(json.dumps(r), flush=True)
        with open(results / "partition_scale.jsonl", "a") as f:
            f.write(json.dumps(r) + "\n")
        return r

    p = gen(n, m)
    run(p, "grem")
    if not args.scale_grem_only:
        avail = _mem_available()
        n2, m2 = n, m
        while estimate_cost(n2, 2 * m2, k, "metis")[0] > avail and m2 > 1000:
            n2, m2 = n2 // 2, m2 // 2
        if (n2, m2) != (n, m):
            print(f"METIS needs ~{estimate_cost(n, 2 * m, k, 'metis')[0] / 2**30:.1f} GiB for "
                  f"n={n}, m={m} (available {avail / 2**30:.1f} GiB): compared at n={n2}, m={m2}",
                  flush=True)
            p = gen(n2, m2)
            run(p, "grem")
        run(p, "metis")
    # rebuild the report from every record so far
    recs = {}
    with open(results / "partition_scale.jsonl") as f:
        for line in f:
            r = json.loads(line)
            recs[(r["graph"], r["method"])] = r
    ordered = sorted(recs.values(), key=lambda r: (r.get("n", 0), r["graph"], r["method"]))
    lines = [f"# Scale runs (rebuilt {time.strftime('%Y-%m-%d %H:%M')})", "",
             "DC-SBM edge lists written by `shared.synthetic.write_dcsbm_edge_list` (1024 "
             "communities, 10 % inter-community edges, Pareto(1.5) propensities, ids shuffled), "
             f"k={k}, stream order file, eps 0.03, one process per run; seconds include the "
             "on-disk regrouping of the edge list (both methods); peak RSS is the process's "
             "(including ~160 MiB of imports); edges/s = undirected edges / seconds; load = "
             "1-minute load average after the run (2 cores).", ""]
    lines += _scale_table(ordered)
    lines.append("")
    for (g, meth), r in sorted(recs.items()):
        mt = recs.get((g, "metis"))
        if meth != "grem" or mt is None or "error" in r or "error" in mt:
            continue
        lines.append(f"- {g}: METIS/GREM peak RSS **{mt['peak_rss_mib'] / r['peak_rss_mib']:.1f}x**, "
                     f"time **{mt['seconds'] / r['seconds']:.2f}x**, cut GREM/METIS "
                     f"**{r['edge_cut'] / max(mt['edge_cut'], 1):.3f}**.")
    for r in ordered:
        cyc = r.get("details", {}).get("cycles")
        if r["method"] == "grem" and cyc:
            c = cyc[0]
            lines.append(f"- {r['graph']} GREM phases: regroup+other "
                         f"{r['seconds'] - r['details']['seconds']:.1f} s, clustering "
                         f"{c['t_cluster']:.1f} s ({c['cluster_passes']} passes), cluster graph "
                         f"{c['t_cluster_graph']:.1f} s ({c['cluster_graph_entries']:,} entries), "
                         f"coarse partition {c['t_partition_coarse']:.1f} s, refinement "
                         f"{c['t_refine']:.1f} s ({c['refine_passes']} passes).")
    (results / "partition_scale.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


# --------------------------------------------------------------------------------------------
# graph-family sweep (--sweep)
# --------------------------------------------------------------------------------------------
def _families():
    """name -> (description, writer(path, n, m, seed)) of the sweep's generated graphs."""
    from argosy.shared import synthetic as syn

    return {
        "planted": ("planted partition, 16 equal blocks, 20 % of edge ends drawn anywhere "
                    "(18.75 % cross blocks), uniform degrees",
                    lambda p, n, m, s: syn.write_planted_edge_list(p, n, m, 16, 0.2, s)),
        "planted4": ("planted partition, 4 equal blocks, 30 % drawn anywhere (22.5 % cross)",
                     lambda p, n, m, s: syn.write_planted_edge_list(p, n, m, 4, 0.3, s)),
        "rmat": ("R-MAT / Kronecker, Graph500 a, b, c = 0.57, 0.19, 0.19, 2^scale vertices",
                 lambda p, n, m, s: syn.write_rmat_edge_list(p, max(1, round(math.log2(n))), m,
                                                            seed=s)),
        "chunglu": ("Chung-Lu power law, exponent 2.1, no other structure (heavier hubs "
                    "than R-MAT; duplicates as sampled)",
                    lambda p, n, m, s: syn.write_chunglu_edge_list(p, n, m, 2.1, s)),
        "skewed": ("SBM, 64 communities of Zipf(1.2) sizes (the largest 29 % of n), 5 % mixing, "
                   "uniform degrees",
                   lambda p, n, m, s: syn.write_skewed_sbm_edge_list(p, n, m, 64, 1.2, 0.05, s)),
        "regular": ("near-regular random: every vertex sends 2m/n/2 edges to random vertices",
                    lambda p, n, m, s: syn.write_regular_edge_list(p, n, max(2, 2 * m // n), s)),
        "geometric": ("random geometric graph in the unit square (road/mesh-like)",
                      lambda p, n, m, s: syn.write_geometric_edge_list(p, n, 2.0 * m / n, s)),
        "dcsbm": ("DC-SBM, 1024 communities, 10 % mixing, Pareto(1.5) degrees",
                  lambda p, n, m, s: syn.write_dcsbm_edge_list(p, n, m, 1024, 0.1, 1.5, s)),
        "road": ("road-like: a perturbed 2-D lattice of mean degree 2.6, ids shuffled "
                 "(`road_edge_chunks`); m edges need n = m / 1.3 vertices, so n is set by m",
                 lambda p, n, m, s: _write_road(p, m, s)),
    }


def _write_road(path: str, m: int, seed: int) -> int:
    """The road-like family as an (m', 2) int32 ``.npy`` with m' ~ m edges (n = m / 1.3)."""
    from argosy.shared.synthetic import road_edge_chunks

    n = int(m / 1.3)
    src, dst = zip(*road_edge_chunks(n, seed=seed))
    e = np.stack([np.concatenate(src), np.concatenate(dst)], axis=1).astype(np.int32)
    np.save(path + ".tmp.npy", e)
    os.replace(path + ".tmp.npy", path)
    return int(e.shape[0])


def _npz_twin(npy: Path) -> Path:
    """CSR ``.npz`` twin (uncompressed, symmetric, deduplicated, no self loops) of an edge
    list, written in a stream: the partitioner's on-disk regrouping yields the adjacency lists
    in vertex order, and the two members are written into the zip chunk by chunk (memory: one
    bucket plus ``indptr``; disk: the regrouping's buckets while it runs)."""
    import tempfile
    import zipfile

    from argosy.services.partitioner.file_streams import open_edge_stream
    from argosy.services.partitioner.regroup import GroupedEdgeStream

    out = npy.with_suffix(".npz")
    if out.exists():
        return out
    tmp = out.with_suffix(".tmp.npz")
    st = open_edge_stream(str(npy), chunk_edges=1 << 22)
    n = int(st.num_nodes)
    with tempfile.TemporaryDirectory(prefix="npz-twin-", dir=str(npy.parent)) as d:
        g = GroupedEdgeStream(st, d)
        try:
            deg = np.zeros(n, np.int64)
            for src, dst in g:  # chunks cover ascending source ranges
                s = src[src != dst]
                if s.size:
                    lo = int(s.min())
                    c = np.bincount(s - lo)
                    deg[lo:lo + c.size] += c
            indptr = np.zeros(n + 1, np.int64)
            np.cumsum(deg, out=indptr[1:])
            del deg
            tmp.unlink(missing_ok=True)
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
                with z.open("indptr.npy", "w", force_zip64=True) as f:
                    np.lib.format.write_array(f, indptr)
                with z.open("indices.npy", "w", force_zip64=True) as f:
                    np.lib.format.write_array_header_2_0(
                        f, {"descr": np.dtype(np.int32).str, "fortran_order": False,
                            "shape": (int(indptr[-1]),)})
                    for src, dst in g:
                        f.write(np.ascontiguousarray(dst[src != dst], np.int32).data)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        finally:
            g.close()
    os.replace(tmp, out)
    return out


def run_cli(graph: str, k: int, store: Path, timeout: float, extra=()) -> dict:
    """``argosy partition GRAPH --parts K --out STORE`` in a subprocess: wall time (process
    start, numba cache load, reading, partitioning and store writing) and peak RSS."""
    import shutil

    cmd = [sys.executable, "-m", "argosy.services.partitioner", graph, "--parts", str(k),
           "--out", str(store), "--overwrite", "--json", "--tmpdir", str(store.parent), *extra]
    t0 = time.perf_counter()
    # a small forking launcher between this process and the CLI, as /usr/bin/time does: a child
    # exec'd straight from here starts its peak RSS at this process's size (Linux carries the
    # peak across exec), which after generating a graph in-process is ~500 MiB
    proc = _RusagePopen([sys.executable, "-c", _LAUNCHER] + cmd, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True, cwd=str(ROOT))
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"error": f"timeout after {timeout}s"}
    wall = time.perf_counter() - t0
    shutil.rmtree(store, ignore_errors=True)
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": (err.strip().splitlines() or ["failed"])[-1][:500]}
    r = json.loads(lines[-1])
    ru = [int(x.split()[1]) for x in err.splitlines() if x.startswith("ARGOSY_MAXRSS_KIB ")]
    if not ru:
        return {"error": "the launcher did not report the peak RSS"}
    return {"seconds": wall, "peak_rss_mib": ru[-1] / 1024.0,
            "edge_cut_fraction": r.get("edge_cut_fraction"), "balance": r.get("balance"),
            "edge_balance": r.get("edge_balance"), "phases": r.get("phases"),
            "partition_seconds": r.get("partition_seconds"), "store_seconds": r.get("store_seconds")}


_LAUNCHER = (
    "import os, sys\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    os.execv(sys.argv[1], sys.argv[1:])\n"
    "_, status, ru = os.wait4(pid, 0)\n"
    "sys.stderr.write('ARGOSY_MAXRSS_KIB %d\\n' % ru.ru_maxrss)\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n")

SWEEP_TOOLS = ("grem-cli", "grem", "metis", "kaminpar-default", "kaminpar-terapart", "fennel")


def paired_mode(args) -> None:
    """Time ratios that survive this machine's drift: for each family's ``.npy``, GREM end to end
    (``argosy partition``) and then METIS's call on the same file, back to back; one record per
    family appended to ``paired.jsonl`` in ``--out``."""
    sys.path.insert(0, str(ROOT))
    results = Path(args.out)
    results.mkdir(parents=True, exist_ok=True)
    fams = _families()
    n, m, k = args.sweep_n, args.sweep_m, args.scale_k
    for fam in (list(fams) if args.sweep_families == "all" else args.sweep_families.split(",")):
        path = Path(args.scale_dir) / f"{fam}_n{n}_m{m}.npy"
        if not path.exists():
            fams[fam][1](str(path), n, m, args.seed)
        g = run_cli(str(path), k, Path(args.scale_dir) / "store", args.timeout)
        mt = run_one(str(path), fam, "metis", k, args.order, args.seed, args.eps, args.scale_chunk,
                     args.timeout)
        r = dict(family=fam, grem_s=g.get("seconds"), metis_s=mt.get("seconds"),
                 grem_mib=g.get("peak_rss_mib"), metis_mib=mt.get("peak_rss_mib"),
                 grem_cut=g.get("edge_cut_fraction"), metis_cut=mt.get("edge_cut_fraction"),
                 load=os.getloadavg()[0], sweep_n=n, sweep_m=m, k=k,
                 date=time.strftime("%Y-%m-%d %H:%M"))
        if r["grem_s"] and r["metis_s"]:
            r["time_ratio"] = r["grem_s"] / r["metis_s"]
        print(json.dumps(r), flush=True)
        with open(results / "paired.jsonl", "a") as f:
            f.write(json.dumps(r) + "\n")


def sweep_mode(args) -> None:
    """Generate every family once (``.npy`` and its ``.npz`` CSR twin) and run every tool on
    every (family, format) in its own process, one at a time; records are appended to
    ``partition_sweep.jsonl`` as they finish (a rerun skips cells already recorded) and
    ``partition_sweep.md`` is rebuilt from them."""
    sys.path.insert(0, str(ROOT))
    results = Path(args.out)
    results.mkdir(parents=True, exist_ok=True)
    work = Path(args.scale_dir)
    work.mkdir(parents=True, exist_ok=True)
    fams = _families()
    names = list(fams) if args.sweep_families == "all" else args.sweep_families.split(",")
    tools = SWEEP_TOOLS if args.sweep_tools == "all" else tuple(args.sweep_tools.split(","))
    formats = args.sweep_formats.split(",")
    n, m, k = args.sweep_n, args.sweep_m, args.scale_k
    jl = results / "partition_sweep.jsonl"
    recs = [json.loads(x) for x in jl.read_text().splitlines() if x.strip()] if jl.exists() else []
    done = set() if args.rerun else {(r["family"], r["format"], r["tool"]) for r in recs if "error" not in r}
    for fam in names:
        npy = work / f"{fam}_n{n}_m{m}.npy"
        if not npy.exists():
            t0 = time.perf_counter()
            fams[fam][1](str(npy), n, m, args.seed)
            print(f"generated {npy} in {time.perf_counter() - t0:.1f}s", flush=True)
        for fmt in formats:
            path = npy if fmt == "npy" else _npz_twin(npy)
            for tool in tools:
                if (fam, fmt, tool) in done:
                    continue
                runs = []
                for _ in range(max(1, args.sweep_repeats)):
                    if tool.startswith("grem-cli"):
                        eff = tool.split("-")[2] if tool.count("-") >= 2 else "default"
                        runs.append(run_cli(str(path), k, work / "store", args.timeout, ("--effort", eff)))
                    else:
                        runs.append(run_one(str(path), fam, tool, k, args.order, args.seed, args.eps,
                                            args.scale_chunk, args.timeout))
                    if "error" in runs[-1]:
                        break
                r = _median_run(runs)
                r.update(family=fam, format=fmt, tool=tool, k=k, sweep_n=n, sweep_m=m,
                         loadavg_1min=os.getloadavg()[0])
                print(json.dumps({x: r.get(x) for x in ("family", "format", "tool", "seconds",
                                                        "peak_rss_mib", "edge_cut_fraction",
                                                        "balance", "error")}), flush=True)
                with open(jl, "a") as f:
                    f.write(json.dumps(r, default=str) + "\n")
                recs.append(r)
                _sweep_report(recs, results / "partition_sweep.md", fams, k)
                _effort_report(recs, results / "partition_efforts.md", k)


def _sweep_report(recs, out_md: Path, fams, k) -> None:
    last = {}
    for r in recs:
        last[(r["family"], r["format"], r["tool"])] = r
    sizes = sorted({(r.get("sweep_n"), r.get("sweep_m")) for r in recs}, key=str)
    lines = [f"# Graph-family sweep (rebuilt {time.strftime('%Y-%m-%d %H:%M')})", "",
             "Sizes (n vertices, m generated edge rows): "
             + ", ".join(f"n={a:,} m={b:,}" for a, b in sizes if a) + ".", "",
             f"k = {k}, eps 0.03, file order, one process per cell, run one at a time under "
             "`nice` on the shared 2-core machine (the load column is the 1-minute load average "
             "after the cell: other work shared the cores, so compare times within a row's "
             "load). **grem-cli** = `argosy partition G --parts 16 --out STORE` end to end "
             "(process start, reading, partitioning, store writing); the other tools time the "
             "partitioning call (GREM and Fennel include reading the stream; KaMinPar excludes "
             "loading its ParHIP file, shown separately). Peak RSS = the process's.", "",
             "Families: " + "; ".join(f"**{f}**: {d}" for f, (d, _) in fams.items()), "",
             "| family | format | tool | seconds | peak RSS MiB | cut % | balance | edge balance "
             "| cut / METIS | load |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for (fam, fmt, tool), r in sorted(last.items()):
        if "error" in r:
            lines.append(f"| {fam} | {fmt} | {tool} | error: {r['error'][:80]} | | | | | | |")
            continue
        # edges of the fullest part over the mean (recorded since session 14; not constrained)
        ebal = "-" if r.get("edge_balance") is None else f"{r['edge_balance']:.2f}"
        mt = last.get((fam, fmt, "metis")) or last.get((fam, "npy", "metis"))
        ratio = "-"
        if mt and "error" not in mt and mt.get("edge_cut_fraction"):
            ratio = f"{r['edge_cut_fraction'] / mt['edge_cut_fraction']:.3f}"
        extra = f" (+{r['load_seconds']:.1f} load)" if r.get("load_seconds") else ""
        lines.append(f"| {fam} | {fmt} | {tool} | {r['seconds']:.1f}{extra} | "
                     f"{r['peak_rss_mib']:,.0f} | {100 * r['edge_cut_fraction']:.3f} | "
                     f"{r['balance']:.3f} | {ebal} | {ratio} | "
                     f"{r.get('loadavg_1min', float('nan')):.1f} |")
    lines += ["", "Targets per cell, GREM against the others in the same (family, format): "
              "peak RSS <= 0.2x METIS and <= 0.5x KaMinPar default, time (grem-cli) <= 0.5x "
              "METIS, cut <= 1.03x METIS.", ""]
    for (fam, fmt, tool), r in sorted(last.items()):
        if tool != "grem-cli" or "error" in r:
            continue
        mt, kd = last.get((fam, fmt, "metis")), last.get((fam, fmt, "kaminpar-default"))
        g = last.get((fam, fmt, "grem"), r)
        parts = []
        if mt and "error" not in mt:
            parts.append(f"RSS {r['peak_rss_mib'] / mt['peak_rss_mib']:.2f}x METIS")
            parts.append(f"time {r['seconds'] / mt['seconds']:.2f}x METIS")
            parts.append(f"cut {g['edge_cut_fraction'] / mt['edge_cut_fraction']:.3f}x METIS")
        if kd and "error" not in kd:
            parts.append(f"RSS {r['peak_rss_mib'] / kd['peak_rss_mib']:.2f}x KaMinPar-default")
        if parts:
            lines.append(f"- {fam} ({fmt}): " + ", ".join(parts))
    out_md.write_text("\n".join(lines) + "\n")


EFFORT_TOOLS = ("grem-fast", "grem-default", "grem-best")


def _effort_report(recs, out_md: Path, k: int) -> None:
    """Per family and format: each GREM effort's time, cut and peak RSS against METIS and
    KaMinPar (default preset, one thread) measured in the same sweep, the geometric means over
    the families, and each GREM cell's phase breakdown."""
    last = {}
    for r in recs:
        last[(r["family"], r["format"], r["tool"])] = r
    cells = sorted({(f, fmt) for f, fmt, _ in last})
    efforts = [t for t in EFFORT_TOOLS + tuple(f"grem-cli-{e}" for e in ("fast", "default", "best"))
               if any(t == tl for _, _, tl in last)]
    if not efforts:
        return
    loads = [r.get("loadavg_1min") for r in last.values() if r.get("loadavg_1min") is not None]
    reps = max((len(r.get("repeat_seconds") or ()) for r in last.values()), default=1)
    lines = [f"# GREM effort levels against METIS and KaMinPar (rebuilt {time.strftime('%Y-%m-%d %H:%M')})", "",
             f"k = {k}, eps 0.03, file order, one process per cell, one cell at a time. GREM on "
             "every core (threads as recorded), METIS (pymetis) and KaMinPar (default preset) on "
             "one thread. Times: the partitioning call, including reading the input and "
             "regrouping an edge list for GREM and METIS; KaMinPar's excludes loading its ParHIP "
             "file. Peak RSS: the process's. 1-minute load average over the cells: "
             + (f"{min(loads):.1f} to {max(loads):.1f}" if loads else "-")
             + " (2 cores shared with other work): ratios are within one sweep, never across."
             + (f" Each cell: the run of median time of {reps} (every tool alike; the others' seconds in "
                "the JSONL's `repeat_seconds`)." if reps > 1 else ""), "",
             "| family | format | tool | s | cut % | peak MiB | time / METIS | time / KaMinPar | "
             "cut / METIS | cut / KaMinPar | RSS / METIS | load |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    ratios = {t: {"t_m": [], "t_k": [], "c_m": [], "c_k": [], "r_m": []} for t in efforts}
    for fam, fmt in cells:
        mt, kp = last.get((fam, fmt, "metis")), last.get((fam, fmt, "kaminpar-default"))
        mt = mt if mt and "error" not in mt else None
        kp = kp if kp and "error" not in kp else None
        for tool in ("metis", "kaminpar-default") + tuple(efforts):
            r = last.get((fam, fmt, tool))
            if r is None:
                continue
            if "error" in r:
                lines.append(f"| {fam} | {fmt} | {tool} | error: {r['error'][:60]} | | | | | | | | |")
                continue
            def rat(a, b):
                return a / b if a and b else None
            tm = rat(r["seconds"], mt and mt["seconds"])
            tk = rat(r["seconds"], kp and kp["seconds"])
            cm = rat(r["edge_cut_fraction"], mt and mt["edge_cut_fraction"])
            ck = rat(r["edge_cut_fraction"], kp and kp["edge_cut_fraction"])
            rm = rat(r["peak_rss_mib"], mt and mt["peak_rss_mib"])
            if tool in ratios:
                for key, v in (("t_m", tm), ("t_k", tk), ("c_m", cm), ("c_k", ck), ("r_m", rm)):
                    if v:
                        ratios[tool][key].append(v)
            lines.append(f"| {fam} | {fmt} | {tool} | {r['seconds']:.1f} | {100 * r['edge_cut_fraction']:.3f} | "
                         f"{r['peak_rss_mib']:,.0f} | {_fmt(tm)} | {_fmt(tk)} | {_fmt(cm, 3)} | "
                         f"{_fmt(ck, 3)} | {_fmt(rm)} | {r.get('loadavg_1min', float('nan')):.1f} |")
    lines += ["", "Geometric means over the cells above (goals of issue 43: default time <= 0.25x "
              "METIS and <= 1x KaMinPar, cut <= 1.00x METIS, RSS <= 0.2x METIS; fast time <= "
              "0.125x METIS, cut <= 1.10x METIS):", "",
              "| effort | time / METIS | time / KaMinPar | cut / METIS | cut / KaMinPar | RSS / METIS | cells |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for t in efforts:
        q = ratios[t]
        lines.append(f"| {t} | {_fmt(_geomean(q['t_m']), 3)} | {_fmt(_geomean(q['t_k']), 3)} | "
                     f"{_fmt(_geomean(q['c_m']), 3)} | {_fmt(_geomean(q['c_k']), 3)} | "
                     f"{_fmt(_geomean(q['r_m']), 3)} | {len(q['c_m'])} |")
    names = ("open", "regroup", "lp_clustering", "cluster_graph", "coarse_partition", "refinement",
             "greedy_check", "other", "evaluate")
    lines += ["", "Where GREM's time goes (seconds per phase; `evaluate` is the closing cut/balance "
              "pass, outside the timed call):", "",
              "| family | format | tool | threads | " + " | ".join(names) + " |",
              "|---|---|---|---:|" + "---:|" * len(names)]
    for fam, fmt in cells:
        for tool in efforts:
            r = last.get((fam, fmt, tool))
            if not r or "error" in r or not r.get("phases"):
                continue
            ph = r["phases"]
            lines.append(f"| {fam} | {fmt} | {tool} | {r.get('threads', '-')} | "
                         + " | ".join(_fmt(ph.get(x), 1) for x in names) + " |")
    out_md.write_text("\n".join(lines) + "\n")


# --------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--graphs", default="all", help="comma list of dataset names, or 'all'")
    ap.add_argument("--methods", default="grem,fennel,ldg,metis",
                    help="comma list; add kaminpar (or kaminpar-fast/-strong) if installed")
    ap.add_argument("--ks", default="2,4,8,16,32")
    ap.add_argument("--order", default="file", choices=["file", "random", "degree"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eps", type=float, default=0.03)
    ap.add_argument("--chunk-edges", type=int, default=1 << 16,
                    help="stream chunk (stored entries); small on purpose so that every graph "
                         "but cora is streamed in several chunks")
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--append", action="store_true", help="append to the jsonl, then re-report")
    ap.add_argument("--rerun", action="store_true",
                    help="with --append: run the --methods cells again, replacing their records; "
                         "with --sweep: run the --sweep-tools cells again (the report keeps the last record)")
    ap.add_argument("--scale", action="store_true")
    ap.add_argument("--scale-n", type=int, default=10_000_000)
    ap.add_argument("--scale-m", type=int, default=100_000_000)
    ap.add_argument("--scale-k", type=int, default=16)
    ap.add_argument("--scale-chunk", type=int, default=1 << 21)
    ap.add_argument("--scale-dir", default="/tmp/argosy_scale")
    ap.add_argument("--scale-format", choices=("npy", "npz"), default="npy",
                    help="with --scale: partition the edge list or its CSR .npz twin (written "
                         "once, streamed)")
    ap.add_argument("--scale-grem-only", action="store_true",
                    help="with --scale: run GREM only (e.g. the 1B-edge graph METIS cannot hold)")
    # worker
    ap.add_argument("--sweep", action="store_true", help="graph-family sweep (see sweep_mode)")
    ap.add_argument("--sweep-families", default="all")
    ap.add_argument("--paired", action="store_true",
                    help="with --sweep: GREM end to end, then METIS, back to back per family (.npy)")
    ap.add_argument("--sweep-tools", default="all", help="comma list of " + ",".join(SWEEP_TOOLS))
    ap.add_argument("--sweep-formats", default="npy,npz")
    ap.add_argument("--sweep-repeats", type=int, default=1,
                    help="run every cell this many times (each tool alike) and keep the run of median time")
    ap.add_argument("--sweep-n", type=int, default=2_000_000)
    ap.add_argument("--sweep-m", type=int, default=20_000_000)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--graph", help=argparse.SUPPRESS)
    ap.add_argument("--graph-name", help=argparse.SUPPRESS)
    ap.add_argument("--method", help=argparse.SUPPRESS)
    ap.add_argument("--k", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        sys.path.insert(0, str(ROOT))
        _worker(args)
        return 0
    if args.scale:
        scale_mode(args)
        return 0
    if args.sweep:
        (paired_mode if args.paired else sweep_mode)(args)
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.graphs == "all":
        graphs = sorted(p.stem for p in DATASETS.glob("*.npz"))
    else:
        graphs = args.graphs.split(",")
    methods = args.methods.split(",")
    ks = [int(x) for x in args.ks.split(",")]
    jl = out / "partition.jsonl"
    records = []
    if args.append and jl.exists():
        records = [json.loads(x) for x in jl.read_text().splitlines() if x.strip()]
    done = {(r["graph"], r["method"], r["k"]) for r in records if "error" not in r}
    if args.rerun:
        done = {d for d in done if d[1] not in methods}
    for g in graphs:
        path = DATASETS / f"{g}.npz"
        for k in ks:
            for m in methods:
                if (g, m, k) in done:
                    continue
                r = run_one(str(path), g, m, k, args.order, args.seed, args.eps,
                            args.chunk_edges, args.timeout)
                records = [x for x in records if (x["graph"], x["method"], x["k"]) != (g, m, k)]
                records.append(r)
                msg = r.get("error") or (f"cut={r['edge_cut']} ({100 * r['edge_cut_fraction']:.3f}%)"
                                         f" bal={r['balance']:.3f} t={r['seconds']:.2f}s "
                                         f"rss={r['peak_rss_mib']:.0f}MiB")
                print(f"{g:13s} {m:8s} k={k:3d} {msg}", flush=True)
                with open(jl, "w") as f:
                    for x in records:
                        f.write(json.dumps(x) + "\n")
    header = (f"# Partitioner benchmark\n\nOrder: **{args.order}** (streaming methods see "
              f"vertices/chunks in this order), eps={args.eps}, seed={args.seed}, "
              f"chunk_edges={args.chunk_edges}, one run per cell, single process per run "
              f"(2-core shared machine). Generated {time.strftime('%Y-%m-%d %H:%M')} by "
              f"`python bench/partition.py {' '.join(argv if argv is not None else sys.argv[1:])}`.")
    summary = write_report(records, out / "partition.md", out / "partition_cut_vs_k.png", header)
    for m, s in summary.items():
        print(f"{m}: geomean cut/METIS (k=8,16,32) = {s['geomean_ratio_k8_16_32']:.3f}, "
              f"worst {s['worst_ratio']:.3f} at {s['worst_at']}")
    return 0


class _RusagePopen(subprocess.Popen):
    """Popen that records the child's peak RSS (KiB) from ``os.wait4`` when it is reaped."""

    def _try_wait(self, wait_flags):
        try:
            pid, sts, ru = os.wait4(self.pid, wait_flags)
        except ChildProcessError:
            pid, sts, ru = self.pid, 0, None
        if pid == self.pid and ru is not None:
            self._argosy_rusage = ru.ru_maxrss
        return (pid, sts)


if __name__ == "__main__":
    sys.exit(main())
