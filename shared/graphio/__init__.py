"""The one input layer for graph files: format detection, header validation and block reading.

Both the streaming partitioner (``services/partitioner/stream.py``) and whole-graph loads
(:func:`load_graph`, for small graphs) read through the classes here, so a file is accepted or
rejected the same way everywhere.

Formats (detected by content first, then by case-insensitive extension):

* ``.npz``: a CSR (``indptr`` + ``indices``) or an edge list (``src`` + ``dst``, optional
  ``num_nodes``), optional edge weights (``edge_weight``, ``weight`` or scipy's ``data``), with optional node data ``features`` (alias ``x``), ``labels`` (alias ``y``),
  ``train_mask``/``val_mask``/``test_mask``.  Members are read one at a time, in blocks.
* ``.npy``: an integer edge list of shape ``(m, 2)``.
* text edge lists (``.txt .csv .tsv .el .edges .edgelist .snap .dat``, optionally ``.gz``):
  ``u v`` per line, space/tab/comma separated; ``#``/``%`` comment lines; a UTF-8 BOM and one
  header line (e.g. ``src,dst,weight``) are skipped; a third column is read as edge weights when
  the header names it ``weight`` or the caller asks (``--edge-weights column``), else dropped with
  the columns after it, in every reader (:mod:`.weights`).
* an OGB node-property-prediction directory: ``raw/edge.csv.gz``, ``raw/node-feat.csv.gz``,
  ``raw/node-label.csv.gz``, ``split/<name>/{train,valid,test}.csv.gz``.

Arrays are read with an explicit dtype, byte order and memory order: big-endian and
Fortran-ordered ``.npy`` data are converted, object (pickled) members are refused, and a header
that declares more bytes than the file holds is reported as truncated before anything is
allocated.  Edge lists and asymmetric CSRs are symmetrised (the store is undirected) unless the
caller keeps them directed.

Example:
    >>> import numpy as np
    >>> g = csr_from_edges(np.array([0, 1, 2]), np.array([1, 2, 0]), num_nodes=3)
    >>> g.indptr.tolist(), g.indices.tolist()
    ([0, 2, 4, 6], [1, 2, 0, 2, 0, 1])
"""
from __future__ import annotations

from .columns import ArrayColumn, CsvColumn, NodeColumn, NpyColumn, check_node_columns, node_column_from_file
from .formats import (NODE_ARRAYS, SPLITS, SUPPORTED_FORMATS, check_ids, check_num_nodes, graph_format,
                      index_dtype)
from .graph import (Graph, coalesce_weights, csr_from_edges, csr_from_keys, csr_is_symmetric, indptr_from_rows,
                    sorted_unique)
from .weights import TEXT_COLUMN, WEIGHT_KEYS, check_weights, iter_weighted_edges
from .load import load_graph, save_graph_npz, save_graph_ogb
from .npy import NpyArray, PairArrayReader
from .source import GraphSource, open_graph
from .text import TextEdgeReader

__all__ = ["Graph", "load_graph", "csr_from_edges", "csr_from_keys", "csr_is_symmetric", "indptr_from_rows",
           "sorted_unique", "save_graph_npz",
           "index_dtype", "graph_format", "open_graph", "GraphSource", "NpyArray", "PairArrayReader",
           "TextEdgeReader", "NodeColumn", "NpyColumn", "CsvColumn", "ArrayColumn", "check_node_columns",
           "node_column_from_file", "SUPPORTED_FORMATS", "check_num_nodes", "check_ids", "NODE_ARRAYS", "SPLITS",
           "save_graph_ogb", "coalesce_weights", "check_weights", "iter_weighted_edges", "TEXT_COLUMN", "WEIGHT_KEYS"]

# Typed (heterogeneous) inputs: every reader returns a TypedGraph (torch_geometric imported lazily).
from .typed import REVERSE_PREFIX, Relation, TypedGraph
from .rdf import read_rdf, read_rdf_dir
from .kgtriples import read_kg_triples
from .typed_dir import read_ogb_hetero, read_typed_dir, save_typed_dir
from .hetero_pyg import from_hetero_data, to_hetero_data
from .typed_open import open_typed, typed_format

__all__ += ["TypedGraph", "Relation", "REVERSE_PREFIX", "read_rdf", "read_rdf_dir", "read_kg_triples",
            "read_typed_dir", "save_typed_dir", "read_ogb_hetero", "from_hetero_data", "to_hetero_data",
            "open_typed", "typed_format"]
