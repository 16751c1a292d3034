"""Early stopping bookkeeping of the trainer's epoch driver: best epoch, ties, patience.

The rule itself is :class:`argosy.shared.models.EarlyStopping`, shared with the full-graph loop.
"""
import numpy as np
import pytest

from argosy.shared.config import JobConfig, TrainerConfig
from argosy.shared.errors import ConfigError
from argosy.shared.early_stopping import EarlyStopping
from argosy.services.trainer.service import TrainerProc


def _driver(patience: int) -> TrainerProc:
    proc = TrainerProc.__new__(TrainerProc)          # the bookkeeping only: no sockets, no Redis
    proc.cfg = JobConfig(trainer=TrainerConfig(patience=patience))
    proc.stopper, proc.result = EarlyStopping(patience), {}
    return proc


def _run(proc, curve):
    """Feed (val_accuracy, val_loss) per epoch as the driver does; return the epochs that ran."""
    ran = []
    for epoch, (acc, loss) in enumerate(curve):
        if proc._patience_spent():
            break
        rec = {"val_accuracy": acc, "val_loss": loss}
        rec["test_accuracy"] = epoch / 100 if proc._improves(rec) else None     # test only when it improves
        proc._track_best(epoch, rec)
        ran.append(epoch)
    return ran


def test_stops_after_patience_epochs_without_improvement():
    curve = [(0.5, 1.0), (0.6, 0.9), (0.7, 0.8), (0.69, 0.85), (0.7, 0.81), (0.65, 0.9), (0.9, 0.1)]
    proc = _driver(patience=3)
    ran = _run(proc, curve)
    assert ran == [0, 1, 2, 3, 4, 5]                  # epoch 6's 0.9 is never reached
    assert proc.result["best_epoch"] == 2 and proc.result["test_accuracy"] == 0.02
    assert proc.result["stopped_early"] is True


def test_equal_accuracy_with_lower_loss_is_better():
    proc = _driver(patience=2)
    _run(proc, [(0.7, 0.9), (0.7, 0.8), (0.7, 0.85), (0.7, 0.95)])
    assert proc.result["best_epoch"] == 1 and proc.result["val_loss"] == 0.8


def test_patience_zero_runs_every_epoch():
    proc = _driver(patience=0)
    assert _run(proc, [(0.9, 0.1)] + [(0.1, 2.0)] * 30) == list(range(31))
    assert proc.result["best_epoch"] == 0 and "stopped_early" not in proc.result


def test_config_rejects_negative_patience():
    with pytest.raises(ValueError, match="patience must be >= 0"):
        TrainerConfig(patience=-1)


def test_falling_validation_loss_keeps_a_plateaued_run_going():
    # accuracy stalls from epoch 1 while the loss keeps falling; it improves again at epoch 6
    curve = [(0.5, 1.0), (0.6, 0.9), (0.6, 0.8), (0.59, 0.7), (0.6, 0.75), (0.58, 0.65), (0.7, 0.6),
             (0.6, 0.9), (0.6, 0.9), (0.6, 0.9), (0.9, 0.1)]
    proc = _driver(patience=3)
    ran = _run(proc, curve)
    assert ran == list(range(10))                     # stops 3 epochs after the last gain (epoch 6)
    assert proc.result["best_epoch"] == 6


def test_early_stopping_state_round_trips_through_a_checkpoint():
    a = EarlyStopping(5)
    for acc, loss in [(0.5, 1.0), (0.6, 0.9), (0.55, 0.95)]:
        a.update(acc, loss)
    b = EarlyStopping(5)
    b.load(a.state())
    assert b == a
    b.load({"best_val": 0.6, "best_val_loss": 0.9, "since_best": 1})   # an older checkpoint
    assert b.low_loss == 0.9 and b.since_gain == 1


def test_link_jobs_stop_on_their_chosen_metric():
    from argosy.shared.config import LinkConfig
    proc = _driver(patience=2)
    proc.cfg = JobConfig(trainer=TrainerConfig(task="link", patience=2), link=LinkConfig(metric="ap"))
    ran = []
    # AP picks the best epoch (1); AUC's best (2) and the accuracy column do not
    for epoch, (auc, ap) in enumerate([(0.7, 0.7), (0.8, 0.9), (0.95, 0.85), (0.9, 0.8), (0.99, 0.99)]):
        if proc._patience_spent():
            break
        rec = {"val_accuracy": 0.5, "val_loss": 1.0, "val_auc": auc, "val_ap": ap, "test_accuracy": None}
        proc._track_best(epoch, rec)
        ran.append(epoch)
    assert proc.result["best_epoch"] == 1 and proc.result["val_ap"] == 0.9 and ran == [0, 1, 2, 3]


def test_kg_lr_decays_on_a_validation_plateau():
    """A knowledge graph's lr is multiplied by kg_lr_decay after every KG_DECAY_AFTER epochs without a
    better validation MRR (the in-process recipe's schedule), never otherwise; 1 turns it off."""
    from argosy.services.trainer.core import TrainerCore
    from argosy.shared.config import KG_DECAY_AFTER, LinkConfig, TrainerConfig
    known = np.array([[0, 0, 1], [1, 1, 2]])
    for decay in (0.3, 1.0):
        core = TrainerCore(TrainerConfig(task="link", device="cpu"), 0, 0, 1, link=LinkConfig(kg_lr_decay=decay),
                           num_nodes=4, kg_relations=2, kg_known=known)
        lr0, lrs = core.opt.param_groups[0]["lr"], []
        for since in range(0, 2 * KG_DECAY_AFTER + 1):
            core.plateau_decay(since)
            lrs.append(core.opt.param_groups[0]["lr"])
        want = [lr0 * decay ** (s // KG_DECAY_AFTER) for s in range(0, 2 * KG_DECAY_AFTER + 1)]
        assert np.allclose(lrs, want), (decay, lrs, want)
    with pytest.raises(ConfigError, match="kg_lr_decay"):
        LinkConfig(kg_lr_decay=0.0)


def test_min_gain_stops_a_creeping_score_but_keeps_its_best():
    """With min_gain, new bests smaller than it still pick the kept weights but do not reset the
    patience count (a decayed-lr KG run's MRR creeping up 1e-4 an epoch stops); 0 keeps the old rule."""
    creep = [0.40, 0.45, 0.4502, 0.4504, 0.4506, 0.4508]
    for min_gain, want_spent in ((1e-3, True), (0.0, False)):
        s = EarlyStopping(patience=4, min_gain=min_gain)
        bests = [s.update(v, 0.0) for v in creep]
        assert bests == [True] * 6 and s.best_val == 0.4508
        assert s.spent == want_spent, (min_gain, s.since_gain)
    s2 = EarlyStopping(patience=4, min_gain=1e-3)
    s2.load(s.state() | {"gain_val": 0.45, "since_best": 3})
    assert s2.gain_val == 0.45 and not s2.update(0.4508, 0.0) and s2.spent
