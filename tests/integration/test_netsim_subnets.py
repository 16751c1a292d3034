"""Simulated hosts' subnets never collide: two ``--hosts`` jobs on one machine get two /16s.

The subnet used to be ``10.(16 + pid % 200)``: two launchers whose pids are equal modulo 200 took
the same one on two bridges.  Now a launcher takes, under a lock file, the first ``10.X`` that no
address or route of the root namespace uses.  Real links (``ip link add ... type dummy``), real
processes; skipped, with the reason, where network namespaces cannot be made.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from argosy.services.netsim import NetSim, available, free_subnet, used_subnets

pytestmark = [pytest.mark.integration]
ROOT = Path(__file__).resolve().parents[2]
WHY = available()
needs_netns = pytest.mark.skipif(WHY is not None, reason=f"simulated hosts unavailable: {WHY}")


@pytest.fixture
def dummies():
    made: list[str] = []

    def make(name: str, addr: str | None = None) -> str:
        subprocess.run(["ip", "link", "add", name, "type", "bridge"], check=True, capture_output=True)
        made.append(name)
        if addr:
            subprocess.run(["ip", "addr", "add", addr, "dev", name], check=True, capture_output=True)
        return name

    yield make
    for name in made:
        subprocess.run(["ip", "link", "del", name], capture_output=True)


@needs_netns
def test_a_subnet_in_use_is_skipped(dummies):
    seed = os.getpid()
    x = free_subnet(seed)
    dummies(f"xsn{os.getpid()}a", f"10.{x}.0.1/16")
    assert x in used_subnets()
    assert free_subnet(seed) != x


@needs_netns
def test_netsim_avoids_the_subnet_its_pid_would_have_taken(dummies):
    old = 16 + os.getpid() % 200                 # the old choice, taken by "another job"
    if old not in used_subnets():
        dummies(f"xsn{os.getpid()}b", f"10.{old}.0.1/16")
    sim = NetSim(1).start()
    try:
        assert sim.subnet != f"10.{old}"
        assert all(a.startswith(sim.subnet + ".") for a in sim.nodes.values())
        assert int(sim.subnet.split(".")[1]) in used_subnets()
    finally:
        sim.close()


CLAIM = textwrap.dedent("""
    import subprocess, sys, time
    from argosy.services.netsim import _subnet_lock, free_subnet
    with _subnet_lock():
        x = free_subnet(int(sys.argv[1]))
        time.sleep(0.5)                 # a second launcher checks now: it must wait for the lock
        subprocess.run(["ip", "addr", "add", f"10.{x}.0.1/16", "dev", sys.argv[2]], check=True)
    print(x)
""")


@needs_netns
def test_two_launchers_with_the_same_seed_at_once_get_two_subnets(dummies):
    seed = os.getpid()                              # as if both launchers' pids were equal modulo 200
    devs = [dummies(f"xsn{os.getpid()}{c}") for c in "cd"]
    procs = [subprocess.Popen([sys.executable, "-c", CLAIM, str(seed), d], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for d in devs]
    got = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        got.append(int(out.split()[-1]))
    assert got[0] != got[1], got
