"""Pure training logic: model, optimizer, one step per FeatureBatch (no sockets, no Redis).

The same object runs inside the trainer service, in the in-process baseline of
``bench/pipeline.py`` and in unit tests, so "disaggregated vs in-process" compares equal work.
"""
from __future__ import annotations

import time
import warnings

import torch
import torch.nn.functional as F

from argosy.shared.config import TrainerConfig
from argosy.shared import envs
from argosy.shared.envs import torch_threads
from argosy.shared.errors import ConfigError
from argosy.shared.protocol import FeatureBatch
from argosy.shared.models import Blocks, build_model, make_optimizer

__all__ = ["TrainerCore", "pick_device", "set_threads"]

warnings.filterwarnings("ignore", message="The given NumPy array is not writable")


def set_threads(n: int) -> None:
    """``n`` compute threads for torch's intra-op pool and for the numba aggregation kernels."""
    torch.set_num_threads(n)
    import numba
    numba.set_num_threads(max(1, min(n, numba.config.NUMBA_NUM_THREADS)))


def pick_device(name: str) -> torch.device:
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ConfigError("--device cuda was requested but no CUDA device is available")
        return torch.device("cuda", envs.get(envs.LOCAL_RANK) % torch.cuda.device_count())
    return torch.device("cpu")


class TrainerCore:
    """Owns the model and optimizer; turns FeatureBatches into steps and eval counts.

    Args:
        cfg: trainer section of the job config.
        in_dim: input feature width.  num_classes: output width.  num_layers: = number of hops.
    """

    def __init__(self, cfg: TrainerConfig, in_dim: int, num_classes: int, num_layers: int, seed: int = 0,
                 device: torch.device | None = None):
        torch.manual_seed(seed)
        set_threads(torch_threads())
        self.cfg = cfg
        self.device = device or pick_device(cfg.device)
        self.model = build_model(cfg.model, in_dim, cfg.hidden, num_classes, num_layers, cfg.dropout,
                                 heads=cfg.heads, aggregator=cfg.aggregator).to(self.device)
        self.module: torch.nn.Module = self.model          # replaced by a DDP wrapper when distributed
        self.opt = make_optimizer(self.model, cfg)
        self._pending = 0
        """Labelled seeds whose gradient is accumulated and not yet stepped on (see :meth:`train_step`)."""

    def to_device(self, fb: FeatureBatch) -> tuple[torch.Tensor, Blocks, torch.Tensor]:
        dev = self.device
        x = torch.from_numpy(fb.features).to(dev, torch.float32, non_blocking=True)
        if self.cfg.normalize_features:
            x = x / x.sum(1, keepdim=True).clamp(min=1e-12)
        hop_nodes = fb.hop_nodes.tolist()
        ptr = None
        if fb.dst_ptr.shape[0]:                        # the sampler's CSR offsets, one slice per hop
            ptr = torch.from_numpy(fb.dst_ptr).to(dev).split([n + 1 for n in hop_nodes[:-1]])
        blocks = Blocks(hop_nodes=hop_nodes, hop_edges=fb.hop_edges.tolist(),
                        edge_src=torch.from_numpy(fb.edge_src).to(dev).long(),
                        edge_dst=torch.from_numpy(fb.edge_dst).to(dev).long(),
                        degrees=torch.from_numpy(fb.degrees).to(dev, torch.float32), dst_ptr=ptr)
        y = torch.from_numpy(fb.labels).to(dev)
        return x, blocks, y

    def train_step(self, fb: FeatureBatch, step: bool = True) -> dict:
        """Forward and backward on one batch; returns loss and accuracy counts.

        With ``step`` the optimizer steps on the gradient of the labelled seeds of every batch since
        the last step (their mean loss).  The trainer passes ``step=False`` to gather several small
        batches into one step of about ``batch_size`` seeds: the plan cuts each part's seeds into
        batches, so a graph with few labelled vertices (120 on Citeseer over 4 parts) would otherwise
        take steps of ~30 seeds from one community at a time, which learns visibly worse than one
        step on all of them.
        """
        x, blocks, y = self.to_device(fb)
        self.module.train()
        t0 = time.perf_counter()
        mask = y >= 0
        count = int(mask.sum())
        alone = step and self._pending == 0      # the usual case: a mean loss, no accumulation
        if not alone and self._pending == 0:
            self.opt.zero_grad(set_to_none=True)  # the first batch of a gathered step
        for _ in range(max(1, self.cfg.work_factor)):
            if alone:
                self.opt.zero_grad(set_to_none=True)
            logits = self.module(x, blocks)
            if count == 0:
                loss = logits.sum() * 0.0
            else:
                loss = F.cross_entropy(logits[mask], y[mask], reduction="mean" if alone else "sum")
            loss.backward()
            if alone:
                self.opt.step()
        if not alone:
            self._pending += count * max(1, self.cfg.work_factor)
            if step:
                self.finish_step()
            loss = loss.detach() / max(count, 1)
        correct = int((logits.argmax(1)[mask] == y[mask]).sum())
        return {"loss": float(loss.detach()), "correct": correct, "count": count,
                "compute_seconds": time.perf_counter() - t0}

    def finish_step(self) -> None:
        """Step on the gradient gathered by ``train_step(..., step=False)`` calls, if any."""
        if self._pending == 0:
            return
        for p in self.model.parameters():
            if p.grad is not None:
                p.grad /= self._pending
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self._pending = 0

    @torch.no_grad()
    def eval_step(self, fb: FeatureBatch) -> dict:
        x, blocks, y = self.to_device(fb)
        self.module.eval()
        logits = self.model(x, blocks)
        mask = y >= 0
        loss = float(F.cross_entropy(logits[mask], y[mask], reduction="sum")) if bool(mask.any()) else 0.0
        return {"correct": int((logits.argmax(1)[mask] == y[mask]).sum()), "count": int(mask.sum()), "loss_sum": loss}

    def user_model(self) -> torch.nn.Module:
        """The model as its author wrote it (a ``MODULE:FACTORY`` model without Argosy's adapter)."""
        return getattr(self.model, "inner", self.model)

    def state(self) -> dict:
        return {"model": self.model.state_dict(), "opt": self.opt.state_dict(),
                "torch_rng": torch.get_rng_state()}

    def load_state(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        torch.set_rng_state(state["torch_rng"])
