"""Checks a store can be trained on, before any service starts: no silent fallbacks.

A graph without features, labels or seeds used to train anyway (on random features, or on zero
seeds with accuracy 0.0 and exit code 0).  :func:`check_trainable` refuses such a store with an
error that says what is missing and what to do, and resolves the choices left to Argosy
(``normalize_features=None``) with a warning that says what was chosen.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from argosy.shared.config import JobConfig
from argosy.shared.errors import ConfigError
from argosy.shared.store import PartitionStore

__all__ = ["TrainInputError", "Preflight", "check_trainable"]

logger = logging.getLogger("argosy")

_ROWS_PER_CHUNK = 65_536


class TrainInputError(ConfigError):
    """The store lacks what training needs (features, labels, seeds of a split)."""


@dataclass
class Preflight:
    """What :func:`check_trainable` found: split sizes and the warnings it printed."""

    train: int = 0
    val: int = 0
    test: int = 0
    labelled_train: int = 0
    warnings: list[str] = field(default_factory=list)


def _non_negative(features: list[np.ndarray]) -> bool:
    for f in features:
        for i in range(0, f.shape[0], _ROWS_PER_CHUNK):
            if np.asarray(f[i:i + _ROWS_PER_CHUNK]).min(initial=0) < 0:
                return False
    return True


def check_trainable(store: PartitionStore | str, cfg: JobConfig) -> Preflight:
    """Raise :class:`TrainInputError` unless ``store`` has features, labels and train/val/test seeds.

    Sets ``cfg.trainer.normalize_features`` when it is None (row-normalise when every feature is
    non-negative, as bag-of-words features are) and warns about that choice.
    """
    store = store if isinstance(store, PartitionStore) else PartitionStore(store)
    m, root = store.manifest, store.root
    parts = [store.part(p) for p in range(store.num_parts)]
    if m.feature_dim == 0 or any(pd.features is None for pd in parts):
        raise TrainInputError(
            f"{root}: the graph has no node features. Give a graph with features (an .npz with `features` or "
            f"`x`), or pass --random-features DIM to train on random features (a systems benchmark: "
            f"the model then learns from the graph structure only)")
    if m.num_classes < 1 or any(pd.labels is None for pd in parts):
        raise TrainInputError(f"{root}: the graph has no labels (an .npz with `labels` or `y`); "
                              "node classification needs them")
    out = Preflight()
    for split in ("train", "val", "test"):
        masks = [getattr(pd, f"{split}_mask") for pd in parts]
        if any(mk is None for mk in masks):
            raise TrainInputError(f"{root}: the graph has no {split}_mask; training needs train, val and test "
                                  "masks (val picks the best epoch and stops training, test is what is reported)")
        setattr(out, split, int(sum(np.count_nonzero(mk) for mk in masks)))
        if getattr(out, split) == 0:
            raise TrainInputError(f"{root}: {split}_mask selects no vertex (got 0 of {m.num_nodes})")
    out.labelled_train = int(sum(np.count_nonzero(np.asarray(pd.labels)[np.asarray(pd.train_mask)] >= 0)
                                 for pd in parts))
    if out.labelled_train == 0:
        raise TrainInputError(f"{root}: none of the {out.train} train vertices has a label (all are -1)")
    t = cfg.trainer
    if t.normalize_features is None:
        t.normalize_features = _non_negative([pd.features for pd in parts])
        msg = ("features are all non-negative: row-normalising them to sum 1 (pass --no-normalize-features "
               "to keep them as they are)" if t.normalize_features else
               "features have negative values: using them as they are (pass --normalize-features to "
               "row-normalise)")
        out.warnings.append(msg)
        logger.warning(msg)
    return out
