"""The soak's heap table (``bench/faults_soak.py probe_rows``): reads the memory probe's lines over the RSS window.

No processes: synthetic probe lines.  The table is what tells a heap setting's two sides apart (the heap's extent
spreading vs its CPU and page-fault cost per epoch), so its arithmetic is pinned here.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import faults_soak as soak  # noqa: E402

MB = 2**20


def _probe(path: Path, t0: float, extent_mb_per_min: float, mallopt: dict) -> None:
    lines = []
    for i in range(6 * 14):                       # 14 min, a line every 10 s
        t = t0 + 10.0 * i
        ext = 1_200 + extent_mb_per_min * (t - t0) / 60.0
        lines.append({"t": t, "uordblks": int(720 * MB), "arena": int((ext + 250) * MB), "keepcost": int(250 * MB),
                      "cpu_s": 0.6 * (t - t0), "minflt": 1_000 * (t - t0), "mallopt": mallopt})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_probe_rows_read_extent_slope_and_cost_per_epoch(tmp_path):
    t0 = 1_000.0
    _probe(tmp_path / "trainer-1.jsonl", t0, 2.0, {})                          # spreads 20 MB per 10 min
    _probe(tmp_path / "trainer-2.jsonl", t0, 0.0, {"mmap_threshold": 1 << 20})   # flat
    epoch_ends = [t0 + 0.2 * k for k in range(5 * 14 * 60)]                    # 5 epochs a second
    rows = soak.probe_rows(tmp_path, t0, t0 + 13 * 60, epoch_ends)
    assert len(rows) == 4                                                    # header, rule, one row per file
    grow, flat = (r.split("|")[1:-1] for r in rows[2:])
    assert grow[1].strip() == "as shipped" and "mmap_threshold" in flat[1]
    assert grow[2].strip().startswith("720 / 720, +0.0")                      # in use flat
    assert float(grow[3].split(",")[-1]) == pytest.approx(20.0, abs=0.5)       # extent MB per 10 min
    assert float(flat[3].split(",")[-1]) == pytest.approx(0.0, abs=0.1)
    assert float(grow[4]) == pytest.approx(120.0, rel=0.01)                  # 0.6 CPU s/s at 5 epochs/s
    assert float(grow[5]) == pytest.approx(200.0, rel=0.01)                  # 1,000 faults/s at 5 epochs/s


def test_probe_rows_skip_a_process_that_lived_inside_warm_up(tmp_path):
    _probe(tmp_path / "loader-1.jsonl", 1_000.0, 1.0, {})
    rows = soak.probe_rows(tmp_path, 1_000.0 - 0.0, 1_000.0 + soak.WARMUP_S + 15, [])
    assert rows[2:] == []
