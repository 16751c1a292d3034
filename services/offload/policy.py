"""Eviction policies for the offload store: Belady (MIN) from a known schedule, and LRU.

Why this module exists: a layer-by-layer, part-by-part full-graph epoch
touches blocks in an order fixed before the epoch starts, so the store can
know each block's *next use* exactly and evict the block used furthest in the
future (Belady's optimal MIN), prefetch exactly the blocks about to be read,
and bypass the cache for blocks that would be the first victim anyway.
GriNNder's public code uses LRU; we keep LRU as the measured baseline.
"""

from __future__ import annotations

import bisect
import logging
import math
import re
from typing import Iterable, Literal

__all__ = ["BlockKey", "Access", "Schedule", "INF", "block_key"]

logger = logging.getLogger(__name__)

BlockKey = tuple[str, int, int]
"""``(kind, layer, part)``."""


_KIND = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")


def block_key(kind: str, layer: int, part: int) -> BlockKey:
    """A block's key, checked: it names the block's spill file (:func:`.spill.file_path`), so a kind such
    as ``../../x`` from a store client must not reach the file system.

    Raises:
        ValueError: a kind other than 1-64 letters, digits and ``_`` (a letter first), or a negative
            layer or part.
    """
    kind, layer, part = str(kind), int(layer), int(part)
    if not _KIND.fullmatch(kind):
        raise ValueError(f"block kind {kind!r}: 1-64 letters, digits and _, a letter first")
    if layer < 0 or part < 0:
        raise ValueError(f"block ({kind!r}, {layer}, {part}): layer and part must be >= 0")
    return (kind, layer, part)


Access = tuple[str, int, int, Literal["r", "w"]]
"""``(kind, layer, part, op)``: ``r`` reads (or read-modify-writes) a block,
``w`` creates/overwrites it (its old contents are dead)."""

INF = math.inf


class Schedule:
    """The planned access sequence of one epoch (or one pass) and a cursor into it.

    Accesses are matched to the plan as they happen: an access to key ``k``
    moves the cursor just past the next planned access to ``k`` if it lies
    within ``tolerance`` steps; otherwise it is counted as unplanned and the
    cursor stays (so one stray access cannot skip the plan).

    Args:
        accesses: the planned order.
        cyclic: blocks with no further use this pass are next used at their
            first position of the next pass (persistent inputs); written-then-
            dead blocks are unaffected because ``w`` ends a lifetime.
        tolerance: how far ahead a real access may match the plan.
    """

    def __init__(self, accesses: Iterable[Access], cyclic: bool = True, tolerance: int = 256) -> None:
        self.accesses: list[Access] = list(accesses)
        for a in self.accesses:
            if len(a) != 4 or a[3] not in ("r", "w"):
                raise ValueError(f"schedule entries are (kind, layer, part, 'r'|'w') (got {a!r})")
        self.cyclic = cyclic
        self.tolerance = tolerance
        self.cursor = 0
        self.unplanned = 0
        self._pos: dict[BlockKey, list[int]] = {}
        for i, (k, l, p, _op) in enumerate(self.accesses):
            self._pos.setdefault((k, int(l), int(p)), []).append(i)

    def __len__(self) -> int:
        return len(self.accesses)

    def reset(self) -> None:
        """Start the pass again (new epoch)."""
        self.cursor = 0

    def advance(self, key: BlockKey) -> bool:
        """Record an access to ``key``; returns whether it matched the plan."""
        pos = self._pos.get(key)
        if pos:
            i = bisect.bisect_left(pos, self.cursor)
            if i < len(pos) and pos[i] - self.cursor <= self.tolerance:
                self.cursor = pos[i] + 1
                return True
        self.unplanned += 1
        return False

    def next_use(self, key: BlockKey) -> float:
        """Position of the next planned *read* of ``key`` (``INF`` if dead or never)."""
        pos = self._pos.get(key)
        if not pos:
            return INF
        i = bisect.bisect_left(pos, self.cursor)
        if i < len(pos):
            j = pos[i]
            return INF if self.accesses[j][3] == "w" else float(j)
        if self.cyclic and self.accesses[pos[0]][3] == "r":
            return float(pos[0] + len(self.accesses))
        return INF

    def upcoming_reads(self, limit: int) -> list[BlockKey]:
        """The next ``limit`` distinct keys read after the cursor, in order."""
        out: list[BlockKey] = []
        seen: set[BlockKey] = set()
        for k, l, p, op in self.accesses[self.cursor:self.cursor + 4 * limit]:
            key = (k, int(l), int(p))
            if op == "r" and key not in seen:
                seen.add(key)
                out.append(key)
                if len(out) >= limit:
                    break
        return out
