"""The ogbn-mag-shaped typed generator: a valid TypedGraph with ogbn-mag's types, relations and
proportions, the same arrays for the same seed, labels that the features carry weakly and the
relations carry strongly, a time split that ``cites`` respects, and edges that scale with
``num_papers``."""
from __future__ import annotations

import numpy as np
import pytest

from argosy.shared.synthetic_hetero import MAG_RELATIONS, OGBN_MAG, _Sorted, mag_like

N = 20_000


@pytest.fixture(scope="module")
def g():
    return mag_like(num_papers=N, seed=5).validate()


def _same_label_pairs(hub, paper, labels, n_hub, C):
    """Fraction of paper pairs sharing a ``hub`` vertex that have the same label."""
    h = np.bincount(hub * C + labels[paper], minlength=n_hub * C).reshape(n_hub, C).astype(np.float64)
    deg = h.sum(1)
    return ((h * h).sum() - deg.sum()) / ((deg * deg).sum() - deg.sum())


def test_shape_types_and_dtypes(g):
    assert g.node_types == ["paper", "author", "institution", "field_of_study"]
    assert g.relations == MAG_RELATIONS and g.target == "paper"
    assert list(g.features) == ["paper"]                                  # other types featureless
    x = g.features["paper"]
    assert x.shape == (N, 128) and x.dtype == np.float32
    assert g.labels.dtype == np.int64 and set(np.unique(g.labels)) == set(range(16))
    for s, d in g.edges.values():
        assert s.dtype == d.dtype == np.int64


def test_counts_follow_ogbn_mag(g):
    scale = N / OGBN_MAG["paper"]
    for t in g.node_types:
        assert g.num_nodes[t] == max(16, round(OGBN_MAG[t] * scale)), t
    for key in g.relations:
        assert len(g.edges[key][0]) == round(OGBN_MAG[key[1]] * scale), key
    assert g.total_nodes > 2.6 * N and g.total_edges > 28 * N


def test_cites_point_back_in_time_and_the_split_is_by_time(g):
    s, d = g.edges[("paper", "cites", "paper")]
    assert not np.any(s == d)
    tr, va, te = g.train_mask, g.val_mask, g.test_mask
    assert (tr.astype(int) + va + te).max() == 1
    assert (tr.sum(), va.sum(), te.sum()) == (0.6 * N, 0.2 * N, 0.2 * N)
    assert not np.any(tr[s] & ~tr[d])                  # the oldest papers cite only old papers
    assert not np.any(va[s] & te[d])
    key = s * N + d
    assert 1 - len(np.unique(key)) / len(key) < 0.03   # duplicates are rare


def test_covers_leave_no_isolated_papers_authors_or_fields(g):
    a, p = g.edges[("author", "writes", "paper")]
    assert np.bincount(p, minlength=N).min() >= 1 and np.bincount(a).min() >= 1
    p, f = g.edges[("paper", "has_topic", "field_of_study")]
    assert np.bincount(p, minlength=N).min() >= 1
    assert np.bincount(f, minlength=g.num_nodes["field_of_study"]).min() >= 1
    _, i = g.edges[("author", "affiliated_with", "institution")]
    assert np.bincount(i, minlength=g.num_nodes["institution"]).min() >= 1


def test_same_seed_same_graph_other_seed_other_graph(g):
    h = mag_like(num_papers=N, seed=5)
    for key in g.relations:
        for u, v in zip(g.edges[key], h.edges[key]):
            np.testing.assert_array_equal(u, v)
    np.testing.assert_array_equal(g.features["paper"], h.features["paper"])
    np.testing.assert_array_equal(g.labels, h.labels)
    np.testing.assert_array_equal(g.test_mask, h.test_mask)
    o = mag_like(num_papers=N, seed=6)
    assert not np.array_equal(g.labels, o.labels)


def test_features_alone_are_moderate_and_the_graph_adds_signal(g):
    x, y, tr, te = g.features["paper"], g.labels, g.train_mask, g.test_mask
    C = 16

    def nearest_centroid(z):
        mu = np.stack([z[tr & (y == c)].mean(0) for c in range(C)])
        dist = (z[te] ** 2).sum(1)[:, None] - 2 * z[te] @ mu.T + (mu ** 2).sum(1)
        return np.mean(dist.argmin(1) == y[te])

    alone = nearest_centroid(x)
    assert 0.3 < alone < 0.6                            # chance is 1/16
    s, d = g.edges[("paper", "cites", "paper")]
    assert np.mean(y[s] == y[d]) > 0.6                  # mixing 0.3: ~0.72
    agg, deg = x.copy(), np.ones(N)
    for a, b in ((s, d), (d, s)):
        np.add.at(agg, a, x[b])
        deg += np.bincount(a, minlength=N)
    assert nearest_centroid(agg / deg[:, None]) > alone + 0.2
    a, p = g.edges[("author", "writes", "paper")]
    assert _same_label_pairs(a, p, y, g.num_nodes["author"], C) > 0.4
    p, f = g.edges[("paper", "has_topic", "field_of_study")]
    assert _same_label_pairs(f, p, y, g.num_nodes["field_of_study"], C) > 0.3


def test_mixing_one_removes_the_graph_signal():
    g = mag_like(num_papers=4000, seed=1, mixing=1.0)
    s, d = g.edges[("paper", "cites", "paper")]
    assert np.mean(g.labels[s] == g.labels[d]) < 0.12


def test_ten_times_the_papers_ten_times_the_edges(g):
    small = mag_like(num_papers=N // 10, seed=5)
    for key in g.relations:
        ratio = len(g.edges[key][0]) / len(small.edges[key][0])
        assert 9.9 < ratio < 10.1, (key, ratio)
    assert 9.5 < g.total_nodes / small.total_nodes < 10.5


@pytest.mark.parametrize("kwargs", [dict(num_papers=10), dict(num_papers=1000, num_classes=0),
                                    dict(num_papers=1000, mixing={"cite": 0.1}),
                                    dict(num_papers=1000, mixing=1.5),
                                    dict(num_papers=1000, split=(0.8, 0.2, 0.2))])
def test_bad_arguments_are_refused(kwargs):
    with pytest.raises(ValueError, match="'mag_like'"):
        mag_like(**kwargs)


@pytest.mark.parametrize("side", ["left", "right"])
def test_bucketed_search_equals_searchsorted(side):
    rng = np.random.default_rng(0)
    cdf = np.cumsum(np.minimum(rng.pareto(2.1, 5000) + 1.0, 70.0))
    keys = np.sort(rng.choice(16 * 5000, 5000, replace=False)).astype(np.int64)
    for a, width, v in ((cdf, 0.5, rng.random(20000) * cdf[-1] * 1.2 - 3),
                        (keys, 4.0, rng.integers(-5, 16 * 5000 + 5, 20000)),
                        (cdf, 50.0, np.concatenate([cdf, cdf + 1e-9]))):   # coarse buckets: fallback
        np.testing.assert_array_equal(_Sorted(a, width, side).find(v), np.searchsorted(a, v, side=side))
