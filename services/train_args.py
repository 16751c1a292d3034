"""The training flags of ``argosy demo|train|up|submit`` and their mapping to :class:`JobConfig`.

One place: a new flag is added in :func:`add_train_args` and read in :func:`job_config` (or, for
the full-graph modes, in :func:`fullgraph_argv`).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from argosy.shared.config import CoordConfig, JobConfig, LoaderConfig, SamplerConfig, TrainerConfig

__all__ = ["add_train_args", "add_mode_args", "job_config", "fullgraph_argv", "finish_args"]


def add_train_args(p: argparse.ArgumentParser, epochs: int = 10) -> None:
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


def add_mode_args(p: argparse.ArgumentParser) -> None:
    """``train``-only flags: resume and the full-graph modes."""
    p.add_argument("--resume", action="store_true", help="continue the run in --run-dir from its last checkpoint")
    p.add_argument("--mode", default="minibatch", choices=("minibatch", "fullgraph", "sar"),
                   help="minibatch: sampled pipeline (default); fullgraph: whole-graph training with activations "
                        "offloaded to disk (GriNNder-style); sar: --trainers workers, one part each (SAR)")
    p.add_argument("--cache-bytes", default="256M", help="fullgraph: host cache budget for offloaded blocks")
    p.add_argument("--spill-dir", default=None, help="fullgraph: where blocks spill (an NVMe path in production)")
    p.add_argument("--eviction", default="belady", choices=("belady", "lru"), help="fullgraph: cache eviction policy")


def finish_args(args: argparse.Namespace) -> argparse.Namespace:
    """Defaults that depend on other flags."""
    if getattr(args, "hidden", 0) is None:
        args.hidden = 16 if args.model == "gcn" else 64
    return args


def job_config(args: argparse.Namespace, store: Path, job: str, run_dir: Path) -> JobConfig:
    fan = tuple(int(x) for x in args.fanouts.split(","))
    return JobConfig(
        job=job, store=str(Path(store).resolve()), run_dir=str(Path(run_dir).resolve()), seed=args.seed,
        num_samplers=args.samplers, num_loaders=args.loaders, num_trainers=args.trainers,
        sampler=SamplerConfig(fanouts=fan, eval_fanouts=tuple([-1] * len(fan)) if args.eval_fanouts is None
                              else tuple(int(x) for x in args.eval_fanouts.split(",")), batch_size=args.batch_size,
                              eval_max_nodes=args.eval_max_nodes),
        loader=LoaderConfig(),
        trainer=TrainerConfig(model=args.model, hidden=args.hidden, dropout=args.dropout, lr=args.lr,
                              weight_decay=args.weight_decay, epochs=args.epochs, device=args.device,
                              work_factor=args.work_factor, normalize_features=args.normalize_features),
        coord=CoordConfig(claim_timeout=args.claim_timeout, peer_timeout=args.peer_timeout))


def fullgraph_argv(args: argparse.Namespace) -> list[str]:
    """The command line of the full-graph trainer entry point for ``train --mode fullgraph|sar``."""
    cmd = [sys.executable, "-m", "argosy.services.fullgraph", "train", "--data", args.data, "--mode", args.mode,
           "--model", args.model, "--epochs", str(args.epochs), "--lr", str(args.lr), "--hidden", str(args.hidden),
           "--dropout", str(args.dropout), "--weight-decay", str(args.weight_decay), "--seed", str(args.seed),
           "--parts", str(args.parts), "--trainers", str(args.trainers), "--cache-bytes", args.cache_bytes,
           "--eviction", args.eviction, "--device", "cuda" if args.device == "cuda" else "cpu"]
    if args.spill_dir:
        cmd += ["--spill-dir", args.spill_dir]
    if args.json:
        cmd.append("--json")
    return cmd
