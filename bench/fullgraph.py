"""Full-graph training bench: exactness, offload vs in-memory, Belady vs LRU, SAR memory per worker.

Why this file exists: issue 5's goals are ratios measured on this machine:
offloaded epoch time <= 1.5x in-memory at peak memory <= 0.3x; Belady beats
LRU on hit rate and bytes moved; SAR peak memory per worker ~1/N (<= 1.3/N)
of single-process full-batch training; gradients equal to in-memory (1e-5).

Every training measurement runs ``argosy train --store ... --mode fullgraph|sar|memory --json``
in a fresh process, so peak RSS is that run's alone. Memory is reported
"above imports" (peak RSS minus RSS after importing torch/numba and building an
optimizer), as in ``sar_measured.md``. The bench graph is road-ny (264k vertices)
with random 64-d features and 8 random classes (accuracy on it is meaningless;
it is a systems workload), partitioned with GREM by ``argosy partition`` into
stores in a temporary directory, never into the repo.

Usage::

    python bench/fullgraph.py                 # all sections
    python bench/fullgraph.py --sections exactness,sar --epochs 4
    python bench/fullgraph.py --sections accuracy --acc-dir DIR   # JSON lines of `argosy train --mode ...`
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from argosy.services.trainer.fullgraph.synthetic import with_random_features  # noqa: E402
from argosy.shared.graphio import load_graph, save_graph_npz  # noqa: E402

logger = logging.getLogger("bench.fullgraph")
from argosy.shared.envs import datasets_dir  # noqa: E402

DATASETS = str(datasets_dir())
MiB = 2**20


def _load() -> float:
    return os.getloadavg()[0]


def cache_flag(cache: str) -> list[str]:
    """``--cache-bytes CACHE``, or nothing for ``auto`` (the default a user runs with)."""
    return [] if cache == "auto" else ["--cache-bytes", cache]


def cli(args: list[str], timeout: int = 3600) -> dict:
    """Run one ``argosy train`` in a fresh process and return its JSON line, plus the whole-process
    peak as ``/usr/bin/time`` reports it (``whole_peak_rss_bytes``: ``ru_maxrss`` of the child and
    the descendants it waited for, i.e. the launcher and the training process)."""
    run_dir = tempfile.mkdtemp(prefix="bench-fg-run-")
    cmd = [sys.executable, "-W", "ignore", "-m", "argosy.services.launch", "train", *args, "--patience", "0",
           "--run-dir", run_dir, "--json"]
    t0 = time.time()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=err, text=True)
        try:
            _, status, ru = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            raise
        out.seek(0)
        err.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{err.read()[-3000:]}")
        res = json.loads(out.read().strip().splitlines()[-1])
    res["whole_peak_rss_bytes"] = ru.ru_maxrss * 1024
    res["wall_seconds"] = time.time() - t0
    res["loadavg_after"] = _load()
    logger.info("%s -> %.2f s/epoch, whole-process peak %.0f MiB, %.0f MiB above imports", " ".join(args[:8]),
                steady_epoch(res), res["whole_peak_rss_bytes"] / MiB, above(res) / MiB)
    return res


def steady_epoch(res: dict) -> float:
    """Median epoch time excluding the first (JIT load, cold page cache)."""
    ts = res.get("epoch_seconds_all") or [res["epoch_seconds"]]
    return float(statistics.median(ts[1:] if len(ts) > 1 else ts))


def above(res: dict) -> int:
    return int(res["peak_rss_bytes"] - res["base_rss_bytes"])


# ---------------------------------------------------------------------------- sections
def section_exactness() -> dict:
    """Max relative gradient error vs in-memory on Cora (dropout 0): offload P=1,4,16, SAR N=1,2,4 from a GREM store."""
    from dataclasses import asdict

    from argosy.services.trainer.fullgraph.fullgraph import OffloadTrainer
    from argosy.services.trainer.fullgraph.graph import build_plan, load_store_graph
    from argosy.services.trainer.fullgraph.inmemory import InMemoryTrainer
    from argosy.services.trainer.fullgraph.model import full_graph_model, flat_grads
    from argosy.services.trainer.fullgraph.sar import SARJob, launch_sar_jobs
    from argosy.services.offload.store import OffloadStore
    from argosy.shared.config import FullGraphConfig, JobConfig, TrainerConfig
    from argosy.shared.store.reader import PartitionStore

    tmp = tempfile.mkdtemp(prefix="bench-exact-")
    store = partition(os.path.join(DATASETS, "cora.npz"), os.path.join(tmp, "cora-grem4"), 4)
    g, _ = load_store_graph(PartitionStore(store), normalize=True)
    m = PartitionStore(store).manifest
    out: dict = {"graph": "cora (GREM store, 4 parts)", "offload": {}, "sar": {}}
    jobs, refs = [], {}
    for kind in ("gcn", "sage"):
        cfg = TrainerConfig(model=kind, hidden=16, dropout=0.0, normalize_features=True)
        m0, spec = full_graph_model(cfg, m.feature_dim, m.num_classes, 2, 1)
        InMemoryTrainer(spec, g, m0, 1).step(0)
        ref = refs[kind] = flat_grads(m0)
        for parts in (1, 4, 16):
            m1, _ = full_graph_model(cfg, m.feature_dim, m.num_classes, 2, 1)
            owner = (np.arange(g.num_nodes) * parts // g.num_nodes).astype(np.int32)
            plan = build_plan(g, owner, spec.aggr)
            with OffloadStore(2 << 20, spill_dir=os.path.join(tmp, f"{kind}{parts}")) as st:
                OffloadTrainer(spec, plan, g, st, m1, 1).step(0)
                stats = st.stats()
            got = flat_grads(m1)
            err = max(float((got[k] - ref[k]).norm() / ref[k].norm()) for k in ref)
            out["offload"][f"{kind}_P{parts}"] = {"max_rel_grad_err": err, "bytes_read": stats["bytes_read"],
                                                  "alpha": plan.expansion_ratio()}
        for n in (1, 2, 4):
            job = JobConfig(store=store, seed=1, num_trainers=n, trainer=cfg)
            jobs.append((kind, n, SARJob(job.to_json(), json.dumps(asdict(FullGraphConfig(mode="sar"))), n,
                                         os.path.join(tmp, f"sar{kind}{n}"), task="grads")))
    launch_sar_jobs([j for _, _, j in jobs])
    for kind, n, job in jobs:
        ref = refs[kind]
        z = np.load(os.path.join(job.out_dir, "grads_0.npz"))
        err = max(float(np.linalg.norm(z[k] - ref[k].numpy()) / float(ref[k].norm())) for k in ref)
        out["sar"][f"{kind}_N{n}"] = {"max_rel_grad_err": err}
    return out


def partition(data: str, out: str, parts: int) -> str:
    """A GREM store written by ``argosy partition`` (reused when it exists)."""
    if not os.path.exists(os.path.join(out, "manifest.json")):
        subprocess.run([sys.executable, "-m", "argosy.services.partitioner", data, "--parts", str(parts),
                        "--method", "grem", "--out", out, "--overwrite"], cwd=ROOT, check=True,
                       capture_output=True)
    return out


def bench_graph(path: str, dim: int = 64) -> str:
    """road-ny with random ``dim``-d features and 8 random classes (a systems workload)."""
    if not os.path.exists(path):
        g = load_graph(os.path.join(DATASETS, "road-ny.npz"))
        save_graph_npz(with_random_features(g, dim, 8, seed=0), path)
    return path


def generated_graph(path: str, nodes: int, dim: int) -> str:
    """``argosy generate``: a degree-corrected SBM with ``dim``-d class-dependent features."""
    if not os.path.exists(path):
        subprocess.run([sys.executable, "-m", "argosy.services.launch", "generate", "--nodes", str(nodes),
                        "--avg-degree", "4", "--feature-dim", str(dim), "--seed", "0", "--out", path],
                       cwd=ROOT, check=True, capture_output=True)
    return path


def road_graph(path: str, nodes: int, dim: int) -> str:
    """A road-like graph (:func:`~argosy.shared.synthetic.road_edge_chunks`: perturbed lattice, mean
    degree ~2.6) with random ``dim``-d features and 8 random classes, like road-ny's."""
    if not os.path.exists(path):
        from argosy.shared.graphio import csr_from_edges
        from argosy.shared.synthetic import road_edge_chunks

        src, dst = zip(*road_edge_chunks(nodes, seed=0))
        g = csr_from_edges(np.concatenate(src), np.concatenate(dst), num_nodes=nodes)
        save_graph_npz(with_random_features(g, dim, 8, seed=0), path)
    return path


def section_scale(graphs: dict[str, str], epochs: int, cache: str, common: list[str]) -> dict:
    """In-memory vs offloaded (Belady, ``cache``) on each graph: whole-process peaks, the memory
    breakdown of both, epoch times and the disk bandwidth the spill used."""
    spill = tempfile.mkdtemp(prefix="bench-scale-")
    out = {}
    for name, store in graphs.items():
        base = ["--store", store, "--epochs", str(epochs), *common]
        mem = cli(base + ["--mode", "memory"])
        off = cli(base + ["--mode", "fullgraph", *cache_flag(cache), "--spill-dir", spill])
        row = {"memory": mem, "offload": off,
               "time_ratio": steady_epoch(off) / steady_epoch(mem),
               "whole_ratio": off["whole_peak_rss_bytes"] / mem["whole_peak_rss_bytes"],
               "above_ratio": above(off) / above(mem)}
        if mem.get("epoch_cpu_seconds") and off.get("epoch_cpu_seconds"):
            row["cpu_ratio"] = off["epoch_cpu_seconds"] / mem["epoch_cpu_seconds"]
        out[name] = row
        logger.info("%s: offload %.2fx epoch time (%.2fx CPU), %.2fx whole-process peak, %.2fx above imports", name,
                    row["time_ratio"], row.get("cpu_ratio", 0), row["whole_ratio"], row["above_ratio"])
    return out


def _scale_md(res: dict, key: str = "scale") -> list[str]:
    """The scale section's tables; ``key`` ``scale_before``: an earlier run kept for comparison (its
    ``scale_before_workload`` says which code)."""
    sc = res[key]
    L = [f"## In-memory vs offload at scale{', before' if key != 'scale' else ''} "
         f"({res.get(key + '_workload', '')})", "",
         "Whole-process peak: `ru_maxrss` of `argosy train` and the training process it starts, as "
         "`/usr/bin/time` reports it. Above imports: the training process's peak minus its RSS after "
         "imports and kernel warm-up. Epoch: median of the epochs after the first. CPU s: the training "
         "process's CPU time (all its threads) in those epochs' steps, median: on a shared machine less "
         "sensitive to the load than wall time.", "",
         "| graph | run | units (alpha) | epoch s | x in-memory | CPU s | x | whole-process peak MiB | x in-memory | "
         "above imports MiB | x in-memory | disk MB/epoch | write MB/s | read MB/s | disk busy s/epoch | load after |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in sc.items():
        m, o = r["memory"], r["offload"]
        cm, co = m.get("epoch_cpu_seconds"), o.get("epoch_cpu_seconds")
        cpu = (f"{cm:.2f} | 1.00" if cm else "- | -"), (f"{co:.2f} | **{co / cm:.2f}**" if cm and co else "- | -")
        L.append(f"| {name} | in-memory | 1 | {steady_epoch(m):.2f} | 1.00 | {cpu[0]} | {m['whole_peak_rss_bytes'] / MiB:.0f} | "
                 f"1.00 | {above(m) / MiB:.0f} | 1.00 | | | | | {m.get('loadavg_after', 0):.1f} |")
        f = lambda v: "-" if v is None else f"{v:.0f}"  # noqa: E731
        L.append(f"| {name} | offload {o['cache_bytes'] / MiB:.0f} MiB cache | {o['parts']} ({o['alpha']:.2f}) | "
                 f"{steady_epoch(o):.2f} | **{r['time_ratio']:.2f}** | {cpu[1]} | {o['whole_peak_rss_bytes'] / MiB:.0f} | "
                 f"**{r['whole_ratio']:.2f}** | {above(o) / MiB:.0f} | {r['above_ratio']:.2f} | "
                 f"{o.get('disk_MB_per_epoch', 0):.0f} | {f(o.get('disk_write_MBps'))} | {f(o.get('disk_read_MBps'))} | "
                 f"{o.get('disk_seconds_per_epoch', 0):.1f} | {o.get('loadavg_after', 0):.1f} |")
    L += [""] + [f"Offload cache on {name}: {r['offload']['cache_bytes'] / MiB:.0f} MiB "
                 f"({r['offload'].get('cache_reason', '--cache-bytes')}); "
                 f"{r['offload'].get('unit_layout', str(r['offload']['parts']) + ' units')}"
                 + (f"; spill files on disk at most {r['offload']['spill_disk_peak_MB']:,.0f} MB"
                    if "spill_disk_peak_MB" in r["offload"] else "") + "." for name, r in sc.items()]
    L += ["", "Where the training process's peak goes (MiB; `compute` is the rest: the layers' tensors while they "
          "run, the whole graph's activations under autograd in-memory, one part's in the offloaded schedule, "
          "and allocator slack):", "",
          "| graph | run | peak | process baseline | graph | features | model+optimizer | activation cache | "
          "spill buffers | compute |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in sc.items():
        for run in ("memory", "offload"):
            b = r[run]["memory"]
            L.append(f"| {name} | {'in-memory' if run == 'memory' else 'offload'} | " + " | ".join(
                f"{b[k] / MiB:.0f}" for k in ("peak", "process_baseline", "graph", "features", "model_optimizer",
                                               "activation_cache", "spill_buffers", "compute")) + " |")
    L.append("")
    return L


def section_offload(data: str, epochs: int, parts: int, cache: str, common: list[str]) -> dict:
    spill = tempfile.mkdtemp(prefix="bench-spill-")
    base = ["--store", data, "--epochs", str(epochs), *common]
    runs = {"memory": cli(base + ["--mode", "memory"])}
    for name, extra in (("belady", ["--eviction", "belady"]), ("lru", ["--eviction", "lru"]),
                        ("belady_noprefetch", ["--eviction", "belady", "--no-prefetch"])):
        runs[name] = cli(base + ["--mode", "fullgraph", "--cache-bytes", cache,
                                 "--spill-dir", spill, *extra])
    mem = runs["memory"]
    out = {"runs": runs, "summary": {}}
    for name, r in runs.items():
        row = {"epoch_s": steady_epoch(r), "peak_above_imports_MiB": above(r) / MiB}
        if name != "memory":
            row.update(time_ratio=steady_epoch(r) / steady_epoch(mem), mem_ratio=above(r) / above(mem),
                       hit_rate=r["cache_hit_rate"], read_MiB_per_epoch=r["bytes_read"] / epochs / MiB,
                       written_MiB_per_epoch=r["bytes_written"] / epochs / MiB,
                       evictions_per_epoch=r["evictions"] / epochs, alpha=r["alpha"])
        out["summary"][name] = row
    act = sum(r for r in [runs["memory"]["num_nodes"] * d * 4 for d in runs["memory"]["dims"][:-1]])
    out["activation_bytes_per_pass"] = act
    return out


def section_pairs(data: str, epochs: int, parts: int, cache: str, common: list[str], rounds: int) -> dict:
    """In-memory and offloaded (Belady) runs back to back, ``rounds`` times: time ratios under equal load."""
    spill = tempfile.mkdtemp(prefix="bench-pairs-")
    base = ["--store", data, "--epochs", str(epochs), *common]
    rows = []
    for _ in range(rounds):
        m = cli(base + ["--mode", "memory"])
        o = cli(base + ["--mode", "fullgraph", "--cache-bytes", cache, "--spill-dir", spill])
        rows.append({"memory_epoch_s": steady_epoch(m), "offload_epoch_s": steady_epoch(o),
                     "time_ratio": steady_epoch(o) / steady_epoch(m), "mem_ratio": above(o) / above(m),
                     "memory_peak_MiB": above(m) / MiB, "offload_peak_MiB": above(o) / MiB,
                     "load": o["loadavg_after"]})
    return {"rows": rows, "median_time_ratio": float(np.median([r["time_ratio"] for r in rows])),
            "median_mem_ratio": float(np.median([r["mem_ratio"] for r in rows]))}


def section_sweep(data: str, epochs: int, parts: int, caches: list[str], common: list[str]) -> dict:
    """Hit rate and traffic of Belady vs LRU across cache budgets."""
    spill = tempfile.mkdtemp(prefix="bench-sweep-")
    rows = []
    for cache in caches:
        for ev in ("belady", "lru"):
            r = cli(["--store", data, "--epochs", str(epochs), *common, "--mode", "fullgraph",
                     "--cache-bytes", cache, "--spill-dir", spill, "--eviction", ev])
            rows.append({"cache": cache, "eviction": ev, "hit_rate": r["cache_hit_rate"],
                         "read_MiB_per_epoch": r["bytes_read"] / epochs / MiB,
                         "written_MiB_per_epoch": r["bytes_written"] / epochs / MiB,
                         "epoch_s": steady_epoch(r)})
    return {"rows": rows}


def section_sar(data: str, epochs: int, common: list[str], mem_ref: dict | None) -> dict:
    base = ["--store", data, "--epochs", str(epochs), *common]
    if mem_ref is None:
        mem_ref = cli(base + ["--mode", "memory"])
    out = {"memory_peak_above_imports_MiB": above(mem_ref) / MiB, "rows": {}}
    for n in (1, 2, 4):
        r = cli(base + ["--mode", "sar", "--trainers", str(n)])  # worker k owns parts p % n == k
        per = [p - b for p, b in zip(r["rank_peak_rss_bytes"], r["rank_base_rss_bytes"])]
        out["rows"][n] = {"max_worker_above_imports_MiB": max(per) / MiB,
                          "workers_above_imports_MiB": [x / MiB for x in per],
                          "ratio_vs_memory": max(per) / above(mem_ref), "goal_max_ratio": 1.3 / n,
                          "ideal_ratio": 1.0 / n, "epoch_s": steady_epoch(r), "alpha": r.get("alpha"),
                          "max_worker_peak_rss_MiB": max(r["rank_peak_rss_bytes"]) / MiB}
    return out


# ---------------------------------------------------------------------------- report
def section_cgroup(sizes: list[int], dim: int, parts: int, limit: str, cache: str, epochs: int,
                   common: list[str]) -> dict:
    """Each run alone in a cgroup-v1 memory cgroup of ``limit`` (page cache counted, no swap): generated
    DC-SBM graphs of growing size, in-memory then offloaded, until offload fails too.  Generating and
    partitioning run outside the cgroup (``bench/outofcore.py`` measures those under a limit)."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from outofcore import MemoryCgroup, parse_bytes, run_step, _json_line  # noqa: E402

    tmp, spill = tempfile.gettempdir(), tempfile.mkdtemp(prefix="bench-cgroup-spill-")
    cg = MemoryCgroup(parse_bytes(limit), name=f"argosy-fg-{os.getpid()}")
    out = {"limit_bytes": cg.limit, "rows": []}
    try:
        for n in sizes:
            npz = generated_graph(os.path.join(tmp, f"argosy-bench-dcsbm{n}-f{dim}.npz"), n, dim)
            store = partition(npz, npz[:-4] + f"-grem{parts}", parts)
            man = json.load(open(os.path.join(store, "manifest.json")))
            trained = {}
            for mode in ("memory", "fullgraph"):
                run_dir = tempfile.mkdtemp(prefix=f"bench-cgroup-{mode}-")
                argv = [sys.executable, "-W", "ignore", "-m", "argosy.services.launch", "train", "--store", store,
                        "--mode", mode, "--epochs", str(epochs), "--patience", "0", *common, "--run-dir", run_dir,
                        "--json"] + ([*cache_flag(cache), "--spill-dir", spill] if mode == "fullgraph" else [])
                log = Path(run_dir) / "bench.log"
                rec = run_step(f"{mode} {n}", argv, cg, log)
                r = _json_line(log.read_text())
                rec.update(nodes=n, edges=int(man.get("num_edges", 0)), mode=mode, trained=rec["rc"] == 0 and bool(r),
                           epoch_seconds=r.get("epoch_seconds"), test_accuracy=r.get("test_accuracy"),
                           feature_bytes=n * dim * 4)
                trained[mode] = rec["trained"]
                out["rows"].append(rec)
                logger.info("%s nodes, %s: %s (rc %s, cgroup peak %.0f MiB, OOM kills %s)", n, mode,
                            "trained" if rec["trained"] else "FAILED", rec["rc"],
                            rec.get("cgroup", {}).get("max_usage_bytes", 0) / MiB, rec.get("cgroup", {}).get("oom_kills"))
            if not trained["fullgraph"]:
                break
    finally:
        cg.close()
    return out


def _cgroup_md(res: dict) -> list[str]:
    c = res["cgroup"]
    L = [f"## Under a {c['limit_bytes'] / 2**30:.0f} GiB memory cgroup ({res.get('cgroup_workload', '')})", "",
         "Each run alone in a cgroup-v1 memory cgroup (`memory.limit_in_bytes`; page cache counted, no swap); "
         "generating and partitioning outside it. `cgroup peak`: `memory.max_usage_in_bytes`.", "",
         "| vertices | edges | features GiB | mode | outcome | epoch s | test acc. | peak RSS MiB | cgroup peak MiB | OOM kills |",
         "|---|---|---|---|---|---|---|---|---|---|"]
    for r in c["rows"]:
        cgr = r.get("cgroup", {})
        outcome = "trained" if r["trained"] else f"failed (rc {r['rc']})"
        ep = f"{r['epoch_seconds']:.1f}" if r.get("epoch_seconds") else "-"
        acc = f"{r['test_accuracy']:.3f}" if r.get("test_accuracy") is not None else "-"
        L.append(f"| {r['nodes']:,} | {r['edges']:,} | {r['feature_bytes'] / 2**30:.2f} | {r['mode']} | {outcome} | "
                 f"{ep} | {acc} | {r['peak_rss_bytes'] / MiB:.0f} | {cgr.get('max_usage_bytes', 0) / MiB:.0f} | "
                 f"{cgr.get('oom_kills', '-')} |")
    return L + [""]


def write_md(res: dict, path: str) -> None:
    L = ["# Full-graph training bench", "",
         f"Machine: {res['machine']}. Load average before/after: {res['load_before']:.1f} / "
         f"{res['load_after']:.1f} (2 cores shared with other engineers: times are loose).", ""]
    if "exactness" in res:
        e = res["exactness"]
        L += ["## Exactness (Cora GREM store, 2 layers, dropout 0, one step; max over parameters of ||g-g_ref||/||g_ref||)",
              "", "| config | max rel. grad error |", "|---|---|"]
        for k, v in e["offload"].items():
            L.append(f"| offload {k} (alpha {v['alpha']:.2f}) | {v['max_rel_grad_err']:.2e} |")
        for k, v in e["sar"].items():
            L.append(f"| SAR {k} | {v['max_rel_grad_err']:.2e} |")
        L.append("")
    if "offload" in res:
        o = res["offload"]
        L += [f"## Offload vs in-memory ({res['workload']})", "",
              "| run | epoch s | x in-memory | peak above imports MiB | x in-memory | hit rate | read MiB/epoch | "
              "written MiB/epoch | evictions/epoch |", "|---|---|---|---|---|---|---|---|---|"]
        for name, r in o["summary"].items():
            if name == "memory":
                L.append(f"| in-memory | {r['epoch_s']:.2f} | 1.00 | {r['peak_above_imports_MiB']:.0f} | 1.00 | | | | |")
            else:
                L.append(f"| offload {name} | {r['epoch_s']:.2f} | {r['time_ratio']:.2f} | "
                         f"{r['peak_above_imports_MiB']:.0f} | {r['mem_ratio']:.2f} | {r['hit_rate']:.3f} | "
                         f"{r['read_MiB_per_epoch']:.0f} | {r['written_MiB_per_epoch']:.0f} | "
                         f"{r['evictions_per_epoch']:.0f} |")
        L += ["", f"Activation bytes of one pass (layer inputs): {o['activation_bytes_per_pass'] / MiB:.0f} MiB; "
              f"cache budget {res['cache']}. Goals: time <= 1.5x, memory <= 0.3x.", ""]
    if "pairs" in res:
        L += ["## Back-to-back pairs (in-memory then offload Belady, same load)", "",
              "| round | in-memory s | offload s | time x | in-memory MiB | offload MiB | memory x | load |",
              "|---|---|---|---|---|---|---|---|"]
        for i, r in enumerate(res["pairs"]["rows"]):
            L.append(f"| {i} | {r['memory_epoch_s']:.2f} | {r['offload_epoch_s']:.2f} | {r['time_ratio']:.2f} | "
                     f"{r['memory_peak_MiB']:.0f} | {r['offload_peak_MiB']:.0f} | {r['mem_ratio']:.2f} | {r['load']:.1f} |")
        L += ["", f"Median time ratio {res['pairs']['median_time_ratio']:.2f}, median memory ratio "
              f"{res['pairs']['median_mem_ratio']:.2f}.", ""]
    if "sweep" in res:
        L += ["## Belady vs LRU across cache budgets", "",
              "| cache | eviction | hit rate | read MiB/epoch | written MiB/epoch | epoch s |", "|---|---|---|---|---|---|"]
        for r in res["sweep"]["rows"]:
            L.append(f"| {r['cache']} | {r['eviction']} | {r['hit_rate']:.3f} | {r['read_MiB_per_epoch']:.0f} | "
                     f"{r['written_MiB_per_epoch']:.0f} | {r['epoch_s']:.2f} |")
        L.append("")
    if "sar" in res:
        s = res["sar"]
        L += [f"## SAR peak memory per worker ({res['workload']})", "",
              f"Single-process in-memory full-batch: {s['memory_peak_above_imports_MiB']:.0f} MiB above imports.", "",
              "| N | max worker MiB above imports | x in-memory | goal (1.3/N) | ideal (1/N) | epoch s |",
              "|---|---|---|---|---|---|"]
        for n, r in s["rows"].items():
            L.append(f"| {n} | {r['max_worker_above_imports_MiB']:.0f} | {r['ratio_vs_memory']:.2f} | "
                     f"{r['goal_max_ratio']:.2f} | {r['ideal_ratio']:.2f} | {r['epoch_s']:.2f} |")
        L.append("")
    if "scale" in res:
        L += _scale_md(res)
    if "scale_before" in res:
        L += _scale_md(res, "scale_before")
    if "cgroup" in res:
        L += _cgroup_md(res)
    if "accuracy" in res:
        L += ["## Accuracy (GCN, `argosy train --mode fullgraph|sar --store GREM-STORE --model gcn` defaults: 2x16, "
              "dropout 0.5, lr 0.01, wd 5e-4, features row-normalised (auto), at most 200 epochs, stop after 20 epochs improving neither validation accuracy nor loss; "
              "test accuracy at the best-validation epoch; SAR with 2 workers)", "",
              "| dataset | mode | seeds | test acc. | mean | published | (best epoch, epochs run) |",
              "|---|---|---|---|---|---|---|"]
        for r in res["accuracy"]:
            L.append(f"| {r['dataset']} | {r['mode']} | {r['seeds']} | "
                     f"{', '.join(f'{x * 100:.1f}' for x in r['test'])} | {r['mean'] * 100:.2f} | {r['reference']} | "
                     f"{r.get('epochs', '')} |")
        L.append("")
    with open(path, "w") as f:
        f.write("\n".join(L))


def section_accuracy(seeds: list[int], acc_dir: str | None) -> list[dict]:
    """GCN with `argosy train` defaults from a GREM store (4 parts), best-validation test accuracy.

    ``acc_dir`` holds ``{dataset}-{mode}-{seed}.json`` result lines of earlier CLI runs (reused)."""
    rows = []
    tmp = tempfile.mkdtemp(prefix="bench-acc-")
    for ds, ref in (("cora", 81.5), ("citeseer", 70.3)):
        store = None
        for mode, extra in (("fullgraph", []), ("sar", ["--trainers", "2"])):
            accs, epochs = [], []
            for s in seeds:
                pre = os.path.join(acc_dir, f"{ds}-{mode}-{s}.json") if acc_dir else None
                if pre and os.path.exists(pre) and os.path.getsize(pre):
                    with open(pre) as f:
                        r = json.loads(f.read().strip().splitlines()[-1])
                else:
                    store = store or partition(os.path.join(DATASETS, f"{ds}.npz"), os.path.join(tmp, ds), 4)
                    out = subprocess.run([sys.executable, "-m", "argosy.services.launch", "train", "--mode", mode,
                                          "--store", store, "--model", "gcn", "--seed", str(s), *extra,
                                          "--run-dir", os.path.join(tmp, f"{ds}-{mode}-{s}"), "--json"],
                                         cwd=ROOT, capture_output=True, text=True, check=True)
                    r = json.loads(out.stdout.strip().splitlines()[-1])
                accs.append(r["test_accuracy"])
                epochs.append((r["best_epoch"], r["epochs"]))
            rows.append({"dataset": ds, "mode": mode, "seeds": seeds, "test": accs, "epochs": epochs,
                         "mean": float(np.mean(accs)), "reference": ref})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sections", default="exactness,offload,pairs,sweep,sar,accuracy,scale")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--parts", type=int, default=16, help="parts of the offload sections' store")
    ap.add_argument("--cache", default="64M")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--sweep-caches", default="32M,128M")
    ap.add_argument("--rounds", type=int, default=2, help="back-to-back in-memory/offload pairs")
    ap.add_argument("--acc-dir", default=None, help="reuse accuracy JSON lines already produced by the CLI")
    ap.add_argument("--scale-nodes", type=int, default=1_200_000, help="vertices of the generated graph (scale)")
    ap.add_argument("--scale-dim", type=int, default=128, help="feature width of the scale section's graphs")
    ap.add_argument("--scale-parts", type=int, default=16, help="GREM parts of the scale section's stores")
    ap.add_argument("--scale-cache", default="auto",
                    help="offload cache of the scale and cgroup sections (auto: the default `argosy train` sizes)")
    ap.add_argument("--scale-road-nodes", type=int, default=1_500_000, help="vertices of the road-like graph (scale)")
    ap.add_argument("--scale-graphs", default="generated,road,road@4,road-ny",
                    help="graphs of the scale section; NAME@K: its GREM store of K parts (default --scale-parts)")
    ap.add_argument("--cgroup-nodes", default="1200000,3000000,6000000",
                    help="cgroup section: generated graph sizes, tried in order until offload fails")
    ap.add_argument("--cgroup-limit", default="4G", help="cgroup section: memory.limit_in_bytes")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "fullgraph"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    secs = args.sections.split(",")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    prev = {}
    if os.path.exists(args.out + ".json"):
        with open(args.out + ".json") as f:
            prev = json.load(f)
    res = dict(prev)
    res.update(machine=f"{platform.node()} {os.cpu_count()} cores, {platform.processor() or platform.machine()}",
               load_before=_load())
    npz = bench_graph(os.path.join(tempfile.gettempdir(), "argosy-bench-roadny-f64.npz")) \
        if {"offload", "pairs", "sweep", "sar"} & set(secs) else ""
    tmp = tempfile.gettempdir()
    data = partition(npz, os.path.join(tmp, f"argosy-bench-roadny-grem{args.parts}"), args.parts) \
        if {"offload", "pairs", "sweep"} & set(secs) else ""
    sar_store = partition(npz, os.path.join(tmp, "argosy-bench-roadny-grem4"), 4) if "sar" in secs else ""
    common = ["--model", "gcn", "--fanouts=" + ",".join(["-1"] * args.layers), "--hidden", str(args.hidden), "--no-normalize-features",
              "--dropout", "0.5", "--lr", "0.01"]
    res["workload"] = (f"road-ny 264k vertices / 365k edges, random 64-d features, 8 classes, GCN {args.layers} "
                       f"layers x {args.hidden} hidden, dropout 0.5; GREM stores (offload P={args.parts}, SAR 4 parts)")
    res["cache"] = args.cache

    def save() -> None:
        res["load_after"] = _load()
        with open(args.out + ".json", "w") as f:
            json.dump(res, f, indent=1, default=str)
        write_md(res, args.out + ".md")

    if "exactness" in secs:
        res["exactness"] = section_exactness()
        save()
    if "offload" in secs:
        res["offload"] = section_offload(data, args.epochs, args.parts, args.cache, common)
        save()
    if "pairs" in secs:
        res["pairs"] = section_pairs(data, args.epochs, args.parts, args.cache, common, args.rounds)
        save()
    if "sweep" in secs:
        res["sweep"] = section_sweep(data, max(2, args.epochs - 1), args.parts, args.sweep_caches.split(","), common)
        save()
    if "sar" in secs:
        mem = res.get("offload", {}).get("runs", {}).get("memory")
        res["sar"] = section_sar(sar_store, args.epochs, common, mem)
        save()
    if "accuracy" in secs:
        res["accuracy"] = section_accuracy([0, 1, 2], args.acc_dir)
        save()
    if "scale" in secs:
        k, d = args.scale_parts, args.scale_dim
        graphs = {}
        for item in args.scale_graphs.split(","):
            name, _, kk = item.partition("@")  # NAME@K: that graph's store of K parts
            k = int(kk) if kk else args.scale_parts
            if name == "generated":
                npz = generated_graph(os.path.join(tmp, f"argosy-bench-dcsbm{args.scale_nodes}-f{d}.npz"),
                                      args.scale_nodes, d)
                graphs[f"generated DCSBM {args.scale_nodes / 1e6:.1f}M" + (f", {k} parts" if kk else "")] = \
                    partition(npz, npz[:-4] + f"-grem{k}", k)
            elif name == "road":
                npz = road_graph(os.path.join(tmp, f"argosy-bench-road{args.scale_road_nodes}-f{d}.npz"),
                                 args.scale_road_nodes, d)
                graphs[f"road-like {args.scale_road_nodes / 1e6:.1f}M" + (f", {k} parts" if kk else "")] = \
                    partition(npz, npz[:-4] + f"-grem{k}", k)
            elif name == "road-ny":
                npz = bench_graph(os.path.join(tmp, f"argosy-bench-roadny-f{d}.npz"), d)
                graphs["road-ny 264k" + (f", {k} parts" if kk else "")] = partition(npz, npz[:-4] + f"-grem{k}", k)
        scale_common = ["--model", "gcn", "--fanouts=-1,-1", "--hidden", "128", "--no-normalize-features",
                        "--dropout", "0.5", "--lr", "0.01"]
        res["scale_workload"] = (f"GCN 2 layers x 128 hidden, dropout 0.5, {d}-d features, GREM stores of "
                                 f"{args.scale_parts} parts (\"K parts\": K), offload cache {args.scale_cache}, "
                                 f"{args.epochs} epochs")
        res["scale"] = section_scale(graphs, args.epochs, args.scale_cache, scale_common)
        save()
    if "cgroup" in secs:
        cg_common = ["--model", "gcn", "--fanouts=-1,-1", "--hidden", "128", "--no-normalize-features",
                     "--dropout", "0.5", "--lr", "0.01"]
        res["cgroup_workload"] = (f"GCN 2 layers x 128 hidden, {args.scale_dim}-d features, GREM stores of "
                                  f"{args.scale_parts} parts, offload cache {args.scale_cache}, {args.epochs} epochs")
        res["cgroup"] = section_cgroup([int(x) for x in args.cgroup_nodes.split(",")], args.scale_dim,
                                       args.scale_parts, args.cgroup_limit, args.scale_cache, args.epochs, cg_common)
        save()
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
