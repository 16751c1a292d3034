"""SAR mode: real worker processes (spawn + gloo on 127.0.0.1) give in-memory gradients.

All (model, N) cases run in ONE spawn of 4 processes (N < 4 uses a sub-group),
so the test pays process start-up once.
"""

from __future__ import annotations

import numpy as np
import pytest

from argosy.services.fullgraph.inmemory import InMemoryTrainer
from argosy.services.fullgraph.model import ModelSpec, flat_grads, init_params
from argosy.services.fullgraph.sar import SARConfig, launch_sar_jobs
from argosy.services.fullgraph.synthetic import planted_graph

TOL = 1e-5
CASES = [("gcn", 1), ("gcn", 2), ("gcn", 4), ("sage", 1), ("sage", 2), ("sage", 4)]


@pytest.mark.integration
def test_sar_gradients_match_in_memory(tmp_path):
    graph = planted_graph(300, avg_degree=6, num_classes=4, feat_dim=20, seed=11)
    jobs, refs = [], []
    for kind, workers in CASES:
        spec = ModelSpec(kind, (20, 16, 12, 4), dropout=0.0)
        params = init_params(spec, 5)
        loss = InMemoryTrainer(spec, graph, params, 5).step(0)
        refs.append((loss, flat_grads(params)))
        d = tmp_path / f"{kind}{workers}"
        jobs.append(SARConfig(str(d), workers, 0, kind, spec.dims, dropout=0.0, seed=5, task="grads"))
    results = launch_sar_jobs(graph, jobs, partition="random")
    for (kind, workers), job, res, (loss0, g0) in zip(CASES, jobs, results, refs):
        assert abs(res["loss"] - loss0) <= 1e-5 * abs(loss0), (kind, workers)
        assert len(res["ranks"]) == workers
        assert all(r["peak_rss_bytes"] > 0 for r in res["ranks"])
        for rank in range(workers):  # every replica holds the all-reduced gradient
            z = np.load(f"{job.out_dir}/grads_{rank}.npz")
            for k, ref in g0.items():
                err = float(np.linalg.norm(z[k] - ref.numpy()) / max(float(ref.norm()), 1e-30))
                assert err <= TOL, (kind, workers, k, rank, err)
