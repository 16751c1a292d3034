"""Per-type feature files against the padded layout they replaced (store bytes, bytes a loader ships
per batch, the loader's CPU time per batch), and the sampler reading relations as stored against its
widened int32 copy (its private and file-backed memory, its CPU time per batch), on an ogbn-mag-shaped
graph, before / after in one run.

The graph is ``mag_like(--num-papers)`` (papers with ``--feature-dim`` features; authors,
institutions and fields of study without), written by each side's own code as a typed store of
``--parts`` parts (random placement, the same for both). Each side runs in its own process from its
own tree (``--baseline REF``: ``git archive`` of that revision, as bench/sampler.py does; the other
side is the working tree): it writes the store, samples ``--batches`` batches of ``--batch`` training
papers with ``--fanouts`` (the same seeds and sampler seed on both sides: the batches are the same
vertex for vertex), and loads each one through a loader holding part 0 whose other parts' rows come
from a second loader through ``serve`` (the halo path, in process). Reported per side: bytes of the
feature files, feature rows and bytes per batch, halo rows per batch, and the loader's
``time.process_time`` per batch (best of ``--passes``); the sampler's CPU time per batch (best of
``--passes``) and the growth of its process's ``RssAnon`` (private memory) and ``RssFile`` (mapped
files, shared by every process on a host) from before the sampler is built to after it is (it holds
every part). Each side runs twice and reports its second run: the first fills its tree's numba cache
(a fresh tree compiles its kernels, and the compiler's memory would count). Both sides' rows are checked equal on every
featured vertex and zero elsewhere (the trainer's input is the same matrix).

Usage: python bench/typed_features.py --baseline REF [--num-papers 100000] [--parts 2]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

WORKER = r"""
import json, sys, time
shim = {shim!r}
if shim:
    sys.path.insert(0, shim)
import numpy as np
from argosy.services.loader.core import LoaderCore
from argosy.services.sampler.core import SamplerCore
from argosy.shared.protocol import HaloRequest
from argosy.shared.store import PartitionStore
from argosy.shared.store.typed import write_typed_store
from argosy.shared.synthetic_hetero import mag_like
import argosy.services.loader.core as LC
assert not shim or LC.__file__.startswith(shim), LC.__file__
tg = mag_like(num_papers={papers}, feature_dim={fdim}, seed=0)
assign = np.random.default_rng(1).integers(0, {parts}, tg.total_nodes)
write_typed_store(tg, assign, {store!r}, num_parts={parts})
root = __import__("pathlib").Path({store!r})
fbytes = sum(f.stat().st_size for f in root.glob("part-*/features*.npy"))
st = PartitionStore(root)
train = np.flatnonzero(tg.train_mask) + int(tg.type_offsets[tg.node_types.index("paper")])
seeds = np.random.default_rng(2).permutation(train)[:{batches} * {batch}].reshape({batches}, {batch})
def rss():
    f = dict(l.split(":", 1) for l in open("/proc/self/status") if l.startswith(("RssAnon", "RssFile")))
    return {{k: int(v.split()[0]) * 1024 for k, v in f.items()}}
r0 = rss()
sampler = SamplerCore(st, seed=0)
r1 = rss()                   # every part held: its CSR mapped, its relations read
sbest = None
for p in range({passes}):
    t0 = time.process_time()
    batches = [sampler.sample(s, ({fanouts}), rng_seed=i) for i, s in enumerate(seeds)]
    t = time.process_time() - t0
    sbest = t if sbest is None else min(sbest, t)
other = LoaderCore(PartitionStore(root), held_parts=list(range(1, {parts})))
halo = {{"rows": 0}}
def fetch(what, ids, epoch):
    halo["rows"] += ids.shape[0] if what == "features" else 0
    return other.serve(HaloRequest(what=what, ids=np.asarray(ids, np.int64)))
loader = LoaderCore(PartitionStore(root), held_parts=[0], fetch=fetch)
best, rows, nbytes = None, 0, 0
for p in range({passes}):
    halo["rows"] = 0
    t0 = time.process_time()
    out = [loader.load(b) for b in batches]
    t = time.process_time() - t0
    best = t if best is None else min(best, t)
rows = sum(fb.features.shape[0] for fb in out)
nbytes = sum(fb.features.nbytes for fb in out)
nodes = sum(b.nodes.shape[0] for b in batches)
# the check: featured vertices' rows equal the graph's padded features (zero for the other types)
x0 = np.zeros((tg.total_nodes, {fdim}), np.float32)
x0[tg.type_offsets[0]:tg.type_offsets[1]] = tg.features[tg.node_types[0]]
ok = True
for b, fb in zip(batches, out):
    sent = b.nodes if fb.features.shape[0] == b.nodes.shape[0] else b.nodes[b.nodes < tg.type_offsets[1]]
    ok &= bool(np.array_equal(fb.features.astype(np.float32), x0[sent]))
    ok &= bool((x0[np.setdiff1d(b.nodes, sent)] == 0).all())
print(json.dumps({{"feature_file_bytes": fbytes, "rows_per_batch": rows / len(batches),
                  "nodes_per_batch": nodes / len(batches), "bytes_per_batch": nbytes / len(batches),
                  "halo_rows_per_batch": halo["rows"] / len(batches),
                  "load_cpu_ms_per_batch": 1000 * best / len(batches), "rows_check": ok,
                  "sample_cpu_ms_per_batch": 1000 * sbest / len(batches),
                  "sampler_rss_anon_bytes": r1["RssAnon"] - r0["RssAnon"], "sampler_rss_file_bytes": r1["RssFile"] - r0["RssFile"],
                  "vertices": int(tg.total_nodes)}}))
"""


def side(shim: str, store: Path, a) -> dict:
    """One side's figures: its second run (the first compiles and caches its kernels)."""
    _run(shim, store, a)
    import shutil
    shutil.rmtree(store)
    return _run(shim, store, a)


def _run(shim: str, store: Path, a) -> dict:
    code = WORKER.format(shim=shim, papers=a.num_papers, fdim=a.feature_dim, parts=a.parts, store=str(store),
                         batches=a.batches, batch=a.batch, fanouts=a.fanouts + ",", passes=a.passes)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    if r.returncode != 0:
        raise SystemExit(f"side {'baseline' if shim else 'current'} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", required=True, help="git revision of the padded layout (before per-type files)")
    ap.add_argument("--num-papers", type=int, default=100_000)
    ap.add_argument("--feature-dim", type=int, default=128)
    ap.add_argument("--parts", type=int, default=2)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--fanouts", default="10,5")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "typed_features.md"))
    a = ap.parse_args()
    import sampler as homo_bench                              # bench/sampler.py: git archive + shim
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shim = str(homo_bench.shim(homo_bench.baseline_tree(a.baseline, work), work))
        res = {"baseline": side(shim, work / "before", a), "current": side("", work / "after", a)}
    b, c = res["baseline"], res["current"]
    ratios = {k: c[k] / b[k] for k in ("feature_file_bytes", "bytes_per_batch", "halo_rows_per_batch",
                                        "load_cpu_ms_per_batch", "sample_cpu_ms_per_batch",
                                        "sampler_rss_anon_bytes", "sampler_rss_file_bytes") if b[k]}
    row = {"args": vars(a), **res, "current_over_baseline": ratios}
    lines = [f"# Per-type feature files vs the padded layout ({a.baseline})", "",
             f"`python bench/typed_features.py --baseline {a.baseline} --num-papers {a.num_papers} --parts {a.parts}`: "
             f"mag_like, {c['vertices']:,} vertices, paper features {a.feature_dim}-d, {a.batches} batches of "
             f"{a.batch} papers, fanouts {a.fanouts}.", "",
             "| | padded (baseline) | per-type files | current / baseline |", "|---|---:|---:|---:|"]
    for k, unit in (("feature_file_bytes", "MiB"), ("nodes_per_batch", ""), ("rows_per_batch", ""),
                    ("bytes_per_batch", "MiB"), ("halo_rows_per_batch", ""), ("load_cpu_ms_per_batch", "ms"),
                    ("sample_cpu_ms_per_batch", "ms"), ("sampler_rss_anon_bytes", "MiB"),
                    ("sampler_rss_file_bytes", "MiB")):
        f = (lambda v: f"{v / 2**20:,.1f}") if unit == "MiB" else (lambda v: f"{v:,.1f}")
        lines.append(f"| {k} {('(' + unit + ')') if unit else ''} | {f(b[k])} | {f(c[k])} | "
                     f"{c[k] / b[k]:.3f} |" if b[k] else f"| {k} | {f(b[k])} | {f(c[k])} | - |")
    lines += ["", f"rows check (featured rows equal the graph's features, the rest zero): baseline "
              f"{b['rows_check']}, current {c['rows_check']}", "", "```json", json.dumps(row), "```"]
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text("\n".join(lines) + "\n")
    print(json.dumps(row))
    print("\n".join(lines[4:-4]))


if __name__ == "__main__":
    main()
