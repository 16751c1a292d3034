"""Run reports: ``report.json``, ``report.md`` and PNG plots written into the run directory."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from argosy.shared.records import EpochRecord

__all__ = ["write_report", "TIME_PARTS", "smoothed_rates", "EpochLog", "THROUGHPUT_SERIES"]

logger = logging.getLogger("argosy")

TIME_PARTS = (("idle_seconds", "waiting for input"), ("compute_seconds", "compute"),
              ("ingest_seconds", "ingest (decode+validate)"), ("copy_seconds", "host-to-device copy"))
"""The trainer's time per epoch, as epoch records carry it (compute thread: the first two)."""


THROUGHPUT_SERIES = (("sampler_batches", "sampler tier"), ("loader_batches", "loader tier"),
                     ("trainer_batches", "trainer"))
"""Counters of the driver's timeline plotted as rates in ``throughput.png``: one line per tier."""


def smoothed_rates(t: np.ndarray, counts: np.ndarray, window: float) -> np.ndarray:
    """Rate of a cumulative counter over the trailing ``window`` seconds at every sample.

    Shapes: t float[n] (ascending), counts float[n] -> float[n] (0 at the first sample).
    The driver polls every ~0.5 s, so rates between neighbouring samples swing between 0 and the
    peak as batches arrive in bursts; a trailing window of a few seconds shows the sustained rate.
    """
    j = np.searchsorted(t, t - window, side="left")
    j = np.minimum(j, np.arange(t.shape[0]) - 1).clip(0)
    dt = t - t[j]
    return np.where(dt > 0, (counts - counts[j]) / np.maximum(dt, 1e-9), 0.0)


def _throughput_figure(plt, timeline: list[dict], origin: float | None):
    """Batches/s of each tier and of the trainers over time, smoothed; the x axis is seconds since
    ``origin`` (the services' start), which the axis label states as a wall-clock time."""
    import time as _time
    t = np.array([s["t"] for s in timeline], float)
    t0 = origin if origin is not None else float(t[0])
    span = float(t[-1] - t0)
    window = max(5.0, min(15.0, span / 30))
    fig, ax = plt.subplots(figsize=(9, 4))
    first = None
    for key, label in THROUGHPUT_SERIES:
        c = np.array([s.get(key, 0.0) for s in timeline], float)
        if not c.any():
            continue
        ax.plot(t - t0, smoothed_rates(t, c, window), label=f"{label}")
        nz = np.flatnonzero(c > 0)
        first = t[nz[0]] - t0 if first is None else min(first, t[nz[0]] - t0)
    if first and first > 0:
        ax.axvspan(0, first, color="0.9", label="start-up (imports, kernel compilation, first batch)")
    ax.set_xlim(left=0)
    ax.set_xlabel(f"seconds since the services were started ({_time.strftime('%H:%M:%S', _time.localtime(t0))})")
    ax.set_ylabel(f"batches/s (trailing {window:.0f} s mean)")
    ax.set_title("throughput per tier")
    if ax.get_legend_handles_labels()[1]:          # a job that failed before its first batch has no series
        ax.legend(loc="best", fontsize=8)
    else:
        ax.text(0.5, 0.5, "no batches", transform=ax.transAxes, ha="center", va="center", color="0.4")
    fig.tight_layout()
    return fig


def _plot(run_dir: Path, epochs: list[dict], timeline: list[dict], origin: float | None = None,
          metric: str = "accuracy") -> list[str]:
    """``metric``: the one that picks the best epoch (``selection_metric``: accuracy, a link job's
    AUC/MRR/..., a knowledge graph's filtered MRR), plotted per epoch for train (accuracy only), val, test."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    if epochs:
        ep = [e["epoch"] for e in epochs]
        fig, axes = plt.subplots(1, 4, figsize=(20, 4))
        axes[0].plot(ep, [e["train_loss"] for e in epochs], label="train loss")
        axes[0].set_xlabel("epoch"); axes[0].set_title("loss"); axes[0].legend()
        for split in ("train", "val", "test") if metric == "accuracy" else ("val", "test"):
            # test is evaluated only at epochs that improved validation (None elsewhere)
            pts = [(x, e[key]) for x, e in zip(ep, epochs) if e.get(key := f"{split}_{metric}") is not None]
            axes[1].plot([x for x, _ in pts], [y for _, y in pts], label=split, marker="." if split == "test" else None)
        axes[1].set_xlabel("epoch"); axes[1].set_title(metric if metric == "accuracy" else f"{metric} (picks the best epoch)")
        axes[1].legend()
        axes[2].plot(ep, [e["batches_per_second"] for e in epochs], label="batches/s")
        ax2 = axes[2].twinx()
        ax2.plot(ep, [e["trainer_idle_fraction"] for e in epochs], color="tab:red", label="trainer idle")
        ax2.set_ylim(0, 1); ax2.set_ylabel("trainer idle fraction", color="tab:red")
        axes[2].set_xlabel("epoch"); axes[2].set_title("throughput"); axes[2].legend(loc="upper left")
        # where the trainer's time went, per thread: the compute thread waits (idle) or computes;
        # the ingest thread receives/decodes/validates and copies to the device alongside
        bottom = [0.0] * len(ep)
        for key, label in TIME_PARTS:
            vals = [float(e.get(key) or 0.0) for e in epochs]
            axes[3].bar(ep, vals, bottom=bottom, label=label)
            bottom = [b + v for b, v in zip(bottom, vals)]
        axes[3].set_xlabel("epoch"); axes[3].set_ylabel("seconds (train phase)")
        axes[3].set_title("trainer time: compute thread | ingest thread"); axes[3].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(run_dir / "training.png", dpi=90)
        plt.close(fig)
        files.append("training.png")
    if len(timeline) > 2:
        fig = _throughput_figure(plt, timeline, origin)
        fig.savefig(run_dir / "throughput.png", dpi=90)
        plt.close(fig)
        files.append("throughput.png")
    return files


def _graph_section(store) -> list[str]:
    """The trained graph in a few lines: n, m, parts and, for a typed store, vertices per node type,
    the relations (reverses included) and the labelled type."""
    from argosy.shared.errors import ArgosyError
    from argosy.shared.store import Manifest
    try:
        m = Manifest.load(store) if store else None
    except (ArgosyError, OSError):
        return []
    if m is None:
        return []
    out = ["", "## Graph", "", f"{m.num_nodes:,} vertices, {m.num_edges:,} {'arcs' if m.directed else 'edges'}, "
           f"{m.num_parts} parts ({m.partition.get('method', '?')}, edge cut "
           f"{100 * m.partition.get('edge_cut_fraction', 0.0):.2f} %)"]
    t = m.typed
    if t:
        off = t["type_offsets"]
        out += ["", "| node type | vertices | feature width |", "|---|---:|---:|"]
        out += [f"| {name}{' (target)' if name == t.get('target') else ''} | {off[i + 1] - off[i]:,} | "
                f"{t['feature_dims'].get(name, 0) or 'learned'} |" for i, name in enumerate(t["node_types"])]
        rels = t["relations"]
        out += ["", f"{len(rels)} relations ({t.get('reverse', 0)} of them added reverses): "
                + ", ".join("(" + ", ".join(r) + ")" for r in rels[:12]) + (" ..." if len(rels) > 12 else "")]
        if t.get("triples"):
            out += ["", "Knowledge-graph triples: " + ", ".join(f"{k} {sum(v):,}" for k, v in t["triples"].items())]
    return out


def write_report(run_dir: str | Path, result: dict, epochs: list[dict], timeline: list[dict], extra: dict) -> Path:
    """Write the report files; returns the path of ``report.md``."""
    epochs = [e.to_dict() if isinstance(e, EpochRecord) else e for e in epochs]
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "report.json").write_text(json.dumps({"result": result, "epochs": epochs, "timeline": timeline,
                                                     **extra}, indent=1))
    metric = result.get("selection_metric") or "accuracy"
    plots = _plot(run_dir, epochs, timeline, extra.get("services_started"), metric)
    lines = [f"# Argosy run {extra.get('job', '')}", "",
             "| metric | value |", "|---|---|"]
    for k, v in result.items():
        lines.append(f"| {k} | {v:.4g} |" if isinstance(v, float) else
                     f"| {k} | {json.dumps(v)} |" if isinstance(v, bool) else f"| {k} | {v} |")
    lines += _graph_section(extra.get("store"))
    lines += ["", "## Setup", "", "```json", json.dumps(extra, indent=1), "```", ""]
    lines += [f"![{p}]({p})" for p in plots]
    decisions = [d for d in extra.get("autoscale") or [] if d.get("action") != "hold" or d.get("paused")]
    if decisions:
        lines += ["", "## Autoscaler decisions", ""] + [
            f"- +{d['t'] - decisions[0]['t']:.0f} s{' (dry run)' if d.get('dry_run') else ''}: {d['reason']}"
            for d in decisions]
    if extra.get("events"):
        from argosy.shared.fleet import event_lines
        lines += ["", "## Scale, kill and re-claim events", ""] + event_lines(extra["events"])
    if epochs:
        lines += ["", "## Epochs", "", "Trainer seconds per train phase: *wait* (compute thread waiting for input), "
                  "*compute* (forward/backward/step), *ingest* (receive, decode, validate) and *copy* (to the "
                  "device), the last two on the ingest thread, alongside; *cache hit* (feature rows served from the trainers' "
                  "feature caches) and *MB/batch* (received by the trainers).", "",
                  f"*train*, *val* and *test* are the {metric} (the figure that picks the best epoch; test only at "
                  "epochs that improved it).", "",
                  "| epoch | loss | train | val | test | s | batches/s | idle | wait s | compute s | ingest s | copy s | cache hit | MB/batch | remote |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for e in epochs:
            lines.append(f"| {e['epoch']} | {e['train_loss']:.4f} | {_fig(e.get(f'train_{metric}'))} | "
                         f"{_fig(e.get(f'val_{metric}'))} | {_fig(e.get(f'test_{metric}'))} | {e['epoch_seconds']:.2f} | {e['batches_per_second']:.1f} | "
                         f"{e['trainer_idle_fraction']:.2f} | "
                         + " | ".join(f"{float(e.get(k) or 0.0):.2f}" for k, _ in TIME_PARTS)
                         + f" | {float(e.get('cache_hit_rate') or 0.0):.3f} | {float(e.get('bytes_per_batch') or 0.0) / 1e6:.2f}"
                         + f" | {e['remote_fraction']:.3f} |")
    path = run_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _fig(v) -> str:
    return "-" if v is None else format(float(v), ".3f")


class EpochLog:
    """TensorBoard event files of a run (``RUN_DIR/tensorboard``): one point per epoch and scalar.

    Written by the driver as epochs arrive (``tensorboard --logdir runs/``).  Needs the
    ``tensorboard`` package (``pip install 'argosy[tensorboard]'``); without it :attr:`path` is None
    and :attr:`why` says so (the report repeats it), and nothing else changes.
    """

    SCALARS = ("train_loss", "train_accuracy", "val_loss", "val_accuracy", "test_accuracy", "epoch_seconds",
               "batches_per_second", "trainer_idle_fraction", "remote_fraction")

    def __init__(self, run_dir: str | Path):
        self.path: Path | None = None
        self.why = ""
        self._w = None
        try:
            import importlib.util
            if importlib.util.find_spec("tensorboard") is None:   # checked first: importing torch's writer
                raise ImportError("tensorboard")                     # loads torch (~120 MB in the launcher)
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            self.why = "no TensorBoard event files: the tensorboard package is not installed (pip install tensorboard)"
            return
        self.path = Path(run_dir) / "tensorboard"
        self._w = SummaryWriter(log_dir=str(self.path))

    def add(self, epoch: dict) -> None:
        if self._w is None:
            return
        step = int(epoch["epoch"])
        for key in self.SCALARS:
            v = epoch.get(key)
            if v is not None:
                group = "accuracy" if key.endswith("accuracy") else "loss" if key.endswith("loss") else "pipeline"
                self._w.add_scalar(f"{group}/{key}", float(v), step)
        self._w.flush()

    def close(self) -> None:
        if self._w is not None:
            self._w.close()
