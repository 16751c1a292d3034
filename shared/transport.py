"""ZeroMQ sockets made in one place (high-water marks, linger) and typed send/receive.

Back-pressure is configured here: PUSH sockets have a small send high-water mark, so when the
next tier is slow ``send`` blocks and the sender stops claiming work instead of buffering.
Sends and receives poll in short slices so a stop request (SIGTERM) is honoured within ~0.2 s.
"""
from __future__ import annotations

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

__all__ = ["make_socket", "bind_random", "send_msg", "recv_msg", "advertise_host", "create_keys", "CurveKeys"]

logger = logging.getLogger(__name__)


def advertise_host() -> str:
    return os.environ.get(envs.ADVERTISE_HOST, "127.0.0.1")


class CurveKeys:
    """Optional ZeroMQ CURVE encryption + authentication between hosts.

    ``ARGOSY_CURVE_KEYS=DIR`` (a directory made by :func:`create_keys`, mounted from a Secret in
    Kubernetes) turns it on: sockets that bind are CURVE servers, sockets that connect are CURVE
    clients that must know the server's public key.  Traffic is encrypted, and a peer without the
    key directory cannot complete the handshake, so it cannot inject batches.  Per-client allow
    lists (a ZAP handler over ``DIR/authorized``) are not enforced yet.
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

    @classmethod
    def from_env(cls) -> "CurveKeys | None":
        d = os.environ.get(envs.CURVE_KEYS)
        return cls(d) if d else None

    def server(self, ctx: zmq.Context, sock: zmq.Socket) -> None:
        sock.curve_secretkey = self.server_secret
        sock.curve_publickey = self.server_public
        sock.curve_server = True

    def client(self, sock: zmq.Socket) -> None:
        sock.curve_secretkey = self.client_secret
        sock.curve_publickey = self.client_public
        sock.curve_serverkey = self.server_public


def create_keys(directory: str) -> None:
    """Write a server and a client CURVE key pair, and authorise the client (``argosy keys DIR``)."""
    import shutil
    import zmq.auth
    d = Path(directory)
    (d / "authorized").mkdir(parents=True, exist_ok=True)
    zmq.auth.create_certificates(d, "server")
    _, secret = zmq.auth.create_certificates(d, "client")
    shutil.copy(d / "client.key", d / "authorized" / "client.key")
    os.chmod(secret, 0o600)
    os.chmod(d / "server.key_secret", 0o600)


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
    sock.setsockopt(zmq.SNDHWM, sndhwm)
    sock.setsockopt(zmq.RCVHWM, rcvhwm)
    sock.setsockopt(zmq.LINGER, linger_ms)
    sock.setsockopt(zmq.IMMEDIATE, 1)          # never queue for a peer that is not connected yet
    if max_msg_bytes:
        sock.setsockopt(zmq.MAXMSGSIZE, max_msg_bytes)
    return sock


def bind_random(sock: zmq.Socket, port: int = 0) -> str:
    """Bind on ``ARGOSY_BIND_HOST`` (a fixed ``port`` or a random free one); return the endpoint peers should connect to."""
    host = os.environ.get(envs.BIND_HOST, "127.0.0.1")
    if port:
        sock.bind(f"tcp://{host}:{port}")
    else:
        port = sock.bind_to_random_port(f"tcp://{host}")
    return f"tcp://{advertise_host()}:{port}"


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


def recv_msg(sock: zmq.Socket, timeout_ms: int = 200, limits: Limits = DEFAULT_LIMITS) -> Message | None:
    """Receive and decode one message, or None on timeout.

    Raises:
        ProtocolError: for a malformed message (the caller logs it and keeps serving).
    """
    if not sock.poll(timeout_ms, zmq.POLLIN):
        return None
    frames = sock.recv_multipart(copy=False)
    return decode(frames, limits)
