"""Mutation fuzzing of Argosy's input surfaces (wire decoder + validator, file readers).

A target is a module ``tests.fuzz.<name>_target`` that defines:

* ``EXPECTED``: the exception types a clean rejection may raise (anything else is a crash);
* ``seeds() -> list[bytes]``: starting inputs (usually the files under ``tests/corpus/<name>/``);
* ``run_one(data: bytes) -> None``: feed one input through the code under test;
* optionally ``mutate(data: bytes, rng: random.Random) -> bytes``: a structure-aware mutator
  (the generic byte mutator :func:`mutate_bytes` is used otherwise).

``python -m tests.fuzz TARGET --minutes N`` runs one target; :func:`fuzz` is what the normal
suite calls for a few seconds.  Crashing inputs are written to ``tests/corpus/<name>/crashes/``
with their traceback, so each becomes a regression test.
"""
from __future__ import annotations

import hashlib
import importlib
import random
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["TARGETS", "FuzzStats", "fuzz", "load_target", "mutate_bytes", "CORPUS"]

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
TARGETS = ("wire", "file")

_INTERESTING = [0, 1, 2, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF,
                2**63 - 1, 2**63, 2**64 - 1]


@dataclass
class FuzzStats:
    target: str
    executions: int = 0
    seconds: float = 0.0
    rejected: int = 0
    """Inputs refused with an expected error (the rest were accepted)."""
    crashes: list[tuple[str, str]] = field(default_factory=list)
    """(saved input path, last traceback line) of every distinct crash."""

    @property
    def per_second(self) -> float:
        return self.executions / max(self.seconds, 1e-9)

    def summary(self) -> str:
        return (f"{self.target}: {self.executions} executions in {self.seconds:.0f} s ({self.per_second:.0f}/s), "
                f"{self.rejected} rejected cleanly, {len(self.crashes)} crashes")


def load_target(name: str):
    if name not in TARGETS:
        raise SystemExit(f"unknown fuzz target {name!r} (known: {', '.join(TARGETS)})")
    return importlib.import_module(f"tests.fuzz.{name}_target")


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """Generic mutations: flips, interesting integers, splices, truncation, duplication, insertion."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        if not b:
            b += bytes([rng.randrange(256)])
            continue
        i = rng.randrange(len(b))
        if op == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            b[i] = rng.randrange(256)
        elif op == 2:
            width = rng.choice((1, 2, 4, 8))
            v = rng.choice(_INTERESTING) & ((1 << (8 * width)) - 1)
            b[i:i + width] = v.to_bytes(width, rng.choice(("little", "big")))
        elif op == 3:
            del b[i:i + rng.randint(1, 16)]
        elif op == 4:
            j = rng.randrange(len(b))
            b[i:i] = b[j:j + rng.randint(1, 32)]
        elif op == 5:
            b = b[:i]
        else:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    return bytes(b)


def _save_crash(name: str, data: bytes, tb: str) -> Path:
    d = CORPUS / name / "crashes"
    d.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha1(data).hexdigest()[:16]
    (d / f"{h}.bin").write_bytes(data)
    (d / f"{h}.txt").write_text(tb)
    return d / f"{h}.bin"


def fuzz(name: str, seconds: float, seed: int = 0, max_executions: int | None = None,
         save_crashes: bool = True, log_every: float = 60.0) -> FuzzStats:
    """Mutate the target's seeds for ``seconds`` (or ``max_executions``) and collect crashes."""
    mod = load_target(name)
    rng = random.Random(seed)
    pool = [bytes(s) for s in mod.seeds()]
    if not pool:
        raise SystemExit(f"fuzz target {name!r} has no seed inputs")
    mutate = getattr(mod, "mutate", mutate_bytes)
    expected = tuple(mod.EXPECTED)
    stats, seen = FuzzStats(name), set()
    t0 = last_log = time.monotonic()
    while True:
        now = time.monotonic()
        if now - t0 >= seconds or (max_executions is not None and stats.executions >= max_executions):
            break
        if log_every and now - last_log > log_every:
            stats.seconds = now - t0
            print(stats.summary(), flush=True)
            last_log = now
        data = mutate(rng.choice(pool), rng)
        stats.executions += 1
        try:
            mod.run_one(data)
        except expected:
            stats.rejected += 1
        except Exception:                                   # noqa: BLE001 - a crash is what we look for
            tb = traceback.format_exc()
            sig = tb.strip().splitlines()[-1][:200]
            where = tb.strip().splitlines()[-3] if len(tb.strip().splitlines()) >= 3 else ""
            if (sig, where) not in seen:
                seen.add((sig, where))
                path = _save_crash(name, data, tb) if save_crashes else Path("-")
                stats.crashes.append((str(path), sig))
                print(f"CRASH {path}: {sig}", flush=True)
        else:
            if len(pool) < 512 and rng.random() < 0.01:     # keep some accepted mutants as new seeds
                pool.append(data)
    stats.seconds = time.monotonic() - t0
    return stats
