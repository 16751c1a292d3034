"""``python -m argosy.services.trainer --redis URL --job JOB --rank R``: one trainer process."""
import argparse

from argosy.shared import envs
from argosy.shared.lifecycle import common_args, run_service


def main(argv=None) -> None:
    p = common_args(argparse.ArgumentParser(prog="argosy-trainer", description=__doc__))
    p.add_argument("--rank", type=int, default=None,
                   help="trainer rank (default $ARGOSY_RANK, or the ordinal of a StatefulSet pod name)")
    args = p.parse_args(argv)
    rank = args.rank
    if rank is None:
        rank = envs.get(envs.RANK)
    if rank is None:
        rank = int((envs.get(envs.HOSTNAME) or "x-0").rsplit("-", 1)[-1] or 0)
    from argosy.services.trainer.service import TrainerProc
    run_service("trainer", args, lambda ctx: TrainerProc(ctx, rank).run())


if __name__ == "__main__":
    main()
