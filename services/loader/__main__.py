"""``python -m argosy.services.loader --redis URL --job JOB``: one loader process."""
import argparse

from argosy.shared.lifecycle import common_args, run_service


def main(argv=None) -> None:
    args = common_args(argparse.ArgumentParser(prog="argosy-loader", description=__doc__)).parse_args(argv)
    from argosy.services.loader.service import LoaderProc
    run_service("loader", args, lambda ctx: LoaderProc(ctx).run())


if __name__ == "__main__":
    main()
