"""Run reports: ``report.json``, ``report.md`` and PNG plots written into the run directory."""
from __future__ import annotations

import json
from pathlib import Path

from argosy.shared.records import EpochRecord

__all__ = ["write_report", "TIME_PARTS"]

TIME_PARTS = (("idle_seconds", "waiting for input"), ("compute_seconds", "compute"),
              ("ingest_seconds", "ingest (decode+validate)"), ("copy_seconds", "host-to-device copy"))
"""The trainer's time per epoch, as epoch records carry it (compute thread: the first two)."""


def _plot(run_dir: Path, epochs: list[dict], timeline: list[dict]) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    if epochs:
        ep = [e["epoch"] for e in epochs]
        fig, axes = plt.subplots(1, 4, figsize=(20, 4))
        axes[0].plot(ep, [e["train_loss"] for e in epochs], label="train loss")
        axes[0].set_xlabel("epoch"); axes[0].set_title("loss"); axes[0].legend()
        for key in ("train_accuracy", "val_accuracy", "test_accuracy"):
            # test accuracy is evaluated only at epochs that improved validation (None elsewhere)
            pts = [(x, e[key]) for x, e in zip(ep, epochs) if e.get(key) is not None]
            axes[1].plot([x for x, _ in pts], [y for _, y in pts], label=key.replace("_accuracy", ""),
                         marker="." if key == "test_accuracy" else None)
        axes[1].set_xlabel("epoch"); axes[1].set_title("accuracy"); axes[1].legend()
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
        t0 = timeline[0]["t"]
        ts = [s["t"] - t0 for s in timeline[1:]]
        fig, ax = plt.subplots(figsize=(8, 4))
        for key, label in (("sampler_batches", "sampler tier"), ("loader_batches", "loader tier")):
            rates = [(b.get(key, 0) - a.get(key, 0)) / max(b["t"] - a["t"], 1e-9) for a, b in zip(timeline, timeline[1:])]
            ax.plot(ts, rates, label=f"{label} batches/s")
        ax.set_xlabel("seconds"); ax.set_ylabel("batches/s"); ax.set_title("throughput per tier over time"); ax.legend()
        fig.tight_layout()
        fig.savefig(run_dir / "throughput.png", dpi=90)
        plt.close(fig)
        files.append("throughput.png")
    return files


def write_report(run_dir: str | Path, result: dict, epochs: list[dict], timeline: list[dict], extra: dict) -> Path:
    """Write the report files; returns the path of ``report.md``."""
    epochs = [e.to_dict() if isinstance(e, EpochRecord) else e for e in epochs]
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "report.json").write_text(json.dumps({"result": result, "epochs": epochs, "timeline": timeline,
                                                     **extra}, indent=1))
    plots = _plot(run_dir, epochs, timeline)
    lines = [f"# Argosy run {extra.get('job', '')}", "",
             "| metric | value |", "|---|---|"]
    for k, v in result.items():
        lines.append(f"| {k} | {v:.4g} |" if isinstance(v, float) else f"| {k} | {v} |")
    lines += ["", "## Setup", "", "```json", json.dumps(extra, indent=1), "```", ""]
    lines += [f"![{p}]({p})" for p in plots]
    decisions = [d for d in extra.get("autoscale") or [] if d.get("action") != "hold" or d.get("paused")]
    if decisions:
        lines += ["", "## Autoscaler decisions", ""] + [
            f"- +{d['t'] - decisions[0]['t']:.0f} s{' (dry run)' if d.get('dry_run') else ''}: {d['reason']}"
            for d in decisions]
    if epochs:
        lines += ["", "## Epochs", "", "Trainer seconds per train phase: *wait* (compute thread waiting for input), "
                  "*compute* (forward/backward/step), *ingest* (receive, decode, validate) and *copy* (to the "
                  "device), the last two on the ingest thread, alongside.", "",
                  "| epoch | loss | train | val | test | s | batches/s | idle | wait s | compute s | ingest s | copy s | remote |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for e in epochs:
            lines.append(f"| {e['epoch']} | {e['train_loss']:.4f} | {e['train_accuracy']:.3f} | {e['val_accuracy']:.3f} | "
                         f"{'-' if e.get('test_accuracy') is None else format(e['test_accuracy'], '.3f')} | {e['epoch_seconds']:.2f} | {e['batches_per_second']:.1f} | "
                         f"{e['trainer_idle_fraction']:.2f} | "
                         + " | ".join(f"{float(e.get(k) or 0.0):.2f}" for k, _ in TIME_PARTS)
                         + f" | {e['remote_fraction']:.3f} |")
    path = run_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
