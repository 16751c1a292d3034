"""Per-type feature files: each node type's rows in its own width, none for a featureless type, and
every reader (loader gather and halo, out-of-core row cache, the trainer's device cache, the
validator, full-graph training) seeing the same rows as the typed graph's own arrays."""
from __future__ import annotations

import numpy as np
import pytest

from argosy.shared.graphio.typed import TypedGraph
from argosy.shared.store import PartitionStore
from argosy.shared.store.features import sent_rows
from argosy.shared.store.typed import write_typed_store


def three_types(seed: int = 0) -> TypedGraph:
    """``a`` (8 features, labelled), ``b`` (3 features), ``c`` (none)."""
    rng = np.random.default_rng(seed)
    n = {"a": 50, "b": 30, "c": 40}
    rels = [("a", "x", "b"), ("b", "y", "c"), ("a", "z", "c"), ("a", "w", "a")]
    edges = {r: (rng.integers(0, n[r[0]], 200), rng.integers(0, n[r[2]], 200)) for r in rels}
    idx = np.arange(50)
    return TypedGraph(node_types=["a", "b", "c"], num_nodes=n, relations=rels, edges=edges, target="a",
                      labels=rng.integers(0, 3, 50), train_mask=idx < 25, val_mask=(idx >= 25) & (idx < 35),
                      test_mask=idx >= 35,
                      features={"a": rng.normal(size=(50, 8)).astype(np.float32),
                                "b": rng.normal(size=(30, 3)).astype(np.float32)})


def padded(tg: TypedGraph) -> np.ndarray:
    """What every vertex's input row must be: its type's features, zero beyond, zero for ``c``."""
    x = np.zeros((tg.total_nodes, 8), np.float32)
    x[:50], x[50:80, :3] = tg.features["a"], tg.features["b"]
    return x


@pytest.fixture
def store(tmp_path) -> tuple[TypedGraph, PartitionStore]:
    tg = three_types()
    write_typed_store(tg, np.random.default_rng(3).integers(0, 3, tg.total_nodes), tmp_path / "s", num_parts=3)
    st = PartitionStore(tmp_path / "s")
    st.verify()
    return tg, st


def test_each_type_has_its_own_file_and_width_and_a_featureless_one_none(store):
    tg, st = store
    m = st.manifest
    assert m.feature_dim == 8 and m.typed["feature_files"] == "per_type"
    assert np.asarray(m.typed["part_type_counts"]).sum(axis=0).tolist() == [50, 30, 40]
    x = padded(tg)
    for p in range(3):
        d = st.root / m.parts[p].path
        assert not (d / "features.npy").exists() and not (d / "features_t2.npy").exists()
        assert np.load(d / "features_t0.npy").shape[1] == 8 and np.load(d / "features_t1.npy").shape[1] == 3
        assert np.array_equal(st.features.dense(p), x[np.asarray(st.part(p).nodes)])
    lay = st.features
    assert lay.featured(np.array([0, 49, 50, 79, 80, 119])).tolist() == [True, True, True, True, False, False]


def test_loader_sends_only_featured_rows_and_the_trainer_rebuilds_every_row(store):
    from argosy.services.loader.core import LoaderCore
    from argosy.services.sampler.core import SamplerCore
    from argosy.services.trainer.core import TrainerCore
    from argosy.shared.config import TrainerConfig
    from argosy.shared.protocol import HaloRequest
    from argosy.shared.validate import BatchBounds, check_feature_batch

    tg, st = store
    x = padded(tg)
    b = SamplerCore(st, seed=1).sample(np.arange(0, 50, 3), [5, 5], rng_seed=2)
    featured = b.nodes < 80
    assert featured.any() and (~featured).any()              # the batch reaches all three types
    # two loaders holding parts {0} and {1, 2}: part 0's loader fetches the others' rows through the halo
    l12 = LoaderCore(PartitionStore(st.root), held_parts=[1, 2])
    l0 = LoaderCore(PartitionStore(st.root), held_parts=[0],
                    fetch=lambda what, ids, epoch: l12.serve(HaloRequest(what=what, ids=np.asarray(ids, np.int64))))
    fb = l0.load(b)
    assert fb.features.shape == (int(featured.sum()), 8)     # no row for a featureless vertex
    assert np.array_equal(fb.features, x[b.nodes[featured]])
    with pytest.raises(Exception, match="without features"):   # a halo request for a featureless row
        l12.serve(HaloRequest(what="features", ids=np.array([100], np.int64)))
    bounds = BatchBounds(num_nodes=120, num_parts=3, num_classes=3, feature_dim=8, feature_dtype="float32",
                         hops=2, eval_hops=2, epochs=1, trainers=1, max_seeds=64, max_nodes=120,
                         max_edges=10_000, max_degree=10_000, max_message_bytes=1 << 30, num_relations=8,
                         feature_layout=st.features)
    check_feature_batch(fb, bounds)
    fb_all = l0.load(b)
    fb_all.features = x[b.nodes]                             # one row per node: refused, naming why
    with pytest.raises(Exception, match="featureless node types carry no rows"):
        check_feature_batch(fb_all, bounds)
    core = TrainerCore(TrainerConfig(model="rgcn", hidden=8), 8, 3, 2, num_nodes=120, num_relations=8,
                       typed=st.manifest.typed, feature_layout=st.features)
    assert np.array_equal(core.stage(fb).x.numpy(), x[b.nodes])
    # with a device feature cache: cached rows from it, featureless rows zero, the rest from the wire
    hot = core.fill_cache(st, 20 * 8 * 4)
    assert hot.rows == 20 and (hot.ids < 80).all()            # only vertices that have a row are cached
    fbc = l0.load(b, hot=hot)
    sent = sent_rows(st.features, b.nodes, hot)
    assert fbc.features.shape[0] == sent.shape[0] < int(featured.sum())
    check_feature_batch(fbc, bounds, hot=hot)
    assert np.array_equal(core.stage(fbc).x.numpy(), x[b.nodes])


def test_out_of_core_row_cache_serves_per_type_rows(store, monkeypatch):
    from argosy.services.loader.core import LoaderCore
    from argosy.services.sampler.core import SamplerCore

    tg, st = store
    x = padded(tg)
    lc = LoaderCore(PartitionStore(st.root), memory_budget=4096)    # parts do not fit: a row cache
    assert lc.row_cache is not None and 0 < lc.row_cache.rows < 80
    b = SamplerCore(st, seed=4).sample(np.arange(0, 50, 2), [5, 5], rng_seed=1)
    fb = lc.load(b)
    assert np.array_equal(fb.features, x[b.nodes[b.nodes < 80]])
    assert lc.stats["row_cache_hits"] > 0 and lc.stats["row_cache_misses"] > 0


def test_full_graph_source_reads_per_type_rows(store):
    from argosy.services.trainer.fullgraph.source import StoreSource, make_units

    tg, st = store
    x = padded(tg)
    for units in (None, make_units(st, 20)):                   # whole parts, and parts cut into pieces
        src = StoreSource(st, units=units)
        for u, (parts, rows) in enumerate(src.units):
            ids = np.concatenate([np.asarray(st.part(p).nodes) if rows is None else np.asarray(st.part(p).nodes)[rows]
                                  for p in parts])
            out = np.full((ids.shape[0], 8), np.nan, np.float32)
            src.features_into(u, out)
            assert np.array_equal(out, x[ids])
