"""SAR mode: real worker processes (spawn + gloo on 127.0.0.1), each loading only its own parts of a
store, give the gradients of in-memory full-batch training.

All (model, N) cases run in ONE spawn of 4 processes (N < 4 uses a sub-group), so the test pays
process start-up once.
"""

from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np
import pytest

from argosy.services.trainer.fullgraph.graph import load_store_graph
from argosy.services.trainer.fullgraph.inmemory import InMemoryTrainer
from argosy.services.trainer.fullgraph.model import flat_grads
from argosy.services.trainer.fullgraph.sar import SARJob, launch_sar_jobs, owned_parts
from argosy.shared.config import FullGraphConfig, JobConfig, SamplerConfig, TrainerConfig
from argosy.shared.store.reader import PartitionStore

from .fullgraph_helpers import make_store, model

TOL = 1e-5
CASES = [("gcn", 1), ("gcn", 2), ("gcn", 4), ("sage", 1), ("sage", 2), ("sage", 4), ("sage-gcn", 2)]


def test_ownership_covers_every_part_once():
    for k, n in ((4, 1), (4, 2), (8, 4), (5, 2)):
        owned = [p for r in range(n) for p in owned_parts(k, r, n)]
        assert sorted(owned) == list(range(k))


@pytest.mark.integration
def test_sar_gradients_match_in_memory(tmp_path):
    _, _, store = make_store(tmp_path, n=300, parts=4)
    g, _ = load_store_graph(PartitionStore(store), normalize=True)
    fg = json.dumps(asdict(FullGraphConfig(mode="sar")))
    jobs, refs = [], []
    for kind, workers in CASES:
        m, spec = model(kind, 20, 4, 3, seed=5)
        loss = InMemoryTrainer(spec, g, m, 5).step(0)
        refs.append((loss, flat_grads(m)))
        job = JobConfig(store=store, seed=5, num_trainers=workers, sampler=SamplerConfig(fanouts=(-1, -1, -1), eval_fanouts=(-1, -1, -1)),
                        trainer=TrainerConfig(model=kind.partition("-")[0], hidden=16, dropout=0.0, normalize_features=True,
                                              aggregator=kind.partition("-")[2] or "mean"))
        jobs.append(SARJob(job.to_json(), fg, workers, str(tmp_path / f"{kind}{workers}"), task="grads"))
    results = launch_sar_jobs(jobs)
    for (kind, workers), job, res, (loss0, g0) in zip(CASES, jobs, results, refs):
        assert abs(res["loss"] - loss0) <= 1e-5 * abs(loss0), (kind, workers)
        assert [r["parts"] for r in res["ranks"]] == [owned_parts(4, r, workers) for r in range(workers)]
        assert all(r["peak_rss_bytes"] > 0 for r in res["ranks"])
        for rank in range(workers):  # every replica holds the all-reduced gradient
            z = np.load(f"{job.out_dir}/grads_{rank}.npz")
            for k, ref in g0.items():
                err = float(np.linalg.norm(z[k] - ref.numpy()) / max(float(ref.norm()), 1e-30))
                assert err <= TOL, (kind, workers, k, rank, err)
