"""Link-prediction metrics in numpy: AUC, AP, and OGB's Hits@K and MRR.

AUC and AP follow scikit-learn's definitions exactly (ties included: AUC is the trapezoid
area, i.e. the Mann-Whitney statistic with average ranks; AP is ``sum_n (R_n - R_{n-1}) P_n``
over distinct score thresholds).  Hits@K and MRR follow the OGB evaluator:

* ``hits_at_k``: every positive is ranked against the SAME negatives (ogbl-collab, -ddi, -ppa):
  the fraction of positives scoring strictly above the K-th highest negative score.
* ``mrr``: positive ``i`` is ranked against its own row of negatives (ogbl-citation2), or
  against the same negatives for all positives when given one row; the rank is the mean of the
  optimistic and pessimistic ranks (ties count half), and MRR is the mean of ``1 / rank``.

Example:
    >>> auc(np.array([0.9, 0.8, 0.3]), np.array([1, 0, 1]))
    0.5
    >>> hits_at_k(np.array([3.0, 1.0]), np.array([2.0, 0.0]), k=1)
    0.5
"""
from __future__ import annotations

import numpy as np

__all__ = ["auc", "average_precision", "hits_at_k", "mrr", "link_metrics", "METRICS"]

METRICS = ("auc", "ap", "hits", "mrr")
"""Link metrics early stopping can follow (``hits`` is Hits@``hits_k``)."""


def _check(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s, y = np.asarray(scores, np.float64).reshape(-1), np.asarray(labels).reshape(-1)
    if s.shape != y.shape:
        raise ValueError(f"scores and labels must have one entry each (got {s.shape[0]} and {y.shape[0]})")
    return s, y.astype(bool)


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve (NaN without both classes).  Shapes: float[m], {0,1}[m]."""
    s, y = _check(scores, labels)
    P, N = int(y.sum()), int((~y).sum())
    if P == 0 or N == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    ss = s[order]
    ranks = np.empty(s.shape[0], np.float64)
    # average ranks over ties: the first and last position of each run of equal scores
    first = np.concatenate([[True], ss[1:] != ss[:-1]])
    starts = np.flatnonzero(first)
    ends = np.concatenate([starts[1:], [ss.shape[0]]])
    avg = (starts + ends + 1) / 2.0                      # 1-based mean rank of each run
    ranks[order] = np.repeat(avg, ends - starts)
    return float((ranks[y].sum() - P * (P + 1) / 2.0) / (P * N))


def average_precision(scores: np.ndarray, labels: np.ndarray) -> float:
    """Average precision (scikit-learn's ``average_precision_score``).  Shapes: float[m], {0,1}[m]."""
    s, y = _check(scores, labels)
    P = int(y.sum())
    if P == 0:
        return float("nan")
    order = np.argsort(-s, kind="mergesort")
    ss, yy = s[order], y[order]
    last = np.concatenate([ss[1:] != ss[:-1], [True]])   # the end of each run of equal scores
    tps = np.cumsum(yy)[last]
    fps = np.cumsum(~yy)[last]
    precision = tps / (tps + fps)
    recall = tps / P
    return float(np.sum(np.diff(np.concatenate([[0.0], recall])) * precision))


def hits_at_k(pos: np.ndarray, neg: np.ndarray, k: int = 50) -> float:
    """OGB Hits@K: positives scoring above the K-th best of the shared negatives (1.0 with < K negatives).
    Shapes: pos float[P], neg float[N]."""
    pos, neg = np.asarray(pos, np.float64).reshape(-1), np.asarray(neg, np.float64).reshape(-1)
    if pos.size == 0:
        return float("nan")
    if neg.size < k:
        return 1.0
    kth = np.partition(neg, neg.size - k)[neg.size - k]
    return float(np.mean(pos > kth))


def mrr(pos: np.ndarray, neg: np.ndarray) -> float:
    """OGB mean reciprocal rank.  Shapes: pos float[P]; neg float[P, K] (own negatives per positive)
    or float[K] (the same negatives for every positive)."""
    pos = np.asarray(pos, np.float64).reshape(-1)
    neg = np.asarray(neg, np.float64)
    if pos.size == 0:
        return float("nan")
    if neg.ndim == 1:                                    # shared negatives: count with a sorted copy
        sn = np.sort(neg)
        optimistic = sn.size - np.searchsorted(sn, pos, side="right")     # negatives > pos
        pessimistic = sn.size - np.searchsorted(sn, pos, side="left")     # negatives >= pos
    else:
        if neg.shape[0] != pos.shape[0]:
            raise ValueError(f"neg must have one row per positive (got {neg.shape[0]} rows for {pos.shape[0]})")
        optimistic = (neg > pos[:, None]).sum(1)
        pessimistic = (neg >= pos[:, None]).sum(1)
    rank = 0.5 * (optimistic + pessimistic) + 1.0
    return float(np.mean(1.0 / rank))


def link_metrics(scores: np.ndarray, labels: np.ndarray, hits_k: int = 50) -> dict:
    """AUC, AP, Hits@K (shared negatives) and MRR (every positive against all negatives) of one
    phase's pairs.  Keys: ``auc``, ``ap``, ``hits``, ``mrr``."""
    s, y = _check(scores, labels)
    return {"auc": auc(s, y), "ap": average_precision(s, y), "hits": hits_at_k(s[y], s[~y], hits_k),
            "mrr": mrr(s[y], s[~y])}
