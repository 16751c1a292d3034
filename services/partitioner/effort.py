"""GREM's effort presets (``--effort fast|default|best``): which passes, cycles and checks each
level runs, and how an explicit keyword overrides its preset.  The figures each level gives are
in ``docs/partitioning.md`` ("Effort levels and threads")."""
from __future__ import annotations

from typing import Dict

from .clustering import LP_STOP_MOVED
from .refine import PROBE_GAIN

__all__ = ["EFFORTS", "DEFAULT_SMALL_GRAPH_ENTRIES", "FAST_CLUSTER_STOP_MOVED", "FAST_REFINE_PROBE_GAIN", "FM_MIN_LP_GAIN", "FM_MIN_MEAN_DEGREE", "effort_options"]


# default: no streamed FM round when the LP pass right before it (the one that ends the LP-only
# phase of step 4) removed less than this share of the cut (``stream_refine``'s
# ``fm_min_lp_gain``; fast runs no FM, best always runs it): on the 20M-edge geometric graph the
# FM pass found 4 of 54k cut edges after an LP pass that found 76, and made default's
# refinement ~15 s against fast's 4-6 s (issue 43, round 4)
FM_MIN_LP_GAIN = 0.01


# fast: the streamed LP clustering stops once a pass moves fewer than this share of the vertices
# (checked after its first eighth too; the other levels stop at clustering.LP_STOP_MOVED, 1 %):
# on the 20M-edge road-like graph the second pass moved 2.9 % (5.42M -> 5.01M clusters) for 1.0 s
# of fast's 10.6 s, and one pass cut no more (issue 43, round 8)
FAST_CLUSTER_STOP_MOVED = 0.05


# fast: a streamed refinement pass is cut short after its first eighth when it is on pace to
# remove less than this share of the cut (the other levels: refine.PROBE_GAIN, 0.05 %): on the
# 20M R-MAT graph the second pass removed 0.12 % of the cut for 0.15-0.2 s of fast's ~1.6 s
FAST_REFINE_PROBE_GAIN = 0.005


# the effort presets (``--effort``): what each level runs; an explicit keyword overrides it
EFFORTS: Dict[str, Dict] = {
    # the paper's regime: streaming clustering, one coarse partition, streamed LP refinement
    "fast": dict(cluster_passes=2, refine_passes=2, vcycles=0, repeats=1, stream_cycles=0,
                 fm_rounds=0, whole_graph=False, tree_refine=False, cluster_entries=1 << 21,
                 fm_min_lp_gain=0.0, cluster_stop_moved=FAST_CLUSTER_STOP_MOVED,
                 refine_probe_gain=FAST_REFINE_PROBE_GAIN),
    # one cycle, refined with FM: the quality of "best" on most graphs for a fraction of its time
    "default": dict(cluster_passes=3, refine_passes=2, vcycles=1, repeats=1, stream_cycles=0,
                    fm_rounds=1, whole_graph=True, tree_refine=True, cluster_entries=1 << 22,
                    fm_min_lp_gain=FM_MIN_LP_GAIN, cluster_stop_moved=LP_STOP_MOVED,
                    refine_probe_gain=PROBE_GAIN),
    # every cycle and pass GREM has (the default up to issue 43)
    "best": dict(cluster_passes=4, refine_passes=6, vcycles=2, repeats=3, stream_cycles=2,
                 fm_rounds=2, whole_graph=True, tree_refine=True, cluster_entries=0,
                 fm_min_lp_gain=0.0, cluster_stop_moved=LP_STOP_MOVED,
                 refine_probe_gain=PROBE_GAIN),
}


# the presets' streamed FM runs on graphs of at least this mean degree (stream entries per
# vertex): on road-like meshes (2.6) the two FM passes after converged LP took 30 of 116 s on
# the 20M-edge graph for 8 of 7,435 cut edges (4M edges: 0.2 % for ~5 s); an explicit
# ``fm_rounds`` is kept
FM_MIN_MEAN_DEGREE = 4.0


# default: a graph of at most this many stream entries gets best's 3 runs of the in-memory
# partitioner (alternating k-way and bisection coarsening) instead of 1: on the seven real graphs
# of 0.1-1M entries (k = 8, 16, 32) default's cut went 1.008x -> 0.964x METIS's (best: 0.935x) for
# about twice its time there (soc-slashdot, three k: 4.4 -> 7.8 s); the 20M-edge graphs (40M
# entries), where one run of a large cluster graph costs 0.1-0.3 s, keep one
DEFAULT_SMALL_GRAPH_ENTRIES = 1 << 22
DEFAULT_SMALL_GRAPH_REPEATS = 3


def effort_options(effort: str, stream, **given) -> Dict:
    """The options of ``effort``'s preset, each replaced by its keyword in ``given`` unless that
    is None; the preset's FM is off on a graph of mean degree below :data:`FM_MIN_MEAN_DEGREE`
    (an explicit ``fm_rounds`` is kept), and ``default`` repeats its in-memory partitioning on a
    small graph (:data:`DEFAULT_SMALL_GRAPH_ENTRIES`).  Raises ValueError for an unknown level."""
    if effort not in EFFORTS:
        raise ValueError(f"unknown effort {effort!r}; expected one of {tuple(EFFORTS)}")
    out = dict(EFFORTS[effort])
    if given.get("fm_rounds") is None and \
            stream.stream_entries < FM_MIN_MEAN_DEGREE * max(int(stream.num_nodes), 1):
        out["fm_rounds"] = 0  # sparse meshes: LP leaves FM ~nothing (see FM_MIN_MEAN_DEGREE)
    if effort == "default" and stream.stream_entries <= DEFAULT_SMALL_GRAPH_ENTRIES:
        out["repeats"] = DEFAULT_SMALL_GRAPH_REPEATS  # small graphs: see DEFAULT_SMALL_GRAPH_ENTRIES
    out.update({key: v for key, v in given.items() if v is not None})
    return out
