"""Train/val/test splits made from the labels: ``--split random:TRAIN,VAL,TEST`` and
``--split per-class:N,VAL,TEST`` (Planetoid style), seeded and recorded in the store's manifest.

``--split NAME`` without a colon keeps its meaning: the ``split/NAME`` directory of an OGB
dataset.  Only labelled vertices (label >= 0) are put in a split.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from argosy.shared.errors import ConfigError

__all__ = ["SplitSpec", "parse_split", "make_split", "SPLIT_KINDS"]

SPLIT_KINDS = ("random", "per-class")


@dataclass(frozen=True)
class SplitSpec:
    """``kind`` random: ``train``/``val``/``test`` are fractions of the labelled vertices;
    per-class: ``train`` vertices of every class, then ``val`` and ``test`` vertices (counts) drawn
    from the rest (PyG's ``RandomNodeSplit(split="random")``, Planetoid's 20/500/1000)."""
    kind: str
    train: float
    val: float
    test: float


def parse_split(text: str | None) -> SplitSpec | None:
    """The generated split ``text`` names, or None for an OGB split name (no colon) or None."""
    if text is None or ":" not in text:
        return None
    kind, _, rest = text.partition(":")
    usage = "expected --split random:TRAIN,VAL,TEST (fractions, e.g. random:0.6,0.2,0.2) or " \
            "--split per-class:N,VAL,TEST (counts, e.g. per-class:20,500,1000)"
    if kind not in SPLIT_KINDS:
        raise ConfigError(f"--split {text}: unknown split kind {kind!r}; {usage}")
    try:
        vals = [float(v) for v in rest.split(",")]
    except ValueError:
        raise ConfigError(f"--split {text}: not three numbers; {usage}") from None
    if len(vals) != 3 or any(v < 0 for v in vals):
        raise ConfigError(f"--split {text}: expected three non-negative numbers (got {rest!r}); {usage}")
    if kind == "random":
        if sum(vals) > 1 + 1e-9 or vals[0] == 0:
            raise ConfigError(f"--split {text}: the fractions must be positive for train and sum to at most 1 "
                              f"(got sum {sum(vals):g})")
    elif any(v != int(v) for v in vals) or vals[0] < 1:
        raise ConfigError(f"--split {text}: per-class takes whole counts, train >= 1 (got {rest!r}); {usage}")
    return SplitSpec(kind, *vals)


def make_split(labels: np.ndarray, spec: SplitSpec, seed: int) -> tuple[dict[str, np.ndarray], dict]:
    """Masks ``train_mask``/``val_mask``/``test_mask`` (bool[n]) and the record kept in the manifest
    (``spec``, ``seed`` and the vertices per split).  Raises ConfigError when the labels cannot
    fill the split (a class with fewer than N labelled vertices, too few vertices for VAL+TEST)."""
    labels = np.asarray(labels)
    n = labels.shape[0]
    rng = np.random.default_rng(seed)
    labelled = np.flatnonzero(labels >= 0)
    if labelled.size == 0:
        raise ConfigError("--split: no vertex has a label (all are -1); a split needs labelled vertices")
    if spec.kind == "random":
        perm = rng.permutation(labelled)
        a = int(round(spec.train * perm.size))
        b = a + int(round(spec.val * perm.size))
        c = min(perm.size, b + int(round(spec.test * perm.size)))
        train, val, test = perm[:a], perm[a:b], perm[b:c]
    else:
        k = int(spec.train)
        classes, counts = np.unique(labels[labelled], return_counts=True)
        short = classes[counts < k]
        if short.size:
            raise ConfigError(f"--split per-class:{k},...: class {int(short[0])} has only "
                              f"{int(counts[classes == short[0]][0])} labelled vertices (want {k} per class)")
        perm = rng.permutation(labelled)
        order = np.argsort(labels[perm], kind="stable")          # each class's vertices in random order
        by_class = perm[order]
        starts = np.searchsorted(labels[by_class], classes)
        train = np.concatenate([by_class[s:s + k] for s in starts])
        rest = rng.permutation(np.setdiff1d(labelled, train))
        nv, nt = int(spec.val), int(spec.test)
        if nv + nt > rest.size:
            raise ConfigError(f"--split per-class:{k},{nv},{nt}: {rest.size} labelled vertices remain after the "
                              f"{train.size} train ones, fewer than {nv} + {nt}")
        val, test = rest[:nv], rest[nv:nv + nt]
    masks = {}
    for name, ids in (("train_mask", train), ("val_mask", val), ("test_mask", test)):
        m = np.zeros(n, bool)
        m[ids] = True
        masks[name] = m
    record = {"spec": asdict(spec), "seed": int(seed), "train": int(train.size), "val": int(val.size),
              "test": int(test.size)}
    return masks, record
