"""Watching a run: status shows validation accuracy, a stopped job's report keeps the best
accuracy so far, throughput.png is smoothed with a stated origin and one line per tier plus the
trainer, TensorBoard event files when the package is there, status/down act on your own jobs."""
from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest

from argosy.shared.records import EpochRecord, best_so_far
from argosy.shared.report import EpochLog, _throughput_figure, smoothed_rates, write_report

EPOCHS = [{"epoch": 0, "train_loss": 1.0, "train_accuracy": 0.3, "val_accuracy": 0.4, "val_loss": 1.2,
           "test_accuracy": 0.41},
          {"epoch": 1, "train_loss": 0.8, "train_accuracy": 0.5, "val_accuracy": 0.6, "val_loss": 1.0,
           "test_accuracy": 0.58},
          {"epoch": 2, "train_loss": 0.7, "train_accuracy": 0.6, "val_accuracy": 0.55, "val_loss": 1.1,
           "test_accuracy": None}]


def test_best_so_far_is_the_last_evaluated_epoch():
    assert best_so_far([EpochRecord.from_dict(e) for e in EPOCHS]) == {
        "best_epoch": 1, "val_accuracy": 0.6, "test_accuracy": 0.58, "val_loss": 1.0}
    assert best_so_far(EPOCHS[2:]) == {}


def test_smoothed_rates_show_the_sustained_rate_of_bursty_counts():
    t = np.arange(0, 60, 0.5)
    counts = np.floor(t / 2) * 20.0                   # 20 batches every 2 s: 10 batches/s, in bursts
    raw = np.diff(counts) / 0.5
    assert raw.min() == 0 and raw.max() == 40          # what the old plot drew: swings 0..40
    sm = smoothed_rates(t, counts, window=6.0)
    assert np.all(np.abs(sm[20:] - 10.0) <= 10.0 / 3 + 1e-9)


def test_throughput_figure_has_one_line_per_tier_plus_trainer_and_a_stated_origin():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    t0 = 1_700_000_000.0
    tl = [{"t": t0 + 1 + i, "sampler_batches": 5.0 * max(0, i - 10), "loader_batches": 5.0 * max(0, i - 11),
           "trainer_batches": 5.0 * max(0, i - 12)} for i in range(60)]
    fig = _throughput_figure(plt, tl, origin=t0)
    ax = fig.axes[0]
    assert [ln.get_label() for ln in ax.get_lines()] == ["sampler tier", "loader tier", "trainer"]
    assert ax.get_xlabel().startswith("seconds since the services were started (")
    assert "trailing" in ax.get_ylabel()
    assert any("start-up" in str(p.get_label()) for p in ax.patches)
    plt.close(fig)


def test_throughput_figure_of_a_job_that_never_trained_says_so_without_a_warning():
    """A job that failed before its first batch (a model the trainer cannot import) has no series:
    the figure says "no batches" instead of matplotlib's "No artists with labels found" warning."""
    import warnings

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tl = [{"t": 1_700_000_000.0 + i, "sampler_batches": 0.0, "trainer_batches": 0.0} for i in range(5)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = _throughput_figure(plt, tl, origin=None)
    ax = fig.axes[0]
    assert ax.get_legend() is None and [t.get_text() for t in ax.texts] == ["no batches"]
    plt.close(fig)


def test_report_of_a_stopped_job_keeps_the_best_accuracy(tmp_path):
    from argosy.services.job_records import keep_best as _keep_best
    (tmp_path / "best.pt").write_bytes(b"")
    res = _keep_best({"error": "interrupted"}, [EpochRecord.from_dict(e) for e in EPOCHS], tmp_path)
    assert res["test_accuracy"] == 0.58 and res["val_accuracy"] == 0.6 and res["best_epoch"] == 1
    assert res["error"] == "interrupted" and res["best_checkpoint"] == str(tmp_path / "best.pt")
    tl = [{"t": time.time() + i, "sampler_batches": float(i), "trainer_batches": float(i)} for i in range(5)]
    write_report(tmp_path, res, [EpochRecord.from_dict(e) for e in EPOCHS], tl, {"job": "j", "services_started": tl[0]["t"] - 1})
    assert json.loads((tmp_path / "report.json").read_text())["result"]["test_accuracy"] == 0.58
    assert "| test_accuracy | 0.58 |" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "throughput.png").stat().st_size > 0


def test_status_shows_validation_accuracy(redis_url):
    from argosy.shared.coord import Coordinator
    from argosy.shared.status_view import render_status, status_dict
    coord = Coordinator(redis_url, "status-val")
    coord.delete_job()
    coord.set_state("running")
    for e in EPOCHS:
        coord.append_epoch(e)
    text = render_status(coord, time.time())
    assert "accuracy: val 0.550 last epoch; best val 0.600 at epoch 1 (test 0.580, the weights in best.pt)" in text
    assert status_dict(coord)["best"]["best_epoch"] == 1
    coord.delete_job()
    coord.close()


def test_tensorboard_event_files_or_a_stated_reason(tmp_path):
    log = EpochLog(tmp_path)
    for e in EPOCHS:
        log.add(e)
    log.close()
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        assert log.path is None and "tensorboard package is not installed" in log.why
        return
    files = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert files and files[0].stat().st_size > 0
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert [s.value for s in acc.Scalars("accuracy/val_accuracy")] == pytest.approx([0.4, 0.6, 0.55])
    assert [s.step for s in acc.Scalars("accuracy/test_accuracy")] == [0, 1]


def test_status_and_down_default_to_your_own_jobs(tmp_path, monkeypatch):
    from argosy.services.stack import StackFile, StackInfo, find_stack, list_stacks
    from argosy.shared import envs
    from argosy.shared.errors import ArgosyError
    monkeypatch.setenv(envs.HOME, str(tmp_path))
    StackFile("mine").write(StackInfo(job="mine", redis="redis://x", run_dir="/r", launcher_pid=os.getpid()))
    other = StackFile("theirs")
    other.write(StackInfo(job="theirs", redis="redis://y", run_dir="/s", launcher_pid=os.getpid()))
    if os.getuid() != 0:
        pytest.skip("giving a file to another user needs root")
    os.chown(other.path, 4242, 4242)
    assert [s.job for s in list_stacks()] == ["mine"]
    assert sorted(s.job for s in list_stacks(all_users=True)) == ["mine", "theirs"]
    assert find_stack(None).job == "mine"
    assert find_stack("theirs").job == "theirs"                # by name: still reachable
    StackFile("mine").remove()
    with pytest.raises(ArgosyError, match=r"no running stack of yours .* \(1 job\(s\) of other users run here; "
                                          r"name one with --job\)"):
        find_stack(None)


@pytest.mark.parametrize("no_weights, want", [(False, True), (True, "off (--no-edge-weights)")])
def test_status_says_whether_edge_weights_are_used(redis_url, tmp_path, no_weights, want):
    """From the job's spec in Redis and its store's manifest; a job without a spec says null."""
    from argosy.shared.config import JobConfig, TrainerConfig
    from argosy.shared.coord import Coordinator
    from argosy.shared.graphio import csr_from_edges
    from argosy.shared.status_view import render_status, status_dict
    from argosy.shared.store import write_store
    rng = np.random.default_rng(0)
    g = csr_from_edges(rng.integers(0, 50, 200), rng.integers(0, 50, 200), 50, weights=rng.random(200))
    write_store(g, rng.integers(0, 2, 50), tmp_path / "s", num_parts=2)
    coord = Coordinator(redis_url, "status-ew")
    coord.delete_job()
    coord.set_state("running")
    assert status_dict(coord)["edge_weights"] is None
    coord.put_spec(JobConfig(store=str(tmp_path / "s"), trainer=TrainerConfig(edge_weights=not no_weights)))
    assert status_dict(coord)["edge_weights"] == want
    assert f"edge weights: {json.dumps(want)}" in render_status(coord, time.time())
    coord.delete_job()
    coord.close()


def test_report_of_a_link_job_shows_the_metric_that_picks_its_best_epoch(tmp_path):
    """A knowledge graph's epochs have no accuracy: report.md's epoch table (and the plot) show its
    validation and test MRR, the result's selection_metric, not a column of zeros."""
    kg = [{**e, "train_accuracy": 0.0, "val_accuracy": 0.0, "test_accuracy": 0.0 if e["test_accuracy"] else None,
           "val_mrr": 0.1 * (i + 4), "test_mrr": None if e["test_accuracy"] is None else 0.1 * (i + 3)}
          for i, e in enumerate(EPOCHS)]
    write_report(tmp_path, {"task": "link", "selection_metric": "mrr"}, [EpochRecord.from_dict(e) for e in kg], [],
                 {"job": "j"})
    md = (tmp_path / "report.md").read_text()
    assert "are the mrr" in md and "| 1 | 0.8000 | - | 0.500 | 0.400 |" in md and "| 2 | 0.7000 | - | 0.600 | - |" in md
    assert (tmp_path / "training.png").stat().st_size > 0
