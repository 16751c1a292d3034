"""Tiny handmade and random graphs for tests (one helper module, like PyG's get_edge_index)."""
from __future__ import annotations

import numpy as np

from argosy.shared.graphio import Graph, csr_from_edges


def path_graph(n: int) -> Graph:
    """0 - 1 - 2 - ... - (n-1)."""
    src = np.arange(n - 1)
    return csr_from_edges(src, src + 1, num_nodes=n)


def random_graph(n: int, m: int, seed: int = 0, features: int = 0, classes: int = 0, weighted: bool = False) -> Graph:
    """``weighted``: edge weights uniform in [0, 3) (the unweighted graph of a seed is unchanged)."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    g = csr_from_edges(src, dst, num_nodes=n, weights=rng.random(m) * 3 if weighted else None)
    if features:
        g.features = rng.standard_normal((n, features)).astype(np.float32)
    if classes:
        g.labels = rng.integers(0, classes, n)
        split = rng.random(n)
        g.train_mask, g.val_mask, g.test_mask = split < 0.5, (split >= 0.5) & (split < 0.7), split >= 0.7
    return g
