"""``python -m argosy.services.sampler --redis URL --job JOB``: one sampler process."""
import argparse

from argosy.shared.lifecycle import common_args, run_service


def main(argv=None) -> None:
    args = common_args(argparse.ArgumentParser(prog="argosy-sampler", description=__doc__)).parse_args(argv)
    from argosy.services.sampler.service import SamplerProc
    run_service("sampler", args, lambda ctx: SamplerProc(ctx).run())


if __name__ == "__main__":
    main()
