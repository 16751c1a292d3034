"""The one early-stopping rule of every training mode (mini-batch, full-graph, SAR): which epoch is
the best (its weights are kept) and when training stops."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EarlyStopping"]


@dataclass
class EarlyStopping:
    """The one early-stopping rule of every training mode (mini-batch, full-graph, SAR).

    The best epoch has the highest validation accuracy (among equal accuracies, the lowest
    validation loss); its weights are the ones kept.  Training stops once ``patience`` epochs
    have passed with neither a new best accuracy nor a new lowest validation loss: on a small
    citation graph one epoch is one optimizer step, and accuracy plateaus for tens of steps while
    the loss still falls, so accuracy alone stops runs that are still learning.  ``patience=0``
    never stops.
    """
    patience: int
    min_gain: float = 0.0
    """A new best resets the patience count only when its score beats the last one that did by more
    than this (a knowledge graph's MRR creeps up by 1e-4 an epoch once its lr has decayed); it is
    still the best epoch whose weights are kept."""
    best_val: float = -1.0
    best_loss: float = float("inf")
    low_loss: float = float("inf")
    gain_val: float = -1.0
    since_gain: int = 0

    def improves(self, val_accuracy: float, val_loss: float) -> bool:
        """Would an epoch with these figures be the new best?"""
        return val_accuracy > self.best_val or (val_accuracy == self.best_val and val_loss < self.best_loss)

    def update(self, val_accuracy: float, val_loss: float) -> bool:
        """Record an epoch; True when it is the new best (keep its weights)."""
        best = self.improves(val_accuracy, val_loss)
        if best:
            self.best_val, self.best_loss = val_accuracy, val_loss
        counted = best and (not self.min_gain or val_accuracy > self.gain_val + self.min_gain)
        if counted:
            self.gain_val = val_accuracy
        gain = counted or val_loss < self.low_loss
        self.low_loss = min(self.low_loss, val_loss)
        self.since_gain = 0 if gain else self.since_gain + 1
        return best

    @property
    def spent(self) -> bool:
        return bool(self.patience) and self.since_gain >= self.patience

    def state(self) -> dict:
        return {"best_val": self.best_val, "best_val_loss": self.best_loss, "low_val_loss": self.low_loss,
                "gain_val": self.gain_val, "since_best": self.since_gain}

    def load(self, state: dict) -> None:
        """Restore from :meth:`state` (checkpoints of older versions lack the loss fields)."""
        self.best_val = float(state.get("best_val", -1.0))
        self.best_loss = float(state.get("best_val_loss", float("inf")))
        self.low_loss = float(state.get("low_val_loss", self.best_loss))
        self.gain_val = float(state.get("gain_val", self.best_val))
        self.since_gain = int(state.get("since_best", 0))
