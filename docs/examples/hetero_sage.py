"""A PyG heterogeneous model for `argosy train --model hetero_sage:hetero_sage` on a typed graph.

Argosy calls the factory with the store's ``metadata`` (node types, ``(src, relation, dst)``
relations, reverse relations included) because its signature names it, runs the model as
``forward(x_dict, edge_index_dict)`` on each sampled batch split by type, and takes the target
type's rows as the seeds' logits.  Lazy layers (``(-1, -1)``) are initialised before training.

    cd docs/examples && argosy generate --preset mag --scale 0.005 --out mag
    argosy train --data mag --model hetero_sage:hetero_sage --fanouts 10,5
"""
import torch
from torch_geometric.nn import SAGEConv, to_hetero


class SAGE2(torch.nn.Module):
    def __init__(self, hidden: int, out: int, dropout: float):
        super().__init__()
        self.conv1 = SAGEConv((-1, -1), hidden)
        self.conv2 = SAGEConv((-1, -1), out)
        self.drop = torch.nn.Dropout(dropout)      # a module, so to_hetero's tracing keeps train/eval

    def forward(self, x, edge_index):
        return self.conv2(self.drop(self.conv1(x, edge_index).relu()), edge_index)


def hetero_sage(in_channels, hidden_channels, num_layers, out_channels, metadata, dropout=0.5):
    return to_hetero(SAGE2(hidden_channels, out_channels, dropout), metadata, aggr="sum")
