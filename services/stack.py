"""The processes of a job on this machine: spawning, the stack file, local scaling, the reaper.

Every job the launcher runs here (``argosy train``, ``argosy up``, ``argosy demo``) writes a stack
file ``$ARGOSY_HOME/stacks/<job>.json`` (:class:`StackInfo`) and removes it when it ends, so
``status``, ``down`` and ``scale`` find any job by id.  The file is the truth about which replicas
are wanted: ``scale`` adds and removes entries under a lock, and the launcher restarts only
replicas still listed.

Children run in their own session (a Ctrl-C in the terminal reaches the launcher only, which
forwards it) with ``PR_SET_PDEATHSIG`` set, and a small reaper process per job (``python -m
argosy.services.stack reap``) stops whatever the stack file lists (the embedded Redis included)
when the launcher disappears without cleaning up, e.g. after SIGKILL.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from argosy.shared import envs
from argosy.shared.errors import ArgosyError

__all__ = ["StackInfo", "StackFile", "stack_dir", "list_stacks", "find_stack", "LocalStack", "scale_local",
           "spawn", "alive", "pid_alive", "terminate", "LOCAL_SCALABLE", "start_reaper"]

logger = logging.getLogger(__name__)

LOCAL_SCALABLE: tuple[str, ...] = ("sampler", "loader")
_PR_SET_PDEATHSIG = 1


def stack_dir() -> Path:
    """Where stack files live (``$ARGOSY_HOME/stacks``, default ``~/.argosy/stacks``)."""
    return Path(envs.get(envs.HOME) or Path.home() / ".argosy") / "stacks"


@dataclass
class StackInfo:
    """One job's processes on this machine.

    Attributes:
        job: job id.
        redis: Redis URL of the job.
        run_dir: where logs, checkpoint and report go.
        pids: ``service id -> pid`` of the wanted sampler/loader/trainer processes.
        redis_pid: pid of the embedded Redis server (None when an external Redis is used).
        launcher_pid: pid of the process that drives the job (None for stacks from older versions).
        ever: every service id the stack ever had (new replicas get fresh ids).
    """
    job: str
    redis: str
    run_dir: str
    pids: dict[str, int] = field(default_factory=dict)
    redis_pid: int | None = None
    launcher_pid: int | None = None
    ever: list[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: dict) -> "StackInfo":
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in names})


class StackFile:
    """Reader/writer of one stack file; every change goes through :meth:`update` under a file lock."""

    def __init__(self, job: str, directory: Path | None = None):
        self.job = job
        self.path = (directory or stack_dir()) / f"{job}.json"

    def exists(self) -> bool:
        return self.path.exists()

    def read(self) -> StackInfo:
        try:
            return StackInfo.from_dict(json.loads(self.path.read_text()))
        except FileNotFoundError:
            raise ArgosyError(f"no stack file {self.path}: is job {self.job!r} running on this machine?") from None
        except (ValueError, TypeError) as e:
            raise ArgosyError(f"stack file {self.path} is not a stack description ({e})") from None

    def write(self, info: StackInfo) -> None:
        with self._locked():
            self._write(info)

    @contextlib.contextmanager
    def update(self):
        """``with sf.update() as info:`` read, edit ``info`` in place, written back atomically on exit."""
        with self._locked():
            info = self.read()
            yield info
            info.ever = sorted(set(info.ever) | set(info.pids))
            self._write(info)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
        self.path.with_suffix(".lock").unlink(missing_ok=True)

    def _write(self, info: StackInfo) -> None:
        # 0600 from creation: the Redis URL in it carries the job's password.
        tmp = self.path.with_suffix(".json.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(asdict(info)))
        os.replace(tmp, self.path)

    @contextlib.contextmanager
    def _locked(self):
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock = open(self.path.with_suffix(".lock"), "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            lock.close()


def list_stacks(all_users: bool = False) -> list[StackInfo]:
    """Stacks on this machine whose launcher (or, for older stacks, any process) is alive, newest first.

    Only the invoking user's (stack files this user owns: ``$ARGOSY_HOME`` may be shared) unless
    ``all_users``; ``status`` and ``down`` without ``--job`` act on these."""
    d = stack_dir()
    out = []
    uid = os.getuid()
    for p in sorted(d.glob("*.json"), key=lambda q: q.stat().st_mtime, reverse=True) if d.exists() else []:
        with contextlib.suppress(OSError):
            if not all_users and p.stat().st_uid != uid:
                continue
        with contextlib.suppress(ArgosyError):
            info = StackFile(p.stem).read()
            if info.launcher_pid is not None and pid_alive(info.launcher_pid):
                out.append(info)
            elif info.launcher_pid is None and any(pid_alive(x) for x in info.pids.values()):
                out.append(info)
    return out


def find_stack(job: str | None) -> StackFile:
    """The stack file of ``job``; without a job, the only job the invoking user runs on this machine."""
    if job is None:
        running = list_stacks()
        if len(running) > 1:
            raise ArgosyError(f"you run several jobs on this machine ({', '.join(s.job for s in running)}): "
                              "pass --job")
        if not running:
            others = len(list_stacks(all_users=True))
            raise ArgosyError(f"no running stack of yours in {stack_dir()}: start one with `argosy up`, or pass --job"
                              + (f" ({others} job(s) of other users run here; name one with --job)" if others else ""))
        job = running[0].job
    sf = StackFile(job)
    if not sf.exists():
        raise ArgosyError(f"no stack file {sf.path}: was job {job!r} started on this machine?")
    return sf


# ---- processes -------------------------------------------------------------------------------
def pid_alive(pid: int) -> bool:
    """True if ``pid`` runs and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        try:
            os.kill(pid, 0)
            return True
        except (ProcessLookupError, PermissionError):
            return False
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def alive(pid: int, role: str) -> bool:
    """True if ``pid`` is a running (not zombie) ``services.<role>`` process."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return pid_alive(pid)
    # services set their title to "argosy-<id>" when setproctitle is installed
    return pid_alive(pid) and (f"argosy.services.{role}" in cmdline or f"argosy-{role}" in cmdline)


def reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


try:                                      # resolved here: the child of a fork must not dlopen
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):         # not Linux: the reaper alone stops orphans
    _prctl = None


def _die_with_parent(parent: int):
    """``preexec_fn``: SIGTERM this child when the process that started it exits (Linux)."""
    def preexec() -> None:
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:                 # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)
    return preexec


def spawn(cmd: list[str], log_path: Path, env: dict | None = None, tie_to_parent: bool = True) -> subprocess.Popen:
    """Start ``cmd`` in its own session with output appended to ``log_path``.

    ``tie_to_parent``: the child gets SIGTERM when this process exits (off for processes that must
    outlive a short-lived command, e.g. replicas added by ``argosy scale``; the reaper covers them).
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=_die_with_parent(os.getpid()) if tie_to_parent else None)


def service_env(redis_url: str, launcher_pid: int | None = None) -> dict:
    """The environment of a job's trainers, samplers and loaders: this one, the job's Redis, and the
    allocator they run with (:func:`~argosy.shared.malloc.allocator_env`: jemalloc where installed)."""
    from argosy.shared.malloc import allocator_env
    env = allocator_env({**os.environ, envs.REDIS_URL: redis_url, "PYTHONUNBUFFERED": "1"})
    if launcher_pid is not None:
        env[envs.LAUNCHER_PID] = str(launcher_pid)
    return env


def service_cmd(role: str, job: str, sid: str, extra: list[str] | None = None) -> list[str]:
    return [sys.executable, "-m", f"argosy.services.{role}", "--job", job, "--id", sid, *(extra or [])]


def log_tail(path: Path, lines: int = 1) -> str:
    """The last non-empty ``lines`` of a log file ('' if none)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 8192))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join([ln for ln in text.splitlines() if ln.strip()][-lines:])


class LocalStack:
    """The launcher's children of one job: start, report exits, restart, stop; mirrored in the stack file."""

    def __init__(self, job: str, redis_url: str, run_dir: Path, redis_pid: int | None = None):
        self.job, self.redis_url, self.run_dir = job, redis_url, Path(run_dir)
        self.procs: dict[str, subprocess.Popen] = {}
        self.stopped = False
        self.file = StackFile(job)
        self.env = service_env(redis_url, os.getpid())
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.file.write(StackInfo(job=job, redis=redis_url, run_dir=str(self.run_dir.resolve()), redis_pid=redis_pid,
                                  launcher_pid=os.getpid()))
        self.reaper = start_reaper(self.file, self.run_dir / "logs" / "reaper.log")

    def log_path(self, sid: str) -> Path:
        return self.run_dir / "logs" / f"{sid}.log"

    def start(self, role: str, sid: str, extra: list[str] | None = None) -> subprocess.Popen:
        p = spawn(service_cmd(role, self.job, sid, extra), self.log_path(sid), self.env)
        self.procs[sid] = p
        with self.file.update() as info:
            info.pids[sid] = p.pid
        return p

    def start_all(self, num_trainers: int, num_loaders: int, num_samplers: int) -> None:
        # the trainers on this host split its cores (samplers and loaders are one thread each and
        # mostly wait on back-pressure); an explicit ARGOSY_TORCH_THREADS wins
        if not envs.get(envs.TORCH_THREADS):
            self.env[envs.TORCH_THREADS] = str(max(1, envs.torch_threads() // max(num_trainers, 1)))
        for r in range(num_trainers):
            self.start("trainer", f"trainer-{r}", ["--rank", str(r)])
        for i in range(num_loaders):
            self.start("loader", f"loader-{i}")
        for i in range(num_samplers):
            self.start("sampler", f"sampler-{i}")

    def exits(self) -> list[tuple[str, int, bool]]:
        """``(service id, exit code, wanted)`` of children that exited since the last call.

        ``wanted`` is False for a replica that ``argosy scale`` removed from the stack (stopped on
        purpose, not to be restarted).  Exited children are forgotten.
        """
        done = [(sid, p.returncode) for sid, p in list(self.procs.items()) if p.poll() is not None]
        if not done:
            return []
        out = []
        with self.file.update() as info:
            for sid, code in done:
                del self.procs[sid]
                out.append((sid, code, info.pids.pop(sid, None) is not None))
        return out

    def kill_role(self, role: str) -> None:
        for sid in [s for s in self.procs if s.split("-")[0] == role]:
            p = self.procs.pop(sid)
            if p.poll() is None:
                p.kill()
                p.wait()
        with self.file.update() as info:
            for sid in [s for s in info.pids if s.split("-")[0] == role]:
                info.pids.pop(sid)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM every process of the stack (replicas added by ``scale`` too), wait, then SIGKILL."""
        if self.stopped:
            return
        self.stopped = True
        with contextlib.suppress(ArgosyError):
            others = {sid: pid for sid, pid in self.file.read().pids.items() if sid not in self.procs}
            terminate(list(others.values()), timeout=0)
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for p in self.procs.values():
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        with contextlib.suppress(ArgosyError):
            terminate(list(self.file.read().pids.values()), timeout=max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        """Forget the stack: the job is over (call after :meth:`stop` and after Redis stopped)."""
        self.file.remove()
        if self.reaper.poll() is None:
            self.reaper.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.reaper.wait(5)


def terminate(pids: list[int], timeout: float) -> None:
    """SIGTERM ``pids``; those still alive after ``timeout`` seconds get SIGKILL (none waited for if 0)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    if timeout <= 0:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in pids:
            reap(pid)
        if not any(pid_alive(p) for p in pids):
            return
        time.sleep(0.1)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


# ---- the reaper ------------------------------------------------------------------------------
def start_reaper(sf: StackFile, log_path: Path) -> subprocess.Popen:
    """A watchdog process that stops the stack if the launcher (this process) dies without cleaning up."""
    return spawn([sys.executable, "-m", "argosy.services.stack", "reap", "--job", sf.job, "--launcher", str(os.getpid()),
                  "--dir", str(sf.path.parent)], log_path, tie_to_parent=False)


def _reap_main(job: str, launcher: int, directory: Path, interval: float = 0.5, grace: float = 10.0) -> int:
    sf = StackFile(job, directory)
    while pid_alive(launcher):
        time.sleep(interval)
    if not sf.exists():
        return 0                        # the launcher cleaned up
    with contextlib.suppress(ArgosyError):
        info = sf.read()
        if info.launcher_pid == launcher:
            print(f"launcher {launcher} of job {job} is gone; stopping {sorted(info.pids)} and Redis", flush=True)
            terminate(list(info.pids.values()), grace)
            if info.redis_pid:
                terminate([info.redis_pid], grace)
            sf.remove()
    return 0


# ---- local scaling ---------------------------------------------------------------------------
def _index(sid: str, role: str) -> int:
    tail = sid[len(role) + 1:]
    return int(tail) if tail.isdigit() else -1


def scale_local(service: str, replicas: int, job: str | None = None, stop_timeout: float = 0.0) -> dict:
    """Start or stop ``service`` replicas of a local stack so ``replicas`` run.

    Returns ``{"previous", "started", "stopped", "redis", "job"}``.
    """
    if service not in LOCAL_SCALABLE:
        raise ArgosyError(f"{service} is not part of a local `argosy up` stack; scale it with --target compose or k8s")
    sf = find_stack(job)
    started, stopped = [], []
    with sf.update() as info:
        mine = [(sid, pid) for sid, pid in info.pids.items() if sid.startswith(service + "-")]
        live = [(sid, pid) for sid, pid in mine if alive(pid, service)]
        for sid, pid in mine:                 # forget replicas that already exited
            if (sid, pid) not in live:
                info.pids.pop(sid, None)
                reap(pid)
        previous = len(live)
        if replicas > len(live):
            run_dir = Path(info.run_dir or ".")
            next_idx = 1 + max([_index(s, service) for s in info.ever] + [_index(s, service) for s, _ in mine] + [-1])
            env = service_env(info.redis, info.launcher_pid)
            for _ in range(replicas - len(live)):
                sid = f"{service}-{next_idx}"
                next_idx += 1
                p = spawn(service_cmd(service, info.job, sid), run_dir / "logs" / f"{sid}.log", env, tie_to_parent=False)
                info.pids[sid] = p.pid
                started.append(sid)
        elif replicas < len(live):
            for sid, pid in live[replicas:][::-1]:          # newest first
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
                info.pids.pop(sid, None)
                stopped.append(sid)
    stopped_pids = [pid for sid, pid in live if sid in stopped]
    deadline = time.monotonic() + stop_timeout
    while stopped_pids and time.monotonic() < deadline:
        for pid in stopped_pids:
            reap(pid)
        stopped_pids = [pid for pid in stopped_pids if alive(pid, service)]
        time.sleep(0.1)
    return {"previous": previous, "started": started, "stopped": stopped, "redis": info.redis, "job": info.job}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m argosy.services.stack")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("reap", help="stop a job's processes once its launcher is gone")
    r.add_argument("--job", required=True)
    r.add_argument("--launcher", type=int, required=True)
    r.add_argument("--dir", type=Path, required=True)
    a = p.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return _reap_main(a.job, a.launcher, a.dir)


if __name__ == "__main__":
    sys.exit(main())
