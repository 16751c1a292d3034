"""``python -m argosy.services.trainer.fullgraph --config FILE``: the process ``argosy train --mode
fullgraph|sar|memory`` starts.

Not a second training CLI: ``argosy train`` is the front door (its flags take their defaults from the
config dataclasses); it writes ``{"job": JobConfig, "fullgraph": FullGraphConfig}`` as JSON to
``RUN_DIR/fullgraph.json`` and runs this module on it, in its own process so that the run's peak
memory is its own.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from argosy.shared.config import FullGraphConfig, JobConfig
from argosy.shared.errors import ArgosyError, ConfigError

__all__ = ["main", "load_config"]

logger = logging.getLogger(__name__)


def load_config(path: str) -> tuple[JobConfig, FullGraphConfig]:
    """The job and fullgraph sections ``argosy train`` wrote."""
    try:
        d = json.loads(Path(path).read_text())
        return JobConfig.from_json(json.dumps(d["job"])), FullGraphConfig(**d["fullgraph"])
    except (OSError, KeyError, TypeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: not a full-graph run config ({type(e).__name__}: {e})") from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m argosy.services.trainer.fullgraph",
                                 description="run a full-graph job written by `argosy train --mode fullgraph|sar|memory`")
    ap.add_argument("--config", required=True, help="RUN_DIR/fullgraph.json (written by `argosy train`)")
    ap.add_argument("--json", action="store_true", help="print one JSON line of metrics at the end")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from argosy.shared.malloc import configure_malloc

    configure_malloc()  # before any thread or large allocation, so every mode is measured the same way
    try:
        from .train import run

        res = run(*load_config(args.config))
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
