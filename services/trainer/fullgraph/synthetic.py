"""Synthetic labelled graphs for tests and the full-graph bench.

Why this module exists: exactness tests need small graphs with features and
labels that build in milliseconds, and the bench needs a graph whose
activations dwarf its adjacency (most of our real graphs have no features).
A planted-partition graph with class-dependent features gives both, and
accuracy on it is meaningful (the classes are learnable).
"""

from __future__ import annotations

import logging

import numpy as np

from argosy.shared.graphio import csr_from_edges

from .graph import GraphData

__all__ = ["planted_graph", "with_random_features"]

logger = logging.getLogger(__name__)


def planted_graph(n: int, avg_degree: float = 8.0, num_classes: int = 5, feat_dim: int = 16,
                  p_in: float = 0.8, noise: float = 1.0, locality: int | None = None,
                  seed: int = 0) -> GraphData:
    """A symmetric planted-partition graph with Gaussian class features and a Planetoid-like split.

    Args:
        n: vertices.
        avg_degree: mean degree (approximate, after symmetrisation and dedup).
        num_classes: classes; a vertex's class is its planted community.
        feat_dim: feature width.
        p_in: fraction of edges inside the community.
        noise: feature noise scale relative to the class means.
        locality: if set, edge endpoints are drawn within +-locality ids (so
            contiguous parts have small boundaries, like a road network).
        seed: RNG seed.

    Returns:
        a :class:`GraphData` with ``features float32[n, feat_dim]``, ``labels``,
        and masks (10% train, 20% val, 40% test).
    """
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, num_classes, n).astype(np.int64)
    m = int(n * avg_degree / 2)
    u = rng.integers(0, n, m)
    if locality:
        v = np.clip(u + rng.integers(-locality, locality + 1, m), 0, n - 1)
    else:
        v = rng.integers(0, n, m)
        same = rng.random(m) < p_in
        # redirect "inside" edges to a random vertex of u's class
        order = np.argsort(labels, kind="stable")
        counts = np.bincount(labels, minlength=num_classes)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        cu = labels[u[same]]
        pick = starts[cu] + (rng.random(same.sum()) * counts[cu]).astype(np.int64)
        v[same] = order[pick]
    g = csr_from_edges(u, v, num_nodes=n)
    means = rng.normal(0, 1, (num_classes, feat_dim)).astype(np.float32)
    feats = (means[labels] + noise * rng.normal(0, 1, (n, feat_dim))).astype(np.float32)
    r = rng.random(n)
    return GraphData(g.indptr, g.indices, feats, labels, r < 0.1, (r >= 0.1) & (r < 0.3), r >= 0.6)


def with_random_features(g: GraphData, feat_dim: int, num_classes: int, seed: int = 0) -> GraphData:
    """Attach random features/labels/masks to a featureless graph (systems benchmarks)."""
    rng = np.random.default_rng(seed)
    n = g.num_nodes
    labels = rng.integers(0, num_classes, n).astype(np.int64)
    feats = rng.normal(0, 1, (n, feat_dim)).astype(np.float32)
    r = rng.random(n)
    return GraphData(g.indptr, g.indices, feats, labels, r < 0.1, (r >= 0.1) & (r < 0.3), r >= 0.6)
