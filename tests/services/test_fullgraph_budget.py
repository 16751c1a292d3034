"""`--cache-bytes auto`: the offload cache sized from the graph, the model and the memory budget."""

from __future__ import annotations

import pytest

from argosy.services.trainer.fullgraph.budget import (BUDGET_FRACTION, FLOOR_FRACTION, MIN_CACHE, auto_cache_bytes,
                                                      in_memory_floor, step_block_bytes)
from argosy.services.trainer.fullgraph.graph import build_plan
from argosy.services.trainer.fullgraph.model import ModelSpec
from argosy.services.trainer.fullgraph.synthetic import planted_graph
from argosy.shared.config import FullGraphConfig
from argosy.shared.errors import ConfigError

from .fullgraph_helpers import shuffled

MiB = 2**20


@pytest.fixture(scope="module")
def plan():
    g = planted_graph(5000, avg_degree=6, num_classes=4, feat_dim=8, seed=1)
    return build_plan(g, shuffled(g.num_nodes, 4), "gcn")


def test_cache_is_a_share_of_what_in_memory_training_holds(plan):
    spec = ModelSpec("gcn", (4096, 4096, 4))                 # wide layers: a floor of ~246 MB on 5000 vertices
    floor = in_memory_floor(5000, spec)
    assert floor == 4 * 5000 * (4096 + 2 * (4096 + 4))
    cache, why = auto_cache_bytes(plan, spec, None, rss=400 * MiB)
    assert cache == int(FLOOR_FRACTION * floor) > MIN_CACHE and "in-memory run holds at least" in why
    assert cache < step_block_bytes(plan, spec)              # blocks spill: the cap does not bind


def test_a_memory_budget_bounds_the_cache(plan):
    spec = ModelSpec("gcn", (4096, 4096, 4))
    cache, why = auto_cache_bytes(plan, spec, 1024 * MiB, rss=512 * MiB)
    assert cache == int(BUDGET_FRACTION * 512 * MiB) and "memory budget" in why
    cache, why = auto_cache_bytes(plan, spec, 520 * MiB, rss=512 * MiB)    # next to nothing left: the floor
    assert cache == MIN_CACHE and "smallest" in why


def test_a_small_graph_caches_every_block(plan):
    spec = ModelSpec("gcn", (8, 16, 4))
    cache, why = auto_cache_bytes(plan, spec, None, rss=400 * MiB)
    assert cache == step_block_bytes(plan, spec) < MIN_CACHE and "nothing spills" in why


def test_cache_bytes_config():
    assert FullGraphConfig().cache_bytes == "auto" and FullGraphConfig(cache_bytes="AUTO").cache_bytes == "auto"
    assert FullGraphConfig(cache_bytes="48M").cache_bytes == 48 * MiB
    with pytest.raises(ConfigError, match="auto or >= 0"):
        FullGraphConfig(cache_bytes=-1)
    with pytest.raises(ConfigError, match="cannot parse size"):
        FullGraphConfig(cache_bytes="lots")


def test_unit_rows_follow_the_cache_and_keep_a_floor():
    from argosy.services.trainer.fullgraph.budget import MIN_UNIT_ROWS, UNIT_FRACTION, unit_rows

    spec = ModelSpec("gcn", (128, 128, 8))
    big = 1 << 30
    assert unit_rows(big, spec) == int(UNIT_FRACTION * big) // (4 * 128)
    assert unit_rows(2 * big, spec) == 2 * unit_rows(big, spec)
    assert unit_rows(1 << 20, spec) == 512 < MIN_UNIT_ROWS  # a part is cut only above MIN_UNIT_ROWS
