"""The run directory: where it is by default, what it holds, and the two checkpoint files.

A run directory (``--run-dir``; default :func:`default_run_dir`) holds::

    RUN_DIR/
    ├── best.pt          # best-validation weights + job spec + model shape (save_best / load_best)
    ├── checkpoint.pt    # rank 0's resumable state after the last checkpointed epoch (save/load_checkpoint)
    ├── checkpoint.epochs.jsonl          # every epoch record (HISTORY_FILE)
    ├── checkpoint.epoch_counters.jsonl  # per-epoch counters moved out of Redis (EPOCH_COUNTERS_FILE)
    ├── model.json       # where a MODULE:FACTORY model was imported from (shared.usermodel)
    ├── submitted.json   # ``argosy submit``: the job's config fingerprint and its store's identity
    ├── report.json  report.md  training.png  throughput.png  tensorboard/
    ├── logs/            # one log per service, launcher.log, reaper.log
    ├── store/           # the partitioned store, when the run built it from a graph file
    └── redis/           # the embedded Redis's data, when the run started one

Both ``.pt`` files are plain tensors and containers, read with ``weights_only=True`` (a checkpoint is
data, never code), written to a temporary file and renamed into place, and carry ``"format"``.  A
reader refuses a format it does not know with a message naming it; a ``checkpoint.pt`` without
``"format"`` (written before the field existed) reads as format 1.

torch is imported inside the functions that need it: ``argosy submit`` uses the layout without it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from argosy.shared.errors import ArgosyError

__all__ = ["BEST_FILE", "CHECKPOINT_FILE", "RUN_MARKER", "LOGS_DIR", "STORE_DIR", "BEST_FORMAT",
           "CHECKPOINT_FORMAT", "default_run_dir", "best_path", "checkpoint_path", "save_best", "load_best",
           "shard_path", "save_shard", "load_shard",
           "save_checkpoint", "load_checkpoint", "run_files"]

RUNS_ROOT = Path("runs")
"""Default parent of run directories, relative to the working directory."""
BEST_FILE = "best.pt"
CHECKPOINT_FILE = "checkpoint.pt"
RUN_MARKER = "submitted.json"
"""What ``submit`` records in a run directory: the job's config fingerprint and its store's identity."""
LOGS_DIR = "logs"
STORE_DIR = "store"

BEST_FORMAT = 1
"""``best.pt``: ``model`` (state dict), ``epoch``, ``val_accuracy``, ``test_accuracy``, ``spec`` (job
config JSON), ``in_dim``, ``num_classes``, ``num_layers``, ``store``."""
CHECKPOINT_FORMAT = 1
"""``checkpoint.pt``: the trainer core's state, ``epoch``, ``epochs``, early-stopping state, ``result``,
``fingerprint``."""


def default_run_dir(job: str, store: str | Path | None = None) -> Path:
    """``runs/JOB`` under the working directory, or, given ``store`` (``argosy submit``, whose store
    sits on a shared volume), ``runs/JOB`` next to the store."""
    return (Path(store).parent if store is not None else Path(".")) / RUNS_ROOT / job


def best_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / BEST_FILE


def checkpoint_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINT_FILE


HISTORY_FILE = "checkpoint.epochs.jsonl"
"""Every epoch record of the run, one JSON line each, appended by trainer rank 0 (Redis keeps only the
newest :data:`argosy.shared.coord.MAX_EPOCH_RECORDS`)."""
EPOCH_COUNTERS_FILE = "checkpoint.epoch_counters.jsonl"
"""Per-epoch counters moved out of Redis's metrics hash by trainer rank 0: lines
``{"epoch": E, "counters": {"wire_bytes": ...}}`` (an epoch may have several lines: they add up)."""


def read_history(run_dir: str | Path | None, n: int) -> list[dict]:
    """The first ``n`` epoch records of :data:`HISTORY_FILE` (fewer when it is missing or shorter)."""
    path = Path(run_dir) / HISTORY_FILE if run_dir else None
    if path is None or not path.exists():
        return []
    with open(path) as f:
        return [json.loads(ln) for _, ln in zip(range(n), f) if ln.strip()]


def read_epoch_counters(run_dir: str | Path | None) -> dict[str, float] | None:
    """:data:`EPOCH_COUNTERS_FILE` as metrics-hash fields (``{name}_e{E}`` summed), or None without one."""
    path = Path(run_dir) / EPOCH_COUNTERS_FILE if run_dir else None
    if path is None or not path.exists():
        return None
    out: dict[str, float] = {}
    with open(path) as f:
        for ln in f:
            try:
                rec = json.loads(ln)
            except ValueError:                  # a line cut by a crash
                continue
            for k, v in rec["counters"].items():
                out[f"{k}_e{rec['epoch']}"] = out.get(f"{k}_e{rec['epoch']}", 0.0) + float(v)
    return out


def run_files(run_dir: str | Path) -> list[Path]:
    """The checkpoint files present in ``run_dir`` (what a new run there would resume from or replace)."""
    return [p for p in (checkpoint_path(run_dir), best_path(run_dir)) if p.exists()]


def _write(path: Path, obj: dict, suffix: str) -> None:
    import torch
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(suffix)
    torch.save(obj, tmp)
    os.replace(tmp, path)


def save_best(run_dir: str | Path, state_dict: dict, *, epoch: int, val_accuracy: float, test_accuracy: float,
              spec: str, in_dim: int, num_classes: int, num_layers: int, store: str,
              metrics: dict | None = None) -> Path:
    """Atomically write the best-validation weights with what rebuilds the model (:func:`argosy.load_model`,
    ``argosy predict``): the job spec and the model's shape.  Every training mode writes through here.
    ``metrics``: the epoch's other figures (a link job's ``val_auc``, ``test_auc``, ...; floats or None)."""
    path = best_path(run_dir)
    _write(path, {"format": BEST_FORMAT, "model": state_dict, "epoch": epoch, "val_accuracy": val_accuracy,
                  "test_accuracy": test_accuracy, "spec": spec, "in_dim": in_dim, "num_classes": num_classes,
                  "num_layers": num_layers, "store": store, "metrics": dict(metrics or {})}, ".tmp-best")
    return path


def load_best(run_dir: str | Path, device: Any = "cpu") -> tuple[Path, dict]:
    """``(path, contents)`` of a run's ``best.pt``; ``run_dir`` may also name the ``.pt`` file itself."""
    import torch
    p = Path(run_dir)
    path = p if p.suffix == ".pt" else best_path(p)
    if not path.exists():
        raise ArgosyError(f"{path}: no best checkpoint (a run writes {BEST_FILE} into its run dir after its first "
                          "validated epoch; is this the --run-dir of a finished run?)")
    ck = torch.load(path, map_location=device, weights_only=True)
    if ck.get("format") != BEST_FORMAT:
        raise ArgosyError(f"{path}: unknown checkpoint format {ck.get('format')!r} (expected {BEST_FORMAT})")
    return path, ck


def save_checkpoint(run_dir: str | Path, state: dict) -> Path:
    """Atomically write rank 0's resumable state (``state`` plus ``"format"``)."""
    path = checkpoint_path(run_dir)
    _write(path, {**state, "format": CHECKPOINT_FORMAT}, ".tmp")
    return path


def shard_path(run_dir: str | Path, rank: int, world: int) -> Path:
    """Where trainer ``rank`` of ``world`` keeps its rows of learned node embeddings between epochs."""
    return Path(run_dir) / f"checkpoint.embeddings-{rank}-of-{world}.pt"


def save_shard(run_dir: str | Path, rank: int, world: int, state: dict) -> Path:
    """Atomically write one trainer's embedding rows and their optimizer state (beside ``checkpoint.pt``)."""
    path = shard_path(run_dir, rank, world)
    _write(path, {**state, "format": CHECKPOINT_FORMAT}, f".tmp{rank}")
    return path


def load_shard(run_dir: str | Path, rank: int, world: int) -> dict:
    import torch
    path = shard_path(run_dir, rank, world)
    if not path.exists():
        raise ArgosyError(f"{path}: missing (a checkpoint of {world} trainers with split node embeddings "
                          f"resumes with {world} trainers; use another --run-dir to start afresh)")
    ck = torch.load(path, map_location="cpu", weights_only=True)
    if ck.get("format") != CHECKPOINT_FORMAT:
        raise ArgosyError(f"{path}: unknown checkpoint format {ck.get('format')!r} (expected {CHECKPOINT_FORMAT})")
    return ck


def load_checkpoint(run_dir: str | Path, device: Any = "cpu") -> dict | None:
    """The contents of ``run_dir/checkpoint.pt``, or None when there is none.  A file from before the
    format field reads as format 1; another format is refused by name."""
    import torch
    path = checkpoint_path(run_dir)
    if not path.exists():
        return None
    ck = torch.load(path, map_location=device, weights_only=True)
    if ck.get("format", 1) != CHECKPOINT_FORMAT:
        raise ArgosyError(f"{path}: unknown checkpoint format {ck.get('format')!r} (expected {CHECKPOINT_FORMAT})")
    return ck
