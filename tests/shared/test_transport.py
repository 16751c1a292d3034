"""Transport: back-pressure through high-water marks, CURVE encryption + authentication."""
import threading
import time

import numpy as np
import pytest
import zmq

from argosy.shared.protocol import SampledBatch
from argosy.shared.transport import create_keys, make_socket, recv_msg, send_msg


def _pair(ctx, curve=False):
    pull = make_socket(ctx, zmq.PULL, rcvhwm=1, curve="server" if curve else None)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    push = make_socket(ctx, zmq.PUSH, sndhwm=1, curve="client" if curve else None)
    push.connect(f"tcp://127.0.0.1:{port}")
    return push, pull


def test_send_blocks_when_receiver_is_slow():
    """Back-pressure: with tiny HWMs a sender cannot queue more than a few messages."""
    ctx = zmq.Context()
    push, pull = _pair(ctx)
    time.sleep(0.2)
    big = SampledBatch(nodes=np.zeros(1 << 20, np.int64))        # 8 MB, larger than socket buffers
    sent = 0
    while send_msg(push, big, timeout=0.5):
        sent += 1
        if sent > 50:
            break
    assert sent < 10                                              # blocked, not buffering without bound
    assert recv_msg(pull, 1000) is not None
    push.close(0), pull.close(0), ctx.term()


def test_curve_encrypts_and_authenticates(tmp_path, monkeypatch):
    create_keys(str(tmp_path / "keys"))
    monkeypatch.setenv("ARGOSY_CURVE_KEYS", str(tmp_path / "keys"))
    ctx = zmq.Context()
    push, pull = _pair(ctx, curve=True)
    assert send_msg(push, SampledBatch(batch_id=5, nodes=np.arange(4)), timeout=5)
    msg = recv_msg(pull, 5000)
    assert msg is not None and msg.batch_id == 5
    # an intruder without the keys cannot deliver anything
    intruder = ctx.socket(zmq.PUSH)
    intruder.connect(pull.getsockopt_string(zmq.LAST_ENDPOINT))
    intruder.send(b"\x00evil")
    assert recv_msg(pull, 500) is None
    for s in (push, pull, intruder):
        s.close(0)
    ctx.term()


def test_missing_keys_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGOSY_CURVE_KEYS", str(tmp_path / "none"))
    with pytest.raises(ValueError, match="argosy keys"):
        make_socket(zmq.Context.instance(), zmq.PUSH, curve="client")
