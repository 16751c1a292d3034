"""The ``argosy`` command line: run the pipeline as local processes, inspect stores, watch jobs.

Roles are started by module name (``python -m argosy.services.sampler``), never imported here, so the
same entry points run under the CLI, docker compose and Kubernetes.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np

from argosy.shared import envs
from argosy.shared.config import CoordConfig, JobConfig, LoaderConfig, SamplerConfig, TrainerConfig
from argosy.shared.errors import ArgosyError

__all__ = ["main", "LocalStack"]

logger = logging.getLogger("argosy")
ROLES = ("trainer", "loader", "sampler")
STACK_DIR = Path(os.environ.get("ARGOSY_HOME", Path.home() / ".argosy")) / "stacks"


# ---------------------------------------------------------------------------------------------
class LocalStack:
    """Processes of one job on this machine: start, watch, restart CPU-tier replicas, stop."""

    def __init__(self, job: str, redis_url: str, run_dir: Path, env: dict | None = None):
        self.job, self.redis_url, self.run_dir = job, redis_url, Path(run_dir)
        self.procs: dict[str, subprocess.Popen] = {}
        self.restarts = 0
        self.trainer_restarts = 0
        self.max_trainer_restarts = 3
        self.env = {**os.environ, envs.REDIS_URL: redis_url, "PYTHONUNBUFFERED": "1", **(env or {})}
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)

    def start(self, role: str, sid: str, extra: list[str] | None = None, detach: bool = False) -> subprocess.Popen:
        log = open(self.run_dir / "logs" / f"{sid}.log", "ab")
        cmd = [sys.executable, "-m", f"argosy.services.{role}", "--job", self.job, "--id", sid, *(extra or [])]
        p = subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=detach)
        self.procs[sid] = p
        return p

    def start_all(self, cfg: JobConfig, detach: bool = False) -> None:
        for r in range(cfg.num_trainers):
            self.start("trainer", f"trainer-{r}", ["--rank", str(r)], detach)
        for i in range(cfg.num_loaders):
            self.start("loader", f"loader-{i}", detach=detach)
        for i in range(cfg.num_samplers):
            self.start("sampler", f"sampler-{i}", detach=detach)

    def trainers_dead(self) -> str | None:
        for sid, p in self.procs.items():
            if sid.startswith("trainer") and p.poll() is not None:
                return f"{sid} exited with code {p.returncode} (see {self.run_dir / 'logs' / (sid + '.log')})"
        return None

    def restart_trainers(self, coord, world: int) -> None:
        """Kill what is left of the DDP world and start it again; trainers resume from the checkpoint."""
        self.trainer_restarts += 1
        for sid in [s for s in self.procs if s.startswith("trainer")]:
            p = self.procs.pop(sid)
            if p.poll() is None:
                p.kill()
                p.wait()
        coord.clear_dist_url()
        cfg = coord.get_spec()
        cfg.resume = True
        coord.put_spec(cfg)
        coord.set_state("starting")
        for r in range(world):
            self.start("trainer", f"trainer-{r}-r{self.trainer_restarts}", ["--rank", str(r)])

    def check(self, restart: bool = True) -> str | None:
        """Restart dead samplers/loaders (trainers are handled by :meth:`restart_trainers`)."""
        for sid, p in list(self.procs.items()):
            rc = p.poll()
            if rc is None:
                continue
            role = sid.split("-")[0]
            if role == "trainer":
                continue
            if rc != 0 and restart:
                self.restarts += 1
                logger.warning("%s exited with code %s; starting a replacement", sid, rc)
                del self.procs[sid]
                self.start(role, f"{role}-r{self.restarts}")
        return None

    def stop(self, timeout: float = 10.0) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for p in self.procs.values():
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


# ---------------------------------------------------------------------------------------------
def _has_features(path: str) -> bool:
    if not path.endswith(".npz"):
        return False
    with np.load(path) as z:
        return "features" in z.files


def partition_to_store(data: str, out: Path, parts: int, method: str, seed: int = 0, quiet: bool = False) -> dict:
    cmd = [sys.executable, "-m", "argosy.services.partitioner", data, "--parts", str(parts), "--method", method,
           "--out", str(out), "--overwrite", "--json", "--seed", str(seed)]
    if not _has_features(data):
        cmd += ["--synthetic-features", "64"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ArgosyError(f"partitioning {data} failed:\n{proc.stderr.strip()[-2000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    if not quiet:
        print(f"partitioned {data} with {method} into {parts} parts: edge cut {100 * res['edge_cut_fraction']:.2f}%, "
              f"balance {res['balance']:.3f} ({res['partition_seconds']:.1f} s)", file=sys.stderr)
    return res


def job_config(args, store: Path, job: str, run_dir: Path) -> JobConfig:
    fan = tuple(int(x) for x in args.fanouts.split(","))
    return JobConfig(
        job=job, store=str(store.resolve()), run_dir=str(run_dir.resolve()), seed=args.seed,
        num_samplers=args.samplers, num_loaders=args.loaders, num_trainers=args.trainers,
        sampler=SamplerConfig(fanouts=fan, eval_fanouts=tuple([-1] * len(fan)) if args.eval_fanouts is None
                              else tuple(int(x) for x in args.eval_fanouts.split(",")), batch_size=args.batch_size,
                              eval_max_nodes=args.eval_max_nodes),
        loader=LoaderConfig(),
        trainer=TrainerConfig(model=args.model, hidden=args.hidden, dropout=args.dropout, lr=args.lr,
                              weight_decay=args.weight_decay, epochs=args.epochs, device=args.device,
                              work_factor=args.work_factor, normalize_features=args.normalize_features),
        coord=CoordConfig(claim_timeout=args.claim_timeout, peer_timeout=args.peer_timeout))


def run_job(args, detach: bool = False) -> dict:
    """Partition (if needed), start Redis (if needed) and every role, watch to the end, report."""
    from argosy.shared.coord import Coordinator, redact_url
    from argosy.shared.redis_server import EmbeddedRedis
    from argosy.shared.report import write_report
    from argosy.shared.store import PartitionStore

    job = args.job or f"job-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
    run_dir = Path(args.run_dir or Path("runs") / job)
    run_dir.mkdir(parents=True, exist_ok=True)
    part_res = None
    if getattr(args, "resume", False) and not args.store and (run_dir / "store" / "manifest.json").exists():
        args.store = str(run_dir / "store")
    if getattr(args, "resume", False) and not (run_dir / "checkpoint.pt").exists():
        raise ArgosyError(f"--resume: no checkpoint in {run_dir} (pass the --run-dir of the interrupted run)")
    if args.store:
        store = Path(args.store)
        PartitionStore(store)                     # fails early with a clear message
    elif args.data:
        if not Path(args.data).exists():
            raise ArgosyError(f"{args.data}: no such file")
        store = run_dir / "store"
        part_res = partition_to_store(args.data, store, args.parts, args.partition_method, args.seed, args.json)
    else:
        raise ArgosyError("give --data FILE (a graph to partition) or --store DIR (an existing store)")
    embedded = None
    url = args.redis or os.environ.get(envs.REDIS_URL)
    if not url:
        # append-only file in the run dir: if the server dies, _watch restarts it with the job's state
        embedded = EmbeddedRedis(data_dir=str((run_dir / "redis").resolve())).start()
        url = embedded.url
    cfg = job_config(args, store, job, run_dir)
    cfg.resume = bool(getattr(args, "resume", False))
    coord = Coordinator(url, job)
    coord.delete_job()
    coord.put_spec(cfg)
    coord.set_state("starting")
    stack = LocalStack(job, url, run_dir)
    if not args.json:
        print(f"job {job}: {cfg.num_samplers} sampler(s), {cfg.num_loaders} loader(s), {cfg.num_trainers} trainer(s); "
              f"Redis {redact_url(url)}{' (embedded)' if embedded else ''}; logs in {run_dir / 'logs'}", file=sys.stderr)
    stack.start_all(cfg, detach=detach)
    if detach:
        STACK_DIR.mkdir(parents=True, exist_ok=True)
        info = {"job": job, "redis": url, "run_dir": str(run_dir.resolve()),
                "pids": {sid: p.pid for sid, p in stack.procs.items()},
                "redis_pid": embedded.proc.pid if embedded else None}
        (STACK_DIR / f"{job}.json").write_text(json.dumps(info))
        (STACK_DIR / "current").write_text(job)
        print(json.dumps({"job": job, "redis": redact_url(url), "run_dir": info["run_dir"]}))
        return info
    result, timeline, t_start = {}, [], time.time()
    try:
        result, timeline = _watch(coord, stack, cfg, quiet=args.json, embedded=embedded)
    except KeyboardInterrupt:
        coord.set_state("stopping")
        result = {"error": "interrupted"}
    finally:
        stack.stop()
        try:
            epochs = coord.epochs()
        except Exception:
            epochs = []
        try:
            from argosy.shared.metrics import read_autoscale_decisions
            autoscale = read_autoscale_decisions(coord)
        except Exception:
            autoscale = []
        if embedded:
            embedded.stop()
    result = {**result, "wall_seconds": time.time() - t_start, "restarts": stack.restarts,
              "trainer_restarts": stack.trainer_restarts}
    extra = {"job": job, "store": str(store), "config": json.loads(cfg.to_json()), "partition": part_res,
             "autoscale": autoscale}
    report = write_report(run_dir, result, epochs, timeline, extra)
    result["report"] = str(report)
    return result


def _watch(coord, stack: LocalStack, cfg: JobConfig, quiet: bool, embedded=None) -> tuple[dict, list]:
    from tqdm import tqdm
    bar = tqdm(total=cfg.trainer.epochs, unit="epoch", disable=quiet, file=sys.stderr, dynamic_ncols=True)
    timeline, seen = [], 0
    try:
        while True:
            if embedded is not None and embedded.proc is not None and embedded.proc.poll() is not None:
                logger.warning("the embedded Redis server exited (code %s); restarting it from its append-only file",
                               embedded.proc.returncode)
                embedded.start()
            state = coord.get_state()
            stack.check()
            if state == "done":
                break
            dead = stack.trainers_dead()
            if state == "failed" or dead:
                reason = (coord.get_result() or {}).get("error") if state == "failed" else dead
                if stack.trainer_restarts >= stack.max_trainer_restarts:
                    raise ArgosyError(f"job failed: {reason}")
                logger.warning("trainer failure (%s); restarting the trainers from the last checkpoint "
                               "(attempt %d of %d)", reason, stack.trainer_restarts + 1, stack.max_trainer_restarts)
                stack.restart_trainers(coord, cfg.num_trainers)
                continue
            epochs = coord.epochs()
            if len(epochs) > seen:
                e = epochs[-1]
                bar.update(len(epochs) - seen)
                seen = len(epochs)
                bar.set_postfix(loss=f"{e['train_loss']:.3f}", val=f"{e['val_accuracy']:.3f}",
                                bps=f"{e['batches_per_second']:.1f}", idle=f"{e['trainer_idle_fraction']:.0%}")
            timeline.append({"t": time.time(), **coord.metrics()})
            time.sleep(0.5)
        epochs = coord.epochs()
        bar.update(len(epochs) - seen)
    finally:
        bar.close()
    timeline.append({"t": time.time(), **coord.metrics()})
    return coord.get_result() or {}, timeline


# ---------------------------------------------------------------------------------------------
def cmd_submit(args) -> int:
    """Write a job spec into an existing Redis for already-running (or soon-running) services,
    optionally wait for the job to finish and write its report (compose/Kubernetes driver)."""
    from argosy.shared.coord import Coordinator
    from argosy.shared.report import write_report
    from argosy.shared.store import PartitionStore
    if not args.store:
        raise ArgosyError("submit needs --store DIR (a store every service can read at the same path)")
    PartitionStore(args.store)
    url = args.redis or os.environ.get(envs.REDIS_URL)
    if not url:
        raise ArgosyError("submit needs --redis URL or $ARGOSY_REDIS_URL")
    job = args.job or "default"
    run_dir = Path(args.run_dir or Path(args.store).parent / "runs" / job)
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = job_config(args, Path(args.store), job, run_dir)
    cfg.resume = True            # a trainer pod restarted by compose/Kubernetes continues from its checkpoint
    coord = Coordinator(url, job, connect_timeout=120)
    if coord.get_state() in ("running",) and not args.force:
        raise ArgosyError(f"job {job!r} is already running (pass --force to replace its spec)")
    coord.delete_job()
    coord.put_spec(cfg)
    coord.set_state("starting")
    print(f"submitted job {job} (fingerprint {cfg.fingerprint()})", file=sys.stderr)
    if not args.wait:
        return 0
    t0, timeline = time.time(), []
    while True:
        state = coord.get_state()
        if state in ("done", "failed"):
            break
        timeline.append({"t": time.time(), **coord.metrics()})
        time.sleep(1.0)
    result = {**(coord.get_result() or {}), "wall_seconds": time.time() - t0}
    from argosy.shared.metrics import read_autoscale_decisions
    report = write_report(run_dir, result, coord.epochs(), timeline, {"job": job, "store": args.store,
                                                                     "config": json.loads(cfg.to_json()),
                                                                     "autoscale": read_autoscale_decisions(coord)})
    result["report"] = str(report)
    _print_result(result, args.json)
    return 0 if state == "done" else 1


def run_fullgraph(args) -> int:
    """Full-graph modes run in the offload service's trainer entry point (``python -m argosy.services.fullgraph``)."""
    if not args.data:
        raise ArgosyError(f"--mode {args.mode} needs --data FILE.npz (a graph with features, labels and splits)")
    cmd = [sys.executable, "-m", "argosy.services.fullgraph", "train", "--data", args.data, "--mode", args.mode,
           "--model", args.model, "--epochs", str(args.epochs), "--lr", str(args.lr), "--hidden", str(args.hidden),
           "--dropout", str(args.dropout), "--weight-decay", str(args.weight_decay), "--seed", str(args.seed),
           "--parts", str(args.parts), "--trainers", str(args.trainers), "--cache-bytes", args.cache_bytes,
           "--eviction", args.eviction, "--device", "cuda" if args.device == "cuda" else "cpu"]
    if args.spill_dir:
        cmd += ["--spill-dir", args.spill_dir]
    if args.json:
        cmd.append("--json")
    return subprocess.call(cmd)


def cmd_train(args) -> int:
    if args.mode != "minibatch":
        return run_fullgraph(args)
    res = run_job(args)
    _print_result(res, args.json)
    return 0 if "error" not in res else 1


def _print_result(res: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(res))
        return
    keys = ("test_accuracy", "val_accuracy", "best_epoch", "epochs", "epoch_seconds", "batches_per_second",
            "sampled_edges_per_second", "trainer_idle_fraction", "remote_fraction", "seeds_planned", "seeds_trained",
            "duplicates", "wall_seconds")
    keys = keys + ("seeds_redelivered", "seeds_dropped", "restarts", "trainer_restarts")
    for k in keys:
        if k in res:
            v = res[k]
            print(f"  {k:26s} {v:.4f}" if isinstance(v, float) else f"  {k:26s} {v}")
    print(f"report: {res.get('report')}")


def cmd_demo(args) -> int:
    from argosy.shared.graphio import save_graph_npz
    from argosy.shared.synthetic import generate_dcsbm
    run_dir = Path(args.run_dir or Path("runs") / f"demo-{time.strftime('%Y%m%d-%H%M%S')}")
    run_dir.mkdir(parents=True, exist_ok=True)
    data = run_dir / "graph.npz"
    print(f"generating a DC-SBM graph: {args.nodes:,} nodes, average degree {args.avg_degree}", file=sys.stderr)
    g = generate_dcsbm(num_nodes=args.nodes, avg_degree=args.avg_degree, seed=args.seed)
    save_graph_npz(g, data)
    args.data, args.store, args.run_dir = str(data), None, str(run_dir)
    res = run_job(args)
    _print_result(res, args.json)
    return 0 if "error" not in res else 1


def cmd_generate(args) -> int:
    from argosy.shared.graphio import save_graph_npz
    from argosy.shared.synthetic import generate_dcsbm, write_dcsbm_edge_list
    if args.out.endswith(".npy"):
        m = int(args.nodes * args.avg_degree / 2)
        write_dcsbm_edge_list(args.out, args.nodes, m, seed=args.seed)
        print(f"wrote {args.out}: {args.nodes:,} nodes, {m:,} edges (binary edge list)")
    else:
        g = generate_dcsbm(num_nodes=args.nodes, avg_degree=args.avg_degree, seed=args.seed, feature_dim=args.feature_dim)
        save_graph_npz(g, args.out)
        print(f"wrote {args.out}: {g.num_nodes:,} nodes, {g.num_edges:,} edges, {g.num_classes} classes")
    return 0


def cmd_partition(argv: list[str]) -> int:
    return subprocess.call([sys.executable, "-m", "argosy.services.partitioner", *argv])


def cmd_inspect(args) -> int:
    from argosy.shared.store import PartitionStore
    s = PartitionStore(args.store)
    if args.verify:
        s.verify()
    m = s.manifest
    out = {"store": str(args.store), "format_version": m.format_version, "name": m.name, "n": m.num_nodes,
           "m": m.num_edges, "parts": m.num_parts, "method": m.partition.get("method"), "order": m.partition.get("order"),
           "edge_cut_fraction": m.partition.get("edge_cut_fraction"), "balance": m.partition.get("balance"),
           "feature_dim": m.feature_dim, "feature_dtype": m.feature_dtype, "num_classes": m.num_classes,
           "splits": m.splits, "part_sizes": [p.num_nodes for p in m.parts], "part_edges": [p.num_edges for p in m.parts]}
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            if k not in ("part_sizes", "part_edges"):
                print(f"{k:18s} {v}")
        print("part  nodes      edges      cut entries")
        for p in m.parts:
            print(f"{p.part:4d}  {p.num_nodes:<10,d} {p.num_edges:<10,d} {p.cut_edges:,d}")
    return 0


def _stack_info(args) -> dict:
    job = args.job
    if job is None and (STACK_DIR / "current").exists():
        job = (STACK_DIR / "current").read_text().strip()
    path = STACK_DIR / f"{job}.json"
    if job and path.exists():
        info = json.loads(path.read_text())
    else:
        info = {"job": job}
    if getattr(args, "redis", None):
        info["redis"] = args.redis
    if not info.get("redis") or not info.get("job"):
        raise ArgosyError("no running stack found: pass --job and --redis (or start one with `argosy up`)")
    return info


def cmd_status(args) -> int:
    from argosy.shared.coord import Coordinator
    info = _stack_info(args)
    coord = Coordinator(info["redis"], info["job"], connect_timeout=5)
    if args.watch:
        from argosy.shared.status_view import watch_status
        watch_status(coord, args.interval, as_json=args.json)
        return 0
    if not args.json:
        from argosy.shared.status_view import render_status
        print(render_status(coord))
        return 0
    now = time.time()
    services = []
    for role in ROLES:
        for s in coord.services(role, include_dead=True):
            s["heartbeat_age"] = round(now - s["heartbeat"], 2) if "heartbeat" in s else None
            services.append(s)
    out = {"job": info["job"], "state": coord.get_state(), "phase": coord.get_phase(), "epochs_done": len(coord.epochs()),
           "metrics": coord.metrics(), "services": services, "missing": [s["id"] for s in services if not s["alive"]]}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"job {out['job']}: {out['state']}  phase {out['phase']}  epochs done {out['epochs_done']}")
    print(f"{'role':8s} {'id':14s} {'host':12s} {'pid':>7s} {'heartbeat':>10s}  status")
    for s in services:
        age = "-" if s["heartbeat_age"] is None else f"{s['heartbeat_age']:.1f}s ago"
        print(f"{s['role']:8s} {s['id']:14s} {str(s.get('host', '-')):12s} {str(s.get('pid', '-')):>7s} {age:>10s}  "
              f"{'alive' if s['alive'] else 'MISSING'}")
    return 0


def cmd_down(args) -> int:
    info = _stack_info(args)
    for sid, pid in (info.get("pids") or {}).items():
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    if info.get("redis_pid"):
        time.sleep(1.0)
        try:
            os.kill(info["redis_pid"], signal.SIGTERM)
        except ProcessLookupError:
            pass
    (STACK_DIR / f"{info['job']}.json").unlink(missing_ok=True)
    print(f"stopped job {info['job']}")
    return 0


def _add_train_args(p: argparse.ArgumentParser, epochs: int = 10) -> None:
    p.add_argument("--data", help="graph file to partition and train on (.npz, .npy edge list, text edge list)")
    p.add_argument("--store", help="an existing partitioned store (skips partitioning)")
    p.add_argument("--parts", type=int, default=4, help="partitions when --data is given (default 4)")
    p.add_argument("--partition-method", default="grem", help="partitioner when --data is given (default grem)")
    p.add_argument("--model", default="sage", choices=("sage", "gcn"))
    p.add_argument("--epochs", type=int, default=epochs)
    p.add_argument("--hidden", type=int, default=None, help="hidden width (default 64 for sage, 16 for gcn)")
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--fanouts", default="10,10", help="neighbours per hop, seeds' hop first (-1 = all)")
    p.add_argument("--eval-fanouts", default=None, help="fanouts for val/test (default all neighbours)")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--eval-max-nodes", type=int, default=20_000, help="val/test vertices evaluated per epoch (a fixed subset)")
    p.add_argument("--samplers", type=int, default=1)
    p.add_argument("--loaders", type=int, default=1)
    p.add_argument("--trainers", type=int, default=1)
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--normalize-features", action="store_true",
                   help="row-normalise features (the standard preprocessing for Cora/Citeseer bag-of-words)")
    p.add_argument("--work-factor", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--redis", default=None, help="Redis URL (default $ARGOSY_REDIS_URL, else an embedded server)")
    p.add_argument("--job", default=None, help="job id (default: generated)")
    p.add_argument("--run-dir", default=None, help="where logs, checkpoint and report go (default runs/JOB)")
    p.add_argument("--claim-timeout", type=float, default=20.0, help="seconds before unacknowledged work is re-claimed")
    p.add_argument("--peer-timeout", type=float, default=120.0, help="seconds a trainer waits for input before failing")
    p.add_argument("--json", action="store_true", help="print one JSON line with the results at the end")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="argosy", description="Disaggregated GNN training: partition, sample, load, train.")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="the main job end to end on a generated graph (no cluster, no Docker)")
    _add_train_args(d, epochs=5)
    d.add_argument("--nodes", type=int, default=30_000)
    d.add_argument("--avg-degree", type=float, default=12.0)
    d.set_defaults(samplers=2, func=cmd_demo)
    t = sub.add_parser("train", help="partition (optional) and train with separate sampler/loader/trainer processes")
    _add_train_args(t)
    t.add_argument("--resume", action="store_true", help="continue the run in --run-dir from its last checkpoint")
    t.add_argument("--mode", default="minibatch", choices=("minibatch", "fullgraph", "sar"),
                   help="minibatch: sampled pipeline (default); fullgraph: whole-graph training with activations "
                        "offloaded to disk (GriNNder-style); sar: --trainers workers, one part each (SAR)")
    t.add_argument("--cache-bytes", default="256M", help="fullgraph: host cache budget for offloaded blocks")
    t.add_argument("--spill-dir", default=None, help="fullgraph: where blocks spill (an NVMe path in production)")
    t.add_argument("--eviction", default="belady", choices=("belady", "lru"), help="fullgraph: cache eviction policy")
    t.set_defaults(func=cmd_train)
    u = sub.add_parser("up", help="start a job's stack in the background (see status, scale, down)")
    _add_train_args(u)
    u.set_defaults(func=lambda a: (run_job(a, detach=True), 0)[1])
    sb = sub.add_parser("submit", help="put a job spec into Redis for services started elsewhere (compose, k8s)")
    _add_train_args(sb)
    sb.add_argument("--wait", action="store_true", help="wait until the job ends, then write its report")
    sb.add_argument("--force", action="store_true")
    sb.set_defaults(func=cmd_submit)
    k = sub.add_parser("keys", help="create ZeroMQ CURVE keys; set ARGOSY_CURVE_KEYS=DIR to encrypt service traffic")
    k.add_argument("dir")
    k.set_defaults(func=lambda a: (__import__("argosy.shared.transport", fromlist=["x"]).create_keys(a.dir),
                                   print(f"wrote CURVE keys to {a.dir}; export ARGOSY_CURVE_KEYS={a.dir}"), 0)[2])
    g = sub.add_parser("generate", help="write a synthetic DC-SBM graph (.npz, or .npy edge list for big graphs)")
    g.add_argument("--nodes", type=int, default=100_000)
    g.add_argument("--avg-degree", type=float, default=10.0)
    g.add_argument("--feature-dim", type=int, default=32)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--out", required=True)
    g.set_defaults(func=cmd_generate)
    sub.add_parser("partition", help="partition a graph into a store (see `argosy partition -h`)", add_help=False)
    sub.add_parser("scale", help="change a tier's replicas: argosy scale sampler N [--target local|compose|k8s]",
                   add_help=False)
    i = sub.add_parser("inspect", help="print a store's manifest and partition quality")
    i.add_argument("store")
    i.add_argument("--json", action="store_true")
    i.add_argument("--verify", action="store_true", help="also check every array against the manifest")
    i.set_defaults(func=cmd_inspect)
    for name, fn, helptext in (("status", cmd_status, "list a job's services and progress"),
                               ("down", cmd_down, "stop a stack started with `argosy up`")):
        s = sub.add_parser(name, help=helptext)
        s.add_argument("--job", default=None)
        s.add_argument("--redis", default=None)
        s.add_argument("--json", action="store_true")
        if name == "status":
            s.add_argument("--watch", action="store_true", help="redraw every --interval seconds until Ctrl-C")
            s.add_argument("--interval", type=float, default=2.0)
        s.set_defaults(func=fn)
    sub.add_parser("autoscale", help="scale samplers/loaders to keep trainers busy (see `argosy autoscale -h`)",
                   add_help=False)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if argv and argv[0] == "partition":
        return cmd_partition(argv[1:])
    if argv and argv[0] == "scale":
        from argosy.services.scaling import main as scale_main
        return scale_main(argv[1:])
    if argv and argv[0] == "autoscale":
        return subprocess.call([sys.executable, "-m", "argosy.services.autoscaler", *argv[1:]])
    args = build_parser().parse_args(argv)
    if getattr(args, "hidden", 0) is None:
        args.hidden = 16 if args.model == "gcn" else 64
    try:
        return args.func(args)
    except (ArgosyError, ValueError, FileNotFoundError) as e:
        print(f"argosy: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
