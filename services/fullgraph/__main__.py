"""``python -m argosy.services.fullgraph``: full-graph training (``train``) and the store service (``serve``).

``train --config FILE`` runs the job the ``argosy`` CLI wrote (``{"job": JobConfig, "fullgraph":
FullGraphConfig}`` as JSON); the flags build the same two sections for direct use (bench, tests).

Examples::

    python -m argosy.services.fullgraph train --store STORE --mode fullgraph --model gcn --json
    python -m argosy.services.fullgraph train --store STORE --mode sar --model sage --trainers 2 --json
    python -m argosy.services.fullgraph serve --bind tcp://127.0.0.1:5555 --spill-dir /nvme/x --cache-bytes 8G
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from argosy.shared.config import FullGraphConfig, JobConfig, SamplerConfig, TrainerConfig, parse_size
from argosy.shared.errors import ArgosyError, ConfigError

__all__ = ["main", "build_parser", "configs_from_args"]

logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m argosy.services.fullgraph", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="full-graph training (offloaded, SAR or in-memory)")
    t.add_argument("--config", help="JSON with the job and fullgraph sections (written by `argosy train`)")
    t.add_argument("--store", help="partitioned store written by `argosy partition`")
    t.add_argument("--run-dir", default="", help="where checkpoint.pt and the report go (default: none)")
    t.add_argument("--mode", choices=["fullgraph", "sar", "memory"], default="fullgraph")
    t.add_argument("--model", choices=["gcn", "sage"], default="gcn")
    t.add_argument("--trainers", type=int, default=2, help="SAR worker processes")
    t.add_argument("--epochs", type=int, default=TrainerConfig.epochs, help="most epochs to run")
    t.add_argument("--patience", type=int, default=TrainerConfig.patience,
                   help="stop after this many epochs without a better validation accuracy (0 = never)")
    t.add_argument("--lr", type=float, default=None, help="default: the model's (MODEL_DEFAULTS)")
    t.add_argument("--hidden", type=int, default=None, help="default: the model's (MODEL_DEFAULTS)")
    t.add_argument("--layers", type=int, default=2, help="GNN layers (every neighbour of every hop)")
    t.add_argument("--dropout", type=float, default=None, help="default: the model's (MODEL_DEFAULTS)")
    t.add_argument("--weight-decay", type=float, default=TrainerConfig.weight_decay)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--normalize-features", action=argparse.BooleanOptionalAction, default=None,
                   help="row-normalise features to sum 1 (default: when every feature is non-negative)")
    t.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    t.add_argument("--cache-bytes", default="256M", help="host cache budget, e.g. 512M, 2G")
    t.add_argument("--disk-bytes", default=None, help="spill budget (default unlimited)")
    t.add_argument("--spill-dir", default=None, help="spill directory (default: a temporary one)")
    t.add_argument("--eviction", choices=["belady", "lru"], default="belady")
    t.add_argument("--no-prefetch", action="store_true", help="disable schedule-driven prefetch")
    t.add_argument("--store-addr", default=None, help="use a remote offload store service (fullgraph)")
    t.add_argument("--json", action="store_true", help="print one JSON line of metrics at the end")
    s = sub.add_parser("serve", help="run the offload store as a ZeroMQ service")
    s.add_argument("--bind", required=True)
    s.add_argument("--spill-dir", default=None)
    s.add_argument("--cache-bytes", default="1G")
    s.add_argument("--disk-bytes", default=None)
    s.add_argument("--eviction", choices=["belady", "lru"], default="belady")
    return ap


def configs_from_args(a: argparse.Namespace) -> tuple[JobConfig, FullGraphConfig]:
    """The job and fullgraph sections of a ``train`` invocation (from ``--config`` or the flags)."""
    if a.config:
        try:
            d = json.loads(Path(a.config).read_text())
            return JobConfig.from_json(json.dumps(d["job"])), FullGraphConfig(**d["fullgraph"])
        except (OSError, KeyError, TypeError, json.JSONDecodeError) as e:
            raise ConfigError(f"{a.config}: not a full-graph run config ({type(e).__name__}: {e})") from None
    if not a.store:
        raise ConfigError("train needs --store DIR (or --config FILE)")
    trainer = TrainerConfig(model=a.model, hidden=a.hidden, dropout=a.dropout, lr=a.lr, weight_decay=a.weight_decay,
                            epochs=a.epochs, patience=a.patience, device=a.device,
                            normalize_features=a.normalize_features)
    every = SamplerConfig(fanouts=(-1,) * a.layers, eval_fanouts=(-1,) * a.layers)  # full graph: all neighbours
    job = JobConfig(store=a.store, run_dir=a.run_dir, num_trainers=a.trainers, seed=a.seed, sampler=every,
                    trainer=trainer)
    fg = FullGraphConfig(mode=a.mode, cache_bytes=a.cache_bytes, disk_bytes=a.disk_bytes, spill_dir=a.spill_dir,
                         eviction=a.eviction, prefetch=not a.no_prefetch, store_addr=a.store_addr)
    return job, fg


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from .memory import configure_malloc

    configure_malloc()  # before any thread or large allocation, so every mode is measured the same way
    try:
        if args.cmd == "serve":
            from .service import StoreServer
            from .store import OffloadStore

            store = OffloadStore(parse_size(args.cache_bytes), args.spill_dir or "auto",
                                 parse_size(args.disk_bytes), args.eviction)
            server = StoreServer(store, args.bind)
            print(json.dumps({"serving": server.endpoint}), flush=True)
            server.run()
            return 0
        from .train import run

        res = run(*configs_from_args(args))
    except ArgosyError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(res), flush=True)
    else:
        logger.info("test %.4f (val %.4f, best epoch %d of %d), %.3f s/epoch, peak RSS %.1f MiB",
                    res["test_accuracy"], res["val_accuracy"], res["best_epoch"], res["epochs"],
                    res["epoch_seconds"], res["peak_rss_bytes"] / 2**20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
