"""The cluster-scale fault matrix, short: a few scenarios of ``bench/faults.py``, one run each, for real.

Real launcher, real Redis in its namespace, real simulated hosts (network namespaces), real
SIGKILL / link down / tmpfs.  Each run must end like the uninterrupted run: exit 0, every seed
trained exactly once, the same test accuracy (batches are applied in plan order), no process of
the job and no namespace left.  ``python bench/chaos.py --hosts 2`` runs the whole matrix 5 times.
Skipped, with the reason, only where network namespaces cannot be made (not root, no iproute2).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from argosy.services.netsim import available

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import faults  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]
WHY = available()
needs_netns = pytest.mark.skipif(WHY is not None, reason=f"simulated hosts unavailable: {WHY}")


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    work = tmp_path_factory.mktemp("fault-matrix")
    store = work / "store"
    faults.partition(store)
    return work, store, faults.baseline(store, work, faults.EPOCHS)


def _check(row: dict) -> None:
    detail = {k: v for k, v in row.items() if k != "stderr_tail"}
    assert row["injected"], detail
    assert row["rc"] == 0, (detail, row.get("stderr_tail"))
    assert row["seeds_trained"] == row["seeds_planned"] == faults.EPOCHS * 140, detail
    assert row["duplicates"] == 0 and row["seeds_dropped"] == 0, detail
    assert row["accuracy_gap"] == 0.0, detail                 # same batches in the same order as undisturbed
    assert row["orphans"] == 0 and row["namespaces_left"] == 0, detail
    assert row["survived"], detail


@needs_netns
@pytest.mark.timeout(400)
@pytest.mark.parametrize("scenario", ["host-kill", "redis-link", "disk-full"])
def test_fault_survived(matrix, scenario):
    work, store, base = matrix
    row = faults.run_scenario(scenario, store, work, 0, base, hosts=2, at_epoch=3)
    _check(row)
    assert row["detect_s"] is not None and row["detect_s"] < 15, row     # the registry lost h1 (5 s heartbeat TTL)
    if scenario == "host-kill":
        assert row["restarts"] >= 2 and row["seeds_redelivered"] > 0     # h1's sampler and loader replaced on h1


@needs_netns
@pytest.mark.timeout(300)
def test_partitioner_killed_mid_stream_then_rerun(tmp_path):
    row = faults.run_partitioner_kill(tmp_path, 0)
    assert row["survived"], row


def test_soak_peak_slope_reads_growth_not_the_trim_sawtooth():
    """The soak's peak slope (``bench/faults_soak.py``): flat for a 60 s heap-trim sawtooth on a flat heap, whose
    plain least-squares slope depends on where the window cuts the teeth; the full slope for the same sawtooth on
    a heap growing 1 MB a minute (growth is never hidden)."""
    import faults_soak as soak

    def series(grow_mb_per_min: float, phase_s: float) -> list[dict]:
        out = []
        for i in range(6 * 24):                          # 24 min, a sample every 10 s
            t = 10.0 * i
            tooth = ((t + phase_s) % 60.0) / 60.0        # trimmed every 60 s, refilled linearly until the next trim
            mb = 1_100 + 200 * tooth + grow_mb_per_min * t / 60.0
            out.append({"t": t, "rss": mb * 2**20, "anon": (mb - 175) * 2**20})
        return out

    for phase in (0.0, 20.0, 40.0):
        flat = series(0.0, phase)
        assert abs(soak._peak_slope(flat, "rss")) < 0.05
        assert abs(soak._peak_slope(flat, "anon", per_mb=True)) < 0.5
        grown = series(1.0, phase)                       # 10 MB per 10 min
        assert soak._peak_slope(grown, "anon", per_mb=True) == pytest.approx(10.0, abs=0.5)
        assert soak._peak_slope(grown, "rss") > 0.7      # 10 MB of a ~1.3 GB process: ~0.75 %/10 min
    assert soak._peak_slope(series(0.0, 0.0)[:30], "rss") is None      # under 3 whole blocks: no slope
