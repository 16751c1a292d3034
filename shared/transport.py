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

import zmq

from shared import envs
from shared.errors import ProtocolError
from shared.protocol import Message
from shared.wire import DEFAULT_LIMITS, Limits, decode, encode

__all__ = ["make_socket", "bind_random", "send_msg", "recv_msg", "advertise_host"]

logger = logging.getLogger(__name__)


def advertise_host() -> str:
    return os.environ.get(envs.ADVERTISE_HOST, "127.0.0.1")


def make_socket(ctx: zmq.Context, kind: int, *, sndhwm: int = 8, rcvhwm: int = 8, linger_ms: int = 0,
                max_msg_bytes: int | None = None) -> zmq.Socket:
    """A socket with explicit HWMs and linger; ``max_msg_bytes`` makes libzmq drop peers that send more."""
    sock = ctx.socket(kind)
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
