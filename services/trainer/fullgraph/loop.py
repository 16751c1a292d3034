"""The epoch loop every full-graph mode runs: step, evaluate, stop when validation stops improving.

Why this module exists: the single-process modes and every SAR rank must make the same stopping
decision and keep the same best-validation weights, so the loop is written once.  In SAR the
trainer's ``step``/``evaluate`` all-reduce, so every rank sees identical numbers and stops together.
"""

from __future__ import annotations

import logging
import statistics
import time
from typing import Callable, Protocol

import torch

from argosy.shared import rundir
from argosy.shared.config import JobConfig, TrainerConfig
from argosy.shared.early_stopping import EarlyStopping

from argosy.shared.malloc import trim_heap

__all__ = ["FullGraphTrainer", "fit", "save_best", "skip_dynamo", "optimizer_step"]

logger = logging.getLogger(__name__)


def skip_dynamo() -> None:
    """Let ``torch.optim`` optimizers be built in this process without importing ``torch._dynamo``.

    ``Optimizer.add_param_group`` (and three other methods) are wrapped by ``torch._compile``'s
    dynamo-disable, which imports ``torch._dynamo`` (sympy and ~1,000 modules: ~80 MiB of resident
    set, a fifth of the full-graph process's baseline) on first call, and caches the disabled
    function on the wrapped one.  Caching the wrapped function itself skips the import; nothing in
    these processes compiles, so there is nothing for dynamo to disable.
    """
    for f in vars(torch.optim.Optimizer).values():
        inner = getattr(f, "__wrapped__", None)
        if inner is not None and getattr(getattr(f, "__code__", None), "co_filename", "").endswith("_compile.py"):
            setattr(inner, "__dynamo_disable", inner)


def optimizer_step(opt: torch.optim.Optimizer) -> None:
    """``opt.step()`` without ``torch.optim``'s step wrappers (hooks, profiler label, and a
    ``torch._dynamo.graph_break()`` whose import costs ~80 MiB: :func:`skip_dynamo`): the optimizer's
    own ``step`` under ``no_grad``, which is all the wrappers run around it without hooks."""
    raw = type(opt).step
    while hasattr(raw, "__wrapped__"):
        raw = raw.__wrapped__
    if raw is type(opt).step or opt.defaults.get("differentiable") or opt._optimizer_step_pre_hooks \
            or opt._optimizer_step_post_hooks:
        opt.step()
        return
    with torch.no_grad():
        raw(opt)


class FullGraphTrainer(Protocol):
    def step(self, epoch: int) -> float: ...

    def evaluate(self) -> dict[str, float]: ...


def save_best(job: JobConfig, model: torch.nn.Module, epoch: int, rec: dict, in_dim: int, num_classes: int,
              num_layers: int) -> None:
    """Atomically write ``best.pt`` in the mini-batch trainer's format, so :func:`argosy.load_model`
    and ``argosy predict`` read a full-graph run like any other."""
    if not job.run_dir:
        return
    rundir.save_best(job.run_dir, model.state_dict(), epoch=epoch, val_accuracy=rec["val_accuracy"],
                     test_accuracy=rec["test_accuracy"], spec=job.to_json(), in_dim=in_dim, num_classes=num_classes,
                     num_layers=num_layers, store=str(job.store))


def fit(trainer: FullGraphTrainer, model: torch.nn.Module, opt: torch.optim.Optimizer, cfg: TrainerConfig,
        device: torch.device, remote_fraction: float = 0.0,
        on_best: Callable[[int, dict], None] | None = None) -> tuple[list[dict], dict]:
    """Train until :class:`EarlyStopping` says stop (or ``cfg.epochs`` have run); one epoch is one
    optimizer step here.  The model ends with its best-validation weights.  Returns the per-epoch records (the keys the
    run report plots) and the result: accuracies at the best-validation epoch, epoch count, times.
    """
    epochs: list[dict] = []
    stopper, best_epoch, best_state = EarlyStopping(cfg.patience), -1, None
    for epoch in range(cfg.epochs):
        idle = getattr(trainer, "idle_seconds", None)  # the offloaded trainer's waits for its store
        t0, c0, i0 = time.perf_counter(), time.process_time(), idle() if idle else 0.0
        opt.zero_grad(set_to_none=True)
        loss = trainer.step(epoch)
        optimizer_step(opt)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        secs, cpu = time.perf_counter() - t0, time.process_time() - c0
        waited = idle() - i0 if idle else 0.0
        trim_heap()  # the step's freed activations back to the OS, so the evaluation does not stack on them
        t1 = time.perf_counter()
        acc = trainer.evaluate()
        trim_heap()
        rec = {"epoch": epoch, "train_loss": float(loss), "train_accuracy": acc["train_accuracy"],
               "val_accuracy": acc["val_accuracy"], "test_accuracy": acc["test_accuracy"],
               "epoch_seconds": secs, "epoch_cpu_seconds": cpu, "eval_seconds": time.perf_counter() - t1,
               "batches_per_second": 1.0 / max(secs, 1e-9),
               "trainer_idle_fraction": waited / max(secs, 1e-9),
               "remote_fraction": remote_fraction}
        epochs.append(rec)
        rec["val_loss"] = acc["val_loss"]
        if stopper.update(acc["val_accuracy"], acc["val_loss"]):
            best_epoch = epoch
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            if on_best is not None:
                on_best(epoch, rec)
        if stopper.spent:
            break
        if epoch % 50 == 0:
            logger.info("epoch %d: loss %.4f train %.3f val %.3f test %.3f (%.3f s)", epoch, loss,
                        acc["train_accuracy"], acc["val_accuracy"], acc["test_accuracy"], secs)
    assert best_state is not None
    model.load_state_dict(best_state)
    best = epochs[best_epoch]
    times, cpus = [e["epoch_seconds"] for e in epochs], [e["epoch_cpu_seconds"] for e in epochs]
    result = {"test_accuracy": best["test_accuracy"], "val_accuracy": best["val_accuracy"],
              "train_accuracy": best["train_accuracy"], "best_epoch": best_epoch, "epochs": len(epochs),
              "stopped_early": len(epochs) < cfg.epochs,
              "final_test_accuracy": epochs[-1]["test_accuracy"], "final_val_accuracy": epochs[-1]["val_accuracy"],
              "final_loss": epochs[-1]["train_loss"],
              "epoch_seconds": statistics.median(times[1:] if len(times) > 1 else times),
              "epoch_seconds_all": times,
              "epoch_cpu_seconds": statistics.median(cpus[1:] if len(cpus) > 1 else cpus),
              "trainer_idle_fraction": statistics.median([e["trainer_idle_fraction"] for e in epochs][1:]
                                                         or [epochs[0]["trainer_idle_fraction"]])}
    logger.info("stopped after %d epochs; best validation %.4f at epoch %d (test %.4f)", len(epochs), stopper.best_val,
                best_epoch, best["test_accuracy"])
    return epochs, result
