"""How long a trainer's batches take from claim to apply, published for the samplers' re-claim deadline.

A sampler stamps each batch with the wall time it claimed the work item
(:attr:`~shared.protocol.SampledBatch.claimed_at`); the trainer notes ``apply - claimed_at`` for
every batch it applies (:meth:`BatchAges.add`) and, at most every :data:`PUBLISH_EVERY_S`, publishes
a high quantile of the last :data:`WINDOW_S` seconds' ages
(:meth:`~shared.coord.Coordinator.publish_batch_age`).  Samplers then wait
``RECLAIM_AGE_FACTOR`` times that age (or the claim timeout, when it is longer) before they take an
item over: a pipeline whose own latency exceeds the claim timeout (many batches in flight ahead of
a ~1 s step) is not re-sampled while it is healthy.
"""
from __future__ import annotations

import math
from collections import deque

__all__ = ["BatchAges", "WINDOW_S", "QUANTILE", "PUBLISH_EVERY_S", "RISE_EVERY_S", "RISE"]

WINDOW_S = 30.0
"""Seconds of applied batches whose ages count (the latency of the pipeline as it is now)."""
QUANTILE = 0.9
"""The quantile published: high enough to cover the healthy pipeline's tail, low enough that a few
batches that waited for a re-claimed one after a fault do not raise the deadline of the next fault."""
PUBLISH_EVERY_S = 3.0
"""One publication (one Redis SET) this often, not one per batch ..."""
RISE_EVERY_S = 0.5
"""... or sooner, but not more often than this, when a batch is :data:`RISE` times older than the age
last published: while the pipeline fills, the age grows by the second, and a deadline sized by a
figure 3 s old re-claimed the tail of the first batches when the claim timeout was short."""
RISE = 1.25


class BatchAges:
    """Claim-to-apply ages of the batches applied in the last ``window`` seconds.

    Args:
        window: seconds of batches kept (default :data:`WINDOW_S`).
        every: seconds between two publications (:meth:`due`; default :data:`PUBLISH_EVERY_S`).
        quantile: the quantile :meth:`due` returns (default :data:`QUANTILE`).

    Example:
        >>> ages = BatchAges(window=10.0, every=5.0)
        >>> for i in range(10):
        ...     ages.add(claimed_at=100.0, applied_at=101.0 + i, now=float(i))
        >>> ages.due(now=9.0), ages.due(now=10.0)      # nearest-rank 90th percentile; then not yet again
        (9.0, None)
        >>> ages.add(claimed_at=100.0, applied_at=130.0, now=9.2)    # 30 s > 1.25 x 9 s: published sooner,
        >>> ages.due(now=9.3), ages.due(now=9.5)                     # and one straggler barely moves it
        (None, 10.0)
    """

    def __init__(self, window: float = WINDOW_S, every: float = PUBLISH_EVERY_S, quantile: float = QUANTILE):
        if window <= 0 or every < 0 or not 0 < quantile <= 1:
            raise ValueError(f"BatchAges needs window > 0, every >= 0 and 0 < quantile <= 1 "
                             f"(got {window}, {every}, {quantile})")
        self.window, self.every, self.quantile = window, every, quantile
        self._ages: deque[tuple[float, float]] = deque()     # (monotonic time applied, age in seconds)
        self._published = -math.inf           # when (monotonic) ...
        self._last = 0.0                      # ... and what was last published
        self._rising = False

    def add(self, claimed_at: float, applied_at: float, now: float) -> None:
        """One batch claimed at wall time ``claimed_at`` was applied at wall time ``applied_at``
        (``now``: the monotonic clock, for the window).  An unstamped batch (0) is skipped; a
        negative age (the sampler's clock ahead of this one) counts as 0."""
        if claimed_at > 0:
            age = max(0.0, applied_at - claimed_at)
            self._ages.append((now, age))
            self._rising |= age > RISE * self._last

    def current(self, now: float) -> float | None:
        """The quantile of the ages applied in the window ending ``now`` (None: none)."""
        while self._ages and self._ages[0][0] < now - self.window:
            self._ages.popleft()
        if not self._ages:
            return None
        ages = sorted(a for _, a in self._ages)
        return ages[max(0, math.ceil(self.quantile * len(ages)) - 1)]

    def due(self, now: float) -> float | None:
        """:meth:`current` when a publication is due (``every`` seconds after the last one, or
        :data:`RISE_EVERY_S` after it when a batch came in :data:`RISE` times older), else None."""
        wait = now - self._published
        if wait < self.every and not (self._rising and wait >= min(RISE_EVERY_S, self.every)):
            return None
        age = self.current(now)
        if age is not None:
            self._published, self._last, self._rising = now, age, False
        return age
