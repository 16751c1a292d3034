"""Image build step: compile a role's numba kernels into ``$NUMBA_CACHE_DIR`` (``/opt/numba-cache``).

A fresh sampler otherwise spends its first seconds to minutes (on a busy node) JIT-compiling
before it can take work, which is exactly when it was started to help. ``docker/entrypoint.sh``
copies the cache to the writable ``$NUMBA_CACHE_DIR`` (``/tmp/numba-cache``) at start. Numba
checks each cached kernel against its source file, so a stale cache is ignored, never wrong.

Usage (build stage): ``NUMBA_CACHE_DIR=/opt/numba-cache python warmup.py sampler|partitioner``.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main(role: str) -> int:
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        graph, store = Path(d) / "g.npz", Path(d) / "store"
        subprocess.run(["argosy", "generate", "--nodes", "2000", "--avg-degree", "8", "--feature-dim", "8",
                        "--out", str(graph)], check=True, stdout=subprocess.DEVNULL)
        methods = ["grem", "random"] if role == "partitioner" else ["random"]
        for method in methods:
            subprocess.run([sys.executable, "-m", "argosy.services.partitioner", str(graph), "--parts", "2", "--method", method,
                            "--out", str(store), "--overwrite"], check=True, stdout=subprocess.DEVNULL)
        if role == "sampler":
            import numpy as np

            from argosy.services.sampler.core import SamplerCore
            from argosy.shared.store import PartitionStore
            core = SamplerCore(PartitionStore(store))
            for fanouts in ((10, 10), (-1, -1)):
                core.sample(np.arange(64, dtype=np.int64), fanouts)
    print(f"numba warm-up for {role}: {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
