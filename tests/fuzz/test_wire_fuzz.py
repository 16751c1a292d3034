"""The wire fuzz target in the normal suite: corpus verdicts, past crashes, and a short fixed-seed run."""
from pathlib import Path

import pytest

from argosy.shared.errors import InvalidMessageError, ProtocolError
from tests.fuzz import fuzz
from tests.fuzz import wire_target as wt

HOSTILE = sorted(wt.DIR.glob("hostile_*.bin"))


def test_corpus_has_every_hostile_class():
    assert {p.stem.removeprefix("hostile_") for p in HOSTILE} == set(wt.hostile_messages())


@pytest.mark.parametrize("path", HOSTILE, ids=lambda p: p.stem)
def test_hostile_corpus_is_refused(path: Path):
    with pytest.raises(ProtocolError):
        wt.run_one(path.read_bytes())


def test_semantic_classes_are_refused_by_the_validator():
    """Decodable poison is refused by the validator, not by luck in the decoder."""
    for name in ("id_1e12", "id_minus5", "state_key_stream", "duplicate_seeds", "foreign_batch_id", "huge_well_formed",
                 "cached_rows_short", "foreign_cache", "ring_reference"):
        with pytest.raises(InvalidMessageError):
            wt.run_one((wt.DIR / f"hostile_{name}.bin").read_bytes())


@pytest.mark.parametrize("path", sorted(wt.DIR.glob("valid_*.bin")), ids=lambda p: p.stem)
def test_valid_corpus_is_accepted(path: Path):
    wt.run_one(path.read_bytes())


@pytest.mark.parametrize("path", sorted((wt.DIR / "crashes").glob("*.bin")), ids=lambda p: p.stem)
def test_past_crashes_are_fixed(path: Path):
    try:
        wt.run_one(path.read_bytes())
    except wt.EXPECTED:
        pass


def test_short_fuzz_run_finds_no_crash():
    stats = fuzz("wire", seconds=120, seed=7, max_executions=1500, save_crashes=False, log_every=0)
    assert stats.executions == 1500
    assert stats.crashes == []
    assert 0 < stats.rejected < stats.executions          # both verdicts were exercised
