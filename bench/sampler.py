"""Sampler benchmark: Argosy's ``SamplerCore`` against DGL's ``NeighborSampler`` on one core.

For each graph (a social, a citation and a road network by default) the same seed batches are
sampled with fanouts 15,10,5 (DGL's order, input layer first: the seeds get 5 neighbours) and
batch 1024 by
  - DGL 2.1 in its own interpreter (``bench/sampler_dgl.py`` run by ``--dgl-python``),
  - this tree's sampler, and, with ``--baseline REF``, the sampler of git revision ``REF`` (``git
    archive`` into a temporary folder), so that before and after are measured in the same run.
Every side runs in its own process pinned to one core (``taskset``, one torch / numba / OpenMP
thread), samples every batch ``--passes`` times and keeps each batch's smallest CPU time (the
process's, ``time.process_time``: on a shared machine wall time measures the scheduler as much as
the sampler); sides alternate over ``--rounds`` rounds and each keeps its best round.  Reported: sampled edges per second (all blocks of a batch), the
ratio Argosy / DGL and the edges per batch of each side ("same edges per batch": both draw
min(degree, fanout) neighbours of every vertex of the previous layers, without replacement).
Writes bench/results/sampler.{json,md}.  Never asserts.

Usage: python bench/sampler.py [--graphs soc-slashdot,pubmed,road-ny] [--baseline 6710e0c]
           [--dgl-python /work/dgl-venv/bin/python] [--quick]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results"
from argosy.shared.envs import datasets_dir  # noqa: E402

DATASETS = datasets_dir()


def graph_path(name: str) -> Path:
    p = Path(name) if name.endswith(".npz") else DATASETS / f"{name}.npz"
    if not p.exists():
        raise SystemExit(f"graph {name!r}: expected a .npz path or a name in {DATASETS} (no {p})")
    return p


def make_store(graph: Path, work: Path) -> Path:
    """One-part store of ``graph`` (the whole topology in one CSR, as DGL holds it)."""
    from argosy.shared.graphio import load_graph
    from argosy.shared.store.writer import write_store
    out = work / f"store-{graph.stem}"
    if not (out / "manifest.json").exists():
        g = load_graph(graph)
        write_store(g, np.zeros(g.num_nodes, np.int64), out, num_parts=1, overwrite=True)
    return out


def shim(tree: Path, work: Path) -> Path:
    """A folder whose ``argosy`` package is ``tree``'s (the repository maps shared/ and services/ in)."""
    top = work / f"shim-{tree.name}" / "argosy"
    if not top.exists():
        top.mkdir(parents=True)
        for entry in (tree / "argosy").iterdir():
            if entry.name != "__pycache__":
                (top / entry.name).symlink_to(entry)
        (top / "shared").symlink_to(tree / "shared")
        (top / "services").symlink_to(tree / "services")
    return top.parent


WORKER = r"""
import json, sys, time
sys.path.insert(0, {shim!r})
import numpy as np
import argosy.services.sampler.core as C
from argosy.shared.store import PartitionStore
assert C.__file__.startswith({shim!r}), C.__file__          # the tree asked for, not the installed one
core = C.SamplerCore(PartitionStore({store!r}))
seeds = np.load({seeds!r})
fan = tuple({fanouts!r})
core.sample(seeds[0], fan, 0)                                       # compile / load the numba cache
best = np.full(len(seeds), np.inf)
for _ in range({passes}):
    for i, s in enumerate(seeds):
        t0 = time.process_time()
        b = core.sample(s, fan, i)
        best[i] = min(best[i], time.process_time() - t0)
edges = [int(core.sample(s, fan, i).num_sampled_edges) for i, s in enumerate(seeds)]
print(json.dumps({{"seconds": float(best.sum()), "edges": edges}}))
"""


def pinned(cpu: int) -> tuple[list[str], dict]:
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", MKL_NUM_THREADS="1", DGLBACKEND="pytorch")
    return ["taskset", "-c", str(cpu)], env


def run_json(cmd: list[str], env: dict) -> dict:
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} ... failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def argosy_side(tree: Path, work: Path, store: Path, seeds: Path, fanouts, passes: int, cpu: int) -> dict:
    pre, env = pinned(cpu)
    code = WORKER.format(shim=str(shim(tree, work)), store=str(store), seeds=str(seeds),
                         fanouts=list(fanouts), passes=passes)
    return run_json(pre + [sys.executable, "-c", code], env)


def dgl_side(python: str, graph: Path, seeds: Path, fanouts, passes: int, cpu: int) -> dict:
    pre, env = pinned(cpu)
    return run_json(pre + [python, str(ROOT / "bench" / "sampler_dgl.py"), str(graph), str(seeds),
                           "--fanouts", ",".join(map(str, fanouts)), "--passes", str(passes)], env)


def baseline_tree(ref: str, work: Path) -> Path:
    rev = subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    tree = work / f"baseline-{rev}"
    if not tree.exists():
        tree.mkdir()
        archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--graphs", default="soc-slashdot,pubmed,road-ny", help="names in the datasets folder or .npz paths")
    ap.add_argument("--fanouts", default="15,10,5", help="DGL's order (input layer first)")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpu", type=int, default=1, help="the core every side is pinned to")
    ap.add_argument("--baseline", default=None, help="git revision whose sampler is measured as 'before'")
    ap.add_argument("--dgl-python", default="/work/dgl-venv/bin/python")
    ap.add_argument("--work", default=None, help="folder for stores and seeds, kept (default: a temporary one, removed)")
    ap.add_argument("--quick", action="store_true", help="10 batches, 2 passes, 1 round")
    a = ap.parse_args()
    a.load_avg = os.getloadavg()[0]
    if a.quick:
        a.batches, a.passes, a.rounds = 10, 2, 1
    dgl_fanouts = [int(f) for f in a.fanouts.split(",")]
    argosy_fanouts = dgl_fanouts[::-1]                     # Argosy lists the seeds' hop first
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="argosy-sampler-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    sides = {"after": ROOT}
    if a.baseline:
        sides["before"] = baseline_tree(a.baseline, work)
    rows = []
    for name in a.graphs.split(","):
        graph = graph_path(name)
        store = make_store(graph, work)
        n = int(np.load(graph)["indptr"].shape[0] - 1)
        rng = np.random.default_rng(0)
        seeds = work / f"seeds-{graph.stem}.npy"
        np.save(seeds, np.stack([rng.permutation(n)[:a.batch] for _ in range(a.batches)]).astype(np.int64))
        res: dict[str, dict] = {}
        for _ in range(a.rounds):
            got = {"dgl": dgl_side(a.dgl_python, graph, seeds, dgl_fanouts, a.passes, a.cpu)}
            for side, tree in sides.items():
                got[side] = argosy_side(tree, work, store, seeds, argosy_fanouts, a.passes, a.cpu)
            for side, r in got.items():
                if side not in res or r["seconds"] < res[side]["seconds"]:
                    res[side] = r
        row = {"graph": graph.stem, "nodes": n, "edges": int(np.load(graph)["indptr"][-1] // 2)}
        for side, r in res.items():
            row[f"{side}_edges_per_batch"] = float(np.mean(r["edges"]))
            row[f"{side}_edges_per_second"] = float(np.sum(r["edges"]) / r["seconds"])
            row[f"{side}_ms_per_batch"] = 1e3 * r["seconds"] / len(r["edges"])
        for side in sides:
            row[f"{side}_ratio"] = row[f"{side}_edges_per_second"] / row["dgl_edges_per_second"]
        if "before" in res:
            row["before_after_same_batches"] = res["before"]["edges"] == res["after"]["edges"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    report(rows, a, sides)
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)


def report(rows: list[dict], a, sides: dict) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "load_avg": a.load_avg, "cpu": a.cpu,
            "fanouts_dgl_order": a.fanouts, "batch": a.batch, "batches": a.batches, "passes": a.passes,
            "rounds": a.rounds, "baseline": a.baseline}
    (OUT / "sampler.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    before = "before" in sides
    head = "| graph | n | m | DGL Medges/s | " + ("before Medges/s | before / DGL | " if before else "") + \
        "Argosy Medges/s | Argosy / DGL | edges/batch DGL | edges/batch Argosy |"
    lines = [f"# Sampler benchmark ({meta['date']}, one core pinned, load avg at start {meta['load_avg']:.1f})", "",
             f"Fanouts {a.fanouts} (DGL's order), batch {a.batch}, {a.batches} batches; CPU time, best of {a.passes} "
             f"passes per batch and of {a.rounds} rounds" + (f"; before = `{a.baseline}`" if before else "") + ".", "",
             head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        cells = [r["graph"], f"{r['nodes']:,}", f"{r['edges']:,}", f"{r['dgl_edges_per_second'] / 1e6:.1f}"]
        if before:
            cells += [f"{r['before_edges_per_second'] / 1e6:.1f}", f"{r['before_ratio']:.2f}x"]
        cells += [f"{r['after_edges_per_second'] / 1e6:.1f}", f"**{r['after_ratio']:.2f}x**",
                  f"{r['dgl_edges_per_batch']:,.0f}", f"{r['after_edges_per_batch']:,.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    (OUT / "sampler.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
