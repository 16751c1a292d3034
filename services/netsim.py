"""A multi-host cluster on one machine: Linux network namespaces joined by a bridge, links shaped with tc.

``argosy train ... --hosts N [--link-rate 1gbit] [--link-delay 0.2ms]`` runs a job on N simulated
hosts: namespace ``h{i}`` holds host i's sampler and loader, ``gpu`` the trainers, ``redis`` the
Redis server.  Every namespace has one veth to a bridge in the root namespace (which also has an
address, so the driver reaches Redis).  Each host link is shaped in both directions with ``tbf``
(rate) and, when the kernel has it, ``netem`` (delay).  The trainers' link is unshaped unless
``--trainer-link-rate`` is given: it stands for a GPU server's fatter NIC.  Each host gets a
directory with only its parts (``ARGOSY_LOCAL_STORE``), staged before the job starts; a part a
host takes over later is staged from the job's store then.

Clean-up: every namespace, veth and bridge is named after the launcher's pid (``ag<pid>...``).
:meth:`NetSim.close` removes them; a watchdog process (``python -m argosy.services.netsim reap``)
removes them if the launcher is killed; and :func:`sweep` removes those of any dead launcher.
Needs root (``CAP_NET_ADMIN``) and ``ip``/``tc``; :func:`available` says why not otherwise.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from argosy.shared import envs
from argosy.shared.errors import ArgosyError, ConfigError
from argosy.shared.ownership import assign_parts
from argosy.shared.redis_server import EmbeddedRedis, find_redis_server
from argosy.shared.store.stage import stage_parts

__all__ = ["NetSim", "NamespacedRedis", "available", "sweep", "cleanup", "parse_rate"]

logger = logging.getLogger(__name__)
PREFIX = "ag"


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise ArgosyError(f"`{' '.join(cmd)}` failed: {p.stderr.strip() or p.stdout.strip()}")
    return p


def available() -> str | None:
    """None when namespaces, veths and tbf can be made here; else the reason they cannot."""
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (iproute2)"
    name = f"{PREFIX}{os.getpid()}probe"
    try:
        p = _run("ip", "netns", "add", name, check=False)
        if p.returncode != 0:
            return f"cannot create a network namespace: {p.stderr.strip()}"
        p = _run("ip", "link", "add", f"{PREFIX}{os.getpid()}pv", "type", "veth", "peer", "name",
                 f"{PREFIX}{os.getpid()}pw", check=False)
        if p.returncode != 0:
            return f"cannot create a veth pair: {p.stderr.strip()}"
        p = _run("tc", "qdisc", "add", "dev", f"{PREFIX}{os.getpid()}pv", "root", "tbf", "rate", "1gbit", "burst",
                 "128kb", "latency", "50ms", check=False)
        if p.returncode != 0:
            return f"cannot shape a link with tc tbf: {p.stderr.strip()}"
        return None
    finally:
        _run("ip", "link", "del", f"{PREFIX}{os.getpid()}pv", check=False)
        _run("ip", "netns", "del", name, check=False)


def _netem_available() -> bool:
    name = f"{PREFIX}{os.getpid()}nm"
    try:
        _run("ip", "link", "add", name, "type", "veth", "peer", "name", name + "p", check=False)
        return _run("tc", "qdisc", "add", "dev", name, "root", "netem", "delay", "1ms", check=False).returncode == 0
    finally:
        _run("ip", "link", "del", name, check=False)


def parse_rate(text: str | None) -> int | None:
    """``1gbit``, ``100mbit``, ``500kbit`` or bits/s -> bits per second (None: unshaped)."""
    if text in (None, "", "none", "0"):
        return None
    s = str(text).strip().lower().removesuffix("bps").removesuffix("bit").removesuffix("/s")
    mult = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
    try:
        v = float(s[:-1]) * mult[s[-1]] if s and s[-1] in mult else float(s)
    except ValueError:
        raise ConfigError(f"cannot parse link rate {text!r} (expected e.g. 1gbit, 100mbit)") from None
    if v <= 0:
        raise ConfigError(f"link rate must be positive (got {text!r})")
    return int(v)


def _owner_alive(prefix: str) -> bool:
    try:
        pid = int(prefix[len(PREFIX):])
    except ValueError:
        return True
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _prefixes() -> set[str]:
    out = set()
    for line in _run("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        if name.startswith(PREFIX) and "-" in name:
            out.add(name.split("-")[0])
    return out


def _forward_rule(br: str) -> list[str]:
    return ["FORWARD", "-i", br, "-o", br, "-j", "ACCEPT"]


def _allow_bridged(br: str) -> None:
    """Let traffic between the namespaces cross the bridge where iptables would drop it.

    With ``br_netfilter`` loaded (``net.bridge.bridge-nf-call-iptables = 1``), bridged frames go
    through the iptables FORWARD chain, whose policy Docker sets to DROP: the hosts would not reach
    Redis or each other.  One ACCEPT rule for this bridge only, removed by :func:`cleanup`.
    """
    if shutil.which("iptables") is None:
        return
    try:
        on = Path("/proc/sys/net/bridge/bridge-nf-call-iptables").read_text().strip() == "1"
    except OSError:
        on = False
    if on:
        _run("iptables", "-I", *_forward_rule(br), check=False)


def _drop_bridge_rules(prefix: str) -> None:
    if shutil.which("iptables") is None:
        return
    for line in _run("iptables", "-S", "FORWARD", check=False).stdout.splitlines():
        f = line.split()
        if len(f) >= 5 and f[0] == "-A" and f[2] == "-i" and f[3] == f"{prefix}br":
            _run("iptables", "-D", *_forward_rule(f[3]), check=False)


def cleanup(prefix: str) -> None:
    """Kill every process in the ``prefix`` namespaces, delete their links, the bridge and the namespaces.

    Links go first: deleting a veth's host end deletes its peer at once, whereas a deleted namespace
    releases its devices later, from a kernel work queue (seconds on a busy machine).
    """
    names = [line.split()[0] for line in _run("ip", "netns", "list", check=False).stdout.splitlines()
             if line.strip() and line.split()[0].startswith(prefix + "-")]
    for name in names:
        for pid in _run("ip", "netns", "pids", name, check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    for line in _run("ip", "-o", "link", "show", check=False).stdout.splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            dev = parts[1].strip().split("@")[0]
            if dev.startswith(prefix) and dev[len(prefix):len(prefix) + 1] in ("h", "b", "g", "r"):
                _run("ip", "link", "del", dev, check=False)
    for name in names:
        _run("ip", "netns", "del", name, check=False)
    _drop_bridge_rules(prefix)


def sweep() -> list[str]:
    """Remove the namespaces and links of launchers that no longer run; returns their prefixes."""
    dead = [p for p in _prefixes() if not _owner_alive(p)]
    for p in dead:
        cleanup(p)
    return dead


SUBNETS = range(16, 216)
"""Second octets of the /16s simulated hosts may use (``10.16.0.0/16`` .. ``10.215.0.0/16``)."""
SUBNET_LOCK = Path("/run/lock" if os.path.isdir("/run/lock") else "/tmp") / "argosy-netsim.lock"


@contextlib.contextmanager
def _subnet_lock():
    """An exclusive lock (``flock``) every launcher holds from choosing its subnet until its bridge has it."""
    with open(SUBNET_LOCK, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def used_subnets() -> set[int]:
    """Second octets X of every ``10.X`` address or route of the root namespace (other jobs' bridges, real networks)."""
    text = _run("ip", "-4", "-o", "addr", "show", check=False).stdout + _run("ip", "-4", "route", "show", check=False).stdout
    used = set()
    for m in re.finditer(r"(?<![\d.])10\.(\d{1,3})\.\d{1,3}\.\d{1,3}(?:/(\d{1,2}))?", text):
        if m.group(2) is None or int(m.group(2)) >= 16:     # 10.0.0.0/8 and the like cover every X: not a collision
            used.add(int(m.group(1)))
    return used


def free_subnet(seed: int) -> int:
    """A second octet X for this job's ``10.X.0.0/16`` that no address or route here uses yet: the first
    free one from ``16 + seed % 200`` on.  Call under :func:`_subnet_lock` and add the address before it is released."""
    used = used_subnets()
    start = seed % len(SUBNETS)
    for k in range(len(SUBNETS)):
        x = SUBNETS[(start + k) % len(SUBNETS)]
        if x not in used:
            return x
    raise ArgosyError(f"no free 10.X.0.0/16 for simulated hosts: 10.{SUBNETS[0]}-10.{SUBNETS[-1]} all in use "
                      "(`ip -4 addr`, `ip -4 route`); `python -m argosy.services.netsim sweep` removes dead jobs' bridges")


class NetSim:
    """The namespaces, links and shaping of one job.

    Args:
        hosts: number of CPU hosts (``h0`` ...).
        rate: bits/s of every host link (None: unshaped); delay: one-way delay string for netem.
        trainer_rate: bits/s of the trainers' link (None: unshaped).
    """

    def __init__(self, hosts: int, rate: int | None = None, delay: str | None = None, trainer_rate: int | None = None):
        if hosts < 1:
            raise ConfigError(f"--hosts must be >= 1 (got {hosts})")
        if hosts > 200:
            raise ConfigError(f"--hosts {hosts}: at most 200 simulated hosts")
        self.hosts, self.rate, self.delay, self.trainer_rate = hosts, rate, delay, trainer_rate
        self.prefix = f"{PREFIX}{os.getpid()}"
        self.subnet = ""                         # "10.X", chosen by :meth:`start` (:func:`_subnet_lock`)
        self.nodes: dict[str, str] = {}          # node name -> address
        self.watchdog: subprocess.Popen | None = None

    @classmethod
    def attach(cls, launcher_pid: int, hosts: int) -> "NetSim":
        """A handle on the namespaces and links of the launcher ``launcher_pid`` (fault injection from
        outside: :meth:`link`, :meth:`ns`, :meth:`exec_prefix`); it does not own them (never ``close`` it)."""
        sim = cls(hosts)
        sim.prefix = f"{PREFIX}{launcher_pid}"
        return sim

    def ns(self, node: str) -> str:
        return f"{self.prefix}-{node}"

    def _dev(self, node: str) -> str:
        return f"{self.prefix}{'h' + node[1:] if node.startswith('h') else node[0]}"

    def _shape(self, dev: str, ns: str | None, rate: int | None) -> None:
        pre = ["ip", "netns", "exec", ns] if ns else []
        if self.delay:
            cmd = [*pre, "tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem", "delay", self.delay]
            _run(*cmd)
            if rate:
                _run(*pre, "tc", "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "tbf", "rate",
                     str(rate), "burst", str(max(rate // 800, 32 * 1024)), "latency", "100ms")
        elif rate:
            # burst: ~10 ms of traffic (at least 32 KiB) so a 1 Gbit/s link can reach its rate at HZ timer resolution
            _run(*pre, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", str(rate), "burst",
                 str(max(rate // 800, 32 * 1024)), "latency", "100ms")

    def start(self) -> "NetSim":
        why = available()
        if why:
            raise ArgosyError(f"--hosts needs network namespaces: {why}")
        if self.delay and not _netem_available():
            raise ArgosyError("--link-delay needs the netem qdisc, which this kernel does not provide "
                              "(modprobe sch_netem); run without --link-delay")
        sweep()
        self.watchdog = subprocess.Popen([sys.executable, "-m", "argosy.services.netsim", "reap", "--parent",
                                          str(os.getpid()), "--prefix", self.prefix],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            br = f"{self.prefix}br"
            _run("ip", "link", "add", br, "type", "bridge")
            with _subnet_lock():               # two launchers starting at once never take the same /16
                self.subnet = f"10.{free_subnet(os.getpid())}"
                _run("ip", "addr", "add", f"{self.subnet}.0.1/16", "dev", br)
            _run("ip", "link", "set", br, "up")
            _allow_bridged(br)
            names = [f"h{i}" for i in range(self.hosts)] + ["gpu", "redis"]
            for idx, node in enumerate(names):
                ns, dev = self.ns(node), self._dev(node)
                addr = f"{self.subnet}.{1 + idx // 250}.{1 + idx % 250}"
                _run("ip", "netns", "add", ns)
                _run("ip", "link", "add", dev, "type", "veth", "peer", "name", dev + "p")
                _run("ip", "link", "set", dev + "p", "netns", ns)
                _run("ip", "netns", "exec", ns, "ip", "link", "set", dev + "p", "name", "eth0")
                _run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{addr}/16", "dev", "eth0")
                _run("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
                _run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
                _run("ip", "link", "set", dev, "master", br)
                _run("ip", "link", "set", dev, "up")
                rate = self.trainer_rate if node == "gpu" else self.rate
                self._shape("eth0", ns, rate)          # traffic leaving the host
                self._shape(dev, None, rate)           # traffic arriving at the host
                self.nodes[node] = addr
        except BaseException:
            self.close()
            raise
        logger.info("simulated %d hosts (%s) on bridge %s, link %s%s", self.hosts, self.prefix, br,
                    f"{self.rate / 1e9:g} Gbit/s" if self.rate else "unshaped",
                    f", delay {self.delay}" if self.delay else "")
        return self

    def exec_prefix(self, node: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns(node)]

    def env(self, node: str) -> dict[str, str]:
        return {envs.HOST_LABEL: node, envs.BIND_HOST: self.nodes[node], envs.ADVERTISE_HOST: self.nodes[node]}

    def stage(self, store: str | Path, root: Path) -> dict[str, Path]:
        """Give each host a directory with only the parts it will own (one sampler and loader per host)."""
        from argosy.shared.store import PartitionStore
        k = PartitionStore(store).num_parts
        own = assign_parts(k, [(f"h{i}", f"h{i}") for i in range(self.hosts)])
        dirs = {}
        for i in range(self.hosts):
            d = Path(root) / f"h{i}" / "store"
            if d.exists():
                shutil.rmtree(d)
            stage_parts(store, d, own[f"h{i}"])
            dirs[f"h{i}"] = d
        return dirs

    def link(self, node: str, up: bool) -> None:
        """Take a host's link down (fault injection) or back up."""
        _run("ip", "link", "set", self._dev(node), "up" if up else "down")

    def close(self) -> None:
        cleanup(self.prefix)
        if self.watchdog is not None and self.watchdog.poll() is None:
            self.watchdog.terminate()
            try:
                self.watchdog.wait(5)
            except subprocess.TimeoutExpired:
                self.watchdog.kill()


class NamespacedRedis(EmbeddedRedis):
    """The job's Redis server inside the ``redis`` namespace, reached over the bridge."""

    def __init__(self, sim: NetSim, data_dir: str):
        super().__init__(port=6379, data_dir=data_dir)
        self.sim = sim
        self.host = sim.nodes["redis"]

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def start(self, timeout: float = 10.0) -> "NamespacedRedis":
        args = [*self.sim.exec_prefix("redis"), find_redis_server(), "--port", str(self.port), "--bind", self.host,
                "--save", "", "--appendonly", "yes", "--appendfsync", "everysec", "--dir", self._dir,
                "--loglevel", "warning", "--daemonize", "no", "--protected-mode", "no"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(Path(self._dir) / "log", "wb"),
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ArgosyError(f"redis-server in namespace exited: {(Path(self._dir) / 'log').read_text()[-500:]}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith((b"+PONG", b"-LOADING")):
                        return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise ArgosyError(f"redis-server in namespace did not answer on {self.host}:{self.port}")


def make_stack(sim: NetSim, job: str, redis_url: str, run_dir: Path, host_dirs: dict[str, Path], redis_pid=None):
    """A :class:`~argosy.services.stack.LocalStack` whose processes start inside the namespaces."""
    from argosy.services.stack import LocalStack, service_cmd, spawn

    class NetStack(LocalStack):
        """Samplers and loaders one per host (``sampler-i`` on ``h{i % N}``), trainers on ``gpu``; a
        replacement of a dead replica starts on the host that lost it."""

        def __init__(self):
            super().__init__(job, redis_url, run_dir, redis_pid=redis_pid)
            self.placed: dict[str, str] = {}
            self.vacant: dict[str, list[str]] = {"sampler": [], "loader": []}

        def _host_for(self, role: str, sid: str) -> str:
            if role == "trainer":
                return "gpu"
            if self.vacant.get(role):
                return self.vacant[role].pop(0)
            tail = sid.rsplit("-", 1)[-1]
            if tail.isdigit():
                return f"h{int(tail) % sim.hosts}"
            used = [h for s, h in self.placed.items() if s.startswith(role) and s in self.procs]
            return min((f"h{i}" for i in range(sim.hosts)), key=lambda h: (used.count(h), h))

        def start(self, role, sid, extra=None):
            node = self._host_for(role, sid)
            self.placed[sid] = node
            env = {**self.env, **sim.env(node)}
            if node in host_dirs:
                env[envs.LOCAL_STORE] = str(host_dirs[node].resolve())
            p = spawn([*sim.exec_prefix(node), *service_cmd(role, self.job, sid, extra)], self.log_path(sid), env)
            self.procs[sid] = p
            with self.file.update() as info:
                info.pids[sid] = p.pid
            logger.info("%s started on simulated host %s", sid, node)
            return p

        def exits(self):
            out = super().exits()
            for sid, code, wanted in out:
                role = sid.split("-")[0]
                if role in self.vacant and sid in self.placed:
                    self.vacant[role].append(self.placed[sid])
            return out

        def host_of(self, sid: str) -> str:
            return self.placed[sid]

    return NetStack()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m argosy.services.netsim", description="simulated-host housekeeping")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("reap", help="wait for a launcher to exit, then remove its namespaces and links")
    r.add_argument("--parent", type=int, required=True)
    r.add_argument("--prefix", required=True)
    sub.add_parser("sweep", help="remove namespaces and links of launchers that no longer run")
    args = p.parse_args(argv)
    if args.cmd == "sweep":
        print(" ".join(sweep()))
        return 0
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))     # the launcher cleaned up itself
    while True:
        try:
            os.kill(args.parent, 0)
        except ProcessLookupError:
            cleanup(args.prefix)
            return 0
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main())
