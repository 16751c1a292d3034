"""The env-var table and the cross-process records."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from argosy.shared import envs
from argosy.shared.errors import ConfigError
from argosy.shared.records import STOP_STATES, EpochRecord, JobResult, JobState, ServiceInfo

ROOT = Path(__file__).resolve().parents[2]


def test_every_declared_name_is_in_the_table():
    names = {v for k, v in vars(envs).items() if k.isupper() and isinstance(v, str)}
    assert names == set(envs.TABLE), names ^ set(envs.TABLE)


def test_no_env_var_is_read_outside_the_table():
    """``os.environ``/``os.getenv`` reads live in shared/envs.py only (writes to a child's env are fine)."""
    out = subprocess.run(["grep", "-rnE", r"os\.environ\.get|os\.getenv|os\.environ\[", "shared", "services", "argosy",
                          "docker", "--include=*.py"], cwd=ROOT, capture_output=True, text=True).stdout
    offenders = [ln for ln in out.splitlines() if not ln.startswith("shared/envs.py")]
    assert offenders == []


def test_get_parses_and_names_the_variable(monkeypatch):
    monkeypatch.setenv(envs.SPEC_WAIT, "12.5")
    assert envs.get(envs.SPEC_WAIT) == 12.5
    monkeypatch.setenv(envs.PORT, "")
    assert envs.get(envs.PORT) == 0                      # empty = unset: the declared default
    monkeypatch.setenv(envs.PORT, "eighty")
    with pytest.raises(ConfigError, match=r"\$ARGOSY_PORT='eighty' is not a valid int"):
        envs.get(envs.PORT)
    with pytest.raises(KeyError, match="not declared"):
        envs.get("ARGOSY_NOT_A_THING")


def test_job_state_is_a_str_enum_and_stop_states():
    assert JobState("stopping") is JobState.STOPPING and str(JobState.DONE) == "done"
    assert "stopping" in STOP_STATES and "failed" in STOP_STATES and "running" not in STOP_STATES


def test_epoch_record_round_trip_keeps_unknown_fields():
    d = {"epoch": 3, "train_loss": 0.5, "val_accuracy": None, "halo_bytes": 10}
    rec = EpochRecord.from_dict(d)
    assert rec.epoch == 3 and rec.extra == {"halo_bytes": 10}
    assert EpochRecord.from_dict(rec.to_dict()) == rec
    assert set(rec.to_dict()) >= set(d)


def test_service_info_and_job_result():
    s = ServiceInfo.from_dict({"role": "loader", "id": "loader-0", "alive": True, "heartbeat": 10.0, "endpoint": "tcp://x"})
    assert s.heartbeat_age(12.5) == 2.5 and s.extra == {"endpoint": "tcp://x"}
    assert ServiceInfo.from_dict({"role": "loader", "id": "l", "alive": False}).heartbeat_age(1.0) is None
    r = JobResult.from_dict({"error": "boom", "seeds_trained": 4})
    assert r.error == "boom" and r.to_dict() == {"seeds_trained": 4, "error": "boom", "restarts": 0, "trainer_restarts": 0}
    assert JobResult.from_dict(None).error is None


def test_keys_have_no_dead_entries():
    from argosy.shared import keys
    text = (ROOT / "shared" / "keys.py").read_text()
    for name in re.findall(r"^def (\w+)\(", text, re.M):
        used = subprocess.run(["grep", "-rlw", f"keys.{name}", "shared", "services", "docker", "--include=*.py"],
                              cwd=ROOT, capture_output=True, text=True).stdout
        assert used, f"keys.{name} is not used"
    assert keys.autoscale("j", "decisions") == "argosy:j:autoscale:decisions"
