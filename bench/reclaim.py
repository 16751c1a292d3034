"""Work re-sent by re-claims: a healthy pipeline slower than the claim timeout, and a hung trainer.

Two scenarios, each one ``argosy train`` job on a private Redis, one JSON line per run:

* ``slow``: Cora with the trainer's step simulated at 1 s (``--simulate-gpu-step 1.0``), batch 8,
  ``--claim-timeout 2``, 2 epochs: the batches queued ahead of the trainer age past the timeout
  while nothing is wrong.  Counted: batches re-claimed (the ``reclaim`` events' items, i.e. the
  ``reclaimed_batches`` counter), seeds re-delivered, duplicate arrivals.
* ``hang``: Cora, 4 random parts, batch 16, ``--claim-timeout 3``, 30 epochs; once epoch 3 is done
  and at least 4 items are in flight, the trainer is SIGSTOPped for ``--stop`` seconds (40) and
  continued.  Counted: the batches re-claimed while it was stopped, against the items pending.

``--code DIR`` runs another checkout (e.g. ``git worktree add /tmp/old HEAD~N``; it needs
``DIR/argosy/shared`` and ``DIR/argosy/services`` as links to ``../shared`` and ``../services``) by
putting it first on the jobs' ``PYTHONPATH``; the default is this checkout.  Never asserts.

    python bench/reclaim.py slow --runs 2 [--code /tmp/old]
    python bench/reclaim.py hang --runs 2 [--code /tmp/old]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from argosy.shared.coord import Coordinator  # noqa: E402
from argosy.shared.envs import datasets_dir  # noqa: E402
from argosy.shared.redis_server import EmbeddedRedis  # noqa: E402

CORA = datasets_dir() / "cora.npz"


def _env(code: str | None) -> dict:
    env = dict(os.environ)
    if code:
        env["PYTHONPATH"] = code + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _result(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def _reclaimed(run_dir: Path) -> tuple[int, int]:
    """(items re-claimed, re-claim events) from the run's report."""
    ev = [e for e in json.loads((run_dir / "report.json").read_text())["events"] if e["event"] == "reclaim"]
    return sum(int(e["items"]) for e in ev), len(ev)


def slow(run_dir: Path, code: str | None) -> dict:
    t0 = time.time()
    p = subprocess.run([sys.executable, "-m", "argosy.services.launch", "train", "--data", str(CORA), "--epochs", "2",
                        "--patience", "0", "--batch-size", "8", "--simulate-gpu-step", "1.0", "--claim-timeout", "2",
                        "--run-dir", str(run_dir), "--json"], env=_env(code), capture_output=True, text=True,
                       cwd=tempfile.gettempdir())
    if p.returncode:
        return {"rc": p.returncode, "error": p.stderr[-2000:]}
    res = _result(p.stdout)
    items, events = _reclaimed(run_dir)
    return {"reclaimed_batches": items, "reclaim_events": events, "seeds_redelivered": res["seeds_redelivered"],
            "duplicate_arrivals": res["duplicate_arrivals"], "seeds_trained": res["seeds_trained"],
            "seeds_planned": res["seeds_planned"], "duplicates": res["duplicates"],
            "wall_seconds": round(time.time() - t0, 1), "load": os.getloadavg()[0]}


def hang(run_dir: Path, code: str | None, stop: float) -> dict:
    store = run_dir.parent / "hang-store"
    if not store.exists():
        subprocess.run([sys.executable, "-m", "argosy.services.partitioner", str(CORA), "--parts", "4", "--method",
                        "random", "--out", str(store)], check=True, capture_output=True, env=_env(code))
    with EmbeddedRedis() as srv:
        p = subprocess.Popen([sys.executable, "-m", "argosy.services.launch", "train", "--store", str(store),
                              "--epochs", "30", "--batch-size", "16", "--redis", srv.url, "--job", "hang",
                              "--run-dir", str(run_dir), "--claim-timeout", "3", "--patience", "0", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(code),
                             cwd=tempfile.gettempdir())
        c = Coordinator(srv.url, "hang")
        while len(c.epochs()) < 3 and p.poll() is None:
            time.sleep(0.1)
        pid = c.services("trainer")[0]["pid"]
        while c.pending(4) < 4 and p.poll() is None:      # stopped with work in flight, not between phases
            time.sleep(0.01)
        os.kill(pid, signal.SIGSTOP)
        time.sleep(0.5)
        before, pending = c.metrics().get("reclaimed_batches", 0.0), c.pending(4)
        time.sleep(stop)
        during = c.metrics().get("reclaimed_batches", 0.0) - before
        os.kill(pid, signal.SIGCONT)
        out, err = p.communicate(timeout=900)
        if p.returncode:
            return {"rc": p.returncode, "error": err[-2000:]}
        res = _result(out)
        return {"stop_seconds": stop, "pending_at_stop": pending, "reclaimed_batches_during_stop": int(during),
                "seeds_redelivered": res["seeds_redelivered"], "duplicate_arrivals": res["duplicate_arrivals"],
                "seeds_trained": res["seeds_trained"], "seeds_planned": res["seeds_planned"],
                "duplicates": res["duplicates"], "load": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("scenario", choices=("slow", "hang"))
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--code", default=None, help="another checkout to run the jobs from (see the module docstring)")
    ap.add_argument("--stop", type=float, default=40.0, help="hang: seconds the trainer stays stopped")
    ap.add_argument("--out", default=None, help="where run dirs go (default: a temporary directory)")
    a = ap.parse_args()
    base = Path(a.out or tempfile.mkdtemp(prefix="argosy-reclaim-"))
    for i in range(a.runs):
        run_dir = base / f"{a.scenario}-{i}"
        row = slow(run_dir, a.code) if a.scenario == "slow" else hang(run_dir, a.code, a.stop)
        print(json.dumps({"scenario": a.scenario, "code": a.code or str(ROOT), "run": i, **row}), flush=True)


if __name__ == "__main__":
    main()
