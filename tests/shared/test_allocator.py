"""The allocator of the throughput processes: jemalloc preloaded where installed (shared/malloc.py)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from argosy.shared import malloc
from argosy.shared.errors import ConfigError
from argosy.services.stack import service_env

PROBE = "from argosy.shared.malloc import allocator; print(allocator())"


def test_choices(monkeypatch):
    base = {"PATH": "/bin", "LD_PRELOAD": "/x/libfoo.so"}
    assert malloc.allocator_env({**base, "ARGOSY_ALLOCATOR": "glibc"}) == {**base, "ARGOSY_ALLOCATOR": "glibc"}
    with pytest.raises(ConfigError, match="expected one of auto, jemalloc, glibc"):
        malloc.allocator_env({"ARGOSY_ALLOCATOR": "tcmalloc"})
    monkeypatch.setattr(malloc, "JEMALLOC_LIBS", ("/nonexistent/libjemalloc.so.2",))
    assert malloc.allocator_env(dict(base)) == base                       # auto, none installed: unchanged
    with pytest.raises(ConfigError, match="apt-get install libjemalloc2"):
        malloc.allocator_env({**base, "ARGOSY_ALLOCATOR": "jemalloc"})


def test_preload_is_added_once_and_keeps_the_users(tmp_path, monkeypatch):
    lib = tmp_path / "libjemalloc.so.2"
    lib.write_bytes(b"")
    monkeypatch.setattr(malloc, "JEMALLOC_LIBS", (str(lib),))
    env = malloc.allocator_env({"LD_PRELOAD": "/x/libfoo.so", "MALLOC_CONF": "narenas:2"})
    assert env["LD_PRELOAD"] == f"{lib}:/x/libfoo.so" and env["MALLOC_CONF"] == "narenas:2"
    assert malloc.allocator_env(env)["LD_PRELOAD"] == env["LD_PRELOAD"]
    assert malloc.allocator_env({})["MALLOC_CONF"] == malloc.JEMALLOC_CONF


def test_a_service_process_runs_on_jemalloc_where_installed():
    """A process started with the stack's environment maps jemalloc (CI installs libjemalloc2), one
    started with ARGOSY_ALLOCATOR=glibc does not."""
    env = service_env("redis://127.0.0.1:1/0")
    got = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    assert got.stdout.strip() == ("jemalloc" if malloc.jemalloc_path() else "system"), got.stderr
    plain = dict(os.environ, ARGOSY_ALLOCATOR="glibc")
    plain.pop("LD_PRELOAD", None)
    got = subprocess.run([sys.executable, "-c", PROBE], env=malloc.allocator_env(plain), capture_output=True,
                         text=True, check=True)
    assert got.stdout.strip() == "system"


def test_shell_lines_for_the_container_entrypoint():
    out = subprocess.run([sys.executable, "-m", "argosy.shared.malloc", "--shell"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    if malloc.jemalloc_path() and "libjemalloc" not in os.environ.get("LD_PRELOAD", ""):
        assert f"export LD_PRELOAD={malloc.jemalloc_path()}" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "argosy.shared.malloc", "--shell"], capture_output=True, text=True,
                         env={**os.environ, "ARGOSY_ALLOCATOR": "nope"})
    assert bad.returncode == 2 and "ARGOSY_ALLOCATOR='nope'" in bad.stderr and not bad.stdout


PURGE = """
import numpy as np
from argosy.shared.malloc import allocator, trim_heap
from argosy.shared.rss import rss_bytes
a = [np.ones(1 << 20) for _ in range(32)]          # 256 MB in 8 MB arrays
top = rss_bytes()
del a
kept = rss_bytes()
trim_heap()
print(allocator(), top >> 20, kept >> 20, rss_bytes() >> 20)
"""


def test_freed_pages_stay_until_the_trim_hands_them_back():
    """On jemalloc (JEMALLOC_CONF: no time decay) freed tensors stay for the next batch and the periodic trim
    (arena purge) hands them back; on glibc, 8 MB arrays are mapped and go back when freed."""
    env = service_env("redis://127.0.0.1:1/0")
    out = subprocess.run([sys.executable, "-c", PURGE], env=env, capture_output=True, text=True, check=True)
    name, top, kept, after = out.stdout.split()
    top, kept, after = int(top), int(kept), int(after)
    assert name == ("jemalloc" if malloc.jemalloc_path() else "system")
    if name == "jemalloc":
        assert kept > top - 32, out.stdout            # kept for reuse
    assert after < top - 200, out.stdout              # handed back
