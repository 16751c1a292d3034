"""No silent fallbacks at train time: a store without what training needs is refused before any
service starts, and choices made for the user are announced."""
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from argosy.shared.config import JobConfig, TrainerConfig
from argosy.shared.graphio import save_graph_npz
from argosy.shared.preflight import TrainInputError, check_trainable
from argosy.shared.store import write_store
from tests.graphs import random_graph

ROOT = Path(__file__).resolve().parents[2]


def _store(tmp_path, **change):
    g = random_graph(300, 1500, seed=2, features=8, classes=3)
    g.features = np.abs(g.features)
    for k, v in change.items():
        setattr(g, k, v(g) if callable(v) else v)
    assign = np.random.default_rng(0).integers(0, 3, g.num_nodes)
    write_store(g, assign, tmp_path / "store")
    return tmp_path / "store"


@pytest.mark.parametrize("change, match", [
    ({"features": None}, "no node features.*--random-features DIM"),
    ({"labels": None}, "no labels"),
    ({"val_mask": None}, "no val_mask"),
    ({"train_mask": lambda g: np.zeros(g.num_nodes, bool)}, r"train_mask selects no vertex \(got 0 of 300\)"),
    ({"test_mask": lambda g: np.zeros(g.num_nodes, bool)}, "test_mask selects no vertex"),
    ({"labels": lambda g: np.where(g.train_mask, -1, g.labels)}, "none of the .* train vertices has a label"),
])
def test_missing_inputs_are_errors(tmp_path, change, match):
    try:
        path = _store(tmp_path, **change)
    except Exception as e:                      # refused even earlier, at partition time: also no fallback
        assert "mask" in str(e) or "label" in str(e) or "feature" in str(e), e
        return
    with pytest.raises(TrainInputError, match=match):
        check_trainable(path, JobConfig())


def test_feature_normalisation_is_chosen_and_announced(tmp_path, caplog):
    path = _store(tmp_path)
    cfg = JobConfig()
    with caplog.at_level(logging.WARNING, logger="argosy"):
        res = check_trainable(path, cfg)
    assert cfg.trainer.normalize_features is True
    assert "row-normalising" in caplog.text and res.warnings
    assert (res.train, res.val, res.test) == (int(res.train), int(res.val), int(res.test)) and res.labelled_train > 0


def test_negative_features_are_kept_and_explicit_choice_is_silent(tmp_path):
    path = _store(tmp_path, features=lambda g: g.features - 0.5)
    cfg = JobConfig()
    assert check_trainable(path, cfg).warnings and cfg.trainer.normalize_features is False
    cfg = JobConfig(trainer=TrainerConfig(normalize_features=True))
    assert check_trainable(path, cfg).warnings == [] and cfg.trainer.normalize_features is True


def test_cli_refuses_a_graph_without_features_before_starting_services(tmp_path):
    g = random_graph(200, 800, seed=3, classes=3)            # labels and splits, no features
    data = tmp_path / "nofeat.npz"
    save_graph_npz(g, data)
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "argosy.services.launch", "train", "--data", str(data),
                           "--run-dir", str(run_dir), "--json"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "no node features" in proc.stderr and "--random-features" in proc.stderr
    assert not list((run_dir / "logs").glob("*.log")) if (run_dir / "logs").exists() else True   # no service ran
    assert not (run_dir / "checkpoint.pt").exists()
