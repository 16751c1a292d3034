"""``python -m argosy.services.autoscaler --redis URL --job J --target local``: scale the CPU tiers of a job.

Watches the trainers' idle fraction and the tiers' throughput in Redis, and adds or removes
sampler/loader replicas through the scaling target, with hysteresis, bounds and a cooldown.
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys

from argosy.services.autoscaler.policy import ScalerConfig
from argosy.shared import envs

__all__ = ["main", "build_parser"]


def build_parser(prog: str = "argosy-autoscaler") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    d = ScalerConfig()  # the defaults live in the config dataclass, stated once
    p.add_argument("--redis", default=envs.get(envs.REDIS_URL), help="Redis URL (default $ARGOSY_REDIS_URL)")
    p.add_argument("--job", default=envs.get(envs.JOB), help="job id")
    p.add_argument("--target", default="local", choices=("local", "compose", "k8s"), help="where replicas run")
    p.add_argument("--roles", default=",".join(d.roles), help=f"roles to scale (default {','.join(d.roles)})")
    p.add_argument("--min", type=int, default=d.min_replicas, dest="min_replicas",
                   help=f"fewest replicas per role (default {d.min_replicas})")
    p.add_argument("--max", type=int, default=d.max_replicas, dest="max_replicas",
                   help=f"most replicas per role (default {d.max_replicas})")
    p.add_argument("--idle-target", type=float, default=d.idle_target,
                   help=f"scale up above this trainer idle fraction (default {d.idle_target})")
    p.add_argument("--idle-low", type=float, default=d.idle_low,
                   help="scale down only below this idle fraction (default min(0.02, target/2))")
    p.add_argument("--cooldown", type=float, default=d.cooldown, help=f"seconds between changes (default {d.cooldown:g})")
    p.add_argument("--down-after", type=float, default=d.down_after,
                   help=f"seconds of idle below --idle-low with full queues before removing a replica "
                        f"(default {d.down_after:g})")
    p.add_argument("--max-step", type=int, default=d.max_step, help=f"most replicas added at once (default {d.max_step})")
    p.add_argument("--min-gain", type=float, default=d.min_gain,
                   help="a scale-up that raises the trainers' batches/s by less than this fraction pauses scale-ups "
                        f"(default {d.min_gain})")
    p.add_argument("--pause", type=float, default=d.pause,
                   help=f"seconds scale-ups pause after one that did not help (default {d.pause:g})")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between observations (default 1)")
    p.add_argument("--window", type=float, default=10.0, help="seconds of history rates use (default 10)")
    p.add_argument("--dry-run", action="store_true", help="only recommend; never scale")
    p.add_argument("--metrics-port", type=int, default=0,
                   help="serve job-wide Prometheus metrics (from Redis) on this port (0 = off)")
    p.add_argument("--warmup", type=float, default=d.warmup,
                   help=f"seconds to watch before the first change (default {d.warmup:g})")
    p.add_argument("--namespace", default=None, help="k8s: namespace (passed to argosy.services.scaling)")
    p.add_argument("--release", default=None, help="k8s: Helm release (passed to argosy.services.scaling)")
    p.add_argument("--project", default=None, help="compose: project name (passed to argosy.services.scaling)")
    p.add_argument("--compose-file", action="append", default=None, help="compose: file(s) (passed to argosy.services.scaling)")
    p.add_argument("--keep-running", action="store_true", help="do not exit when the job is done")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=envs.get(envs.LOG_LEVEL).upper(),
                        format="%(asctime)s autoscaler %(levelname)s %(name)s: %(message)s")
    from argosy.shared.coord import Coordinator
    from argosy.services.autoscaler.service import AutoscalerProc, make_backend, serve_job_metrics
    coord = Coordinator(args.redis, args.job)
    cfg = ScalerConfig(min_replicas=args.min_replicas, max_replicas=args.max_replicas, idle_target=args.idle_target,
                       idle_low=args.idle_low, cooldown=args.cooldown, down_after=args.down_after,
                       max_step=args.max_step, warmup=args.warmup, min_gain=args.min_gain, pause=args.pause, roles=tuple(r for r in args.roles.split(",") if r))
    backend = None
    if not args.dry_run:
        opts = {k: v for k, v in (("namespace", args.namespace), ("release", args.release), ("project", args.project),
                                  ("files", args.compose_file)) if v}
        backend = make_backend(args.target, coord, opts=opts)
    server = serve_job_metrics(coord, args.metrics_port)
    proc = AutoscalerProc(coord, cfg, backend, dry_run=args.dry_run, interval=args.interval, window=args.window)
    signal.signal(signal.SIGTERM, lambda *_: proc.stop.set())
    signal.signal(signal.SIGINT, lambda *_: proc.stop.set())
    logging.getLogger(__name__).info("autoscaling job %s (%s target, roles %s, replicas %d..%d, idle target %.0f%%%s)",
                                     args.job, args.target, ",".join(cfg.roles), cfg.min_replicas, cfg.max_replicas,
                                     100 * cfg.idle_target, ", dry run" if args.dry_run else "")
    try:
        proc.run(until_done=not args.keep_running)
    finally:
        if server is not None:
            server.shutdown()
        coord.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
