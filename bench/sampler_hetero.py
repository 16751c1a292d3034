"""Typed sampler benchmark: Argosy's ``SamplerCore`` on a typed store against DGL 2.1's heterograph
``NeighborSampler``, one core each, at the same per-relation fanouts.

The graph is ``mag_like(num_papers)`` (ogbn-mag-shaped: paper, author, institution, field_of_study;
writes, cites, has_topic, affiliated_with), written as a one-part typed store with the reverse
relations (``rev_<r>``: 8 relations).  DGL gets ``dgl.heterograph`` of exactly the store's entries
(one edge type per store relation, entry ``(d, s, r)`` = edge ``s -> d`` of ``r``; the store drops
duplicate ``(d, s, r)`` entries, so DGL gets none either): every vertex has the same
in-neighbourhood, edge for edge, on both sides.  Seeds: ``--batches`` disjoint batches of
``--batch`` training papers (one shuffled pass over the train split).

Both sides sample per relation (DGL's and PyG's heterogeneous semantics, Argosy's since 75200c6):
at every hop, for every vertex reached so far (seeds included, as DGL's blocks do: a block's
destinations are the previous block's sources), ``min(deg_r, F_r)`` distinct in-edges of each
relation ``r``, so both sides do the same work and draw the same number of edges per batch up to
chance (the seeds' hop exactly).  Two settings, each given identically to both sides:
  (a) ``int``: ``--fanouts`` (``F_r = F`` for every relation; Argosy ``sample(seeds, F)``, DGL
      ``NeighborSampler([F, ...])``);
  (b) ``dict``: ``--relation-fanouts`` on top of it (named relations have their own, 0 drops a
      relation from a hop; Argosy ``sample(seeds, F, relation_fanouts={name: hops})``, DGL a dict
      per layer naming every edge type, ``--fanouts``' value for the unnamed ones).
Both sides de-duplicate the vertices of each hop and relabel them (Argosy: one frontier array;
DGL: ``to_block`` per layer).  Every side runs in its own process pinned to one core (``taskset``,
one torch / numba / OpenMP thread), samples every batch ``--passes`` times and keeps each batch's
smallest CPU time (``time.process_time``); sides alternate over ``--rounds`` rounds, each keeps its
best round.  With ``--baseline REF`` Argosy's sides also run from git revision ``REF`` (``git
archive``, as bench/sampler.py does): a kernel's before / after in the same run.

Reported: sampled edges per CPU-second, Argosy / DGL per setting, edges per batch and per hop, and
three checks on one untimed pass of each Argosy setting: (1) every sampled ``(dst, src,
relation)`` is an entry of the store *and* an edge of the generated graph in that relation (a
reverse relation: the forward edge ``dst -> src``); (2) per hop, vertex and relation Argosy sampled
exactly ``min(deg_r, F_r)`` edges, none twice; (3) Argosy's and DGL's edges per batch agree within
``--tolerance`` (and per hop).  Writes bench/results/sampler_hetero<tag>.md (the table, the JSON
line; a ``## Notes`` section already there is kept); prints the JSON line and the table.  Never
asserts: a failed check is written as FAILED.

Usage: python bench/sampler_hetero.py [--num-papers 100000] [--fanouts 10,10]
           [--relation-fanouts "cites=5,15 rev_has_topic=3,5 rev_writes=0,0"] [--baseline REF]
           [--homogeneous-reference soc-slashdot] [--dgl-python /work/dgl-venv/bin/python]
           [--work DIR] [--quick] [--no-dgl]
(both fanout flags in DGL's order, input layer first: the last number is the seeds' hop)
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
SETTINGS = ("int", "dict")


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


# ---- the checks ----------------------------------------------------------------------------------
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


def check_counts(batches, deg: np.ndarray, table: np.ndarray) -> dict:
    """Per hop ``h``, vertex ``v`` of the hop's destinations and relation ``r``: the batch has exactly
    ``min(deg[v, r], table[h, r])`` edges (``-1``: all ``deg[v, r]``, 0: none) and no
    ``(dst, src, r)`` twice.  ``deg``: int64[n, R] stored in-entries per vertex and relation;
    ``table``: int64[hops, R], Argosy's order (the seeds' hop first)."""
    R = deg.shape[1]
    cells = wrong = dups = edges = 0
    for b in batches:
        he, hn = b.hop_edges, b.hop_nodes
        for h in range(table.shape[0]):
            sl = slice(int(he[h]), int(he[h + 1]))
            dst, src = b.edge_dst[sl].astype(np.int64), b.edge_src[sl].astype(np.int64)
            t = b.edge_type[sl].astype(np.int64)
            k = int(hn[h])
            got = np.bincount(dst * R + t, minlength=k * R).reshape(k, R)
            d = deg[b.nodes[:k]]
            f = table[h]
            want = np.where(f < 0, d, np.minimum(d, np.maximum(f, 0)))
            cells += want.size
            wrong += int(np.count_nonzero(got != want))
            key = (dst * int(hn[h + 1]) + src) * R + t
            dups += int(key.size - np.unique(key).size)
            edges += int(key.size)
    return {"edges_checked": edges, "cells_checked": cells, "cells_wrong": wrong, "duplicate_edges": dups,
            "ok": wrong == 0 and dups == 0 and edges > 0}


def compare_edges(argosy: dict, dgl: dict, tol: float) -> dict:
    """Argosy's / DGL's edges per batch, in all and per hop (Argosy's order), and whether each is
    within ``tol`` of 1.  The seeds' hop samples the same destinations on both sides, so it agrees
    exactly; later hops' destinations are random, so they agree up to chance."""
    a, d = np.asarray(argosy["edges"], np.float64), np.asarray(dgl["edges"], np.float64)
    ah = np.asarray(argosy["edges_per_hop"], np.float64)
    dh = np.asarray(dgl["edges_per_layer"][::-1], np.float64)
    total = float(a.sum() / d.sum())
    hops = (ah / np.maximum(dh, 1)).tolist()
    return {"argosy_over_dgl_edges": total, "per_hop": hops, "tolerance": tol,
            "ok": bool(abs(total - 1) <= tol and all(abs(x - 1) <= tol for x in hops))}


def fanout_settings(fanouts: str, relation_fanouts: str, relations: list) -> dict:
    """Both settings for both sides, from the flags (DGL's order).

    Returns ``{"int": ..., "dict": ...}``, each with ``argosy`` (``(fanouts, relation_fanouts)``,
    seeds' hop first), ``dgl`` (a list, input layer first, of an int or a dict naming every edge
    type) and ``table`` (int64[hops, R], Argosy's order: what each relation gets per hop)."""
    from argosy.shared.fanouts import parse_fanouts, relation_fanout_table
    default, named = parse_fanouts(f"{fanouts} {relation_fanouts}", "--fanouts/--relation-fanouts")
    default_a = tuple(default[::-1])                             # Argosy lists the seeds' hop first
    named_a = {k: tuple(v[::-1]) for k, v in named.items()}
    names = [r for _, r, _ in relations]
    if len(set(names)) != len(names):
        raise SystemExit(f"relation names repeat ({names}): DGL's dict fanout could not name them")
    out = {}
    for setting, per in (("int", {}), ("dict", named_a)):
        table = relation_fanout_table(default_a, per, relations)
        if setting == "int":
            dgl = list(default)
        else:                                                    # DGL's dict names every edge type
            dgl = [{r: int(table[len(default) - 1 - i, j]) for j, r in enumerate(names)} for i in range(len(default))]
        out[setting] = {"argosy": (default_a, per), "dgl": dgl, "table": table}
    return out


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
    """``--argosy-worker``: time ``SamplerCore.sample`` over the seed batches; one JSON line.
    ``--shim``: import ``argosy`` from there (another revision's tree, see ``--baseline``)."""
    if a.shim:
        sys.path.insert(0, a.shim)
    import argosy.services.sampler.core as C
    from argosy.shared.store import PartitionStore
    if a.shim and not C.__file__.startswith(a.shim):
        raise SystemExit(f"expected argosy from {a.shim}, imported {C.__file__}")
    core = C.SamplerCore(PartitionStore(a.store))
    seeds = np.load(a.seeds)
    fan = tuple(int(f) for f in a.argosy_fanouts.split(","))
    named = {k: tuple(v) for k, v in json.loads(a.argosy_relation_fanouts).items()}
    kw = {"relation_fanouts": named} if named else {}
    core.sample(seeds[0], fan, 0, **kw)                         # compile / load the numba cache
    best = np.full(len(seeds), np.inf)
    for _ in range(a.passes):
        for i, s in enumerate(seeds):
            t0 = time.process_time()
            core.sample(s, fan, i, **kw)
            best[i] = min(best[i], time.process_time() - t0)
    out = [core.sample(s, fan, i, **kw) for i, s in enumerate(seeds)]
    print(json.dumps({"seconds": float(best.sum()), "edges": [int(b.num_sampled_edges) for b in out],
                      "edges_per_hop": np.sum([np.diff(b.hop_edges) for b in out], axis=0).tolist(),
                      "module": C.__file__}))


def argosy_side(store: Path, seeds: Path, fanouts, named: dict, passes: int, cpu: int, shim: Path | None = None) -> dict:
    pre, env = pinned(cpu)
    return run_json(pre + [sys.executable, str(Path(__file__).resolve()), "--argosy-worker", "--store", str(store),
                           "--seeds", str(seeds), "--argosy-fanouts", ",".join(map(str, fanouts)),
                           "--argosy-relation-fanouts", json.dumps(named), "--passes", str(passes)]
                    + (["--shim", str(shim)] if shim else []), env)


def dgl_side(python: str, graph: Path, seeds: Path, fanouts: list, passes: int, cpu: int) -> dict:
    pre, env = pinned(cpu)
    return run_json(pre + [python, str(ROOT / "bench" / "sampler_dgl_hetero.py"), str(graph), str(seeds),
                           "--fanouts", json.dumps(fanouts), "--passes", str(passes)], env)


# ---- main ---------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-papers", type=int, default=100_000, help="mag_like size (736389: ogbn-mag's)")
    ap.add_argument("--graph-seed", type=int, default=0)
    ap.add_argument("--fanouts", default="10,10", help="per hop, DGL's order (input layer first): every relation's")
    ap.add_argument("--relation-fanouts", default="cites=5,15 rev_has_topic=3,5 rev_writes=0,0",
                    help="the dict setting: named relations' own fanouts on top of --fanouts, same order and "
                         "syntax as argosy's --fanouts entries (name=hops; 0 drops the relation from a hop)")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--batches", type=int, default=50)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tolerance", type=float, default=0.03, help="edges per batch, Argosy / DGL, allowed off 1")
    ap.add_argument("--cpu", type=int, default=1, help="the core every side is pinned to")
    ap.add_argument("--dgl-python", default="/work/dgl-venv/bin/python")
    ap.add_argument("--no-dgl", action="store_true", help="Argosy's sides (and the checks) only")
    ap.add_argument("--baseline", default=None, metavar="REF",
                    help="also time Argosy's sides from git revision REF (before / after in one run)")
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
    ap.add_argument("--argosy-relation-fanouts", default="{}", help=argparse.SUPPRESS)
    ap.add_argument("--shim", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.argosy_worker:
        return argosy_worker(a)
    a.load_avg = os.getloadavg()[0]
    a.command = "python " + " ".join([os.path.relpath(__file__, ROOT)] + sys.argv[1:])
    if a.quick:
        a.num_papers, a.batches, a.passes, a.rounds = 20_000, 10, 2, 1
    use_dgl = not a.no_dgl
    if use_dgl and not Path(a.dgl_python).exists():
        print(f"# no DGL interpreter at {a.dgl_python}: Argosy side only", file=sys.stderr)
        use_dgl = False
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="argosy-sampler-hetero-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        run(a, work, use_dgl)
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)


def run(a, work: Path, use_dgl: bool) -> None:
    tg, store = make_store(a.num_papers, a.graph_seed, work)
    rows, nbrs, rels, typed, n = store_entries(store)
    names = [r for _, r, _ in typed["relations"]]
    R = len(names)
    settings = fanout_settings(a.fanouts, a.relation_fanouts, typed["relations"])
    dgl_fanouts = settings["int"]["dgl"]
    argosy_fanouts = settings["int"]["argosy"][0]
    poff = tg.offset("paper")
    train = np.flatnonzero(tg.train_mask)
    rng = np.random.default_rng(0)
    need = a.batch * a.batches
    order = np.concatenate([rng.permutation(train) for _ in range(-(-need // len(train)))])[:need]
    local_seeds = order.reshape(a.batches, a.batch).astype(np.int64)
    seeds = work / "seeds-global.npy"
    np.save(seeds, local_seeds + poff)
    np.save(work / "seeds-paper.npy", local_seeds)

    # one untimed pass per setting in this process: the relation and count checks, the per-relation mix
    from argosy.services.sampler.core import SamplerCore
    from argosy.shared.store import PartitionStore
    core = SamplerCore(PartitionStore(store))
    deg = np.bincount(rows * R + rels, minlength=n * R).reshape(n, R)        # stored in-entries per relation
    checks, per_rel = {}, {}
    for setting, st in settings.items():
        fan, named = st["argosy"]
        batches = [core.sample(s, fan, i, relation_fanouts=named) for i, s in enumerate(np.load(seeds))]
        checks[setting] = {"relations": check_relations(batches, rows, nbrs, rels, tg, n),
                           "counts": check_counts(batches, deg, st["table"])}
        per_rel[setting] = dict(zip(names, np.bincount(np.concatenate([b.edge_type for b in batches]),
                                                       minlength=R).tolist()))
        print(f"# {setting} checks: {json.dumps(checks[setting])}", file=sys.stderr, flush=True)
    del batches, core, deg
    graph_npz = work / "dgl-graph.npz"
    if use_dgl:
        export_dgl(rows, nbrs, rels, typed, graph_npz)
    num_entries = int(rows.size)
    del rows, nbrs, rels

    shim = None
    if a.baseline:
        sys.path.insert(0, str(ROOT / "bench"))
        import sampler as homo_bench                            # bench/sampler.py: git archive + shim
        shim = homo_bench.shim(homo_bench.baseline_tree(a.baseline, work), work)
        rev = subprocess.run(["git", "rev-parse", "--short", a.baseline], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
        a.baseline_label = a.baseline if rev.startswith(a.baseline) else f"{a.baseline} ({rev})"
    variants = {}
    for setting, st in settings.items():
        variants[f"argosy_{setting}"] = ("argosy", st, None)
        if shim:
            variants[f"baseline_{setting}"] = ("argosy", st, shim)
        if use_dgl:
            variants[f"dgl_{setting}"] = ("dgl", st, None)
    if a.homogeneous_reference:
        sys.path.insert(0, str(ROOT / "bench"))
        import sampler as homo_bench                            # bench/sampler.py: the homogeneous sides
        hgraph = homo_bench.graph_path(a.homogeneous_reference)
        hstore = homo_bench.make_store(hgraph, work)
        hn = int(np.load(hgraph)["indptr"].shape[0] - 1)
        hseeds = work / "seeds-homogeneous.npy"
        hrng = np.random.default_rng(0)
        np.save(hseeds, np.stack([hrng.permutation(hn)[:a.batch] for _ in range(a.batches)]).astype(np.int64))
        variants["homogeneous_argosy"] = ("homo_argosy", None, None)
        if use_dgl:
            variants["homogeneous_dgl"] = ("homo_dgl", None, None)
    res: dict[str, dict] = {}
    for _ in range(a.rounds):
        for side, (kind, st, sh) in variants.items():
            if kind == "argosy":
                r = argosy_side(store, seeds, st["argosy"][0], st["argosy"][1], a.passes, a.cpu, sh)
            elif kind == "dgl":
                r = dgl_side(a.dgl_python, graph_npz, work / "seeds-paper.npy", st["dgl"], a.passes, a.cpu)
            elif kind == "homo_argosy":
                r = homo_bench.argosy_side(ROOT, work, hstore, hseeds, argosy_fanouts, a.passes, a.cpu)
            else:
                r = homo_bench.dgl_side(a.dgl_python, hgraph, hseeds, dgl_fanouts, a.passes, a.cpu)
            if side not in res or r["seconds"] < res[side]["seconds"]:
                res[side] = r
            print(f"# {side}: {r['seconds']:.3f} s, {np.mean(r['edges']):,.0f} edges/batch", file=sys.stderr, flush=True)

    row = {"graph": f"mag_like({a.num_papers})", "nodes": int(tg.total_nodes), "graph_edges": int(tg.total_edges),
           "store_entries": num_entries, "relations": names,
           "fanouts_dgl_order": a.fanouts, "relation_fanouts_dgl_order": a.relation_fanouts,
           "argosy_relation_fanouts": {k: list(v) for k, v in settings["dict"]["argosy"][1].items()},
           "dgl_dict_fanouts": settings["dict"]["dgl"],
           "batch": a.batch, "batches": a.batches, "passes": a.passes, "rounds": a.rounds, "checks": checks,
           "baseline": getattr(a, "baseline_label", None)}
    for setting in SETTINGS:
        row[f"argosy_{setting}_edges_per_relation"] = per_rel[setting]
    for side, r in res.items():
        row[f"{side}_edges_per_batch"] = float(np.mean(r["edges"]))
        row[f"{side}_edges_per_cpu_second"] = float(np.sum(r["edges"]) / r["seconds"])
        row[f"{side}_ms_per_batch"] = 1e3 * r["seconds"] / len(r["edges"])
        if side.startswith(("argosy", "baseline")):
            row[f"{side}_edges_per_hop"] = r["edges_per_hop"]
        elif side.startswith("dgl"):
            row[f"{side}_edges_per_relation"] = r["edges_per_relation"]
            row[f"{side}_edges_per_hop"] = r["edges_per_layer"][::-1]
            row["dgl_version"], row["torch_version"], row["dgl_threads"] = r["dgl"], r["torch"], r["threads"]
            row["dgl_graph_edges"] = r["num_edges"]
    for setting in SETTINGS:
        if f"dgl_{setting}" in res:
            row[f"argosy_over_dgl_{setting}"] = (row[f"argosy_{setting}_edges_per_cpu_second"] /
                                                 row[f"dgl_{setting}_edges_per_cpu_second"])
            checks[setting]["edges_vs_dgl"] = compare_edges(res[f"argosy_{setting}"], res[f"dgl_{setting}"],
                                                            a.tolerance)
        if f"baseline_{setting}" in res:
            row[f"argosy_over_baseline_{setting}"] = (row[f"argosy_{setting}_edges_per_cpu_second"] /
                                                      row[f"baseline_{setting}_edges_per_cpu_second"])
    if "homogeneous_dgl" in res:
        row["homogeneous_reference"] = a.homogeneous_reference
        row["homogeneous_argosy_over_dgl"] = (row["homogeneous_argosy_edges_per_cpu_second"] /
                                              row["homogeneous_dgl_edges_per_cpu_second"])
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


def _ok(flag: bool) -> str:
    return "**OK**" if flag else "**FAILED**"


def report(row: dict, a, use_dgl: bool) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine(), "load_avg_at_start": a.load_avg,
            "load_avg_at_end": os.getloadavg()[0], "cpu": a.cpu, "command": a.command}
    fo, named = a.fanouts, row["argosy_relation_fanouts"]
    lines = [f"# Typed sampler benchmark: Argosy vs DGL {row.get('dgl_version', '')} heterograph NeighborSampler",
             "",
             f"{meta['date']}; {meta['machine']}; every side pinned to core {a.cpu}, one thread; "
             f"load avg {meta['load_avg_at_start']:.1f} at start, {meta['load_avg_at_end']:.1f} at end "
             "(shared machine: read ratios within this run, not absolute figures).",
             "",
             f"Command: `{a.command}`",
             "",
             f"Graph: {row['graph']}: {row['nodes']:,} vertices, {row['graph_edges']:,} edges in 4 relations; "
             f"one-part typed store with the 4 reverse relations (8 relations, "
             f"{row['store_entries']:,} entries); DGL's heterograph holds exactly the "
             f"store's entries. Seeds: {a.batches} disjoint batches of {a.batch} train papers. "
             f"CPU time (process_time), best of {a.passes} passes per batch, best of {a.rounds} rounds.",
             "",
             "Both sides sample min(deg_r, F_r) distinct in-edges per relation r, per vertex and hop "
             "(DGL's and PyG's heterogeneous semantics):",
             "",
             f"* **int**: F_r = {fo} for every relation (DGL's order, input layer first); Argosy "
             f"`sample(seeds, {tuple(int(x) for x in fo.split(',')[::-1])})`, DGL `NeighborSampler([{fo}])`.",
             f"* **dict**: `{a.relation_fanouts}` on top of it (DGL's order); Argosy "
             f"`relation_fanouts={json.dumps(named)}` (seeds' hop first), DGL per layer (input layer first) "
             + "; ".join(f"`{json.dumps(d)}`" for d in row["dgl_dict_fanouts"]) + ".",
             "",
             "| setting | sampler | edges/batch | ms/batch | Medges per CPU-s | Argosy / it |",
             "|---|---|---|---|---|---|"]
    label = {"argosy": "Argosy SamplerCore", "dgl": "DGL NeighborSampler",
             "baseline": f"Argosy SamplerCore at {row['baseline']}"}
    for setting in SETTINGS:
        for who in ("argosy", "baseline", "dgl"):
            side = f"{who}_{setting}"
            if f"{side}_edges_per_batch" not in row:
                continue
            ratio = "" if who == "argosy" else f"**{row[f'argosy_over_{side}']:.2f}x**"
            lines.append(f"| {setting} | {label[who]} | {row[f'{side}_edges_per_batch']:,.0f} | "
                         f"{row[f'{side}_ms_per_batch']:.1f} | {row[f'{side}_edges_per_cpu_second'] / 1e6:.2f} | "
                         f"{ratio} |")
    if "homogeneous_argosy_edges_per_batch" in row:
        for side, lab in (("homogeneous_argosy", "Argosy, untyped"), ("homogeneous_dgl", "DGL, homogeneous")):
            if f"{side}_edges_per_batch" in row:
                ratio = f"{row['homogeneous_argosy_over_dgl']:.2f}x" if side == "homogeneous_dgl" else ""
                lines.append(f"| reference: {a.homogeneous_reference}, min(deg, F) | {lab} | "
                             f"{row[f'{side}_edges_per_batch']:,.0f} | {row[f'{side}_ms_per_batch']:.1f} | "
                             f"{row[f'{side}_edges_per_cpu_second'] / 1e6:.2f} | {ratio} |")
    lines.append("")
    if use_dgl:
        lines += ["Edges per hop (all batches; Argosy's order, the seeds' hop first):", "",
                  "| setting | Argosy | DGL |", "|---|---|---|"]
        for setting in SETTINGS:
            if f"dgl_{setting}_edges_per_hop" in row:
                lines.append(f"| {setting} | {' / '.join(f'{x:,}' for x in row[f'argosy_{setting}_edges_per_hop'])} | "
                             f"{' / '.join(f'{x:,}' for x in row[f'dgl_{setting}_edges_per_hop'])} |")
        lines.append("")
    rels = row["relations"]
    lines += ["Sampled edges per relation (all batches):", "",
              "| setting | sampler | " + " | ".join(rels) + " |", "|---|---|" + "---|" * len(rels)]
    for setting in SETTINGS:
        for who in ("argosy", "dgl"):
            per = row.get(f"{who}_{setting}_edges_per_relation")
            if per:
                lines.append(f"| {setting} | {label[who]} | " + " | ".join(f"{per.get(r, 0):,}" for r in rels) + " |")
    lines += ["", "Checks (Argosy, one untimed pass of every batch per setting):", ""]
    for setting in SETTINGS:
        c = row["checks"][setting]
        r_, k = c["relations"], c["counts"]
        lines.append(f"* {setting}: relations: {r_['edges_checked']:,} sampled edges; not a store entry (dst, src, "
                     f"relation): {r_['not_in_store']}; not an edge of the generated graph in that relation (reverse "
                     f"relations: the forward edge dst -> src): {r_['not_in_graph']}; endpoint types not the "
                     f"relation's: {r_['wrong_node_types']}; {_ok(r_['ok'])}. Counts: {k['cells_checked']:,} "
                     f"(hop, vertex, relation) cells, not min(deg_r, F_r): {k['cells_wrong']}; an edge twice in a "
                     f"hop: {k['duplicate_edges']}; {_ok(k['ok'])}.")
        e = c.get("edges_vs_dgl")
        if e:
            lines.append(f"  Edges per batch, Argosy / DGL: {e['argosy_over_dgl_edges']:.4f} (per hop, seeds' hop "
                         f"first: {', '.join(f'{x:.4f}' for x in e['per_hop'])}; allowed 1 +- {e['tolerance']:g}); "
                         f"{_ok(e['ok'])}.")
    if not use_dgl:
        lines += ["", "DGL was not run (no DGL interpreter or `--no-dgl`): Argosy's sides only."]
    lines += ["", "The run's JSON line:", "", "```json", json.dumps({"meta": meta, **row}), "```"]
    text = "\n".join(lines) + "\n"
    md = OUT / f"sampler_hetero{a.tag}.md"
    if md.exists() and NOTES in md.read_text():             # a hand-written section below the figures is kept
        text += "\n" + NOTES + md.read_text().split(NOTES, 1)[1]
    md.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
