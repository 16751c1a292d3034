"""One set of model definitions: the full-graph modes compute what the mini-batch model computes.

The same :class:`~argosy.shared.models.GNN` weights run (a) as the mini-batch model on blocks that hold
every neighbour of every hop and (b) as the whole-graph in-memory trainer; the seeds' logits agree.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from argosy.services.trainer.fullgraph.inmemory import InMemoryTrainer
from argosy.shared.errors import ConfigError
from argosy.shared.models import Blocks

from .fullgraph_helpers import model
from argosy.services.trainer.fullgraph.synthetic import planted_graph


def full_blocks(g, seeds: np.ndarray, hops: int) -> tuple[np.ndarray, Blocks]:
    """Blocks with the complete ``hops``-hop neighbourhood of ``seeds`` (the protocol's id conventions)."""
    nodes = [int(s) for s in seeds]
    pos = {v: i for i, v in enumerate(nodes)}
    hop_nodes, hop_edges, src, dst = [len(nodes)], [0], [], []
    for _ in range(hops):
        for d in range(hop_nodes[-1]):
            v = nodes[d]
            for u in g.indices[g.indptr[v]:g.indptr[v + 1]].tolist():
                if u not in pos:
                    pos[u] = len(nodes)
                    nodes.append(u)
                src.append(pos[u])
                dst.append(d)
        hop_nodes.append(len(nodes))
        hop_edges.append(len(src))
    nodes_a = np.array(nodes)
    deg = np.diff(g.indptr)[nodes_a]
    return nodes_a, Blocks(hop_nodes=hop_nodes, hop_edges=hop_edges, edge_src=torch.tensor(src),
                           edge_dst=torch.tensor(dst), degrees=torch.from_numpy(deg).float())


@pytest.mark.parametrize("kind", ["gcn", "sage", "sage-gcn"])
@pytest.mark.parametrize("layers", [2, 3])
def test_full_graph_logits_equal_mini_batch_logits(kind, layers):
    g = planted_graph(250, avg_degree=5, num_classes=3, feat_dim=12, seed=4)
    m, spec = model(kind, 12, 3, layers, hidden=8, dropout=0.5)
    m.eval()
    full = InMemoryTrainer(spec, g, m, seed=0).forward(0, training=False)
    seeds = np.random.default_rng(0).choice(g.num_nodes, 40, replace=False)
    nodes, blocks = full_blocks(g, seeds, layers)
    with torch.no_grad():
        mini = m(torch.from_numpy(g.features[nodes]), blocks)
    assert mini.shape == (40, 3)
    assert torch.allclose(full[torch.from_numpy(seeds)].detach(), mini, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(full[torch.from_numpy(seeds + 1) % g.num_nodes].detach(), mini, atol=1e-3)


def test_attention_models_are_refused():
    with pytest.raises(ConfigError, match="gat cannot run in the full-graph modes"):
        model("gat", 12, 3)
