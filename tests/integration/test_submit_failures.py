"""``argosy submit --wait`` drives a job whose processes run elsewhere (compose, Kubernetes). It used to
see only the job's state in Redis, so a trainer that could not start (a model its image could not
import) was restarted 13 times while submit waited forever, saying nothing (issue 34, finding 4).
Here real service processes fail against a real Redis, and submit must end with their error."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from argosy.services.launch import RUN_MARKER, claim_run_dir
from argosy.shared.errors import ArgosyError

pytestmark = pytest.mark.integration


def _service(role: str, redis_url: str, job: str, sid: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", f"argosy.services.{role}", "--redis", redis_url, "--job", job,
                             "--id", sid, *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_submit_wait_ends_with_the_error_of_a_trainer_that_cannot_start(small_store, redis_url, tmp_path):
    _, store = small_store
    job = "cannot-start"
    submit = subprocess.Popen([sys.executable, "-m", "argosy.services.launch", "submit", "--store", str(store),
                               "--redis", redis_url, "--job", job, "--run-dir", str(tmp_path / "run"), "--epochs", "2",
                               "--model", "argosy_no_such_module:make", "--wait"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)
    trainers = []
    try:
        for attempt in range(3):          # the orchestrator restarting it changes nothing
            trainers.append(_service("trainer", redis_url, job, "trainer-pod", "--rank", "0"))
            trainers[-1].wait(timeout=120)
        out, err = submit.communicate(timeout=60)
    finally:
        for p in [submit, *trainers]:
            if p.poll() is None:
                p.kill()
    logs = [t.stdout.read() for t in trainers]
    # the first exits EX_CONFIG and records the job's end; the orchestrator's restarts find the job
    # over and exit 0 with one line (compose's restart: on-failure then stops restarting them)
    assert [t.returncode for t in trainers] == [78, 0, 0], [x[-1000:] for x in logs]
    assert all("is already failed (trainer-pod cannot start" in x and "nothing to run" in x for x in logs[1:]), logs[1][-1000:]
    assert submit.returncode == 1, err[-2000:]
    text = out + err
    assert "trainer-pod cannot start" in text and "argosy_no_such_module" in text, text[-2000:]
    assert err.strip().splitlines()[-1].startswith(f"argosy: job {job} failed: trainer-pod cannot start"), err[-500:]


def test_run_dir_of_another_store_is_refused_then_replaced(small_store, tmp_path):
    _, store = small_store
    run = tmp_path / "run"
    run.mkdir()
    claim_run_dir(run, "j", "fp1", str(store))                 # a fresh run dir: claimed
    (run / "checkpoint.pt").write_bytes(b"x")
    claim_run_dir(run, "j", "fp1", str(store))                 # same job again: resumed, no error
    manifest = store / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"name"', '"name" ', 1))     # the store was rebuilt
    with pytest.raises(ArgosyError, match="another store .* Pass --replace"):
        claim_run_dir(run, "j", "fp1", str(store))
    with pytest.raises(ArgosyError, match="another configuration"):
        claim_run_dir(run, "j", "fp2", str(store))
    assert (run / "checkpoint.pt").exists()                    # refused: nothing deleted
    claim_run_dir(run, "j", "fp2", str(store), replace=True)
    assert not (run / "checkpoint.pt").exists()
    assert json.loads((run / RUN_MARKER).read_text())["fingerprint"] == "fp2"


def test_submit_runs_without_torch(small_store, redis_url, tmp_path):
    """`argosy submit` runs in the partitioner image, which has no torch: an import of torch anywhere on
    its path (an own model's source record once did) broke every compose job."""
    _, store = small_store
    (tmp_path / "ownmodels.py").write_text("import torch_geometric\n\ndef make(**kw):\n    pass\n")
    code = ("import sys; sys.modules['torch'] = None; from argosy.services.launch import main; "
            f"sys.exit(main(['submit', '--store', {str(store)!r}, '--redis', {redis_url!r}, '--job', 'notorch', "
            f"'--run-dir', {str(tmp_path / 'run')!r}, '--epochs', '1', '--model', 'ownmodels:make']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "submitted job notorch" in out.stderr
