"""GREM's effort levels (``effort=``), worker threads (``threads=``) and phase breakdown."""

import json
import subprocess
import sys

import numpy as np
import pytest

from argosy.services.partitioner.core import partition_stream, phase_seconds
from argosy.services.partitioner.file_streams import open_edge_stream
from argosy.services.partitioner.grem import EFFORTS
from argosy.services.partitioner.sampled_cut import FENNEL_MIN_DEGREE_SKEW
from argosy.services.partitioner.placement import capacity
from argosy.services.partitioner.threads import map_chunks, using_threads, get_threads


@pytest.fixture(scope="module")
def planted16(tmp_path_factory):
    """A 16-block planted partition, 40k vertices, streamed in several chunks (an edge list, so
    it is regrouped on disk as the big graphs are)."""
    from argosy.shared.synthetic import planted_blocks, write_planted_edge_list

    p = tmp_path_factory.mktemp("eff") / "pp.npy"
    write_planted_edge_list(p, 40000, 400000, blocks=16, mixing=0.2, seed=4)
    return p, planted_blocks(40000, 16, seed=4)


def _agreement(truth, part, k):
    table = np.zeros((k, truth.max() + 1), np.int64)
    np.add.at(table, (part, truth), 1)
    return table.max(1).sum() / truth.size


@pytest.mark.parametrize("effort", list(EFFORTS))
def test_every_effort_balanced_and_recovers_planted_blocks(planted16, effort):
    path, truth = planted16
    n, k = truth.size, 16
    r = partition_stream(open_edge_stream(path, chunk_edges=40000), k, effort=effort,
                         whole_graph=False)
    assert r.part_sizes.max() <= capacity(n, k, 0.03)
    assert r.details["effort"] == effort
    assert _agreement(truth, r.assignment, k) >= 0.9
    if EFFORTS[effort]["stream_cycles"] == 0:
        assert len(r.details["cycles"]) == 1   # no streamed V-cycle below "best"


def test_effort_and_threads_checked():
    from argosy.services.partitioner.stream import ArrayEdgeStream

    st = ArrayEdgeStream(np.arange(9), np.arange(1, 10))
    with pytest.raises(ValueError, match="effort"):
        partition_stream(st, 2, effort="slow")
    with pytest.raises(ValueError, match="threads"):
        partition_stream(st, 2, threads=0)


def test_threads_keep_the_capacity_and_one_thread_reproduces(planted16):
    path, truth = planted16
    n, k = truth.size, 16
    runs = [partition_stream(open_edge_stream(path, chunk_edges=20000), k, seed=3, threads=t)
            for t in (1, 1, 2)]
    assert np.array_equal(runs[0].assignment, runs[1].assignment)
    for r in runs:
        assert r.part_sizes.max() <= capacity(n, k, 0.03)
        assert _agreement(truth, r.assignment, k) >= 0.9
    # several threads: the same quality, not necessarily the same assignment
    assert runs[2].edge_cut <= 1.05 * runs[0].edge_cut


def test_map_chunks_keeps_order_and_thread_setting_is_scoped():
    before = get_threads()
    with using_threads(3):
        assert get_threads() == 3
        assert list(map_chunks(lambda i: i * i, range(10))) == [i * i for i in range(10)]
    assert get_threads() == before


def test_phase_breakdown_sums_to_the_call(planted16):
    path, _ = planted16
    r = partition_stream(open_edge_stream(path, chunk_edges=40000), 16)
    ph = phase_seconds(r.details, r.seconds)
    assert set(ph) >= {"regroup", "lp_clustering", "cluster_graph", "coarse_partition",
                       "refinement", "other", "evaluate"}
    assert all(v >= 0 for v in ph.values())
    inside = sum(v for key, v in ph.items() if key != "evaluate")
    assert inside == pytest.approx(r.seconds, rel=0.02, abs=0.01)


def test_cli_effort_threads_and_phases(planted16, tmp_path):
    path, _ = planted16
    out = subprocess.run([sys.executable, "-m", "argosy.services.partitioner", str(path), "--parts", "4",
                          "--out", str(tmp_path / "s"), "--json", "--effort", "fast", "--threads", "2"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    assert rec["effort"] == "fast" and rec["phases"]["lp_clustering"] > 0
    bad = subprocess.run([sys.executable, "-m", "argosy.services.partitioner", str(path), "--parts", "4",
                          "--out", str(tmp_path / "t"), "--threads", "0"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--threads must be >= 1" in bad.stderr
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("effort", ["fast", "default"])
def test_clusters_without_edges_and_a_good_fennel_start_skip_the_cluster_graph(
        tmp_path, planted16, monkeypatch, effort):
    """R-MAT: the stream clusters leave >= 90 % of the entries between them while Fennel cuts
    well below a random partition, so the Fennel start is refined at once (no cluster graph);
    the cut is the one the full path reaches (it dropped the multilevel start for Fennel's)."""
    import argosy.services.partitioner.grem as grem
    from argosy.shared.synthetic import write_rmat_edge_list

    path = tmp_path / "rmat.npy"
    write_rmat_edge_list(path, 14, 200_000, seed=0)
    k = 8

    def run():  # one in-memory run, as on a large graph (default repeats them on small ones)
        with using_threads(1):
            return partition_stream(open_edge_stream(path, chunk_edges=1 << 14), k, effort=effort,
                                    whole_graph=False, repeats=1)

    early = run()
    c = early.details["cycles"][0]
    assert c["early_greedy"] and c["cluster_graph_entries"] == 0
    # heavy-tailed degrees: Fennel placed in the first clustering pass, the start decided right
    # after it, no second LP pass
    assert early.details["degree_skew"] >= grem.FENNEL_FIRST_MIN_DEGREE_SKEW
    assert c["fennel_first"] and "fennel_alone" not in c and c["cluster_passes"] == 1
    # below that moment: Fennel places in a pass of its own after LP's first, the same decision
    monkeypatch.setattr(grem, "FENNEL_FIRST_MIN_DEGREE_SKEW", float("inf"))
    alone = run()
    ca = alone.details["cycles"][0]
    assert ca["early_greedy"] and ca["fennel_alone"] and ca["cluster_passes"] == 1
    assert "fennel_first" not in ca
    assert alone.edge_cut <= 1.05 * early.edge_cut and early.edge_cut <= 1.05 * alone.edge_cut
    assert c["cluster_share"] >= grem.GREEDY_EARLY_CLUSTER_SHARE
    assert early.details["start"] == "greedy-refined"
    assert early.details["degree_skew"] >= FENNEL_MIN_DEGREE_SKEW  # power law: Fennel runs
    assert early.part_sizes.max() <= capacity(early.assignment.size, k, 0.03)
    monkeypatch.setattr(grem, "GREEDY_EARLY", -1.0)  # the full path, for comparison
    full = run()
    assert "early_greedy" not in full.details["cycles"][0]
    assert full.details["cycles"][0]["cluster_passes"] >= 2  # not taken: LP goes on
    assert full.details["start"] == "greedy-refined"
    assert early.edge_cut <= 1.01 * full.edge_cut
    # clusters that hold the structure (planted blocks): the cluster graph is built as before
    p16, _ = planted16
    r = partition_stream(open_edge_stream(p16, chunk_edges=40000), 16, effort=effort,
                         whole_graph=False)
    assert "early_greedy" not in r.details["cycles"][0]


@pytest.mark.parametrize("effort", ["fast", "default"])
def test_flat_degrees_skip_the_fennel_start_and_lose_nothing(tmp_path, monkeypatch, effort):
    """A random geometric graph (every degree near the mean): the sampled degree moment is
    ~1, the one-pass Fennel start is not computed (it never wins there), and the partition is
    the one GREM gives with Fennel forced on (the multilevel start wins either way)."""
    import argosy.services.partitioner.sampled_cut as sc
    from argosy.shared.synthetic import write_geometric_edge_list

    path = tmp_path / "geo.npy"
    write_geometric_edge_list(path, 40_000, 12.0, 0)

    def run():
        with using_threads(1):
            return partition_stream(open_edge_stream(path, chunk_edges=1 << 14), 8,
                                    effort=effort, whole_graph=False)

    skip = run()
    assert 0.9 <= skip.details["degree_skew"] < FENNEL_MIN_DEGREE_SKEW
    assert "greedy_cut" not in skip.details and skip.details["start"] == "multilevel"
    assert "greedy_share" not in skip.details["cycles"][0]
    monkeypatch.setattr(sc, "FENNEL_MIN_DEGREE_SKEW", 0.0)
    import argosy.services.partitioner.clustering as cl
    import argosy.services.partitioner.grem as grem
    monkeypatch.setattr(grem, "FENNEL_MIN_DEGREE_SKEW", 0.0)
    monkeypatch.setattr(cl, "FENNEL_MIN_PASS1_SHARE", 0.0)  # its other gate (geometric: ~0.4)
    forced = run()
    assert "greedy_cut" in forced.details and forced.details["start"] == "multilevel"
    assert np.array_equal(skip.assignment, forced.assignment)


def test_fennel_waits_for_the_first_pass_and_is_dropped_where_clusters_hold_structure(
        tmp_path, monkeypatch):
    """A DC-SBM (power-law degrees, so the degree test keeps Fennel): after the first clustering
    pass its clusters leave ~0.5 of the entries between them, so the second pass runs without
    Fennel; the partition is the one GREM gives with Fennel run (the multilevel start wins)."""
    import argosy.services.partitioner.clustering as cl
    from argosy.shared.synthetic import write_dcsbm_edge_list

    path = tmp_path / "dcsbm.npy"
    write_dcsbm_edge_list(path, 100_000, 1_000_000, 1024, 0.1, 1.5, 0)

    def run():
        with using_threads(1):
            return partition_stream(open_edge_stream(path, chunk_edges=1 << 15), 8,
                                    effort="fast")

    skip = run()
    c = skip.details["cycles"][0]
    assert skip.details["degree_skew"] >= FENNEL_MIN_DEGREE_SKEW
    assert c["pass1_cluster_share"] < cl.FENNEL_MIN_PASS1_SHARE
    assert "greedy_cut" not in skip.details and skip.details["start"] == "multilevel"
    monkeypatch.setattr(cl, "FENNEL_MIN_PASS1_SHARE", 0.0)
    forced = run()
    assert "greedy_cut" in forced.details and forced.details["start"] == "multilevel"
    assert np.array_equal(skip.assignment, forced.assignment)


def test_default_skips_the_fm_round_only_after_an_lp_pass_under_the_threshold(tmp_path):
    """``default`` skips step 4's streamed FM when the LP pass right before it removed less
    than ``FM_MIN_LP_GAIN`` of the cut (``lp_gain_before_fm``); ``best`` and an explicit
    ``fm_min_lp_gain=0`` always run it.  One thread: every run takes the same path up to that
    pass, so the decision follows the threshold exactly."""
    import argosy.services.partitioner.grem as grem
    from argosy.shared.synthetic import write_geometric_edge_list

    path = tmp_path / "geo.npy"
    write_geometric_edge_list(path, 20000, 20.0, seed=5)  # seed 4's LP converged fully (0 %)
    k = 8

    def run(effort="default", **kw):
        r = partition_stream(open_edge_stream(path, chunk_edges=1 << 14), k, effort=effort,
                             whole_graph=False, threads=1, **kw)
        assert r.part_sizes.max() <= capacity(r.assignment.size, k, 0.03)
        return r, r.details["cycles"][0]

    keep, ck = run(fm_min_lp_gain=0.0)
    share = ck["lp_gain_before_fm"]
    assert ck["fm"] == "ran" and 0 < share < 0.02   # LP converged (< 2 %), with some gain
    rule, cr = run()
    assert cr["lp_gain_before_fm"] == share
    assert share < grem.FM_MIN_LP_GAIN and cr["fm"] == "skipped"  # this graph: 0.65 %
    above, ca = run(fm_min_lp_gain=share * 1.01)
    below, cb = run(fm_min_lp_gain=share * 0.99)
    assert ca["fm"] == "skipped" and cb["fm"] == "ran"
    assert np.array_equal(below.assignment, keep.assignment)  # the rule did not fire: as before
    assert ca["refine_passes"] < ck["refine_passes"]            # the FM passes did not run
    assert above.edge_cut >= keep.edge_cut                      # FM only removes cut
    _, cbest = run("best")
    assert cbest["fm"] != "skipped"
    _, cfast = run("fast")
    assert cfast["fm"] == "off"


def test_fast_stops_a_clustering_pass_that_moves_little_after_its_first_eighth(tmp_path):
    """A road-like graph: the first LP pass leaves ~3-vertex clusters and a second moves few
    vertices; under ``fast`` it stops after the first eighth of the stream (recorded), where
    ``default``'s second pass runs to its end; the cut is within 10 % of fast's with that pass
    run whole (one thread: the same run every time)."""
    from argosy.services.partitioner.clustering import LP_STOP_MOVED
    from argosy.services.partitioner.effort import FAST_CLUSTER_STOP_MOVED
    from argosy.shared.synthetic import road_edge_chunks

    src, dst = (np.concatenate(a) for a in zip(*road_edge_chunks(200_000, seed=1)))
    path = tmp_path / "road.npy"
    np.save(path, np.stack([src, dst], 1).astype(np.int32))

    def run(effort, **kw):
        return partition_stream(open_edge_stream(path, chunk_edges=1 << 14), 8, effort=effort,
                                whole_graph=False, threads=1, **kw)

    fast = run("fast")
    c = fast.details["cycles"][0]
    assert c["cluster_pass_stopped"] == 2 and c["cluster_passes"] == 2
    assert fast.part_sizes.max() <= capacity(fast.assignment.size, 8, 0.03)
    whole = run("fast", cluster_stop_moved=LP_STOP_MOVED)
    assert "cluster_pass_stopped" not in whole.details["cycles"][0]
    assert fast.edge_cut <= 1.10 * whole.edge_cut
    assert LP_STOP_MOVED < FAST_CLUSTER_STOP_MOVED < 0.5
    # default (1 %) runs its second pass to the end; its third may stop the same way
    assert run("default").details["cycles"][0].get("cluster_pass_stopped", 3) >= 3


def test_threaded_lp_refinement_keeps_every_block_under_its_capacity(planted16):
    """k-way LP refinement on two threads (chunks at once, sizes by atomic adds) from a
    scrambled start with every block at its capacity: no block passes it, the sizes it keeps
    are the true counts, and the cut falls."""
    from argosy.services.partitioner.core import evaluate_partition
    from argosy.services.partitioner.nbutil import rng_state
    from argosy.services.partitioner.refine import stream_refine

    path, truth = planted16
    n, k = truth.size, 16
    st = open_edge_stream(path, chunk_edges=8000)
    from argosy.services.partitioner.regroup import GroupedEdgeStream

    with GroupedEdgeStream(st, str(path.parent / "rg"), 8000) as g:
        part = truth.astype(np.int32).copy()
        rng = np.random.default_rng(0)
        flip = rng.random(n) < 0.3
        part[flip] = rng.integers(0, k, int(flip.sum()))
        size = np.bincount(part, minlength=k).astype(np.int64)
        cap = int(size.max()) + 2  # the fullest blocks take 2 more vertices
        before = evaluate_partition(g, part, k)["edge_cut"]
        with using_threads(2):
            rp, gain = stream_refine(g, part, size, k, cap, "file", rng_state(1), 3,
                                     2 * before, 0)
        assert np.array_equal(size, np.bincount(part, minlength=k))
        assert size.max() <= cap
        after = evaluate_partition(g, part, k)["edge_cut"]
        assert after < 0.8 * before and gain > 0


def test_default_repeats_its_in_memory_runs_on_small_graphs_only():
    """default takes best's 3 in-memory runs on a graph of at most DEFAULT_SMALL_GRAPH_ENTRIES
    stream entries (where they cost little), 1 above it; an explicit ``repeats`` wins."""
    from types import SimpleNamespace

    from argosy.services.partitioner.effort import DEFAULT_SMALL_GRAPH_ENTRIES, effort_options

    small = SimpleNamespace(stream_entries=DEFAULT_SMALL_GRAPH_ENTRIES, num_nodes=1000)
    large = SimpleNamespace(stream_entries=DEFAULT_SMALL_GRAPH_ENTRIES + 1, num_nodes=1000)
    assert effort_options("default", small)["repeats"] == 3
    assert effort_options("default", large)["repeats"] == 1
    assert effort_options("default", small, repeats=1)["repeats"] == 1
    assert effort_options("fast", small)["repeats"] == 1
