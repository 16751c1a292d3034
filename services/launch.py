"""The ``argosy`` command line: the parser and one small function per command.

Jobs are driven by :mod:`argosy.services.driver`, their processes by :mod:`argosy.services.stack`;
the training flags live in :mod:`argosy.services.train_args`.  Roles are started by module name
(``python -m argosy.services.sampler``), never imported here, so the same entry points run under
the CLI, docker compose and Kubernetes.
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
from pathlib import Path

from argosy.shared import envs
from argosy.shared.errors import ArgosyError
from argosy.shared.records import JobState, Role
from argosy.shared.rundir import RUN_MARKER, default_run_dir, run_files
from argosy.services.train_args import TRAIN_EPILOG, add_mode_args, add_train_args, expand_job_file, finish_args

__all__ = ["main", "build_parser"]

logger = logging.getLogger("argosy")


def cmd_train(args) -> int:
    if args.mode != "minibatch":
        from argosy.services.driver import fullgraph_config
        from argosy.shared.malloc import huge_page_env
        cmd = [sys.executable, "-m", "argosy.services.trainer.fullgraph", "--config", str(fullgraph_config(args))]
        return subprocess.call(cmd + (["--json"] if args.json else []), env=huge_page_env())
    from argosy.services.driver import run_local
    res = run_local(args)
    _print_result(res, args.json)
    return 0 if "error" not in res else 1


def cmd_up(args) -> int:
    """``train`` in the background: a detached launcher drives the job; returns once its processes started."""
    from argosy.services.driver import new_job_id
    from argosy.services.stack import StackFile, log_tail
    from argosy.shared.coord import redact_url
    job = args.job or new_job_id()
    run_dir = Path(args.run_dir or default_run_dir(job)).resolve()
    log = run_dir / "logs" / "launcher.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "argosy.services.launch", "train", *args.argv[1:], "--job", job,
           "--run-dir", str(run_dir), "--json"]
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    sf, wanted = StackFile(job), args.trainers + args.loaders + args.samplers
    while True:
        if sf.exists():
            info = sf.read()
            if info.launcher_pid == proc.pid and len(info.ever) >= wanted:
                break
        if proc.poll() is not None:
            raise ArgosyError(f"job {job} did not start (see {log}):\n{log_tail(log, 20)}")
        time.sleep(0.2)
    if not args.json:
        print(f"job {job} runs in the background (launcher pid {proc.pid}); logs in {run_dir / 'logs'}; "
              f"`argosy status --job {job}`, `argosy down --job {job}`", file=sys.stderr)
    print(json.dumps({"job": job, "redis": redact_url(info.redis), "run_dir": info.run_dir}))
    return 0


def cmd_submit(args) -> int:
    """Write a job spec into an existing Redis for already-running (or soon-running) services,
    optionally wait for the job to finish and write its report (compose/Kubernetes driver)."""
    from argosy.services.driver import run_submitted
    from argosy.services.train_args import job_config, refuse_partition_flags
    from argosy.shared.coord import Coordinator
    from argosy.shared.store import PartitionStore
    if not args.store:
        raise ArgosyError("submit needs --store DIR (a store every service can read at the same path)")
    PartitionStore(args.store)
    refuse_partition_flags(args, args.store)
    url = args.redis or envs.get(envs.REDIS_URL)
    if not url:
        raise ArgosyError("submit needs --redis URL or $ARGOSY_REDIS_URL")
    job = args.job or "default"
    run_dir = Path(args.run_dir or default_run_dir(job, store=args.store))
    cfg = job_config(args, Path(args.store), job, run_dir)
    cfg.resume = True            # a trainer pod restarted by compose/Kubernetes continues from its checkpoint
    from argosy.services.driver import preflight_job
    from argosy.shared.preflight import check_trainable
    from argosy.shared.usermodel import record_source
    preflight_job(args, cfg, remote=True)     # `train`'s refusals, before the spec reaches anyone
    check_trainable(args.store, cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    record_source(run_dir, cfg.trainer.model)
    coord = Coordinator(url, job, connect_timeout=120)
    if coord.get_state() == JobState.RUNNING.value and not args.force:
        raise ArgosyError(f"job {job!r} is already running (pass --force to replace its spec)")
    claim_run_dir(run_dir, job, cfg.fingerprint(), args.store, replace=args.replace)
    coord.delete_job()
    coord.put_spec(cfg)
    coord.set_state(JobState.STARTING.value)
    print(f"submitted job {job} (fingerprint {cfg.fingerprint()})", file=sys.stderr)
    if args.ready_file:
        Path(args.ready_file).write_text(f"{job}\n")
    if not args.wait:
        return 0
    result = run_submitted(coord, cfg, run_dir, args.store)
    _print_result(result, args.json)
    if "error" in result:
        print(f"argosy: job {job} failed: {result['error']}", file=sys.stderr)
    return 0 if "error" not in result else 1


def claim_run_dir(run_dir: Path, job: str, fingerprint: str, store: str, replace: bool = False) -> None:
    """Make ``run_dir`` this job's: a trainer resumes from a checkpoint it finds there, so a checkpoint
    of another configuration or of another store (the same path, repartitioned) is refused, or deleted
    with ``replace``; one of this very job is resumed."""
    import hashlib
    store_id = hashlib.sha256((Path(store) / "manifest.json").read_bytes()).hexdigest()[:16]
    marker = run_dir / RUN_MARKER
    runs = run_files(run_dir)
    if runs and replace:
        for f in runs:
            f.unlink()
        print(f"--replace: deleted the earlier run of job {job} ({', '.join(f.name for f in runs)} in {run_dir})",
              file=sys.stderr)
    elif runs:
        old = json.loads(marker.read_text()) if marker.exists() else {}
        if (old.get("fingerprint"), old.get("store")) != (fingerprint, store_id):
            what = ("an unknown configuration" if not old else
                    "another configuration" if old.get("fingerprint") != fingerprint else
                    f"another store (the store at {store} was rebuilt since)")
            raise ArgosyError(f"job {job!r} already has a run in {run_dir} from {what}; its trainer would resume "
                              f"from that checkpoint. Pass --replace to delete that run and start over (compose: "
                              f"ARGOSY_SUBMIT_ARGS=--replace), or name another --job")
        print(f"job {job}: resuming the run in {run_dir} from its checkpoint (same configuration and store; "
              f"--replace starts over)", file=sys.stderr)
    marker.write_text(json.dumps({"job": job, "fingerprint": fingerprint, "store": store_id}))


def _print_result(res: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(res))
        return
    link = res.get("task") == "link"      # pair scores: AUC/AP/Hits@K/MRR, not a thresholded accuracy
    keys = ("task", "test_auc", "test_ap", "test_hits", "test_mrr", "val_auc",
            *(() if link else ("test_accuracy", "val_accuracy")), "best_epoch", "epochs", "epoch_seconds", "batches_per_second",
            "sampled_edges_per_second", "trainer_idle_fraction", "remote_fraction", "seeds_planned", "seeds_trained",
            "duplicates", "out_of_order_batches", "wall_seconds", "seeds_redelivered", "seeds_dropped", "restarts", "trainer_restarts",
            "wire_bytes", "ipc_bytes", "halo_bytes", "halo_cache_hit_rate", "disk_read_bytes", "major_faults",
            "row_cache_hit_rate", "edge_weights", "precision", "simulation", "error")
    for k in keys:
        v = res.get(k)
        if v is None:
            continue
        if k.endswith("_bytes"):
            v = f"{v / 2**20:,.1f} MiB"
        if isinstance(v, bool):
            v = json.dumps(v)
        print(f"  {k:26s} {v:.4f}" if isinstance(v, float) else f"  {k:26s} {v}")
    print(f"report: {res.get('report')}")


def cmd_demo(args) -> int:
    from argosy.services.driver import run_local
    from argosy.shared.graphio import save_graph_npz
    from argosy.shared.synthetic import generate_dcsbm
    run_dir = Path(args.run_dir or default_run_dir(f"demo-{time.strftime('%Y%m%d-%H%M%S')}"))
    run_dir.mkdir(parents=True, exist_ok=True)
    data = run_dir / "graph.npz"
    print(f"generating a DC-SBM graph: {args.nodes:,} nodes, average degree {args.avg_degree}", file=sys.stderr)
    g = generate_dcsbm(num_nodes=args.nodes, avg_degree=args.avg_degree, seed=args.seed)
    save_graph_npz(g, data)
    args.data, args.store, args.run_dir = str(data), None, str(run_dir)
    res = run_local(args)
    _print_result(res, args.json)
    return 0 if "error" not in res else 1


def cmd_warmup(args) -> int:
    """Compile and cache the numba kernels once (``services/warmup.py``): every kernel a job uses, by
    a tiny demo end to end (after install), or one role's (``--role``: the image build)."""
    from argosy.services.warmup import warm_all, warm_role
    secs = warm_role(args.role) if args.role else warm_all(build_parser)
    print(f"compiled and cached Argosy's kernels{' for the ' + args.role if args.role else ''} in {secs:.1f} s",
          file=sys.stderr)
    return 0


def cmd_generate(args) -> int:
    from argosy.shared.graphio import save_graph_npz
    from argosy.shared.synthetic import generate_dcsbm, write_dcsbm_edge_list
    if args.preset == "mag":
        return _generate_mag(args)
    if args.preset or not args.out.endswith((".npy", ".npz")):
        return _generate_dataset(args)
    if args.out.endswith(".npy"):
        m = int(args.nodes * args.avg_degree / 2)
        write_dcsbm_edge_list(args.out, args.nodes, m, seed=args.seed)
        print(f"wrote {args.out}: {args.nodes:,} nodes, {m:,} edges (binary edge list)")
    else:
        g = generate_dcsbm(num_nodes=args.nodes, avg_degree=args.avg_degree, seed=args.seed, feature_dim=args.feature_dim)
        save_graph_npz(g, args.out)
        print(f"wrote {args.out}: {g.num_nodes:,} nodes, {g.num_edges:,} edges, {g.num_classes} classes")
    return 0


def _generate_mag(args) -> int:
    """``--preset mag --scale S --out DIR``: an ogbn-mag-shaped typed graph (papers, authors,
    institutions, fields of study; planted labels on papers) as a typed directory (graph.yaml)."""
    from argosy.shared.graphio.typed_dir import save_typed_dir
    from argosy.shared.synthetic_hetero import OGBN_MAG, mag_like
    papers = int(round(OGBN_MAG["paper"] * args.scale))
    tg = mag_like(num_papers=papers, seed=args.seed, **({"num_classes": args.classes} if args.classes else {}))
    save_typed_dir(tg, args.out)
    rec = {"out": args.out, "num_nodes": tg.total_nodes, "num_edges": tg.total_edges,
           "node_types": {t: int(tg.num_nodes[t]) for t in tg.node_types}, "relations": len(tg.relations)}
    print(json.dumps(rec) if args.json else
          f"wrote {args.out}: {rec['num_nodes']:,} vertices ({', '.join(f'{t} {c:,}' for t, c in rec['node_types'].items())}), "
          f"{rec['num_edges']:,} edges over {rec['relations']} relations\ntrain on it with: argosy train --data {args.out}")
    return 0


def _generate_dataset(args) -> int:
    """``--out DIR``: edges and node data streamed to ``.npy`` files in bounded memory."""
    from argosy.shared.synthetic_big import partition_argv, preset, write_dcsbm_dataset
    if args.preset:
        params = preset(args.preset, args.scale)
    else:
        params = dict(num_nodes=args.nodes, num_edges=int(args.nodes * args.avg_degree / 2),
                      feature_dim=args.feature_dim)
    if args.feature_dtype:
        params["feature_dtype"] = args.feature_dtype
    if args.classes:
        params["num_classes"] = args.classes
    rec = write_dcsbm_dataset(args.out, seed=args.seed, **params)
    if args.json:
        print(json.dumps(rec))
    else:
        print(f"wrote {args.out}: {rec['num_nodes']:,} nodes, {rec['num_edges']:,} edge rows, "
              f"{rec['feature_dim']}-d {rec['feature_dtype']} features, {rec['num_classes']} classes, splits "
              f"{rec['splits']}\npartition it with: argosy partition {' '.join(partition_argv(args.out))} "
              f"--feature-dtype {rec['feature_dtype']} --parts 4 --out STORE")
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
           # edges of the fullest part over the mean (from the parts: stores written before it was recorded too)
           "edge_balance": round(max(p.num_edges for p in m.parts) * len(m.parts)
                                 / max(sum(p.num_edges for p in m.parts), 1), 4),
           "feature_dim": m.feature_dim, "feature_dtype": m.feature_dtype, "num_classes": m.num_classes,
           "splits": m.splits, "part_sizes": [p.num_nodes for p in m.parts], "part_edges": [p.num_edges for p in m.parts]}
    if m.typed:                              # a typed store: its types, relations and target
        offs = m.typed["type_offsets"]
        out["node_types"] = {t: int(offs[i + 1] - offs[i]) for i, t in enumerate(m.typed["node_types"])}
        out["relations"], out["reverse_relations"] = m.num_relations, int(m.typed.get("reverse", 0))
        out["target"] = m.typed.get("target")
        if m.feature_dim:                    # each type's width (0: no feature file, a learned input row)
            out["feature_dims"] = dict(m.typed.get("feature_dims", {}))
        tb = m.partition.get("target_balance")
        if tb:                               # the fullest part's training vertices of the target type / mean
            out["target_balance"] = round(tb["marked_max_over_mean_after"], 3)
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
    """``job``/``redis`` (+ the stack file's fields) of the job named by ``--job`` (default: the one running here)."""
    from argosy.services.stack import find_stack
    from dataclasses import asdict
    try:
        info = asdict(find_stack(args.job).read())
    except ArgosyError:
        if not (args.job and args.redis):
            raise
        info = {"job": args.job}
    if args.redis:
        info["redis"] = args.redis
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
    for role in Role:
        for s in coord.service_infos(role.value, include_dead=True):
            age = s.heartbeat_age(now)
            services.append({**s.extra, "role": s.role, "id": s.id, "alive": s.alive, "host": s.host, "pid": s.pid,
                             "heartbeat_age": None if age is None else round(age, 2)})
    from argosy.shared.status_view import edge_weights_of
    print(json.dumps({"job": info["job"], "state": coord.get_state(), "phase": coord.get_phase(),
                      "epochs_done": coord.epochs_count(), "metrics": coord.metrics(), "services": services,
                      "missing": [s["id"] for s in services if not s["alive"]], "edge_weights": edge_weights_of(coord)}))
    return 0


def cmd_down(args) -> int:
    """Stop a job on this machine: its launcher drains every role, writes the report, then stops Redis."""
    from argosy.services.stack import StackFile, find_stack, pid_alive, terminate
    try:
        sf = find_stack(args.job)
    except ArgosyError:
        if not (args.job and args.redis):
            raise
        from argosy.shared.coord import Coordinator
        Coordinator(args.redis, args.job, connect_timeout=5).set_state(JobState.STOPPING.value)
        print(f"job {args.job} has no processes on this machine; set its state to stopping in Redis")
        return 0
    info = sf.read()
    if info.launcher_pid and pid_alive(info.launcher_pid):
        os.kill(info.launcher_pid, signal.SIGTERM)
        deadline = time.monotonic() + args.timeout
        while pid_alive(info.launcher_pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if pid_alive(info.launcher_pid):
            raise ArgosyError(f"the launcher of job {info.job} (pid {info.launcher_pid}) did not stop within "
                              f"{args.timeout:.0f} s; its log: {Path(info.run_dir) / 'logs' / 'launcher.log'}")
    if StackFile(info.job).exists():                # no launcher left to clean up: stop what the file lists
        info = sf.read()
        terminate(list(info.pids.values()), timeout=30.0)
        if info.redis_pid:
            terminate([info.redis_pid], timeout=10.0)
        sf.remove()
    print(f"stopped job {info.job}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="argosy", description="Disaggregated GNN training: partition, sample, load, train.")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="the main job end to end on a generated graph (no cluster, no Docker)")
    add_train_args(d, epochs=5)
    d.add_argument("--nodes", type=int, default=30_000)
    d.add_argument("--avg-degree", type=float, default=12.0)
    d.set_defaults(samplers=2, func=cmd_demo)
    t = sub.add_parser("train", help="partition (optional) and train with separate sampler/loader/trainer processes",
                       epilog=TRAIN_EPILOG)
    add_train_args(t)
    add_mode_args(t)
    t.set_defaults(func=cmd_train)
    u = sub.add_parser("up", help="start a job in the background (see status, scale, down)")
    add_train_args(u)
    u.set_defaults(func=cmd_up)
    sb = sub.add_parser("submit", help="put a job spec into Redis for services started elsewhere (compose, k8s)")
    add_train_args(sb)
    sb.add_argument("--wait", action="store_true", help="wait until the job ends, then write its report")
    sb.add_argument("--force", action="store_true", help="replace the spec of a job that is still running")
    sb.add_argument("--ready-file", default=None, metavar="PATH",
                    help="create PATH once the spec is in Redis (compose starts the services on it: none of "
                         "them can see an earlier job's state under the same name)")
    sb.add_argument("--replace", action="store_true",
                    help="delete this job's earlier run in --run-dir (checkpoint, best model) and start over; without "
                         "it, a run from another configuration or store is refused and one from the same is resumed")
    sb.set_defaults(func=cmd_submit)
    k = sub.add_parser("keys", help="create ZeroMQ CURVE keys; set ARGOSY_CURVE_KEYS=DIR to encrypt service traffic")
    k.add_argument("dir")
    k.add_argument("--clients", default="client", help="comma-separated client key pairs to create and allow "
                   "(each a peer that can be cut off on its own; services use 'client')")
    k.set_defaults(func=cmd_keys)
    w = sub.add_parser("warmup", help="compile and cache the numba kernels once (after install), so the first "
                       "job does not pay for it")
    w.add_argument("--role", default=None, help="only this role's kernels, without torch or Redis (image builds)")
    w.set_defaults(func=cmd_warmup)
    g = sub.add_parser("generate", help="write a synthetic DC-SBM graph (.npz; .npy edge list; or a directory of "
                                        ".npy edges + node data, streamed in bounded memory, for graphs of any size)")
    g.add_argument("--preset", choices=("papers100m", "mag"), default=None,
                   help="papers100m: ogbn-papers100M's shape (111M vertices, 1.6B edge rows, 128-d float16 "
                        "features, 172 classes, 1.2M train vertices), written to the directory --out")
    g.add_argument("--scale", type=float, default=1.0, help="--preset: fraction of its vertices/edges/splits "
                                                            "(0.01 = 1/100)")
    g.add_argument("--feature-dtype", choices=("float16", "float32"), default=None,
                   help="directory output: feature dtype (default float16)")
    g.add_argument("--classes", type=int, default=None, help="directory output: label classes (preset: 172)")
    g.add_argument("--json", action="store_true", help="directory output: print the dataset record as JSON")
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
                               ("down", cmd_down, "stop a job running on this machine (train, up or demo)")):
        s = sub.add_parser(name, help=helptext)
        s.add_argument("--job", default=None, help="job id (default: your job running on this machine; other "
                       "users' jobs only by --job)")
        s.add_argument("--redis", default=None)
        s.add_argument("--json", action="store_true")
        if name == "status":
            s.add_argument("--watch", action="store_true", help="redraw every --interval seconds until Ctrl-C")
            s.add_argument("--interval", type=float, default=2.0)
        else:
            s.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the job to drain")
        s.set_defaults(func=fn)
    sub.add_parser("autoscale", help="scale samplers/loaders to keep trainers busy (see `argosy autoscale -h`)",
                   add_help=False)
    pr = sub.add_parser("predict", help="predict every vertex with the best checkpoint of a run (full neighbourhoods)")
    pr.add_argument("run_dir", help="a run's directory (holds best.pt)")
    pr.add_argument("--out", required=True, help="FILE.npz: pred int64[n], logits float32[n, C] (a link run: scores "
                    "float32[m] and edges int64[m, 2] of the pairs)")
    pr.add_argument("--edges", default=None, metavar="PAIRS.npy",
                    help="a link-prediction run: score these (m, 2) vertex pairs (default: the store's test pairs, "
                         "whose AUC/AP are then reported)")
    pr.add_argument("--embeddings", action="store_true", help="also write the last hidden layer (a MODULE:FACTORY model: "
                    "the input of its last layer, see docs/python-api.md)")
    pr.add_argument("--store", default=None, help="the store to predict on (default: the run's own)")
    pr.add_argument("--json", action="store_true")
    pr.set_defaults(func=cmd_predict)
    return p


def cmd_predict(args) -> int:
    from argosy.inference import predict_store
    from argosy.linkpredict import is_link_run, predict_links
    if is_link_run(args.run_dir):
        res = predict_links(args.run_dir, args.out, edges=args.edges, store=args.store, embeddings=args.embeddings)
        print(json.dumps(res) if args.json else
              f"wrote {res['out']}: scores of {res['pairs']:,} pairs (best epoch {res['best_epoch']})"
              + (f"; test AUC {res['test_auc']:.4f} AP {res['test_ap']:.4f} (training reported "
                 f"{res.get('run_test_auc')} / {res.get('run_test_ap')})" if "test_auc" in res else ""))
        return 0
    if args.edges:
        raise ArgosyError(f"--edges: {args.run_dir} is a node-classification run (train with --task link)")
    res = predict_store(args.run_dir, args.out, store=args.store, embeddings=args.embeddings)
    if args.json:
        print(json.dumps(res))
    else:
        print(f"wrote {res['out']}: {res['n']:,} vertices, {res['classes']} classes (best epoch {res['best_epoch']}); "
              f"test accuracy {res.get('test_accuracy')}")
    return 0


def cmd_keys(args) -> int:
    from argosy.shared.transport import create_keys
    create_keys(args.dir, clients=tuple(c for c in args.clients.split(",") if c) or ("client",))
    print(f"wrote CURVE keys to {args.dir} (secret files 0600; allowed clients in {args.dir}/authorized); "
          f"export {envs.CURVE_KEYS}={args.dir}")
    return 0


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
    try:
        argv = expand_job_file(argv)
    except ArgosyError as e:
        print(f"argosy: error: {e}", file=sys.stderr)
        return 2
    args = finish_args(build_parser().parse_args(argv))
    args.argv = list(argv)
    try:
        return args.func(args)
    except (ArgosyError, ValueError, FileNotFoundError) as e:
        print(f"argosy: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
