"""The run directory's checkpoint files: one writer and one reader each, with a format version."""
from pathlib import Path

import pytest
import torch

from argosy.shared import rundir
from argosy.shared.errors import ArgosyError


def _best(tmp_path: Path) -> Path:
    return rundir.save_best(tmp_path, {"w": torch.ones(2)}, epoch=3, val_accuracy=0.5, test_accuracy=0.4, spec="{}",
                            in_dim=4, num_classes=2, num_layers=2, store="s")


def test_best_round_trip_by_dir_or_file(tmp_path):
    path = _best(tmp_path)
    assert path == tmp_path / "best.pt" and not list(tmp_path.glob("*.tmp*"))
    for where in (tmp_path, path):
        got_path, ck = rundir.load_best(where)
        assert got_path == path and ck["format"] == rundir.BEST_FORMAT and ck["epoch"] == 3
        assert torch.equal(ck["model"]["w"], torch.ones(2))


def test_best_missing_or_unknown_format_is_refused(tmp_path):
    with pytest.raises(ArgosyError, match="no best checkpoint"):
        rundir.load_best(tmp_path)
    torch.save({"format": 99, "model": {}}, tmp_path / "best.pt")
    with pytest.raises(ArgosyError, match="unknown checkpoint format 99 \\(expected 1\\)"):
        rundir.load_best(tmp_path)


def test_checkpoint_versioned_and_legacy_files_load(tmp_path):
    assert rundir.load_checkpoint(tmp_path) is None
    rundir.save_checkpoint(tmp_path, {"epoch": 2})
    assert rundir.load_checkpoint(tmp_path) == {"epoch": 2, "format": rundir.CHECKPOINT_FORMAT}
    torch.save({"epoch": 1}, tmp_path / "checkpoint.pt")          # written before the format field existed
    assert rundir.load_checkpoint(tmp_path)["epoch"] == 1
    torch.save({"epoch": 1, "format": 7}, tmp_path / "checkpoint.pt")
    with pytest.raises(ArgosyError, match="format 7"):
        rundir.load_checkpoint(tmp_path)


def test_default_run_dir():
    assert rundir.default_run_dir("j") == Path("runs/j")
    assert rundir.default_run_dir("j", store="/data/store") == Path("/data/runs/j")
