"""The heterogeneous accuracy figures, through the whole pipeline with defaults: AIFB (R-GCN entity
classification, mean test accuracy over seeds; paper 95.83) and CoDEx-S (ComplEx, filtered test
MRR and Hits@k; published 0.465 / 0.646).  Each run is ``argosy train --data DIR --seed S --json``
in its own process; the lines and a table go to stdout and ``--out`` (JSON lines).

Usage: python bench/hetero_accuracy.py [--aifb-seeds 5] [--codex-seeds 1] [--out results.jsonl]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from argosy.shared.envs import datasets_dir

KEYS = {"aifb": ("test_accuracy", "val_accuracy", "best_epoch", "epochs"),
        "codex-s": ("test_mrr", "test_hits1", "test_hits3", "test_hits10", "val_mrr", "best_epoch", "epochs")}


def run(data: Path, seed: int, tmp: Path) -> dict:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "argosy.services.launch", "train", "--data", str(data), "--seed",
                        str(seed), "--run-dir", str(tmp / f"{data.name}-{seed}"), "--json"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"}
    res = json.loads(p.stdout.strip().splitlines()[-1])
    out = {k: res.get(k) for k in KEYS[data.name]}
    out.update(seconds=round(time.perf_counter() - t0, 1), seeds_planned=res.get("seeds_planned"),
               seeds_trained=res.get("seeds_trained"), duplicates=res.get("duplicates"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--aifb-seeds", type=int, default=5)
    ap.add_argument("--codex-seeds", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="argosy-hetero-acc-") as tmp:
        for name, seeds in (("aifb", a.aifb_seeds), ("codex-s", a.codex_seeds)):
            data = datasets_dir() / "hetero" / name
            if not data.exists():
                print(f"{data}: not present, skipped", file=sys.stderr)
                continue
            for s in range(seeds):
                r = {"dataset": name, "seed": s, **run(data, s, Path(tmp))}
                rows.append(r)
                print(json.dumps(r), flush=True)
                if a.out:
                    with open(a.out, "a") as fh:
                        fh.write(json.dumps(r) + "\n")
    for name, key in (("aifb", "test_accuracy"), ("codex-s", "test_mrr")):
        vals = [r[key] for r in rows if r["dataset"] == name and r.get(key) is not None]
        if vals:
            print(f"{name}: mean {key} {sum(vals) / len(vals):.4f} over {len(vals)} seed(s): "
                  f"{', '.join(f'{v:.4f}' for v in vals)}")


if __name__ == "__main__":
    main()
