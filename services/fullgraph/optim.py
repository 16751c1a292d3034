"""A minimal Adam (torch.optim.Adam semantics, L2 weight decay) without torch.optim.

Why this module exists: constructing any ``torch.optim`` optimizer imports
``torch._dynamo`` (about 2-6 s and >100 MiB on our CPU machines). Every SAR
worker and every CLI run would pay that, and it would distort the
peak-memory ratios the bench reports. Full-graph training needs only Adam.
"""

from __future__ import annotations

import logging
from typing import Iterable

import torch

__all__ = ["Adam"]

logger = logging.getLogger(__name__)


class Adam:
    """Adam with per-group L2 weight decay (``grad += wd * param``), as ``torch.optim.Adam``.

    Args:
        groups: ``[{"params": [...], "weight_decay": float}, ...]`` or a list of tensors.
        lr: learning rate.
        betas: moment decay rates.
        eps: denominator epsilon.
    """

    def __init__(self, groups: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        groups = list(groups)
        if groups and isinstance(groups[0], torch.Tensor):
            groups = [{"params": groups}]
        self.param_groups = [{"params": list(g["params"]), "weight_decay": float(g.get("weight_decay", 0.0)),
                              "lr": float(g.get("lr", lr))} for g in groups]
        self.betas, self.eps = betas, eps
        self.state: dict[int, dict] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for g in self.param_groups:
            for p in g["params"]:
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        b1, b2 = self.betas
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                if g["weight_decay"]:
                    grad = grad.add(p, alpha=g["weight_decay"])
                st = self.state.setdefault(id(p), {"step": 0, "m": torch.zeros_like(p), "v": torch.zeros_like(p)})
                st["step"] += 1
                t = st["step"]
                st["m"].mul_(b1).add_(grad, alpha=1 - b1)
                st["v"].mul_(b2).addcmul_(grad, grad, value=1 - b2)
                denom = (st["v"].sqrt() / (1 - b2 ** t) ** 0.5).add_(self.eps)
                p.addcdiv_(st["m"], denom, value=-g["lr"] / (1 - b1 ** t))
