"""Cut under a vertex *and* an edge limit: GREM's ``max_edge_balance`` against METIS.

Why this file exists: a GNN host's work and memory follow the edges of its part, and on
heavy-tailed graphs every vertex-balanced partitioner packs hubs (one part with several times
the mean edge count).  ``partition_stream(..., max_edge_balance=X)`` caps both; this measures
what the cap costs in cut, for GREM and for the two ways to get it from METIS: METIS's
vertex-balanced partition finished by the same streamed phase (:func:`edge_balance_phase`), and
METIS with vertex weights ``1 + degree`` (edge-balanced, any vertex balance) finished by it.
One process, cells one after another, so the seconds are comparable within a run only.

Usage::

    python bench/edge_balance.py                                   # 7 real graphs, k = 16, X = 1.1
    python bench/edge_balance.py --graphs soc-slashdot,/tmp/rmat.npz --ks 8,16 --limits 1.1,1.5
    python bench/edge_balance.py --render                          # rewrite the .md from the records
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
from argosy.shared.envs import datasets_dir  # noqa: E402

DATASETS = datasets_dir()
RESULTS = ROOT / "bench" / "results"
RECORDS = RESULTS / "edge_balance.jsonl"
REAL = "cora,citeseer,pubmed,ca-astroph,email-enron,soc-slashdot,road-ny"
CELLS = ("grem", "grem-limited", "metis+phase", "metis-degree+phase")


def _csr(stream):
    """Symmetric simple CSR of the stream (for METIS), int64."""
    n = int(stream.num_nodes)
    src, dst = zip(*[(s.astype(np.int64), d.astype(np.int64)) for s, d in stream])
    a, b = np.concatenate(src + dst), np.concatenate(dst + src)
    keep = a != b
    key = np.unique(a[keep] * n + b[keep])
    a, b = key // n, key % n
    xadj = np.zeros(n + 1, np.int64)
    np.add.at(xadj, a + 1, 1)
    return np.cumsum(xadj), b


def run_graph(path: str, ks, limits, eps: float = 0.03):
    import pymetis
    from argosy.services.partitioner.core import evaluate_partition, partition_stream
    from argosy.services.partitioner.edge_balance import edge_balance_phase
    from argosy.services.partitioner.file_streams import open_edge_stream

    stream = open_edge_stream(path)
    name = Path(path).name.split(".")[0]
    xadj, adj = _csr(stream)
    deg = np.diff(xadj)
    opts = pymetis.Options(ufactor=int(round(eps * 1000)), seed=0)
    for k in ks:
        t = time.perf_counter()
        metis = np.asarray(pymetis.part_graph(k, xadj=xadj, adjncy=adj, options=opts)[1], np.int32)
        t_metis = time.perf_counter() - t
        t = time.perf_counter()
        metis_deg = np.asarray(pymetis.part_graph(k, xadj=xadj, adjncy=adj, vweights=deg + 1,
                                                  options=opts)[1], np.int32)
        t_metis_deg = time.perf_counter() - t
        t = time.perf_counter()
        plain = partition_stream(stream, k, eps=eps)
        base = {"graph": name, "k": k, "n": int(stream.num_nodes)}
        yield dict(base, cell="grem", limit=None, seconds=time.perf_counter() - t,
                   cut=plain.edge_cut_fraction, balance=plain.balance,
                   edge_balance=plain.edge_balance)
        for x in limits:
            t = time.perf_counter()
            res = partition_stream(stream, k, eps=eps, max_edge_balance=x)
            el = res.details.get("edge_limited", {})
            yield dict(base, cell="grem-limited", limit=x, seconds=time.perf_counter() - t,
                       cut=res.edge_cut_fraction, balance=res.balance,
                       edge_balance=res.edge_balance, kept=el.get("kept", "vertex_balanced"))
            for cell, start, t0 in (("metis+phase", metis, t_metis),
                                    ("metis-degree+phase", metis_deg, t_metis_deg)):
                p = start.copy()
                t = time.perf_counter()
                info = edge_balance_phase(stream, p, k, eps, x)
                ev = evaluate_partition(stream, p, k)
                ev0 = evaluate_partition(stream, start, k)
                yield dict(base, cell=cell, limit=x, seconds=t0 + time.perf_counter() - t,
                           cut=ev["edge_cut_fraction"], balance=ev["balance"],
                           edge_balance=ev["edge_balance"], reached=info["reached"],
                           start_cut=ev0["edge_cut_fraction"], start_balance=ev0["balance"],
                           start_edge_balance=ev0["edge_balance"])


def render() -> str:
    rows = [json.loads(l) for l in RECORDS.read_text().splitlines() if l.strip()]
    latest = {}
    for r in rows:
        latest[(r["graph"], r["k"], r["cell"], r["limit"])] = r
    lines = ["# Cut under a vertex and an edge limit", "",
             "`python bench/edge_balance.py`: k blocks, vertex limit 1.03 for every cell, edge limit X "
             "(largest part's adjacency entries / mean). Cells: GREM without the edge limit; "
             "`partition_stream(..., max_edge_balance=X)` (GREM's two runs, the lower cut kept); "
             "METIS's partition, then the same streamed phase; METIS with vertex weights 1 + degree, "
             "then the phase. Cut % / edge balance; ✗ = the phase could not reach X.", ""]
    keys = sorted({(g, k, l) for (g, k, c, l) in latest if l is not None})
    lines += ["| graph | k | X | GREM (no edge limit) | GREM, edge limit | METIS + phase | "
              "METIS degree-weighted + phase | GREM / best METIS |", "|---|---|---|---|---|---|---|---|"]
    for g, k, x in keys:
        cells = []
        plain = latest.get((g, k, "grem", None))
        cells.append(f"{100 * plain['cut']:.2f} / {plain['edge_balance']:.2f}" if plain else "–")
        best = None
        for c in ("grem-limited", "metis+phase", "metis-degree+phase"):
            r = latest.get((g, k, c, x))
            if r is None:
                cells.append("–")
                continue
            bad = "" if r.get("reached", True) else " ✗"
            cells.append(f"{100 * r['cut']:.2f} / {r['edge_balance']:.2f}{bad}")
            if c != "grem-limited" and r.get("reached", True):
                best = r["cut"] if best is None else min(best, r["cut"])
        gl = latest.get((g, k, "grem-limited", x))
        ratio = f"{gl['cut'] / best:.3f}" if gl and best else "–"
        lines.append(f"| {g} | {k} | {x} | " + " | ".join(cells) + f" | {ratio} |")
    commits = sorted({r.get("commit", "?") for r in latest.values()})
    lines += ["", f"Commits: {', '.join(commits)}."]
    return "\n".join(lines) + "\n"


def _commit() -> str:
    p = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return p.stdout.strip() or "unknown"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", default=REAL, help="dataset names or paths (comma-separated)")
    ap.add_argument("--ks", default="16")
    ap.add_argument("--limits", default="1.1", help="edge limits X (comma-separated)")
    ap.add_argument("--render", action="store_true", help="only rewrite the .md from the records")
    args = ap.parse_args(argv)
    if not args.render:
        RESULTS.mkdir(parents=True, exist_ok=True)
        ks = [int(k) for k in args.ks.split(",")]
        limits = [float(x) for x in args.limits.split(",")]
        commit = _commit()
        for g in args.graphs.split(","):
            path = g if os.path.exists(g) else str(DATASETS / f"{g}.npz")
            for rec in run_graph(path, ks, limits):
                rec.update(commit=commit, load_avg=os.getloadavg()[0])
                with open(RECORDS, "a") as f:
                    f.write(json.dumps(rec) + "\n")
                print(f"{rec['graph']} k={rec['k']} {rec['cell']:18s} X={rec['limit']}: cut "
                      f"{100 * rec['cut']:.2f} % balance {rec['balance']:.3f} edge balance "
                      f"{rec['edge_balance']:.2f} ({rec['seconds']:.1f} s)", flush=True)
    (RESULTS / "edge_balance.md").write_text(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
