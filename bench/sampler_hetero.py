"""Typed sampler benchmark: Argosy's ``SamplerCore`` on a typed store against DGL 2.1's heterograph
``NeighborSampler``, one core each.

The graph is ``mag_like(num_papers)`` (ogbn-mag-shaped: paper, author, institution, field_of_study;
writes, cites, has_topic, affiliated_with), written as a one-part typed store with the reverse
relations (``rev_<r>``: 8 relations).  DGL gets ``dgl.heterograph`` of exactly the store's entries
(one edge type per store relation, entry ``(d, s, r)`` = edge ``s -> d`` of ``r``; the store drops
duplicate ``(d, s, r)`` entries, so DGL gets none either): every vertex has the same
in-neighbourhood, edge for edge, on both sides.  Seeds: ``--batches`` disjoint batches of
``--batch`` training papers (one shuffled pass over the train split).

What each side samples, per hop, for every vertex reached so far (seeds included, as DGL's blocks
do: a block's destinations are the previous block's sources):
  - Argosy: ``min(deg, F)`` distinct in-edges out of all of the vertex's typed in-edges together
    (uniform over the whole row, whatever the relation); each sampled edge carries its relation;
  - DGL, ``int`` fanout ``F``: ``min(deg_r, F)`` distinct in-edges *per relation* ``r`` (up to
    ``F`` x the number of relations into the vertex's type: 4 for a paper), so it samples several
    times more edges per batch;
  - DGL, ``dict`` fanout ``{r: F_r}``: ``min(deg_r, F_r)`` per relation, ``F_r`` chosen per hop so
    that DGL's expected edges equal Argosy's actual ones on Argosy's own destinations (greedy per
    destination type, every relation at least 1), then each hop's target rescaled from a few untimed
    DGL runs on the first 10 batches until DGL's edges per batch come within 2 % of Argosy's (at most
    4 tries, the nearest kept): about the same edges per batch; both are reported.
Both sides de-duplicate the vertices of each hop and relabel them (Argosy: one frontier array;
DGL: ``to_block`` per layer).  Every side runs in its own process pinned to one core (``taskset``,
one torch / numba / OpenMP thread), samples every batch ``--passes`` times and keeps each batch's
smallest CPU time (``time.process_time``); sides alternate over ``--rounds`` rounds, each keeps its
best round.  Reported: sampled edges per CPU-second, Argosy / DGL, edges per batch; and a check
that every edge Argosy sampled, ``(dst, src, relation)``, is an entry of the store *and* an edge
of the generated graph in that relation (a reverse relation: the forward edge ``dst -> src``).
Writes bench/results/sampler_hetero.md (the table, the JSON line; a ``## Notes`` section already
there is kept); prints the JSON line and the table.

Usage: python bench/sampler_hetero.py [--num-papers 100000] [--fanouts 10,10]
           [--dgl-python /work/dgl-venv/bin/python] [--work DIR] [--quick] [--no-dgl]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results"
NOTES = "## Notes"


# ---- the graph, the store, the DGL export ----------------------------------------------------------
def make_store(num_papers: int, seed: int, work: Path):
    """``(TypedGraph, store path)``: ``mag_like`` and its one-part typed store (reused if present)."""
    from argosy.shared.synthetic_hetero import mag_like
    from argosy.shared.store.typed import write_typed_store
    t0 = time.perf_counter()
    tg = mag_like(num_papers=num_papers, seed=seed)
    gen_s = time.perf_counter() - t0
    out = work / f"store-mag-like-{num_papers}-s{seed}"
    t0 = time.perf_counter()
    if not (out / "manifest.json").exists():
        write_typed_store(tg, np.zeros(tg.total_nodes, np.int64), out, num_parts=1, overwrite=True)
    print(f"# mag_like({num_papers}): {tg.total_nodes:,} vertices, {tg.total_edges:,} edges, generated in {gen_s:.1f} s;"
          f" store {out} in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return tg, out


def store_entries(store_path: Path):
    """The one part's entries as global ``(row, nbr, rel)`` int64 arrays, plus the manifest's typing."""
    from argosy.shared.store import PartitionStore
    st = PartitionStore(store_path)
    if st.num_parts != 1:
        raise SystemExit("expected a one-part store")
    p = st.part(0)
    a = st.read_part(0, ("edge_type",))
    nodes = np.asarray(p.nodes, np.int64)
    indptr = np.asarray(p.indptr, np.int64)
    rows = np.repeat(nodes, np.diff(indptr))
    return rows, np.asarray(p.indices, np.int64), np.asarray(a["edge_type"], np.int64), st.manifest.typed, \
        int(st.manifest.num_nodes)


def export_dgl(rows, nbrs, rels, typed: dict, path: Path) -> None:
    """Per store relation ``(s_t, r, d_t)``: the type-local ``src`` (= neighbour) and ``dst`` (= row)."""
    off = {t: int(o) for t, o in zip(typed["node_types"], typed["type_offsets"])}
    cnt = {t: int(typed["type_offsets"][i + 1] - typed["type_offsets"][i]) for i, t in enumerate(typed["node_types"])}
    arrays = {}
    for i, (s, r, d) in enumerate(typed["relations"]):
        m = rels == i
        src, dst = nbrs[m] - off[s], rows[m] - off[d]
        if src.size and (src.min() < 0 or src.max() >= cnt[s] or dst.min() < 0 or dst.max() >= cnt[d]):
            raise SystemExit(f"relation {(s, r, d)}: store entries outside the types' id ranges")
        arrays[f"src{i}"], arrays[f"dst{i}"] = src, dst
    meta = {"relations": typed["relations"], "num_nodes": cnt}
    np.savez(path, meta=np.array(json.dumps(meta)), **arrays)


# ---- correctness of Argosy's relations ------------------------------------------------------------
def check_relations(batches, rows, nbrs, rels, tg, n: int) -> dict:
    """Every sampled ``(dst, src, rel)`` is a store entry and an edge of ``tg`` in ``rel``."""
    R = int(rels.max()) + 1 if rels.size else 0
    R0 = len(tg.relations)
    skey = np.sort((rows * n + nbrs) * R + rels)
    gs, gd, gr = tg.global_edges()
    gkey = np.sort((gs * n + gd) * R0 + gr.astype(np.int64))
    type_of = tg.node_type_of().astype(np.int64)
    typed_rels = [(tg.node_types.index(s), tg.node_types.index(d)) for s, _, d in tg.relations]
    typed_rels += [(d, s) for s, d in typed_rels]               # rev_r: (d_t, rev_r, s_t)
    rel_src_t = np.array([s for s, _ in typed_rels], np.int64)
    rel_dst_t = np.array([d for _, d in typed_rels], np.int64)
    total = bad_store = bad_graph = bad_types = 0
    for b in batches:
        src = b.nodes[b.edge_src].astype(np.int64)
        dst = b.nodes[b.edge_dst].astype(np.int64)
        t = b.edge_type.astype(np.int64)
        if t.shape != src.shape:
            raise SystemExit(f"edge_type has {t.shape[0]} entries for {src.shape[0]} edges")
        k = (dst * n + src) * R + t
        j = np.minimum(np.searchsorted(skey, k), skey.size - 1)
        bad_store += int(np.count_nonzero(skey[j] != k))
        fwd = t < R0                                            # forward: src -> dst in t; reverse: dst -> src in t - R0
        gk = np.where(fwd, (src * n + dst) * R0 + t, (dst * n + src) * R0 + (t - R0))
        j = np.minimum(np.searchsorted(gkey, gk), gkey.size - 1)
        bad_graph += int(np.count_nonzero(gkey[j] != gk))
        bad_types += int(np.count_nonzero((type_of[src] != rel_src_t[t]) | (type_of[dst] != rel_dst_t[t])))
        total += int(src.shape[0])
    return {"edges_checked": total, "not_in_store": bad_store, "not_in_graph": bad_graph, "wrong_node_types": bad_types,
            "ok": bad_store == 0 and bad_graph == 0 and bad_types == 0 and total > 0}


# ---- DGL's per-relation fanouts matching Argosy's edges -------------------------------------------
def matched_dict_fanouts(batches, rows, rels, typed: dict, argosy_fanouts, scale=None) -> list[dict]:
    """Per hop (Argosy's order), ``{relation: F_r}`` so that ``sum_r min(deg_r(v), F_r)`` over the
    destinations Argosy's batches had at that hop comes to Argosy's sampled edges there (times
    ``scale[h]``: the calibration against DGL's own destinations, see :func:`calibrate`): greedy per
    destination type, one fanout step at a time to the relation adding the most edges, every relation
    at least 1, stopping at the step nearest the target."""
    scale = [1.0] * len(argosy_fanouts) if scale is None else scale
    names = [r for _, r, _ in typed["relations"]]
    types = typed["node_types"]
    off = np.asarray(typed["type_offsets"], np.int64)
    R, n = len(names), int(off[-1])
    deg = np.bincount(rows * R + rels, minlength=n * R).reshape(n, R)          # in-degree per relation
    into = {t: [i for i, (_, _, d) in enumerate(typed["relations"]) if d == t] for t in types}
    out = []
    for h, F in enumerate(argosy_fanouts):
        dsts = np.concatenate([b.nodes[:b.hop_nodes[h]] for b in batches]).astype(np.int64)
        tdst = np.searchsorted(off, dsts, side="right") - 1
        fan = dict.fromkeys(names, 0)
        for ti, t in enumerate(types):
            v = dsts[tdst == ti]
            rs = [i for i in into[t] if deg[:, i].any()]
            if v.size == 0 or not rs:
                for i in into[t]:
                    fan[names[i]] = 1
                continue
            D = deg[v][:, rs]                                                   # [dests of type t, relations into t]
            target = scale[h] * (float(np.minimum(D.sum(1), F).sum()) if F >= 0 else float(D.sum()))
            f = np.ones(len(rs), np.int64)
            cur = float(np.minimum(D, f).sum())
            while True:
                gain = (D > f).sum(0).astype(np.float64)       # edges one more step of each relation adds
                j = int(gain.argmax())
                if gain[j] == 0 or abs(cur + gain[j] - target) >= abs(cur - target):
                    break
                f[j] += 1
                cur += gain[j]
            for i, k in zip(rs, f):
                fan[names[i]] = int(k)
            for i in into[t]:
                if i not in rs:
                    fan[names[i]] = 1
        out.append(fan)
    return out


def calibrate(a, batches, rows, rels, typed: dict, argosy_fanouts, graph_npz: Path, seeds_paper: Path,
              tries: int = 4, tol: float = 0.02) -> tuple[list[dict], list]:
    """DGL's dict fanouts (DGL's order) whose edges per batch come nearest Argosy's.

    :func:`matched_dict_fanouts` matches Argosy's edges on Argosy's destinations; DGL's later hops
    reach another mix of vertices (its per-relation picks differ), so each try runs DGL on the
    first batches (untimed use of one pass) and scales each hop's target by Argosy's / DGL's edges
    at that hop; the try nearest in total edges is kept.  Returns it and the log of tries."""
    k = min(len(batches), 10)
    calib = seeds_paper.with_name("seeds-paper-calib.npy")
    np.save(calib, np.load(seeds_paper)[:k])
    want = np.sum([np.diff(b.hop_edges) for b in batches[:k]], axis=0).astype(np.float64)
    scale = np.ones(len(argosy_fanouts))
    best, log = None, []
    for _ in range(tries):
        fans = matched_dict_fanouts(batches, rows, rels, typed, argosy_fanouts, scale.tolist())[::-1]
        got = np.asarray(dgl_side(a.dgl_python, graph_npz, calib, fans, 1, a.cpu)["edges_per_layer"][::-1], np.float64)
        err = abs(got.sum() / want.sum() - 1)
        log.append({"scale": scale.round(4).tolist(), "dgl_over_argosy_edges": float(got.sum() / want.sum())})
        if best is None or err < best[0]:
            best = (err, fans)
        if err <= tol:
            break
        scale = scale * want / np.maximum(got, 1)
    print(f"# dict fanout calibration: {json.dumps(log)}", file=sys.stderr, flush=True)
    return best[1], log


# ---- the timed sides ----------------------------------------------------------------------------
def pinned(cpu: int) -> tuple[list[str], dict]:
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", MKL_NUM_THREADS="1", DGLBACKEND="pytorch")
    pre = ["taskset", "-c", str(cpu)] if shutil.which("taskset") else []
    return pre, env


def run_json(cmd: list[str], env: dict) -> dict:
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} ... failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def argosy_worker(a) -> None:
    """``--argosy-worker``: time ``SamplerCore.sample`` over the seed batches; one JSON line."""
    import argosy.services.sampler.core as C
    from argosy.shared.store import PartitionStore
    core = C.SamplerCore(PartitionStore(a.store))
    seeds = np.load(a.seeds)
    fan = tuple(int(f) for f in a.argosy_fanouts.split(","))
    core.sample(seeds[0], fan, 0)                               # compile / load the numba cache
    best = np.full(len(seeds), np.inf)
    for _ in range(a.passes):
        for i, s in enumerate(seeds):
            t0 = time.process_time()
            core.sample(s, fan, i)
            best[i] = min(best[i], time.process_time() - t0)
    edges = [int(core.sample(s, fan, i).num_sampled_edges) for i, s in enumerate(seeds)]
    print(json.dumps({"seconds": float(best.sum()), "edges": edges, "module": C.__file__}))


def argosy_side(store: Path, seeds: Path, fanouts, passes: int, cpu: int) -> dict:
    pre, env = pinned(cpu)
    return run_json(pre + [sys.executable, str(Path(__file__).resolve()), "--argosy-worker", "--store", str(store),
                           "--seeds", str(seeds), "--argosy-fanouts", ",".join(map(str, fanouts)),
                           "--passes", str(passes)], env)


def dgl_side(python: str, graph: Path, seeds: Path, fanouts: list, passes: int, cpu: int) -> dict:
    pre, env = pinned(cpu)
    return run_json(pre + [python, str(ROOT / "bench" / "sampler_dgl_hetero.py"), str(graph), str(seeds),
                           "--fanouts", json.dumps(fanouts), "--passes", str(passes)], env)


# ---- main ---------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-papers", type=int, default=100_000, help="mag_like size (736389: ogbn-mag's)")
    ap.add_argument("--graph-seed", type=int, default=0)
    ap.add_argument("--fanouts", default="10,10", help="per hop, DGL's order (input layer first)")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--batches", type=int, default=50)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cpu", type=int, default=1, help="the core every side is pinned to")
    ap.add_argument("--dgl-python", default="/work/dgl-venv/bin/python")
    ap.add_argument("--no-dgl", action="store_true", help="Argosy side (and the relation check) only")
    ap.add_argument("--work", default=None, help="folder for the store, kept (default: a temporary one, removed)")
    ap.add_argument("--quick", action="store_true", help="20k papers, 10 batches, 2 passes, 1 round")
    ap.add_argument("--homogeneous-reference", default=None, metavar="GRAPH",
                    help="also run bench/sampler.py's two sides on this homogeneous graph (a name in the datasets "
                         "folder, e.g. soc-slashdot) with the same fanouts, seeds and passes, interleaved with the "
                         "typed rounds: today's homogeneous Argosy / DGL on this machine, for reference")
    ap.add_argument("--tag", default="", help="suffix of the result file (bench/results/sampler_hetero<tag>.md)")
    # worker mode (internal)
    ap.add_argument("--argosy-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    ap.add_argument("--seeds", help=argparse.SUPPRESS)
    ap.add_argument("--argosy-fanouts", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.argosy_worker:
        return argosy_worker(a)
    a.load_avg = os.getloadavg()[0]
    a.command = "python " + " ".join([os.path.relpath(__file__, ROOT)] + sys.argv[1:])
    if a.quick:
        a.num_papers, a.batches, a.passes, a.rounds = 20_000, 10, 2, 1
    dgl_fanouts = [int(f) for f in a.fanouts.split(",")]
    argosy_fanouts = dgl_fanouts[::-1]                           # Argosy lists the seeds' hop first
    use_dgl = not a.no_dgl
    if use_dgl and not Path(a.dgl_python).exists():
        print(f"# no DGL interpreter at {a.dgl_python}: Argosy side only", file=sys.stderr)
        use_dgl = False
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="argosy-sampler-hetero-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        run(a, work, dgl_fanouts, argosy_fanouts, use_dgl)
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)


def run(a, work: Path, dgl_fanouts, argosy_fanouts, use_dgl: bool) -> None:
    tg, store = make_store(a.num_papers, a.graph_seed, work)
    rows, nbrs, rels, typed, n = store_entries(store)
    names = [r for _, r, _ in typed["relations"]]
    poff = tg.offset("paper")
    train = np.flatnonzero(tg.train_mask)
    rng = np.random.default_rng(0)
    need = a.batch * a.batches
    order = np.concatenate([rng.permutation(train) for _ in range(-(-need // len(train)))])[:need]
    local_seeds = order.reshape(a.batches, a.batch).astype(np.int64)
    seeds = work / "seeds-global.npy"
    np.save(seeds, local_seeds + poff)
    np.save(work / "seeds-paper.npy", local_seeds)

    # one untimed pass in this process: the relation check, Argosy's per-relation mix, DGL's dict fanouts
    from argosy.services.sampler.core import SamplerCore
    from argosy.shared.store import PartitionStore
    core = SamplerCore(PartitionStore(store))
    batches = [core.sample(s, argosy_fanouts, i) for i, s in enumerate(np.load(seeds))]
    check = check_relations(batches, rows, nbrs, rels, tg, n)
    print(f"# relation check: {json.dumps(check)}", file=sys.stderr, flush=True)
    argosy_per_rel = dict(zip(names, np.bincount(np.concatenate([b.edge_type for b in batches]),
                                                 minlength=len(names)).tolist()))
    argosy_per_hop = np.sum([np.diff(b.hop_edges) for b in batches], axis=0).tolist()
    graph_npz = work / "dgl-graph.npz"
    dict_fanouts, calib_log = None, None
    if use_dgl:
        export_dgl(rows, nbrs, rels, typed, graph_npz)
        dict_fanouts, calib_log = calibrate(a, batches, rows, rels, typed, argosy_fanouts, graph_npz,
                                            work / "seeds-paper.npy")                # DGL's order
    del batches, core
    num_entries = int(rows.size)
    del rows, nbrs, rels

    variants = {"argosy": None}
    if use_dgl:
        variants["dgl_int"] = dgl_fanouts
        variants["dgl_dict"] = dict_fanouts
    homo = None
    if a.homogeneous_reference:
        sys.path.insert(0, str(ROOT / "bench"))
        import sampler as homo_bench                            # bench/sampler.py: the homogeneous sides
        hgraph = homo_bench.graph_path(a.homogeneous_reference)
        hstore = homo_bench.make_store(hgraph, work)
        hn = int(np.load(hgraph)["indptr"].shape[0] - 1)
        hseeds = work / "seeds-homogeneous.npy"
        hrng = np.random.default_rng(0)
        np.save(hseeds, np.stack([hrng.permutation(hn)[:a.batch] for _ in range(a.batches)]).astype(np.int64))
        variants["homogeneous_argosy"] = "homo"
        if use_dgl:
            variants["homogeneous_dgl"] = "homo"
    res: dict[str, dict] = {}
    for _ in range(a.rounds):
        for side, fan in variants.items():
            if side == "argosy":
                r = argosy_side(store, seeds, argosy_fanouts, a.passes, a.cpu)
            elif side == "homogeneous_argosy":
                r = homo_bench.argosy_side(ROOT, work, hstore, hseeds, argosy_fanouts, a.passes, a.cpu)
            elif side == "homogeneous_dgl":
                r = homo_bench.dgl_side(a.dgl_python, hgraph, hseeds, dgl_fanouts, a.passes, a.cpu)
            else:
                r = dgl_side(a.dgl_python, graph_npz, work / "seeds-paper.npy", fan, a.passes, a.cpu)
            if side not in res or r["seconds"] < res[side]["seconds"]:
                res[side] = r
            print(f"# {side}: {r['seconds']:.3f} s, {np.mean(r['edges']):,.0f} edges/batch", file=sys.stderr, flush=True)

    row = {"graph": f"mag_like({a.num_papers})", "nodes": int(tg.total_nodes), "graph_edges": int(tg.total_edges),
           "store_entries": num_entries,
           "fanouts_dgl_order": a.fanouts, "batch": a.batch, "batches": a.batches, "passes": a.passes,
           "rounds": a.rounds, "relation_check": check,
           "argosy_edges_per_relation": argosy_per_rel, "argosy_edges_per_hop": argosy_per_hop,
           "dgl_dict_fanouts_dgl_order": dict_fanouts, "dgl_dict_calibration": calib_log}
    for side, r in res.items():
        row[f"{side}_edges_per_batch"] = float(np.mean(r["edges"]))
        row[f"{side}_edges_per_cpu_second"] = float(np.sum(r["edges"]) / r["seconds"])
        row[f"{side}_ms_per_batch"] = 1e3 * r["seconds"] / len(r["edges"])
        if side.startswith("homogeneous"):
            continue
        if side != "argosy":
            row[f"{side}_edges_per_relation"] = r["edges_per_relation"]
            row[f"{side}_edges_per_hop"] = r["edges_per_layer"][::-1]
            row["dgl_version"], row["torch_version"], row["dgl_threads"] = r["dgl"], r["torch"], r["threads"]
            row["dgl_graph_edges"] = r["num_edges"]
    if "homogeneous_dgl" in res:
        row["homogeneous_reference"] = a.homogeneous_reference
        row["homogeneous_argosy_over_dgl"] = (row["homogeneous_argosy_edges_per_cpu_second"] /
                                              row["homogeneous_dgl_edges_per_cpu_second"])
    for side in res:
        if side in ("dgl_int", "dgl_dict"):
            row[f"argosy_over_{side}"] = row["argosy_edges_per_cpu_second"] / row[f"{side}_edges_per_cpu_second"]
    row["dgl"] = "ran" if use_dgl else "not run (no DGL interpreter or --no-dgl)"
    print(json.dumps(row), flush=True)
    report(row, a, use_dgl)


def machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model or platform.processor()}, {os.cpu_count()} cores visible, Python {platform.python_version()}"


def report(row: dict, a, use_dgl: bool) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine(), "load_avg_at_start": a.load_avg,
            "cpu": a.cpu, "command": a.command}
    fo = a.fanouts
    lines = [f"# Typed sampler benchmark: Argosy vs DGL {row.get('dgl_version', '')} heterograph NeighborSampler",
             "",
             f"{meta['date']}; {meta['machine']}; every side pinned to core {a.cpu}, one thread; "
             f"load avg at start {a.load_avg:.1f}.",
             "",
             f"Command: `{a.command}`",
             "",
             f"Graph: {row['graph']}: {row['nodes']:,} vertices, {row['graph_edges']:,} edges in 4 relations; "
             f"one-part typed store with the 4 reverse relations (8 relations, "
             f"{row['store_entries']:,} entries); DGL's heterograph holds exactly the "
             f"store's entries. Seeds: {a.batches} disjoint batches of {a.batch} train papers. Fanouts {fo} "
             f"(DGL's order). CPU time (process_time), best of {a.passes} passes per batch, best of {a.rounds} rounds.",
             "",
             "| sampler | what it samples per vertex and hop | edges/batch | ms/batch | Medges per CPU-s | Argosy / it |",
             "|---|---|---|---|---|---|"]
    desc = {"argosy": f"min(deg, F) of all typed in-edges together (F = {fo})",
            "dgl_int": f"min(deg_r, F) per relation r (int fanout {fo})",
            "dgl_dict": "min(deg_r, F_r) per relation, F_r matched to Argosy's edges (below)"}
    label = {"argosy": "Argosy SamplerCore", "dgl_int": "DGL NeighborSampler, int fanout",
             "dgl_dict": "DGL NeighborSampler, dict fanout"}
    for side in ("argosy", "dgl_int", "dgl_dict"):
        if f"{side}_edges_per_batch" not in row:
            continue
        ratio = "" if side == "argosy" else f"**{row[f'argosy_over_{side}']:.2f}x**"
        lines.append(f"| {label[side]} | {desc[side]} | {row[f'{side}_edges_per_batch']:,.0f} | "
                     f"{row[f'{side}_ms_per_batch']:.1f} | {row[f'{side}_edges_per_cpu_second'] / 1e6:.2f} | {ratio} |")
    if "homogeneous_argosy_edges_per_batch" in row:
        for side, lab in (("homogeneous_argosy", "Argosy, untyped"), ("homogeneous_dgl", "DGL, homogeneous")):
            if f"{side}_edges_per_batch" in row:
                ratio = f"{row['homogeneous_argosy_over_dgl']:.2f}x" if side == "homogeneous_dgl" else ""
                lines.append(f"| reference: {lab}, {a.homogeneous_reference} | min(deg, F), one relation | "
                             f"{row[f'{side}_edges_per_batch']:,.0f} | {row[f'{side}_ms_per_batch']:.1f} | "
                             f"{row[f'{side}_edges_per_cpu_second'] / 1e6:.2f} | {ratio} |")
    lines.append("")
    if use_dgl:
        lines.append("DGL dict fanouts (input layer first): " +
                     "; ".join(json.dumps(d) for d in row["dgl_dict_fanouts_dgl_order"]))
        lines.append("")
    rels = list(row["argosy_edges_per_relation"])
    lines += ["Sampled edges per relation (all batches):", "",
              "| sampler | " + " | ".join(rels) + " |", "|---|" + "---|" * len(rels)]
    for side in ("argosy", "dgl_int", "dgl_dict"):
        per = row.get(f"{side}_edges_per_relation")
        if per:
            lines.append(f"| {label[side]} | " + " | ".join(f"{per.get(r, 0):,}" for r in rels) + " |")
    c = row["relation_check"]
    lines += ["", f"Relation check (Argosy): {c['edges_checked']:,} sampled edges; not a store entry "
              f"(dst, src, relation): {c['not_in_store']}; not an edge of the generated graph in that relation "
              f"(reverse relations: the forward edge dst -> src): {c['not_in_graph']}; endpoint types not the "
              f"relation's: {c['wrong_node_types']}; **{'OK' if c['ok'] else 'FAILED'}**."]
    if not use_dgl:
        lines += ["", "DGL was not run (no DGL interpreter or `--no-dgl`): Argosy side only."]
    lines += ["", "The run's JSON line:", "", "```json", json.dumps({"meta": meta, **row}), "```"]
    text = "\n".join(lines) + "\n"
    md = OUT / f"sampler_hetero{a.tag}.md"
    if md.exists() and NOTES in md.read_text():             # a hand-written section below the figures is kept
        text += "\n" + NOTES + md.read_text().split(NOTES, 1)[1]
    md.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
