"""Ingest benchmark: how fast one trainer takes in ~33-45 MB batches, before and after (issue 28).

Part 1, ``ingest``: a real trainer process (``python -m argosy.services.trainer``) pinned to one
core receives batches over real ZeroMQ (TCP loopback) from a producer process on another core
that replays one real sampled batch (fanouts 10,10, batch 1024 on the generated graph of the
issue) with each plan item's seeds written in, so every batch passes the full validator (plan
seeds included), is claimed in a real Redis and acknowledged.  The GPU step is simulated at 1 µs
(``--simulate-gpu-step 1us``: the step is a ~50 µs sleep, i.e. ~0): what is measured is the
ingest path.  It runs twice in the same bench run: the code of ``--baseline-rev`` (checked out into
a temporary directory: receive, decode and validate on the one training thread) and this tree's
(ingest thread, message buffers reused, Redis bookkeeping off the step).  Reported per train
phase of epochs 1.. (epoch 0 is warm-up): batches/s, GB/s of features, and the trainer process's
CPU seconds per batch (``/proc/PID/stat``), whose inverse is the batches/s one core sustains.

Part ``cache``: the same replay into this tree's trainer without a feature cache, with one of
``--cache-fraction`` of the rows, and with every row (``--gpu-cache``; the producer leaves the
cached rows out, as a loader does): bytes per batch into the trainer, hit rate and trainer CPU per batch.

Part ``transport``: the socket alone, TCP loopback against ``ipc://`` (what a loader on the
trainer's host uses): receiver CPU per message of ``--transport-mb`` MB, receiver on one core.

Part 2, ``job``: ``argosy train`` with 1 sampler + 1 loader + 1 trainer and the GPU step simulated
(``--job-step``, default 1 ms); per-process CPU time (``/proc/PID/stat``) over the steady state
(between 20 % and 90 % of the batches the trainer applied): trainer CPU / loader CPU (goal <= 0.2).

Writes ``bench/results/ingest.{json,md}``.  Never asserts: figures are reported, not enforced.

Usage:
    python bench/ingest.py                       # the issue's graph: 500k nodes, degree 20, 128-d features
    python bench/ingest.py --small               # smoke run (20k nodes, 32-d)
    python bench/ingest.py --device cuda         # on a GPU machine (the after path copies to the device)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "bench" / "results"
BASELINE_REV = "6710e0c"
"""The code the issue measured (before the ingest thread)."""


def make_store(work: Path, nodes: int, degree: float, dim: int, parts: int) -> Path:
    store = work / f"store-{nodes}-{degree:g}-{dim}-{parts}"
    if (store / "manifest.json").exists():
        return store
    graph = work / f"graph-{nodes}-{degree:g}-{dim}.npz"
    if not graph.exists():
        subprocess.run([sys.executable, "-m", "argosy.services.launch", "generate", "--nodes", str(nodes), "--avg-degree",
                        str(degree), "--feature-dim", str(dim), "--out", str(graph)], check=True, cwd=ROOT, capture_output=True)
    subprocess.run([sys.executable, "-m", "argosy.services.partitioner", str(graph), "--parts", str(parts), "--method",
                    "random", "--out", str(store), "--overwrite"], check=True, cwd=ROOT, capture_output=True)
    return store


def baseline_tree(rev: str, work: Path) -> Path:
    """``rev``'s code importable as ``argosy`` (PYTHONPATH=<returned dir>), from ``git archive``."""
    pkg = work / f"baseline-{rev}"
    if (pkg / "argosy" / "__init__.py").exists():
        return pkg
    src = work / f"baseline-src-{rev}"
    src.mkdir(parents=True, exist_ok=True)
    arch = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "argosy", "shared", "services"], check=True,
                          capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=arch, check=True)
    (pkg / "argosy").mkdir(parents=True, exist_ok=True)
    for f in (src / "argosy").iterdir():
        os.symlink(f, pkg / "argosy" / f.name)
    os.symlink(src / "shared", pkg / "argosy" / "shared")
    os.symlink(src / "services", pkg / "argosy" / "services")
    return pkg


SPEC_FIELDS = r"""
import dataclasses, json
from argosy.shared.config import JobConfig
top = {f.name: f for f in dataclasses.fields(JobConfig)}
print(json.dumps({n: ([g.name for g in dataclasses.fields(f.default_factory)] if f.default_factory is not dataclasses.MISSING
                      and dataclasses.is_dataclass(f.default_factory) else None) for n, f in top.items()}))
"""


def spec_for_tree(spec: dict, pythonpath: str) -> dict:
    """``spec`` without the fields an older tree's ``JobConfig`` does not know (they take its defaults there)."""
    env = {**os.environ, "PYTHONPATH": pythonpath}
    known = json.loads(subprocess.run([sys.executable, "-c", SPEC_FIELDS], env=env, cwd=tempfile.gettempdir(),
                                      capture_output=True, text=True, check=True).stdout)
    out = {}
    for k, v in spec.items():
        if k in known:
            out[k] = {a: b for a, b in v.items() if a in known[k]} if isinstance(v, dict) and known[k] is not None else v
    return out


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, all its threads (``/proc/PID/stat`` fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------- part 1
PRODUCER = r"""
import json, os, sys, time
import numpy as np, zmq
from argosy.shared import keys
from argosy.shared.coord import Coordinator
from argosy.shared.config import JobConfig
from argosy.shared.store import PartitionStore
from argosy.shared.transport import make_socket
try:
    from argosy.shared.transport import connect_endpoint
except ImportError:                                  # the baseline's tree: TCP only
    connect_endpoint = lambda reg: reg["endpoint"]
from argosy.shared.validate import job_plan
from argosy.shared.wire import encode
from argosy.services.loader.core import LoaderCore
from argosy.services.sampler.core import SamplerCore
os.sched_setaffinity(0, {cpus!r})
coord = Coordinator({redis!r}, {job!r})
cfg = coord.get_spec(wait=30)
store = PartitionStore(cfg.store)
plan0 = job_plan(cfg, store, 0, "train")
it0 = max(plan0, key=lambda it: it.count)
tpl = LoaderCore(store).load(SamplerCore(store, seed=0).sample_item(it0, cfg.sampler.fanouts))
B = int(tpl.hop_nodes[0])

def batch(it):
    # the template's structure with this item's seeds (and fewer seeds: hop-1 edges to the dropped ones cut)
    fb = type(tpl)(**tpl.__dict__)
    nodes = tpl.nodes.copy()
    fb.epoch, fb.phase, fb.batch_id, fb.part, fb.trainer_rank, fb.job = it.epoch, it.phase, it.batch_id, it.part, it.trainer_rank, cfg.job
    fb.work_stream, fb.work_id = keys.work_stream(cfg.job, it.part), "1-0"
    seeds = orders[(it.epoch if it.phase == "train" else 0, it.phase, it.part)][it.offset:it.offset + it.count]
    nodes[:it.count] = seeds
    if it.count < B:
        he = tpl.hop_edges
        keep = np.ones(tpl.edge_src.shape[0], bool)
        keep[he[0]:he[1]] = tpl.edge_dst[he[0]:he[1]] < it.count
        fb.edge_src, fb.edge_dst = tpl.edge_src[keep], tpl.edge_dst[keep]
        fb.hop_edges = np.concatenate([[0], np.cumsum([int(keep[he[h]:he[h + 1]].sum()) for h in range(len(he) - 1)])]).astype(np.int64)
        fb.hop_nodes = tpl.hop_nodes.copy(); fb.hop_nodes[0] = it.count
        fb.remote_neighbors = 0
        if hasattr(tpl, "dst_ptr"):                  # CSR offsets are optional: the trainer uses the edge lists
            fb.dst_ptr = tpl.dst_ptr[:0]
    fb.nodes = nodes
    fb.labels = np.ascontiguousarray(tpl.labels[:it.count])
    if hot is not None:                              # what a loader sends a trainer with a feature cache
        fb.features, fb.feature_cache = tpl.features[hot.lookup(nodes)[1]], hot.digest
    return fb

from argosy.shared.plan import split_order
orders = {{}}
ctx = zmq.Context()
while not coord.services("trainer"):
    time.sleep(0.05)
push = make_socket(ctx, zmq.PUSH, sndhwm=4)
push.connect(connect_endpoint(coord.services("trainer")[0]))   # as a loader does: ipc:// on one host
ring = None
if {ring!r}:                                         # as a loader on the trainer's host does: rows through its ring
    from argosy.shared.shm_ring import RingWriter
    from argosy.shared.validate import BatchBounds
    ring = RingWriter(coord.services("trainer")[0]["ring_dir"], cfg.loader.shm_ring_slots,
                      BatchBounds.from_job(cfg, store).ring_slot_bytes)

def send(fb):
    if ring is not None:                             # (a loader gathers into the slot; this replay copies)
        lease = ring.acquire(fb.features.nbytes, 60.0)
        ring.rows(lease, fb.features.shape, fb.features.dtype)[:] = fb.features
        fb.features, fb.ring, fb.ring_slot, fb.ring_seq, fb.ring_bytes = (fb.features[:0], ring.name, lease.slot,
                                                                          lease.seq, fb.features.nbytes)
    push.send_multipart(encode(fb), copy=False)
hot = None
if {cache!r}:                                        # the trainer's feature cache, derived as a loader does
    from argosy.shared.hot_rows import HotRows
    hot = HotRows.matching(store, coord.services("trainer")[0].get("feature_cache"))
print(json.dumps({{"feature_bytes": int(tpl.features.nbytes), "rows": int(tpl.features.shape[0]),
                  "edges": int(tpl.edge_src.shape[0]), "seeds": B}}), flush=True)
seen = set()
while coord.get_state() not in ("done", "failed"):
    ph = coord.get_phase()
    key = (ph.get("epoch"), ph.get("phase"))
    if not ph or key in seen:
        time.sleep(0.005)
        continue
    seen.add(key)
    print(json.dumps({{"phase": key, "t": time.time()}}), flush=True)
    for it in job_plan(cfg, store, key[0], key[1]):
        k = (it.epoch if it.phase == "train" else 0, it.phase, it.part)
        if k not in orders:
            orders[k] = split_order(store, it.part, it.phase, cfg.seed, it.epoch)
        send(batch(it))
print(json.dumps({{"end": time.time()}}), flush=True)
if ring is not None:
    ring.close()
"""


def ingest_run(label: str, a, store: Path, redis_url: str, pythonpath: str, gpu_cache: int | None = None,
               ring: bool = False) -> dict:
    """One trainer (pinned to CPU ``a.trainer_cpu``) fed by a replaying producer; returns its epoch figures.

    ``gpu_cache``: the trainer's feature cache in bytes (this tree only; the producer then leaves the
    cached rows out, as a loader does); None = the config's default.  ``ring``: the producer puts
    the rows in a shared-memory ring in the trainer's directory, as a loader on its host does (this
    tree only)."""
    from argosy.shared.config import JobConfig, SamplerConfig, TrainerConfig
    from argosy.shared.coord import Coordinator
    job = f"ingest-{label}-{os.getpid()}"
    fan = tuple(int(x) for x in a.fanouts.split(","))
    cfg = JobConfig(job=job, store=str(store), sampler=SamplerConfig(fanouts=fan, eval_fanouts=fan, batch_size=a.batch_size,
                                                                     eval_batch_size=a.batch_size, eval_max_nodes=a.batch_size),
                    trainer=TrainerConfig(epochs=a.epochs, patience=0, device=a.device, simulate_gpu_step=1e-6,
                                          checkpoint_every=0, **({} if gpu_cache is None else {"gpu_cache": gpu_cache})))
    coord = Coordinator(redis_url, job)
    coord.delete_job()
    spec = json.loads(cfg.to_json())
    if pythonpath:                                        # the baseline's spec has fewer fields
        spec = spec_for_tree(spec, pythonpath)
    from argosy.shared import keys
    coord.r.set(keys.spec(job), json.dumps(spec))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONPATH", None)
    if pythonpath:                                        # the baseline's tree first; else this tree (installed)
        env["PYTHONPATH"] = pythonpath
    tr = subprocess.Popen(["taskset", "-c", str(a.trainer_cpu), sys.executable, "-m", "argosy.services.trainer", "--redis",
                           redis_url, "--job", job, "--rank", "0", "--id", "trainer-0"], env=env, cwd=tempfile.gettempdir(),
                          stdout=subprocess.DEVNULL, stderr=open(Path(a.work) / f"{label}-trainer.log", "w"))
    prod_cpus = set(range(os.cpu_count() or 1)) - {a.trainer_cpu} or {0}
    # the producer speaks the trainer's protocol version: same code (PYTHONPATH) as the trainer
    pr = subprocess.Popen([sys.executable, "-c", PRODUCER.format(redis=redis_url, job=job, cpus=prod_cpus, cache=bool(gpu_cache),
                                                                       ring=ring)],
                          stdout=subprocess.PIPE, text=True, cwd=tempfile.gettempdir(), env=env)
    marks = []                                            # (phase key, wall, trainer cpu) at each phase start
    info = None
    for line in pr.stdout:
        d = json.loads(line)
        if "feature_bytes" in d:
            info = d
        elif "phase" in d:
            marks.append((tuple(d["phase"]), time.time(), cpu_seconds(tr.pid)))
        elif "end" in d:
            break
    try:
        tr.wait(timeout=120)
    finally:
        if tr.poll() is None:
            tr.kill()
    pr.wait(timeout=30)
    epochs = [e.to_dict() for e in coord.epochs()]
    state = coord.get_state()
    coord.delete_job()
    if state != "done" or not epochs:
        raise RuntimeError(f"{label}: trainer ended in state {state}; see {a.work}/{label}-trainer.log")
    # trainer CPU per train phase: from its start mark to the next phase's mark
    rows = []
    for (key, t0, c0), (_, t1, c1) in zip(marks, marks[1:]):
        if key[1] != "train" or key[0] == 0:
            continue
        e = next(x for x in epochs if x["epoch"] == key[0])
        n = e["batches"]
        rows.append({"epoch": key[0], "batches": n, "batches_per_second": e["batches_per_second"],
                     "gb_per_second": e["batches_per_second"] * info["feature_bytes"] / 1e9,
                     "cpu_ms_per_batch": 1000 * (c1 - c0) / max(n, 1),
                     "one_core_batches_per_second": n / max(c1 - c0, 1e-9),
                     "idle": e["trainer_idle_fraction"], "ingest_seconds": e.get("ingest_seconds"),
                     "bytes_per_batch": e.get("bytes_per_batch"), "cache_hit_rate": e.get("cache_hit_rate"),
                     "copy_seconds": e.get("copy_seconds"), "compute_seconds": e.get("compute_seconds")})
    med = lambda k: float(np.median([r[k] for r in rows]))
    return {"label": label, "batch": info, "epochs": rows,
            **{k: med(k) for k in ("batches_per_second", "gb_per_second", "cpu_ms_per_batch", "one_core_batches_per_second")},
            **({k: med(k) for k in ("bytes_per_batch", "cache_hit_rate")} if not pythonpath else {}), "gpu_cache": gpu_cache}


# ---------------------------------------------------------------------------------------------- transport
def _transport_send(endpoint: str, cpus: set, nbytes: int, count: int) -> None:
    import zmq
    os.sched_setaffinity(0, cpus)
    ctx = zmq.Context()
    s = ctx.socket(zmq.PUSH)
    s.setsockopt(zmq.SNDHWM, 4)
    s.connect(endpoint)
    buf = np.ones(nbytes, np.uint8)
    for _ in range(count):
        s.send_multipart([b"h" * 500, memoryview(buf)], copy=False)
    time.sleep(1)
    s.close()
    ctx.term()


def _transport_receive(kind: str, cpu: int, nbytes: int, count: int, out) -> None:
    """Receiver on one core, as the trainer's socket is set up (buffers reused); CPU s per message."""
    import multiprocessing as mp
    import zmq
    from argosy.shared.transport import bind_local, retain_large_buffers, unbind_local
    retain_large_buffers()
    os.sched_setaffinity(0, {cpu})
    ctx = zmq.Context()
    s = ctx.socket(zmq.PULL)
    s.setsockopt(zmq.RCVHWM, 8)
    ep = bind_local(s) if kind == "ipc" else f"tcp://127.0.0.1:{s.bind_to_random_port('tcp://127.0.0.1')}"
    warm = 5
    snd = mp.Process(target=_transport_send, args=(ep, (set(range(os.cpu_count() or 1)) - {cpu}) or {cpu}, nbytes,
                                                    count + warm))
    snd.start()
    for _ in range(warm):
        s.recv_multipart(copy=False)
    c0 = time.process_time()
    for _ in range(count):
        s.recv_multipart(copy=False)
    out.put((time.process_time() - c0) / count)
    snd.join()
    s.close()
    ctx.term()
    unbind_local(ep if kind == "ipc" else None)


def transport_run(a) -> list[dict]:
    """Receiver CPU per message of ``--transport-mb`` MB over TCP loopback and ``ipc://``, interleaved."""
    import multiprocessing as mp
    rows = []
    for _ in range(a.transport_repeats):
        for kind in ("tcp", "ipc"):
            q = mp.Queue()
            p = mp.Process(target=_transport_receive, args=(kind, a.trainer_cpu, int(a.transport_mb * 1e6), 100, q))
            p.start()
            rows.append({"kind": kind, "receiver_cpu_ms_per_message": 1000 * q.get(timeout=600)})
            p.join()
            print(f"transport {kind}: {rows[-1]['receiver_cpu_ms_per_message']:.2f} ms", file=sys.stderr)
    return rows


# ---------------------------------------------------------------------------------------------- part 2
def job_run(a, store: Path, pythonpath: str = "", label: str = "this tree") -> dict:
    """1 sampler + 1 loader + 1 trainer, GPU step simulated: per-process CPU over the steady state.

    ``pythonpath``: another tree's code (:func:`baseline_tree`) for every process of the job; "" = this tree."""
    import psutil
    job = f"ingest-job-{os.getpid()}-{int(time.time())}"
    run_dir = Path(a.work) / job
    env = {**os.environ}
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    cmd = [sys.executable, "-m", "argosy.services.launch", "train", "--store", str(store), "--samplers", "1", "--loaders", "1",
           "--job", job,
           "--epochs", str(a.job_epochs), "--patience", "0", "--fanouts", a.fanouts, "--eval-fanouts", a.fanouts,
           "--batch-size", str(a.batch_size), "--eval-max-nodes", str(a.batch_size), "--simulate-gpu-step", a.job_step,
           "--device", a.device, "--run-dir", str(run_dir), "--json"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         cwd=tempfile.gettempdir() if pythonpath else ROOT, env=env)
    samples: list[tuple[float, dict[str, float]]] = []
    launcher = psutil.Process(p.pid)
    while p.poll() is None:           # the launcher's descendants, by module name or process title (setproctitle)
        cpu: dict[str, float] = {}
        try:
            kids = launcher.children(recursive=True)
        except psutil.Error:
            kids = []
        for proc in kids:
            try:
                cmdline = " ".join(proc.cmdline())
                for role in ("sampler", "loader", "trainer"):
                    if f"argosy.services.{role}" in cmdline or cmdline.startswith(f"argosy-{role}-"):
                        cpu[role] = cpu.get(role, 0.0) + cpu_seconds(proc.pid)
            except (psutil.Error, OSError):
                pass
        samples.append((time.time(), cpu))
        time.sleep(0.25)
    out = p.stdout.read().strip().splitlines()
    res = json.loads(out[-1]) if out else {}
    rep = json.loads((run_dir / "report.json").read_text())
    tl = [(s["t"], s.get("trainer_batches", 0.0)) for s in rep["timeline"]]
    total = tl[-1][1]
    t_a = next(t for t, b in tl if b >= 0.2 * total)
    t_b = next(t for t, b in tl if b >= 0.9 * total)

    def at(t: float, role: str) -> float:
        before = [c.get(role, 0.0) for s, c in samples if s <= t and role in c]
        return before[-1] if before else 0.0

    cpu = {r: at(t_b, r) - at(t_a, r) for r in ("sampler", "loader", "trainer")}
    batches = np.interp([t_a, t_b], [t for t, _ in tl], [b for _, b in tl])
    nb = float(batches[1] - batches[0])
    return {"window_seconds": t_b - t_a, "batches": nb, "cpu_seconds": cpu,
            "cpu_ms_per_batch": {r: 1000 * v / max(nb, 1) for r, v in cpu.items()},
            "trainer_over_loader": cpu["trainer"] / max(cpu["loader"], 1e-9),
            "batches_per_second": res.get("batches_per_second"), "trainer_idle_fraction": res.get("trainer_idle_fraction"),
            "simulated_step": a.job_step, "label": label}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=500_000)
    ap.add_argument("--degree", type=float, default=20)
    ap.add_argument("--feature-dim", type=int, default=128)
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--fanouts", default="10,10")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--epochs", type=int, default=3, help="epochs per ingest run (epoch 0 is warm-up)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--trainer-cpu", type=int, default=0, help="the one core the trainer runs on")
    ap.add_argument("--baseline-rev", default=BASELINE_REV)
    ap.add_argument("--job-epochs", type=int, default=3)
    ap.add_argument("--job-step", default="1ms", help="simulated GPU step of the 1+1+1 job")
    ap.add_argument("--job-baseline-rev", default="", help="also run the job with this revision's code (same bench run)")
    ap.add_argument("--job-repeats", type=int, default=1, help="runs of the job (each with the baseline first, if any)")
    ap.add_argument("--parts-to-run", default="ingest,cache,transport,job", help="comma list of ingest, cache, transport, job")
    ap.add_argument("--transport-mb", type=float, default=45.3, help="transport part: message size")
    ap.add_argument("--transport-repeats", type=int, default=2, help="transport part: runs of each kind")
    ap.add_argument("--cache-fraction", type=float, default=0.25, help="cache part: the partial cache, a fraction of the rows' bytes")
    ap.add_argument("--cache-repeats", type=int, default=1, help="cache part: runs of each cache size")
    ap.add_argument("--work", default="/tmp/argosy-bench-ingest")
    ap.add_argument("--small", action="store_true", help="smoke run: 20k nodes, 32-d features, batch 256")
    a = ap.parse_args()
    if a.small:
        a.nodes, a.feature_dim, a.batch_size, a.parts = 20_000, 32, 256, 4
    Path(a.work).mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    store = make_store(Path(a.work), a.nodes, a.degree, a.feature_dim, a.parts)
    prev = json.loads((OUT / "ingest.json").read_text()) if (OUT / "ingest.json").exists() else {}
    res = {"setting": {k: getattr(a, k) for k in ("nodes", "degree", "feature_dim", "parts", "fanouts", "batch_size", "device",
                                                  "baseline_rev", "trainer_cpu", "job_step")},
           "cpus": os.cpu_count(), "load_average_at_start": os.getloadavg(), "when": time.strftime("%Y-%m-%d %H:%M")}
    todo = a.parts_to_run.split(",")
    if "ingest" in todo:
        from argosy.shared.redis_server import EmbeddedRedis
        old = baseline_tree(a.baseline_rev, Path(a.work))
        with EmbeddedRedis() as srv:
            runs = []
            for label, path in (("before", str(old)), ("after", ""), ("after-ring", ""), ("before", str(old)),
                                ("after", ""), ("after-ring", "")):
                print(f"ingest: {label} ...", file=sys.stderr)
                runs.append(ingest_run(label, a, store, srv.url, path, ring=label == "after-ring"))
        res["ingest"] = runs
        b = [r for r in runs if r["label"] == "before"]
        f = [r for r in runs if r["label"] == "after"]
        mean = lambda rs, k: float(np.mean([r[k] for r in rs]))
        res["ingest_speedup"] = {k: mean(f, k) / mean(b, k) for k in ("batches_per_second", "one_core_batches_per_second")}
        g = [r for r in runs if r["label"] == "after-ring"]
        if g:
            res["ingest_speedup_ring"] = {k: mean(g, k) / mean(b, k) for k in ("batches_per_second", "one_core_batches_per_second")}
    if "cache" in todo:
        from argosy.shared.redis_server import EmbeddedRedis
        whole = a.nodes * a.feature_dim * 4
        sizes = {"off": 0, f"{a.cache_fraction:.0%} of rows": int(whole * a.cache_fraction), "every row": whole}
        with EmbeddedRedis() as srv:
            runs = []
            for _ in range(a.cache_repeats):
                for label, size in sizes.items():
                    print(f"cache: {label} ...", file=sys.stderr)
                    runs.append({**ingest_run(f"cache-{label.split()[0]}", a, store, srv.url, "", gpu_cache=size),
                                 "label": label})
        res["cache"] = runs
    if "transport" in todo:
        res["transport"] = transport_run(a)
    if "job" in todo:
        runs = []
        for _ in range(a.job_repeats):
            if a.job_baseline_rev:
                print(f"job ({a.job_baseline_rev}): 1 sampler + 1 loader + 1 trainer ...", file=sys.stderr)
                runs.append(job_run(a, store, str(baseline_tree(a.job_baseline_rev, Path(a.work))), a.job_baseline_rev))
            print("job: 1 sampler + 1 loader + 1 trainer ...", file=sys.stderr)
            runs.append(job_run(a, store))
        res["job"] = runs
    for part in ("ingest", "ingest_speedup", "ingest_speedup_ring", "cache", "transport", "job"):         # a part not run this time: keep the last figures
        if part not in res and part in prev and prev.get("setting") == res["setting"]:
            res[part] = prev[part]
    (OUT / "ingest.json").write_text(json.dumps(res, indent=1))
    md = [f"# Ingest benchmark ({res['when']}, {res['cpus']} cores, load avg at start {res['load_average_at_start'][0]:.2f})", ""]
    if "ingest" in res:
        bt = res["ingest"][0]["batch"]
        md += [f"One trainer on one core (`taskset -c {a.trainer_cpu}`), GPU step simulated at 1 µs, device {a.device}; "
               f"batches of {bt['rows']:,} feature rows x {a.feature_dim} ({bt['feature_bytes'] / 1e6:.1f} MB), "
               f"{bt['edges']:,} edges, replayed over ZeroMQ as a loader on the same host sends them (this tree: ipc://; "
               f"a baseline without it: TCP loopback). Median of epochs 1..{a.epochs - 1}; "
               "*one core* = batches per trainer CPU-second.", "",
               "| code | batches/s | GB/s | trainer CPU ms/batch | one core: batches/s |", "|---|---|---|---|---|"]
        for r in res["ingest"]:
            name = {"before": f"before ({a.baseline_rev})", "after-ring": "after, rows through a shared-memory ring"}.get(
                r["label"], "after")
            md.append(f"| {name} | {r['batches_per_second']:.1f} | {r['gb_per_second']:.2f} | {r['cpu_ms_per_batch']:.1f} | "
                      f"{r['one_core_batches_per_second']:.1f} |")
        s = res["ingest_speedup"]
        md += ["", f"after / before: batches/s **{s['batches_per_second']:.2f}x**, one core **{s['one_core_batches_per_second']:.2f}x**"]
        if "ingest_speedup_ring" in res:
            s = res["ingest_speedup_ring"]
            md.append(f"after (ring) / before: batches/s **{s['batches_per_second']:.2f}x**, one core "
                      f"**{s['one_core_batches_per_second']:.2f}x**")
        md.append("")
    if "cache" in res:
        bt = res["cache"][0]["batch"]
        off = [r for r in res["cache"] if not r["gpu_cache"]]
        md += [f"Trainer feature cache (`--gpu-cache`), the same replay ({bt['rows']:,} rows x {a.feature_dim}, "
               f"{bt['feature_bytes'] / 1e6:.1f} MB of features per batch without it), one trainer core, device {a.device}; "
               "the producer leaves the cached rows out as a loader does. Median of epochs 1.."
               f"{a.epochs - 1}; ratios against the mean of the runs without a cache.", "",
               "| cache | hit rate | MB / batch into the trainer | trainer CPU ms/batch | batches/s (wall) | CPU vs off |",
               "|---|---|---|---|---|---|"]
        base = float(np.mean([r["cpu_ms_per_batch"] for r in off])) if off else float("nan")
        for r in res["cache"]:
            md.append(f"| {r['label']} ({(r['gpu_cache'] or 0) / 1e6:.0f} MB) | {r['cache_hit_rate']:.3f} | "
                      f"{r['bytes_per_batch'] / 1e6:.2f} | {r['cpu_ms_per_batch']:.1f} | {r['batches_per_second']:.1f} | "
                      f"{r['cpu_ms_per_batch'] / base:.2f}x |")
        md.append("")
    if "transport" in res:
        md += [f"Transport alone: libzmq PUSH -> PULL of {a.transport_mb:g} MB messages (+ a 500-byte header frame), the "
               f"receiver on one core (`{a.trainer_cpu}`) with buffers reused as in the trainer, the sender on the others; "
               "receiver CPU per message over 100 messages", "",
               "| endpoint | receiver CPU ms / message |", "|---|---|"]
        md += [f"| {r['kind']} | {r['receiver_cpu_ms_per_message']:.2f} |" for r in res["transport"]]
        md.append("")
    if "job" in res:
        jobs = res["job"] if isinstance(res["job"], list) else [res["job"]]
        md += [f"1 sampler + 1 loader + 1 trainer, GPU step simulated at {jobs[0]['simulated_step']}: CPU per applied batch "
               "over the steady state (between 20 % and 90 % of the trainer's batches), per process", "",
               "| code | window s | batches | sampler ms | loader ms | trainer ms | **trainer / loader** | batches/s | trainer idle |",
               "|---|---|---|---|---|---|---|---|---|"]
        for j in jobs:
            c = j["cpu_ms_per_batch"]
            md.append(f"| {j.get('label', 'this tree')} | {j['window_seconds']:.1f} | {j['batches']:.0f} | {c['sampler']:.1f} | "
                      f"{c['loader']:.1f} | {c['trainer']:.1f} | **{j['trainer_over_loader']:.2f}** | "
                      f"{j['batches_per_second']:.1f} | {j['trainer_idle_fraction']:.0%} |")
        md += ["", "Goal: trainer / loader <= 0.2.", ""]
    (OUT / "ingest.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
