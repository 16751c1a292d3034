"""What the offloaded schedule reads per part: features, labels and topology straight from the store.

Why this module exists: the offloaded mode exists to train where the graph's activations do not fit
in memory, so it must not load the whole graph either.  The schedule works part by part on the
store's parts; this module builds the plan from one part's topology at a time and reads a part's
feature rows from the store's ``features.npy`` when a layer-0 gather needs them (a memory mapping
opened for the copy and dropped after it, so the file's pages do not stay in the process's resident
set).  :class:`GraphSource` gives the same interface over a graph held in memory (exactness tests).

The schedule's working set is one part's layer tensors, so a store with more parts (``argosy
partition --parts``) trains in less memory.  (Cutting a store part into row ranges instead was
measured and rejected: on a DCSBM graph of 1.2M vertices, 4 GREM parts cut into 15 row ranges
raised the expansion ratio alpha from ~1.3 to 3.0 and the disk traffic tenfold; GREM's own parts
keep the halos small.)

Shapes: part ``p`` owns ``n_p`` vertices (``plan.own[p]``, ascending global ids, the store's row
order); its features are ``float32[n_p, F]``.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from argosy.shared.errors import StoreFormatError
from argosy.shared.store.reader import PartitionStore

from .graph import Aggr, GraphData, PartPlan, assemble_plan, degree_weights, normalize_rows

__all__ = ["GraphSource", "StoreSource", "plan_from_store", "part_tensors"]

logger = logging.getLogger(__name__)

SPLITS = ("train_mask", "val_mask", "test_mask")


class GraphSource:
    """Part reads from a graph held in memory (the reference path of the exactness tests)."""

    def __init__(self, graph: GraphData, plan: PartPlan) -> None:
        if graph.features is None or graph.labels is None:
            raise ValueError("offloaded training needs features and labels")
        self.graph, self.plan = graph, plan
        self.feature_dim = int(graph.features.shape[1])
        self.labels = [np.asarray(graph.labels[o]) for o in plan.own]
        self.masks = {k: [np.asarray(getattr(graph, k)[o]) if getattr(graph, k) is not None else np.zeros(len(o), bool)
                          for o in plan.own] for k in SPLITS}

    def features_into(self, s: int, out: np.ndarray) -> None:
        """Copy part ``s``'s feature rows into ``out`` (``float32[n_s, F]``)."""
        out[...] = self.graph.features[self.plan.own[s]]

    def nbytes(self) -> int:
        return int(self.graph.features.nbytes)


class StoreSource:
    """Part reads from a partitioned store.

    Args:
        store: the store ``argosy partition`` wrote.
        normalize: row-normalise features as they are read (row-local, so the same as whole).
    """

    def __init__(self, store: PartitionStore, normalize: bool = False) -> None:
        m = store.manifest
        if not m.feature_dim or not m.num_classes:
            raise StoreFormatError(f"{store.root}: full-graph training needs features and labels, and this "
                                   f"store has {m.feature_dim} feature columns and {m.num_classes} classes")
        self.store, self.normalize = store, normalize
        self.feature_dim = int(m.feature_dim)
        self.labels: list[np.ndarray] = []
        self.masks: dict[str, list[np.ndarray]] = {k: [] for k in SPLITS}
        for p in range(store.num_parts):
            arrays = store.read_part(p, ("labels",) + SPLITS)
            n_p = m.parts[p].num_nodes
            lab = arrays["labels"]
            self.labels.append(np.asarray(lab, np.int64) if lab is not None else np.full(n_p, -1, np.int64))
            for k in SPLITS:
                a = arrays[k]
                self.masks[k].append(np.asarray(a, bool) if a is not None else np.zeros(n_p, bool))

    def features_into(self, p: int, out: np.ndarray) -> None:
        """Copy part ``p``'s feature rows from the store into ``out`` (``float32[n_p, F]``)."""
        path = self.store.root / self.store.manifest.parts[p].path / "features.npy"
        want = (self.store.manifest.parts[p].num_nodes, self.feature_dim)
        # read(2) straight into ``out``: a fresh mapping per part faulted every page in (~2.5x slower),
        # and nothing stays in this process's resident set afterwards
        try:
            with open(path, "rb") as f:
                major, _ = np.lib.format.read_magic(f)
                shape, fortran, dtype = (np.lib.format.read_array_header_1_0 if major == 1
                                         else np.lib.format.read_array_header_2_0)(f)
                if tuple(shape) != want or fortran or dtype not in (np.dtype("<f4"), np.dtype("<f2")):
                    raise StoreFormatError(f"{path}: expected C-ordered float32 or float16 features of shape "
                                           f"{want}, got {dtype}{' (Fortran order)' if fortran else ''} {tuple(shape)}")
                direct = out.flags.c_contiguous and out.dtype == dtype
                dst = out if direct else np.empty(want, dtype)   # float16 stores: read, then widen
                got = f.readinto(memoryview(dst).cast("B"))
        except (ValueError, OSError) as e:
            raise StoreFormatError(f"{path}: unreadable features ({e})") from None
        if got != dst.nbytes:
            raise StoreFormatError(f"{path}: truncated: {got:,} of {dst.nbytes:,} feature bytes present")
        if dst is not out:
            out[...] = dst
        if self.normalize:
            normalize_rows(out)

    def nbytes(self) -> int:
        return 0  # nothing held: read per part


def plan_from_store(store: PartitionStore, aggr: Aggr) -> PartPlan:
    """The schedule's plan over the store's parts, built from one part's topology at a time.

    Normalisation uses whole-graph degrees (one ``float64[n]`` array, from the parts' row pointers),
    so the plan equals :func:`~.graph.build_plan` on the whole graph with the store's assignment.
    """
    n = store.manifest.num_nodes
    deg = np.zeros(n, np.float64)
    own: list[np.ndarray] = []
    for p in range(store.num_parts):
        a = store.read_part(p, ("nodes", "indptr"))
        nodes = np.asarray(a["nodes"], np.int64)
        deg[nodes] = np.diff(a["indptr"])
        own.append(nodes)
    owner = np.asarray(store.assignment, np.int32)

    def edges_of(p: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        a = store.read_part(p, ("indptr", "indices"))
        n_p = len(own[p])
        lr = np.repeat(np.arange(n_p, dtype=np.int64), np.diff(a["indptr"]))
        col = np.asarray(a["indices"], np.int64)
        if aggr in ("gcn", "mean_self"):
            lr = np.concatenate([lr, np.arange(n_p, dtype=np.int64)])
            col = np.concatenate([col, own[p]])
        return lr, col, degree_weights(deg, own[p][lr], col, aggr)

    return assemble_plan(owner, own, aggr, edges_of)


def part_tensors(source, device: torch.device) -> tuple[list[torch.Tensor], dict[str, list[torch.Tensor]], int]:
    """Labels and split masks per part as tensors on ``device``, and the global training count."""
    labels = [torch.from_numpy(x).to(device) for x in source.labels]
    masks = {k: [torch.from_numpy(x).to(device) for x in v] for k, v in source.masks.items()}
    n_train = int(sum(int((m & (lab >= 0)).sum()) for m, lab in zip(source.masks["train_mask"], source.labels)))
    return labels, masks, n_train
