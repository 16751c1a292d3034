"""``python -m argosy.services.fullgraph``: full-graph training (``train``) and the store service (``serve``).

Why this module exists: the lead's ``argosy`` CLI starts roles by module
name, so this entry point only parses flags and calls the drivers in
:mod:`services.fullgraph.train` and :mod:`services.fullgraph.service`.

Examples::

    python -m argosy.services.fullgraph train --data cora.npz --mode fullgraph --model gcn --parts 4 --json
    python -m argosy.services.fullgraph train --data cora.npz --mode sar --model sage --trainers 2 --json
    python -m argosy.services.fullgraph serve --bind tcp://127.0.0.1:5555 --spill-dir /nvme/x --cache-bytes 8G
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

__all__ = ["main", "build_parser"]

logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m argosy.services.fullgraph", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="full-graph training (offloaded or SAR)")
    t.add_argument("--data", required=True, help="graph .npz with features, labels and masks")
    t.add_argument("--mode", choices=["fullgraph", "sar", "memory"], default="fullgraph",
                   help="fullgraph = offloaded single process; sar = N workers; memory = in-memory baseline")
    t.add_argument("--model", choices=["gcn", "sage"], default="gcn")
    t.add_argument("--parts", type=int, default=4, help="parts of the offloaded schedule (fullgraph)")
    t.add_argument("--trainers", type=int, default=2, help="SAR worker processes (sar)")
    t.add_argument("--epochs", type=int, default=200)
    t.add_argument("--lr", type=float, default=0.01)
    t.add_argument("--hidden", type=int, default=16)
    t.add_argument("--layers", type=int, default=2)
    t.add_argument("--dropout", type=float, default=0.5)
    t.add_argument("--weight-decay", type=float, default=5e-4)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--cache-bytes", default="256M", help="host cache budget, e.g. 512M, 2G")
    t.add_argument("--disk-bytes", default=None, help="spill budget (default unlimited)")
    t.add_argument("--spill-dir", default=None, help="spill directory (default: a temporary one)")
    t.add_argument("--eviction", choices=["belady", "lru"], default="belady")
    t.add_argument("--no-prefetch", action="store_true", help="disable schedule-driven prefetch")
    t.add_argument("--partition", choices=["contiguous", "random"], default="contiguous")
    t.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    t.add_argument("--store-addr", default=None, help="use a remote store service (fullgraph)")
    t.add_argument("--malloc-mmap-threshold", default=None,
                   help="pin glibc's mmap threshold (e.g. 256K): lowest RSS, slower allocation")
    t.add_argument("--no-feature-norm", action="store_true", help="skip row-normalising features")
    t.add_argument("--json", action="store_true", help="print one JSON line of metrics at the end")
    s = sub.add_parser("serve", help="run the offload store as a ZeroMQ service")
    s.add_argument("--bind", required=True)
    s.add_argument("--spill-dir", default=None)
    s.add_argument("--cache-bytes", default="1G")
    s.add_argument("--disk-bytes", default=None)
    s.add_argument("--eviction", choices=["belady", "lru"], default="belady")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from .memory import configure_malloc, tame_malloc
    from .train import TrainArgs, parse_size, run_train

    # before any thread or large allocation, so every mode is measured the same way
    configure_malloc()
    if getattr(args, "malloc_mmap_threshold", None):
        tame_malloc(parse_size(args.malloc_mmap_threshold))

    if args.cmd == "serve":
        from .service import StoreServer
        from .store import OffloadStore

        store = OffloadStore(parse_size(args.cache_bytes), args.spill_dir or "auto",
                             parse_size(args.disk_bytes) if args.disk_bytes else None, args.eviction)
        server = StoreServer(store, args.bind)
        print(json.dumps({"serving": server.endpoint}), flush=True)
        server.run()
        return 0
    res = run_train(TrainArgs(
        data=args.data, mode=args.mode, model=args.model, parts=args.parts, trainers=args.trainers,
        epochs=args.epochs, lr=args.lr, hidden=args.hidden, layers=args.layers, dropout=args.dropout,
        weight_decay=args.weight_decay, seed=args.seed, cache_bytes=parse_size(args.cache_bytes),
        disk_bytes=parse_size(args.disk_bytes) if args.disk_bytes else None, spill_dir=args.spill_dir,
        eviction=args.eviction, prefetch=not args.no_prefetch, partition=args.partition,
        device=args.device, store_addr=args.store_addr, feature_norm=not args.no_feature_norm))
    if args.json:
        print(json.dumps(res), flush=True)
    else:
        logger.info("test %.4f val %.4f, %.3f s/epoch, peak RSS %.1f MiB", res["test_accuracy"],
                    res["val_accuracy"], res["epoch_seconds"], res["peak_rss_bytes"] / 2**20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
