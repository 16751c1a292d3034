"""Link prediction's data side and metrics: the edge split, the store's link arrays, AUC/AP/Hits/MRR."""
from __future__ import annotations

import numpy as np
import pytest

from argosy.shared.errors import ConfigError, GraphFormatError
from argosy.shared.linkmetrics import auc, average_precision, hits_at_k, link_metrics, mrr
from argosy.shared.linkpred import EdgeSplit, pair_keys, parse_edge_split, write_link_arrays
from argosy.shared.store import PartitionStore, write_store_from_edges
from argosy.shared.store.writer import graph_edge_chunks
from tests.graphs import random_graph


def link_store(tmp_path, n=400, m=2400, parts=3, fractions=(0.1, 0.2), seed=0, features=8, **split_kw):
    """A ``parts``-part store of a random graph with a link split (``features=0``: none); returns
    (graph, store, split)."""
    g = random_graph(n, m, seed=seed, features=features)
    sp = EdgeSplit(g.num_nodes, seed, fractions, **split_kw)
    assign = np.random.default_rng(seed).integers(0, parts, g.num_nodes)
    write_store_from_edges(sp.filter(graph_edge_chunks(g, 500)), g.num_nodes, assign, tmp_path / "store",
                           num_parts=parts, node_data={"features": g.features} if features else {},
                           finish=lambda root, man: write_link_arrays(root, man, sp))
    return g, PartitionStore(tmp_path / "store"), sp


def graph_keys(g) -> np.ndarray:
    src = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    keep = src < g.indices
    return np.unique(pair_keys(src[keep], g.indices[keep], g.num_nodes))


# ---------------------------------------------------------------------------------------- metrics
def _brute_auc(s, y):
    p, n = s[y == 1], s[y == 0]
    return ((p[:, None] > n[None]).sum() + 0.5 * (p[:, None] == n[None]).sum()) / (p.size * n.size)


def _brute_ap(s, y):
    ap = prev = 0.0
    for t in np.unique(s)[::-1]:
        sel = s >= t
        tp = (y[sel] == 1).sum()
        ap += (tp / y.sum() - prev) * tp / sel.sum()
        prev = tp / y.sum()
    return ap


@pytest.mark.parametrize("ties", [False, True])
def test_auc_ap_match_their_definitions(ties):
    rng = np.random.default_rng(3)
    for _ in range(5):
        s = rng.integers(0, 6, 300).astype(float) if ties else rng.random(300)
        y = rng.integers(0, 2, 300)
        assert auc(s, y) == pytest.approx(_brute_auc(s, y), abs=1e-12)
        assert average_precision(s, y) == pytest.approx(_brute_ap(s, y), abs=1e-12)
    assert auc(np.array([3.0, 2.0, 1.0]), np.array([1, 1, 0])) == 1.0
    assert np.isnan(auc(np.ones(3), np.ones(3)))


def test_ogb_hits_and_mrr_conventions():
    neg = np.array([5.0, 4.0, 3.0, 2.0])
    assert hits_at_k(np.array([4.5, 3.5, 6.0]), neg, k=2) == pytest.approx(2 / 3)   # above the 2nd best (4.0)
    assert hits_at_k(np.array([0.0]), neg, k=10) == 1.0                                 # fewer negatives than K
    # rank = 1 + negatives above, ties counted half (OGB's optimistic/pessimistic mean)
    assert mrr(np.array([4.0]), neg) == pytest.approx(1 / 2.5)
    own = np.array([[1.0, 2.0], [0.0, 0.0]])
    assert mrr(np.array([1.5, 1.0]), own) == pytest.approx((1 / 2 + 1 / 1) / 2)
    m = link_metrics(np.array([0.9, 0.1, 0.8, 0.2]), np.array([1, 0, 1, 0]), hits_k=1)
    assert m == {"auc": 1.0, "ap": 1.0, "hits": 1.0, "mrr": 1.0}


# ---------------------------------------------------------------------------------------- split
def test_parse_edge_split():
    assert parse_edge_split("0.85,0.05,0.10") == (0.05, 0.10)
    for bad in ("0.8,0.1", "0.5,0.5,0.5", "a,b,c", "0,0.5,0.5"):
        with pytest.raises(ConfigError, match="--edge-split"):
            parse_edge_split(bad)


def test_hash_split_agrees_on_both_directions_and_duplicates():
    sp = EdgeSplit(1000, 7, (0.1, 0.2))
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 1000, 20000), rng.integers(0, 1000, 20000)
    assert np.array_equal(sp.classify(a, b), sp.classify(b, a))
    c = sp.classify(a, b)
    assert 0.08 < np.mean(c == 1) < 0.12 and 0.18 < np.mean(c == 2) < 0.22
    assert not np.array_equal(c, EdgeSplit(1000, 8, (0.1, 0.2)).classify(a, b))     # the seed matters


def test_store_keeps_no_held_out_edge_and_loses_no_edge(tmp_path):
    g, store, sp = link_store(tmp_path)
    n = g.num_nodes
    link = store.manifest.link
    held = sp.held_out()
    stored_keys = []
    for p in range(store.num_parts):
        pd = store.part(p)
        src = np.repeat(np.asarray(pd.nodes), np.diff(pd.indptr))
        stored_keys.append(pair_keys(src, pd.indices, n))
        te = np.load(store.root / pd_path(store, p) / "train_edges.npy")
        assert te.shape[0] == link["train_edges"][p]
        assert (te[:, 0] < te[:, 1]).all() and (np.asarray(store.assignment)[te[:, 0]] == p).all()
    stored = np.unique(np.concatenate(stored_keys))
    hk = {k: pair_keys(v[:, 0], v[:, 1], n) for k, v in held.items()}
    assert not np.isin(hk["val"], stored).any() and not np.isin(hk["test"], stored).any()
    assert not np.isin(hk["val"], hk["test"]).any()
    # train + val + test is the input graph, exactly
    assert np.array_equal(np.sort(np.concatenate([stored, hk["val"], hk["test"]])), graph_keys(g))
    assert link["split"]["val_edges"] == hk["val"].size and link["split"]["test_edges"] == hk["test"].size
    store.verify()


def pd_path(store, p):
    return store.manifest.parts[p].path


def test_eval_pairs_have_true_negatives(tmp_path):
    g, store, sp = link_store(tmp_path)
    every = graph_keys(g)
    seen = []
    for phase in ("val", "test"):
        pairs, labels = [], []
        for p in range(store.num_parts):
            d = store.root / pd_path(store, p)
            pairs.append(np.load(d / f"{phase}_pairs.npy"))
            labels.append(np.load(d / f"{phase}_labels.npy"))
        pairs, labels = np.concatenate(pairs), np.concatenate(labels)
        keys = pair_keys(pairs[:, 0], pairs[:, 1], g.num_nodes)
        assert labels.sum() == sp.held_out()[phase].shape[0] == (labels == 0).sum()
        assert np.isin(keys[labels == 1], every).all()
        assert not np.isin(keys[labels == 0], every).any()           # negatives are non-edges
        assert np.unique(keys).size == keys.size
        seen.append(keys[labels == 0])
    assert not np.isin(seen[0], seen[1]).any()                       # val and test negatives differ


def test_explicit_held_out_edges(tmp_path):
    g = random_graph(300, 1500, seed=2, features=4)
    src = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    up = np.flatnonzero(src < g.indices)
    val = np.stack([g.indices[up[:20]], src[up[:20]]], 1)            # given in either direction
    test = np.stack([src[up[20:50]], g.indices[up[20:50]]], 1)
    _, store, sp = link_store(tmp_path, fractions=None, val_edges=val, test_edges=test, n=300, m=1500, seed=2)
    assert store.manifest.link["split"] == {"kind": "files", "seed": 2, "val_edges": 20, "test_edges": 30}
    with pytest.raises(GraphFormatError, match="both val and test"):
        EdgeSplit(300, 0, None, val_edges=val, test_edges=val)
    with pytest.raises(ConfigError, match="not both"):
        EdgeSplit(300, 0, (0.1, 0.1), val_edges=val)


def test_link_jobs_on_a_weighted_store_are_refused_unless_weights_are_off(tmp_path):
    from argosy.shared.config import JobConfig, TrainerConfig
    from argosy.shared.preflight import TrainInputError, check_trainable
    _, store, _ = link_store(tmp_path)
    for q in range(store.num_parts):                    # unit weights, as a weighted input's store holds them
        pd, d = store.part(q), store.root / store.manifest.parts[q].path
        np.save(d / "edge_weight.npy", np.ones(pd.indices.shape[0], np.float32))
        np.save(d / "weighted_degree.npy", np.diff(np.asarray(pd.indptr)).astype(np.float32))
    store = PartitionStore(store.root)
    store.manifest.edge_weights = True
    cfg = JobConfig(trainer=TrainerConfig(task="link", normalize_features=False))
    with pytest.raises(TrainInputError, match="--task link does not use edge weights yet.*--no-edge-weights"):
        check_trainable(store, cfg)
    cfg.trainer.edge_weights = False
    assert check_trainable(store, cfg).train > 0
