"""`argosy.train(data=...)` takes a graph in memory: a PyG Data, a scipy adjacency matrix or an
edge array, with node arrays as options; it is written as the .npz edge list the partitioner reads."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from argosy.api import graph_to_npz
from argosy.shared.errors import ConfigError
from argosy.shared.graphio import load_graph


def _check(path, n, m_sym):
    g = load_graph(path)
    assert g.num_nodes == n and g.indices.shape[0] == m_sym      # symmetrised
    return g


def test_pyg_data(tmp_path):
    tg = pytest.importorskip("torch_geometric")
    x = torch.rand(5, 3)
    data = tg.data.Data(x=x, y=torch.tensor([0, 1, 0, 1, 2]), edge_index=torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]]),
                        train_mask=torch.tensor([1, 1, 0, 0, 0], dtype=torch.bool))
    g = _check(graph_to_npz(data, tmp_path / "g.npz"), 5, 8)
    np.testing.assert_array_equal(g.features, x.numpy())
    np.testing.assert_array_equal(g.labels, [0, 1, 0, 1, 2])
    assert g.train_mask.tolist() == [True, True, False, False, False] and g.val_mask is None


def test_scipy_adjacency_and_arrays(tmp_path):
    sp = pytest.importorskip("scipy.sparse")
    a = sp.coo_matrix((np.ones(3), ([0, 1, 2], [1, 2, 3])), shape=(4, 4))
    g = _check(graph_to_npz(a.tocsr(), tmp_path / "g.npz", {"features": np.eye(4), "labels": [0, 1, 1, 0]}), 4, 6)
    assert g.features.dtype == np.float32 and g.labels.tolist() == [0, 1, 1, 0]


@pytest.mark.parametrize("edges", [np.array([[0, 1], [1, 2], [2, 0]]), np.array([[0, 1, 2], [1, 2, 0]])])
def test_edge_arrays_either_orientation(tmp_path, edges):
    _check(graph_to_npz(edges, tmp_path / "g.npz"), 3, 6)


def test_bad_inputs_say_what_is_accepted(tmp_path):
    with pytest.raises(ConfigError, match=r"takes a path, a PyG Data, a scipy sparse adjacency matrix or an integer "
                                          r"edge array of shape \(m, 2\) or \(2, m\) \(got ndarray float64\[3, 2\]\)"):
        graph_to_npz(np.zeros((3, 2)), tmp_path / "g.npz")
    sp = pytest.importorskip("scipy.sparse")
    with pytest.raises(ConfigError, match=r"an adjacency matrix must be square \(got shape \(2, 3\)\)"):
        graph_to_npz(sp.csr_matrix(np.ones((2, 3))), tmp_path / "g.npz")
    tg = pytest.importorskip("torch_geometric")
    data = tg.data.Data(x=torch.rand(2, 2), edge_index=torch.tensor([[0], [1]]))
    with pytest.raises(ConfigError, match=r"features is given twice \(in data and as features=\)"):
        graph_to_npz(data, tmp_path / "g.npz", {"features": np.ones((2, 2))})
