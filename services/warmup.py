"""Compile and cache Argosy's numba kernels once, so a first job (or a new replica) does not pay for it.

``argosy warmup`` (after install) runs a tiny demo end to end, which compiles every kernel a job
uses. ``argosy warmup --role ROLE`` (the image build, ``docker/Dockerfile``) compiles only what that
role's process runs, without torch or Redis: sampler and loader images have neither. Numba checks
each cached kernel against its source file, so a stale cache is ignored, never wrong; the images
compile into ``/opt/numba-cache`` and ``docker/entrypoint.sh`` copies it to the writable
``$NUMBA_CACHE_DIR`` at start.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from argosy.shared.errors import ArgosyError

__all__ = ["warm_all", "warm_role", "ROLES"]

ROLES = ("sampler", "loader", "partitioner", "trainer", "offload")


def _tiny_store(d: Path, methods: tuple[str, ...]) -> Path:
    """A 2,000-vertex DC-SBM graph partitioned by each of ``methods`` (GREM compiles the partitioner)."""
    from argosy.shared.graphio import save_graph_npz
    from argosy.shared.synthetic import generate_dcsbm
    graph, store = d / "g.npz", d / "store"
    save_graph_npz(generate_dcsbm(num_nodes=2000, avg_degree=8.0, feature_dim=8, seed=0), graph)
    for method in methods:
        subprocess.run([sys.executable, "-m", "argosy.services.partitioner", str(graph), "--parts", "2",
                        "--method", method, "--out", str(store), "--overwrite"], check=True, stdout=subprocess.DEVNULL)
    return store


def warm_role(role: str) -> float:
    """Compile the kernels of one role's process (no torch, no Redis); returns the seconds spent."""
    if role not in ROLES:
        raise ArgosyError(f"warmup --role: expected one of {', '.join(ROLES)} (got {role!r})")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        store = _tiny_store(Path(d), ("grem", "random") if role == "partitioner" else ("random",))
        if role == "sampler":
            import numpy as np

            from argosy.services.sampler.core import SamplerCore
            from argosy.shared.store import PartitionStore
            core = SamplerCore(PartitionStore(store))
            for fanouts in ((10, 10), (-1, -1)):
                core.sample(np.arange(64, dtype=np.int64), fanouts)
    return time.perf_counter() - t0


def warm_all(build_parser) -> float:
    """Run a tiny demo end to end (every role, embedded Redis): compiles every kernel a job uses.
    ``build_parser``: the CLI's (``launch.build_parser``), passed in so this module does not import
    the CLI that imports it."""
    from argosy.services.driver import run_local
    from argosy.services.train_args import finish_args
    from argosy.shared.graphio import save_graph_npz
    from argosy.shared.synthetic import generate_dcsbm
    t0 = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="argosy-warmup-"))
    try:
        save_graph_npz(generate_dcsbm(num_nodes=3000, avg_degree=12.0, seed=0), tmp / "graph.npz")
        demo = build_parser().parse_args(["demo", "--epochs", "1", "--json", "--no-normalize-features",
                                          "--run-dir", str(tmp / "run")])
        demo.data, demo.argv = str(tmp / "graph.npz"), ["demo"]
        res = run_local(finish_args(demo))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if "error" in res:
        raise ArgosyError(f"warm-up failed: {res['error']}")
    return time.perf_counter() - t0
