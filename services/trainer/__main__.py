"""``python -m argosy.services.trainer --redis URL --job JOB --rank R``: one trainer process."""
import argparse
import os
import sys

from argosy.shared.lifecycle import common_args, start_service


def main(argv=None) -> None:
    p = common_args(argparse.ArgumentParser(prog="argosy-trainer", description=__doc__))
    p.add_argument("--rank", type=int, default=None,
                   help="trainer rank (default $ARGOSY_RANK, or the ordinal of a StatefulSet pod name)")
    args = p.parse_args(argv)
    rank = args.rank
    if rank is None:
        rank = int(os.environ.get("ARGOSY_RANK", os.environ.get("HOSTNAME", "x-0").rsplit("-", 1)[-1] or 0))
    ctx = start_service("trainer", args)
    from argosy.services.trainer.service import TrainerProc
    try:
        TrainerProc(ctx, rank).run()
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception:
        sys.exit(1)


if __name__ == "__main__":
    main()
