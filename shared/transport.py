"""ZeroMQ sockets made in one place (high-water marks, linger) and typed send/receive.

Back-pressure is configured here: PUSH sockets have a small send high-water mark, so when the
next tier is slow ``send`` blocks and the sender stops claiming work instead of buffering.
Sends and receives poll in short slices so a stop request (SIGTERM) is honoured within ~0.2 s.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from pathlib import Path

import zmq

from argosy.shared import envs
from argosy.shared.errors import ProtocolError
from argosy.shared.protocol import Message
from argosy.shared.wire import DEFAULT_LIMITS, Limits, decode, encode

__all__ = ["make_socket", "bind_random", "send_msg", "recv_msg", "advertise_host", "create_keys", "CurveKeys",
           "ZapHandler", "Receiver", "peer_of", "rendezvous_store",
           "bind_host", "retain_large_buffers", "bind_local", "unbind_local", "connect_endpoint", "host_boot_id",
           "local_ring_dir"]

logger = logging.getLogger(__name__)


def _is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def advertise_host() -> str:
    """Where peers reach this process: ``ARGOSY_ADVERTISE_HOST``; ``auto`` = this host's own address."""
    host = envs.get(envs.ADVERTISE_HOST)
    if host == "auto":
        import socket
        host = socket.gethostbyname(socket.gethostname())
    return host


def bind_host() -> str:
    """The one interface to listen on: ``ARGOSY_BIND_HOST`` if set (``auto`` = the advertised
    address), else loopback on one host, else (a non-loopback advertised host, as in containers)
    that advertised interface, never every interface unless ``0.0.0.0`` is asked for explicitly."""
    host = envs.get(envs.BIND_HOST, "")
    if host and host != "auto":
        return host
    adv = advertise_host()
    if not host and _is_loopback(adv):
        return "127.0.0.1"
    import socket
    try:
        return socket.gethostbyname(adv)
    except OSError as e:
        raise ValueError(f"cannot resolve the advertised host {adv!r} to bind to ({e}); set "
                         f"{envs.BIND_HOST} to an interface address") from None


class CurveKeys:
    """ZeroMQ CURVE encryption + authentication with an allow-list of client keys.

    ``ARGOSY_CURVE_KEYS=DIR`` (a directory made by :func:`create_keys`, mounted from a Secret in
    Kubernetes) turns it on: sockets that bind are CURVE servers, sockets that connect are CURVE
    clients.  A server accepts only clients whose public key is in ``DIR/authorized/*.key``
    (checked by the context's :class:`ZapHandler`), so holding the server's public key, or any
    self-made key pair, delivers nothing.
    """

    def __init__(self, directory: str):
        import zmq.auth
        d = Path(directory)
        try:
            self.server_public, self.server_secret = zmq.auth.load_certificate(d / "server.key_secret")
            self.client_public, self.client_secret = zmq.auth.load_certificate(d / "client.key_secret")
        except (OSError, ValueError) as e:
            raise ValueError(f"ARGOSY_CURVE_KEYS={directory}: cannot read CURVE keys ({e}); "
                             "create them with `argosy keys DIR`") from None
        self.authorized = d / "authorized"
        for secret in (d / "server.key_secret", d / "client.key_secret"):
            if secret.stat().st_mode & 0o077:
                logger.warning("%s is readable by other users (mode %o); `chmod 600` it", secret,
                               secret.stat().st_mode & 0o777)

    @classmethod
    def from_env(cls) -> "CurveKeys | None":
        d = envs.get(envs.CURVE_KEYS)
        return cls(d) if d else None

    def allowed_clients(self) -> set[bytes]:
        """Z85 public keys of the authorised clients (``DIR/authorized/*.key``)."""
        import zmq.auth
        out = set()
        for f in sorted(self.authorized.glob("*.key")) if self.authorized.is_dir() else []:
            public, _ = zmq.auth.load_certificate(f)
            out.add(public)
        return out

    def server(self, ctx: zmq.Context, sock: zmq.Socket) -> None:
        ZapHandler.for_context(ctx, self)
        sock.zap_domain = b"argosy"
        sock.curve_secretkey = self.server_secret
        sock.curve_publickey = self.server_public
        sock.curve_server = True

    def client(self, sock: zmq.Socket) -> None:
        sock.curve_secretkey = self.client_secret
        sock.curve_publickey = self.client_public
        sock.curve_serverkey = self.server_public


class ZapHandler:
    """The context's ZAP authenticator (RFC 27): who may connect, and a User-Id on every message.

    With CURVE, a client is admitted only if its public key is on the allow-list and was not cut
    off; its messages carry ``User-Id = "curve:<z85 key>"``.  Without CURVE (NULL mechanism) every
    connection is admitted and gets its own ``User-Id = "conn:<n>@<address>"``, so a receiver can
    still tell connections apart and cut one off.  One handler per context, started on the first
    server socket, serving on a thread until the context terminates.
    """

    _by_context: dict[int, "ZapHandler"] = {}
    _lock = threading.Lock()

    def __init__(self, ctx: zmq.Context, keys: "CurveKeys | None"):
        self.allowed = keys.allowed_clients() if keys is not None else None
        self.banned: set[str] = set()
        self.refused = 0
        self._n = 0
        self._sock = ctx.socket(zmq.REP)
        self._sock.linger = 0
        self._sock.bind("inproc://zeromq.zap.01")
        self._ctx_id = id(ctx)
        self._thread = threading.Thread(target=self._serve, name="argosy-zap", daemon=True)
        self._thread.start()

    @classmethod
    def for_context(cls, ctx: zmq.Context, keys: "CurveKeys | None") -> "ZapHandler":
        with cls._lock:
            h = cls._by_context.get(id(ctx))
            if h is None:
                h = cls._by_context[id(ctx)] = cls(ctx, keys)
            elif keys is not None and h.allowed is None:
                h.allowed = keys.allowed_clients()
            return h

    def ban(self, user_id: str) -> None:
        """Refuse this CURVE key from now on (a connection id is simply never seen again)."""
        self.banned.add(user_id)

    def _decide(self, address: str, mechanism: bytes, credentials: list[bytes]) -> tuple[bytes, bytes, str]:
        if mechanism == b"CURVE" and len(credentials) == 1 and len(credentials[0]) == 32:
            key = zmq.utils.z85.encode(credentials[0])
            uid = "curve:" + key.decode()
            if self.allowed is None or key not in self.allowed:
                return b"400", b"client key not authorised", ""
            if uid in self.banned:
                return b"400", b"client key cut off", ""
            return b"200", b"OK", uid
        if mechanism == b"NULL" and self.allowed is None:
            self._n += 1
            return b"200", b"OK", f"conn:{self._n}@{address}"
        return b"400", b"mechanism not accepted", ""

    def _serve(self) -> None:
        import zmq.utils.z85  # noqa: F401  (used in _decide)
        sock = self._sock
        try:
            while True:
                msg = sock.recv_multipart()
                if len(msg) < 6:
                    sock.send_multipart([b"1.0", msg[1] if len(msg) > 1 else b"", b"500", b"malformed", b"", b""])
                    continue
                version, request_id, _domain, address, _identity, mechanism, *cred = msg
                code, text, uid = self._decide(address.decode(errors="replace"), mechanism, cred)
                if code != b"200":
                    self.refused += 1          # a refused peer retries every 100 ms: log a few, then every 1000th
                    if self.refused <= 10 or self.refused % 1000 == 0:
                        logger.warning("refused a %s connection from %s: %s (%d refused so far)",
                                       mechanism.decode(errors="replace"), address.decode(errors="replace"),
                                       text.decode(), self.refused)
                sock.send_multipart([version, request_id, code, text, uid.encode(), b""])
        except zmq.ContextTerminated:
            pass
        finally:
            sock.close(0)
            with self._lock:
                if self._by_context.get(self._ctx_id) is self:
                    del self._by_context[self._ctx_id]


def create_keys(directory: str, clients: tuple[str, ...] = ("client",)) -> None:
    """Write a server key pair and client key pairs, and authorise the clients (``argosy keys DIR``).

    Secret files are created under a 0077 umask (never readable by others, not even briefly); the
    directory is 0700.  Public keys may be shared; the allow-list is ``DIR/authorized/*.key``.
    """
    import shutil
    import zmq.auth
    d = Path(directory)
    old = os.umask(0o077)
    try:
        (d / "authorized").mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o700)
        zmq.auth.create_certificates(d, "server")
        for name in clients:
            _, secret = zmq.auth.create_certificates(d, name)
            shutil.copy(d / f"{name}.key", d / "authorized" / f"{name}.key")
            os.chmod(secret, 0o600)
        os.chmod(d / "server.key_secret", 0o600)
    finally:
        os.umask(old)


def make_socket(ctx: zmq.Context, kind: int, *, sndhwm: int = 8, rcvhwm: int = 8, linger_ms: int = 0,
                max_msg_bytes: int | None = None, curve: str | None = None) -> zmq.Socket:
    """A socket with explicit HWMs and linger; ``max_msg_bytes`` makes libzmq drop peers that send more.

    Args:
        curve: ``"server"`` for a socket that binds, ``"client"`` for one that connects; applied
            only when ``ARGOSY_CURVE_KEYS`` is set.
    """
    sock = ctx.socket(kind)
    keys = CurveKeys.from_env() if curve else None
    if keys is not None:
        keys.server(ctx, sock) if curve == "server" else keys.client(sock)
    elif curve == "server":                     # no CURVE: ZAP still names each connection
        ZapHandler.for_context(ctx, None)
        sock.zap_domain = b"argosy"
    sock.setsockopt(zmq.SNDHWM, sndhwm)
    # libzmq 4.3 stalls a ZAP-authenticated connection whose receive HWM is 1 (measured: nothing
    # is ever delivered), so a server socket keeps at least 2.
    sock.setsockopt(zmq.RCVHWM, max(rcvhwm, 2) if curve == "server" else rcvhwm)
    sock.setsockopt(zmq.LINGER, linger_ms)
    sock.setsockopt(zmq.IMMEDIATE, 1)          # never queue for a peer that is not connected yet
    if max_msg_bytes:
        sock.setsockopt(zmq.MAXMSGSIZE, max_msg_bytes)
    return sock


def bind_random(sock: zmq.Socket, port: int = 0) -> str:
    """Bind on :func:`bind_host` (a fixed ``port`` or a random free one); return the endpoint peers should connect to."""
    host = bind_host()
    if port:
        sock.bind(f"tcp://{host}:{port}")
    else:
        port = sock.bind_to_random_port(f"tcp://{host}")
    return f"tcp://{advertise_host()}:{port}"


def host_boot_id() -> str:
    """This kernel's boot id (``/proc/sys/kernel/random/boot_id``; "" where there is none): two
    processes can share a Unix-domain socket only if they run on the same kernel."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def bind_local(sock: zmq.Socket) -> str | None:
    """Also listen on a Unix-domain socket in a fresh 0700 directory; return its ``ipc://`` endpoint.

    Peers on the same host connect there (:func:`connect_endpoint`) instead of over TCP loopback:
    the kernel copies a message once on each side either way, but skips the TCP/IP stack
    (segments, acknowledgements, netfilter): ~6 % less receiver CPU for 45 MB messages here, and
    steadier (``docs/gpu-pipeline.md``).  Only this user can connect (the directory's mode); the
    socket keeps its ZAP/CURVE settings and size limits.  None where ``ipc://`` is not available.

    The directory is made in shared memory (``/dev/shm``) where there is one, else in the temporary
    directory; in shared memory it also holds the peers' rings (:func:`local_ring_dir`).
    """
    import tempfile
    if not zmq.has("ipc") or not host_boot_id():
        return None
    _sweep_stale_local()
    d, err = None, None
    for root in _local_roots():
        try:
            d = tempfile.mkdtemp(prefix=f"{_IPC_PREFIX}{os.getpid()}-", dir=root)      # mode 0700
            break
        except OSError as e:                         # say, a read-only /tmp: the next root, or TCP only
            err = e
    if d is None:
        logger.info("no Unix-domain endpoint (%s): peers on this host connect over TCP", err)
        return None
    path = os.path.join(d, "s")
    try:
        if len(path) > 100:                          # sun_path holds 108 bytes
            raise OSError(f"socket path {path!r} is too long")
        sock.bind(f"ipc://{path}")
    except (OSError, zmq.ZMQError) as e:
        logger.info("no Unix-domain endpoint (%s): peers on this host connect over TCP", e)
        unbind_local(f"ipc://{path}")
        return None
    return f"ipc://{path}"


_IPC_PREFIX = "argosy-ipc-"
SHM_ROOT = "/dev/shm"
"""Where :func:`bind_local` makes its directory when it can (memory, not disk: rings live there)."""


def _local_roots() -> list[str]:
    """Directories :func:`bind_local` may use, preferred first: shared memory, then the temporary directory."""
    import tempfile
    roots = [SHM_ROOT] if os.path.isdir(SHM_ROOT) and os.access(SHM_ROOT, os.W_OK | os.X_OK) else []
    return roots + [tempfile.gettempdir()]


def local_ring_dir(endpoint: str | None) -> str | None:
    """The directory of :func:`bind_local`'s endpoint if it is in shared memory: where loaders on
    this host put their rings (:mod:`shared.shm_ring`); None otherwise (their rows cross the socket)."""
    if not endpoint or not endpoint.startswith("ipc://"):
        return None
    d = os.path.dirname(endpoint[len("ipc://"):])
    return d if os.path.dirname(d) == SHM_ROOT else None


def _sweep_stale_local() -> None:
    """Remove the socket directories of this user's processes that died without :func:`unbind_local`
    (a SIGKILLed trainer): named ``argosy-ipc-PID-*``, removed when no process PID exists."""
    for root in dict.fromkeys(_local_roots()):
        try:
            names = [n for n in os.listdir(root) if n.startswith(_IPC_PREFIX)]
        except OSError:
            continue
        for name in names:
            try:
                pid = int(name[len(_IPC_PREFIX):].split("-", 1)[0])
                path = os.path.join(root, name)
                if os.stat(path).st_uid != os.getuid():
                    continue
                os.kill(pid, 0)                      # alive (or not ours to signal): keep it
            except ProcessLookupError:
                unbind_local(f"ipc://{os.path.join(root, name, 's')}")
            except (ValueError, OSError):
                continue


def unbind_local(endpoint: str | None) -> None:
    """Remove what :func:`bind_local` created, and the rings peers left in it (call after the socket is closed)."""
    if endpoint and endpoint.startswith("ipc://"):
        path = endpoint[len("ipc://"):]
        d = os.path.dirname(path)
        with contextlib.suppress(OSError):
            os.unlink(path)                          # libzmq removes it on close; here in case it did not
        with contextlib.suppress(OSError):
            for name in os.listdir(d):
                if name.startswith("ring-"):         # rings of loaders that did not remove them (killed)
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(d, name))
        with contextlib.suppress(OSError):
            os.rmdir(d)


def connect_endpoint(registration: dict) -> str | None:
    """Where to connect to a registered service: its ``local_endpoint`` (``ipc://``, see
    :func:`bind_local`) when it runs on this kernel and the socket file is here, else its TCP
    ``endpoint``."""
    local = registration.get("local_endpoint")
    if (isinstance(local, str) and local.startswith("ipc://") and registration.get("boot_id") == host_boot_id()
            and os.path.exists(local[len("ipc://"):])):
        return local
    return registration.get("endpoint")


def send_msg(sock: zmq.Socket, msg: Message, stop: threading.Event | None = None, timeout: float | None = None) -> bool:
    """Send ``msg`` zero-copy, blocking while the peer's queue is full (back-pressure).

    Returns False if ``stop`` was set or ``timeout`` passed before the message could be queued.
    """
    frames = encode(msg)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        if sock.poll(200, zmq.POLLOUT):
            try:
                sock.send_multipart(frames, copy=False, flags=zmq.NOBLOCK)
                return True
            except zmq.Again:
                pass
        if stop is not None and stop.is_set():
            return False
        if deadline is not None and time.monotonic() > deadline:
            return False


def retain_large_buffers(pad_bytes: int = 256 << 20, budget: int | None = None) -> bool:
    """Keep freed message buffers in the process's heap for the next message (glibc only).

    libzmq allocates each received message with ``malloc``; glibc serves one above 32 MB with a
    fresh ``mmap`` and unmaps it on ``free``, so every page of every 33 MB batch is faulted in
    and zeroed again: measured, 11k page faults and ~27 ms of CPU per 45 MB message over TCP
    loopback, against ~9 ms once buffers are reused (``bench/ingest.py``).  This raises the mmap
    threshold to 1 GB and keeps freed memory (trim threshold 2 GB), so the process's resident
    size stays at its peak of messages in flight (receive HWM x batch bytes): the trainer's preset
    of :func:`argosy.shared.malloc.keep_heap`, bounded by ``budget`` when one is in force.  Returns
    False where ``mallopt`` is not available (not glibc); nothing changes there.
    """
    from argosy.shared.malloc import keep_heap
    return keep_heap(mmap_threshold=1 << 30, trim_threshold=1 << 31, top_pad=int(pad_bytes), budget=budget)


def recv_msg(sock: zmq.Socket, timeout_ms: int = 200, limits: Limits = DEFAULT_LIMITS) -> Message | None:
    """Receive and decode one message, or None on timeout.

    Raises:
        ProtocolError: for a malformed message (the caller logs it and keeps serving).
    """
    if not sock.poll(timeout_ms, zmq.POLLIN):
        return None
    frames = sock.recv_multipart(copy=False)
    return decode(frames, limits)


def peer_of(frame) -> str:
    """The User-Id the ZAP handler gave the sending connection ("" on a socket without ZAP)."""
    try:
        return frame.get("User-Id") or ""
    except (zmq.ZMQError, AttributeError):
        return ""


class Receiver:
    """Receive, decode and validate messages on one socket; bad ones are dropped, never raised.

    Each bad message (undecodable, or refused by ``check``) is counted in ``bad_messages`` and
    charged to its peer: the CURVE key, or the connection when CURVE is off (see
    :class:`ZapHandler`).  After ``cut_off_after`` bad messages a peer is cut off: its later
    messages are discarded before decoding (``cut_off_messages``) and, with CURVE, its key can no
    longer connect.  Counters go to ``coord`` (``Coordinator.incr``) at most once a second.

    Args:
        check: ``msg -> msg`` raising :class:`ProtocolError` for a message this service must not use.
    """

    def __init__(self, sock: zmq.Socket, check=None, limits: Limits = DEFAULT_LIMITS, coord=None,
                 cut_off_after: int = 16, name: str = ""):
        self.sock, self.check, self.limits, self.coord = sock, check, limits, coord
        self.cut_off_after, self.name = cut_off_after, name
        self.strikes: dict[str, int] = {}
        self.cut_off: set[str] = set()
        self.totals = {"bad_messages": 0, "cut_off_messages": 0, "peers_cut_off": 0, "connections_refused": 0}
        self._zap_seen = 0
        self._unflushed = dict.fromkeys(self.totals, 0)
        self._last_flush = time.monotonic()
        self.last_frames: list = []
        """Frames of the last message received (for byte accounting)."""
        self.last_peer = ""
        """Who sent the last message (see :func:`peer_of`): a later check that fails calls :meth:`strike`."""

    def count(self, key: str) -> None:
        self.totals[key] += 1
        self._unflushed[key] += 1

    def flush(self, force: bool = False) -> None:
        zap = ZapHandler._by_context.get(id(self.sock.context))
        if zap is not None and zap.refused > self._zap_seen:      # handshakes the ZAP handler refused
            self.totals["connections_refused"] += zap.refused - self._zap_seen
            self._unflushed["connections_refused"] += zap.refused - self._zap_seen
            self._zap_seen = zap.refused
        if self.coord is None or not any(self._unflushed.values()):
            return
        if force or time.monotonic() - self._last_flush > 1.0:
            self.coord.incr(**{k: float(v) for k, v in self._unflushed.items() if v})
            self._unflushed = dict.fromkeys(self.totals, 0)
            self._last_flush = time.monotonic()

    def strike(self, peer: str, err: Exception) -> None:
        """Charge one bad message to ``peer``; cut it off at ``cut_off_after``."""
        self.count("bad_messages")
        n = self.strikes[peer] = self.strikes.get(peer, 0) + 1
        if n <= 3:
            logger.warning("%sdropped a malformed message from %s: %s", self.name and self.name + ": ", peer or "?", err)
        if n >= self.cut_off_after and peer:
            self.cut_off.add(peer)
            self.count("peers_cut_off")
            if peer.startswith("curve:"):
                h = ZapHandler._by_context.get(id(self.sock.context))
                if h is not None:
                    h.ban(peer)
            logger.warning("cut off %s after %d bad messages", peer, n)

    def recv(self, timeout_ms: int = 200) -> Message | None:
        """One valid message, or None (timeout, or the message was dropped)."""
        self.flush()
        if not self.sock.poll(timeout_ms, zmq.POLLIN):
            return None
        frames = self.last_frames = self.sock.recv_multipart(copy=False)
        peer = self.last_peer = peer_of(frames[0])
        if peer in self.cut_off:
            self.count("cut_off_messages")
            return None
        try:
            msg = decode(frames, self.limits)
            return self.check(msg) if self.check is not None else msg
        except ProtocolError as e:
            self.strike(peer, e)
            return None


def rendezvous_store(world: int, timeout: float, url: str | None = None):
    """The torch.distributed TCPStore of a trainer group; returns ``(store, url)``.

    Rank 0 (``url`` None) binds the listening socket itself on ``ARGOSY_BIND_HOST`` (loopback by
    default) and hands its fd to the store: a plain ``init_method="tcp://127.0.0.1:P"`` makes
    torch listen on every interface whatever the URL says.  The port is ``ARGOSY_DIST_URL``'s, or
    a free one.  On a loopback-only host gloo's and NCCL's own sockets are kept on ``lo`` too.
    Other ranks pass the published ``url`` and connect.
    """
    import datetime
    import socket
    from urllib.parse import urlparse
    import torch.distributed as dist
    bind = bind_host()
    if _is_loopback(bind):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    td = datetime.timedelta(seconds=timeout)
    if url is not None:
        u = urlparse(url)
        return dist.TCPStore(u.hostname, u.port, world, False, td), url
    want = envs.get(envs.DIST_URL)
    port = urlparse(want).port if want else 0
    sock = socket.socket(socket.AF_INET6 if ":" in bind else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((bind, port or 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    # wait_for_workers=False: the URL is published only after this returns (the group's own
    # barrier waits for the other ranks); the store owns the fd from now on.
    store = dist.TCPStore(bind if bind not in ("0.0.0.0", "::") else "127.0.0.1", port, world, True, td,
                          wait_for_workers=False, master_listen_fd=sock.detach())
    return store, want or f"tcp://{advertise_host()}:{port}"
