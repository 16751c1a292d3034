"""``python -m argosy.services.offload``: run the offload store as a ZeroMQ service.

Example::

    python -m argosy.services.offload --bind tcp://127.0.0.1:5555 --spill-dir /nvme/x --cache-bytes 8G

Defaults come from :class:`~argosy.shared.config.FullGraphConfig`, as for ``argosy train --mode fullgraph``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from argosy.shared.config import FullGraphConfig, parse_size
from argosy.shared.errors import ArgosyError

__all__ = ["main", "build_parser"]


def _default(name: str):
    return FullGraphConfig.__dataclass_fields__[name].default


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m argosy.services.offload", description=__doc__.splitlines()[0])
    ap.add_argument("--bind", required=True, help="ZeroMQ endpoint, e.g. tcp://0.0.0.0:5580")
    ap.add_argument("--spill-dir", default=_default("spill_dir"), help="where blocks spill (default: a temporary one)")
    ap.add_argument("--cache-bytes", default="256M", help="host cache budget, e.g. 512M, 2G (default 256M: a "
                    "standalone store does not know the graph that `--cache-bytes auto` sizes from)")
    ap.add_argument("--disk-bytes", default=_default("disk_bytes"), help="spill budget (default unlimited)")
    ap.add_argument("--eviction", choices=["belady", "lru"], default=_default("eviction"))
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from argosy.shared.malloc import configure_malloc
    from .service import StoreServer
    from .store import OffloadStore

    configure_malloc()  # before any thread or large allocation
    try:
        store = OffloadStore(parse_size(args.cache_bytes), args.spill_dir or "auto",
                             parse_size(args.disk_bytes), args.eviction)
        server = StoreServer(store, args.bind)
    except ArgosyError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"serving": server.endpoint}), flush=True)
    server.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
