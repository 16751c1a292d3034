"""The road-like generator: low degree, one giant component, deterministic, chunking-independent."""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse import csgraph

from argosy.shared.graphio import csr_from_edges
from argosy.shared.synthetic import road_edge_chunks


def _graph(n, **kw):
    src, dst = zip(*road_edge_chunks(n, **kw))
    return csr_from_edges(np.concatenate(src), np.concatenate(dst), num_nodes=n)


def test_road_graph_is_low_degree_connected_and_deterministic():
    n = 40_000
    g = _graph(n, seed=3)
    deg = np.diff(g.indptr)
    assert 2.3 < deg.mean() < 2.9 and deg.max() <= 6
    a = sp.csr_matrix((np.ones(len(g.indices)), g.indices, g.indptr), shape=(n, n))
    _, lab = csgraph.connected_components(a)
    assert np.bincount(lab).max() > 0.9 * n
    h = _graph(n, seed=3, chunk_rows=7)  # chunking draws differently but keeps the statistics
    assert abs(len(h.indices) - len(g.indices)) < 0.02 * len(g.indices)
    again = _graph(n, seed=3)
    assert np.array_equal(again.indptr, g.indptr) and np.array_equal(again.indices, g.indices)
    assert not np.array_equal(_graph(n, seed=4).indices, g.indices)


def test_road_graph_rejects_bad_parameters():
    with pytest.raises(ValueError, match="avg_degree"):
        next(road_edge_chunks(100, avg_degree=5.0))
    with pytest.raises(ValueError, match="n=1"):
        next(road_edge_chunks(1))
