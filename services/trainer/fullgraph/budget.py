"""How big the offloaded mode's host cache is when the user does not say (``--cache-bytes auto``).

Why this module exists: the offload store's cache trades memory for spill traffic, and users run
with defaults.  A fixed default is wrong both ways: 48 MiB moved 9.1 GB per epoch through the spill
on a 1.2M-vertex graph whose in-memory run peaks at 5.9 GB, while 256 MiB is most of what a small
graph's whole run needs.  The cache is sized instead from what the job already knows:

* the bytes an in-memory run of the same model holds **at least** (:func:`in_memory_floor`: the
  features, every layer's output and its gradient; a real run holds more, 2-3x on the bench
  graphs, for autograd's saved tensors and masks), of which the cache takes
  :data:`FLOOR_FRACTION`, so that the offloaded run's whole-process peak stays well under 0.3x of
  an in-memory run's (the mode's goal, docs/fullgraph.md);
* the memory budget (``--memory-budget``, else the cgroup limit: :mod:`shared.store.residency`):
  at most :data:`BUDGET_FRACTION` of what is left of it after what the process holds already,
  because the schedule's per-part tensors, the write-behind buffers and the spill files' page cache
  need the rest;
* never less than :data:`MIN_CACHE`, and never more than the step's blocks
  (:func:`step_block_bytes`): beyond that nothing spills.

An explicit ``--cache-bytes`` always wins.  The run logs and reports the size and the reason.

The cache also sizes the schedule's compute units (:func:`unit_rows`): a unit's own block is at
most :data:`UNIT_FRACTION` of the cache (its rows times the widest per-row tensor: R-GCN's aggregate
or messages are ``R`` times a layer's width, :attr:`.model.ModelSpec.row_width`), so the per-unit tensors, the write-behind buffers (a
quarter of the cache plus two expanded blocks) and the prefetched blocks scale with the cache, not
with the store's part count; and a unit has at least :data:`MIN_UNIT_ROWS` rows, because each unit
costs a gather, kernel calls and block puts per layer whatever its size (a part is cut only when
larger than both).  Larger store parts are cut
and smaller ones grouped (:func:`.source.make_units`).  Measured: 4 GREM parts of a 1.5M-vertex
road-like graph (375k rows, 192 MB blocks against a 360 MB cache) peaked at 0.32x of an in-memory
run, 16 parts at 0.18x.  Grouping pays when the cache allows it (road-ny, 264k vertices, 256 MiB
cache: 0.78-0.99 s of CPU per step as 4 units, 1.14-1.64 s as 16), but a floor that grouped road-ny's
16 parts into 6 under its automatic 61 MiB cache cut the step's CPU by ~15% for 24% more peak
(559 -> 695 MiB: larger write-behind and per-unit tensors), so the floor stays low.
"""

from __future__ import annotations

from .graph import PartPlan
from .model import ModelSpec

__all__ = ["FLOOR_FRACTION", "BUDGET_FRACTION", "MIN_CACHE", "UNIT_FRACTION", "MIN_UNIT_ROWS", "in_memory_floor",
           "step_block_bytes", "auto_cache_bytes", "unit_rows"]

FLOOR_FRACTION = 0.15
"""Share of :func:`in_memory_floor` the cache takes (no budget binding)."""
BUDGET_FRACTION = 1 / 16
"""Share of the memory budget left after the process's current RSS the cache may take."""
MIN_CACHE = 16 << 20
"""Smallest automatic cache: a few parts' blocks, so Belady has something to choose from."""

UNIT_FRACTION = 1 / 4
"""Share of the cache one compute unit's own block (rows x widest per-row tensor) may take."""
MIN_UNIT_ROWS = 65536
"""Fewest rows a piece of a cut store part gets (32 MB blocks at 128 columns): the 4-part road-like
store under ``--cache-bytes 48M`` (the issue's setting) cut into 63 pieces of 24k rows took 1.40x the
in-memory epoch at 0.11x its peak, into 24 of 64k rows 1.21x at 0.14x (uncut: 0.97x at 0.32x)."""

_F32 = 4


def in_memory_floor(num_nodes: int, spec: ModelSpec) -> int:
    """Bytes in-memory training of ``spec`` on ``num_nodes`` vertices holds at least: the features,
    and every layer's output with its gradient (float32)."""
    return _F32 * num_nodes * (spec.dims[0] + 2 * sum(spec.dims[1:]))


def step_block_bytes(plan: PartPlan, spec: ModelSpec) -> int:
    """Bytes of the offload store's blocks live in a training step: each hidden layer's activations
    and gradients (own blocks plus the pair blocks readers gather: ``alpha * n`` rows each) and
    layer 0's feature halos and aggregated inputs."""
    n = len(plan.owner)
    alpha = plan.expansion_ratio()
    hidden = sum(spec.dims[1:-1])
    return int(_F32 * (2 * alpha * n * hidden + (alpha - 1) * n * spec.dims[0] + n * spec.dims[0]))


def unit_rows(cache: int, spec: ModelSpec) -> int:
    """The most rows of one compute unit under a ``cache``-byte cache (see the module docstring); a
    store part is cut only when it holds more than ``max(unit_rows, MIN_UNIT_ROWS)``."""
    return max(1, int(UNIT_FRACTION * cache) // (_F32 * spec.row_width))


def auto_cache_bytes(plan: PartPlan | int, spec: ModelSpec, budget: int | None, rss: int) -> tuple[int, str]:
    """``(cache bytes, why)`` for ``--cache-bytes auto`` (see the module docstring).

    Args:
        plan: the schedule's plan, or before one is built the vertex count (then the cache is not
            capped by the step's blocks).
        budget: the job's memory budget in bytes (None: none known).
        rss: the process's resident set now (imports, the plan, labels), which the budget already pays.
    """
    n = plan if isinstance(plan, int) else len(plan.owner)
    floor = in_memory_floor(n, spec)
    cache = int(FLOOR_FRACTION * floor)
    why = f"{FLOOR_FRACTION:.0%} of the {floor / 2**20:,.0f} MiB an in-memory run holds at least"
    if budget is not None:
        room = int(BUDGET_FRACTION * max(0, budget - rss))
        if room < cache:
            cache = room
            why = (f"1/{round(1 / BUDGET_FRACTION)} of the memory budget ({budget / 2**20:,.0f} MiB) left after "
                   f"{rss / 2**20:,.0f} MiB resident")
    if cache < MIN_CACHE:
        cache, why = MIN_CACHE, f"the smallest automatic cache ({why}: {cache / 2**20:,.1f} MiB)"
    blocks = cache if isinstance(plan, int) else step_block_bytes(plan, spec)
    if blocks < cache:
        cache, why = blocks, f"every block of a step ({blocks / 2**20:,.1f} MiB): nothing spills"
    return cache, why
