"""``python -m tests.fuzz TARGET --minutes N [--seed S]``: run one fuzz target, print executions/s and crashes."""
from __future__ import annotations

import argparse
import sys

from tests.fuzz import TARGETS, fuzz


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    p.add_argument("target", choices=TARGETS)
    p.add_argument("--minutes", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=float, default=60.0, help="seconds between progress lines")
    a = p.parse_args(argv)
    stats = fuzz(a.target, a.minutes * 60, seed=a.seed, log_every=a.log_every)
    print(stats.summary(), flush=True)
    for path, sig in stats.crashes:
        print(f"  crash: {path}: {sig}")
    return 1 if stats.crashes else 0


if __name__ == "__main__":
    sys.exit(main())
