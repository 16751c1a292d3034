"""Run a Python script against a real full disk: a small tmpfs mounted in a user namespace."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def run_on_full_disk(tmp_path: Path, size: str, script: str) -> subprocess.CompletedProcess:
    """Run ``script`` with ``sys.argv[1]`` a fresh tmpfs of ``size`` (e.g. ``64k``); skips where
    ``unshare`` is missing. Returns the finished process (text stdout/stderr)."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare not available")
    mnt = tmp_path / "full"
    mnt.mkdir()
    path = tmp_path / "fill.py"
    path.write_text(script)
    return subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size={size} tmpfs {mnt} && "
                           f"{sys.executable} {path} {mnt}"], capture_output=True, text=True, timeout=120)
