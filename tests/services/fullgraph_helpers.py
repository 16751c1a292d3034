"""Small graphs, stores and models shared by the full-graph tests."""
from __future__ import annotations

import numpy as np

from argosy.services.trainer.fullgraph.model import full_graph_model
from argosy.services.trainer.fullgraph.synthetic import planted_graph
from argosy.shared.config import TrainerConfig
from argosy.shared.store.writer import write_store


def contiguous(n: int, parts: int) -> np.ndarray:
    """Near-equal id ranges (the assignment a locality-preserving partitioner would give)."""
    return (np.arange(n) * parts // n).astype(np.int32)


def shuffled(n: int, parts: int, seed: int = 0) -> np.ndarray:
    """Every part touches every other part: the worst case for boundaries."""
    owner = np.arange(n) % parts
    np.random.default_rng(seed).shuffle(owner)
    return owner.astype(np.int32)


def make_store(tmp_path, n: int = 300, parts: int = 4, seed: int = 11, feat_dim: int = 20, classes: int = 4,
               assignment: str = "shuffled"):
    g = planted_graph(n, avg_degree=6, num_classes=classes, feat_dim=feat_dim, seed=seed)
    g.features = np.abs(g.features)  # non-negative, so row normalisation is meaningful
    owner = shuffled(n, parts, seed) if assignment == "shuffled" else contiguous(n, parts)
    path = tmp_path / f"store-{n}-{parts}-{seed}-{assignment}"
    write_store(g, owner, path, num_parts=parts)
    return g, owner, str(path)


def model(kind: str, in_dim: int, classes: int, layers: int = 3, hidden: int = 16, dropout: float = 0.0, seed: int = 5):
    """``kind``: gcn, sage, gat, or ``sage-gcn`` (SAGE with the gcn aggregator)."""
    kind, _, aggregator = kind.partition("-")
    cfg = TrainerConfig(model=kind, hidden=hidden, dropout=dropout, aggregator=aggregator or "mean")
    return full_graph_model(cfg, in_dim, classes, layers, seed)
