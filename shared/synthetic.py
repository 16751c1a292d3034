"""Synthetic graphs for the embedded default: a degree-corrected stochastic block model.

Power-law degrees (Pareto propensities), planted communities, and node features / labels that
are correlated with the communities, so a GNN has something real to learn: features alone give
a weak signal (noisy community centroids), neighbourhoods sharpen it.  Deterministic by seed.
Vertex ids are randomly permuted so that file order does not reveal the communities.

Example:
    >>> g = generate_dcsbm(num_nodes=1000, avg_degree=8, seed=0)
    >>> g.num_nodes, g.features.shape[1], g.num_classes
    (1000, 32, 8)
"""
from __future__ import annotations

import numpy as np

from shared.graphio import Graph, csr_from_edges

__all__ = ["generate_dcsbm", "dcsbm_edge_chunks"]


def _model(num_nodes: int, num_communities: int, power_law: float, rng: np.random.Generator):
    comm = rng.integers(0, num_communities, num_nodes)
    theta = rng.pareto(power_law, num_nodes) + 1.0          # power-law degree propensities
    theta = np.minimum(theta, np.sqrt(num_nodes))           # keep hubs below sqrt(n) expected degree
    order = np.argsort(comm, kind="stable")                 # nodes grouped by community
    counts = np.bincount(comm, minlength=num_communities)
    starts = np.concatenate([[0], np.cumsum(counts)])
    cdf_all = np.cumsum(theta)
    cdf_all /= cdf_all[-1]
    cdf_comm = np.cumsum(theta[order])                      # within-community cdf, by blocks
    return comm, theta, order, starts, cdf_all, cdf_comm


def dcsbm_edge_chunks(num_nodes: int, num_edges: int, num_communities: int = 16, mixing: float = 0.2,
                      power_law: float = 2.1, seed: int = 0, chunk_edges: int = 1 << 22):
    """Yield ``(src, dst)`` int64 chunks of a DC-SBM edge list (may hold duplicates/self loops;
    readers normalise them).  Memory is O(n + chunk), so it scales to 100M+ edges on disk.

    Args:
        mixing: fraction of edges whose endpoint is drawn outside the source's community.
    """
    rng = np.random.default_rng(seed)
    comm, theta, order, starts, cdf_all, cdf_comm = _model(num_nodes, num_communities, power_law, rng)
    perm = rng.permutation(num_nodes)                       # hide community structure from file order
    done = 0
    while done < num_edges:
        b = min(chunk_edges, num_edges - done)
        src = np.searchsorted(cdf_all, rng.random(b), side="right")
        src = np.minimum(src, num_nodes - 1)
        c = comm[src]
        lo, hi = starts[c], starts[c + 1]
        base = np.where(lo > 0, cdf_comm[np.maximum(lo - 1, 0)], 0.0)
        top = cdf_comm[hi - 1]
        u = base + rng.random(b) * (top - base)
        inside = order[np.clip(np.searchsorted(cdf_comm, u, side="right"), lo, hi - 1)]
        anywhere = np.minimum(np.searchsorted(cdf_all, rng.random(b), side="right"), num_nodes - 1)
        dst = np.where(rng.random(b) < mixing, anywhere, inside)
        yield perm[src], perm[dst]
        done += b


def generate_dcsbm(num_nodes: int = 20_000, avg_degree: float = 10.0, num_communities: int | None = None,
                   num_classes: int = 8, feature_dim: int = 32, mixing: float = 0.2,
                   feature_noise: float = 4.0, power_law: float = 2.1, train_fraction: float = 0.3,
                   val_fraction: float = 0.1, test_fraction: float = 0.2, seed: int = 0) -> Graph:
    """Generate an in-memory DC-SBM graph with features, labels and splits.

    Args:
        num_nodes: vertices.  avg_degree: mean undirected degree (before de-duplication).
        num_communities: planted communities (default ``num_classes``); label = community mod classes.
        feature_noise: std of Gaussian noise around each community centroid (centroids ~ N(0, 1)).
            At the default 4.0 a nearest-centroid classifier on features alone gets ~48% on 8
            classes, on features averaged over 2 hops ~87%: the graph carries most of the signal.
    Returns:
        A :class:`~shared.graphio.Graph` with float32 features, int64 labels and random masks.
    """
    if num_nodes < 2:
        raise ValueError(f"num_nodes must be >= 2 (got {num_nodes})")
    if not 0 <= mixing <= 1:
        raise ValueError(f"mixing must be in [0, 1] (got {mixing})")
    num_communities = num_communities or num_classes
    num_edges = int(num_nodes * avg_degree / 2)
    srcs, dsts = zip(*dcsbm_edge_chunks(num_nodes, num_edges, num_communities, mixing, power_law, seed))
    g = csr_from_edges(np.concatenate(srcs), np.concatenate(dsts), num_nodes=num_nodes)
    # recover the permuted id -> community map exactly as dcsbm_edge_chunks built it
    rng2 = np.random.default_rng(seed)
    comm, *_ = _model(num_nodes, num_communities, power_law, rng2)
    perm = rng2.permutation(num_nodes)
    comm_of = np.empty(num_nodes, np.int64)
    comm_of[perm] = comm
    frng = np.random.default_rng(seed + 1)
    centroids = frng.standard_normal((num_communities, feature_dim)).astype(np.float32)
    g.features = centroids[comm_of] + feature_noise * frng.standard_normal((num_nodes, feature_dim)).astype(np.float32)
    g.labels = comm_of % num_classes
    split = frng.random(num_nodes)
    g.train_mask = split < train_fraction
    g.val_mask = (split >= train_fraction) & (split < train_fraction + val_fraction)
    g.test_mask = (split >= train_fraction + val_fraction) & (split < train_fraction + val_fraction + test_fraction)
    g.name = f"dcsbm-{num_nodes}"
    return g
