"""The offload store over ZeroMQ: a real server process, the client API, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
import zmq

from argosy.services.trainer.fullgraph.fullgraph import OffloadTrainer
from argosy.services.trainer.fullgraph.graph import build_plan
from argosy.services.trainer.fullgraph.model import flat_grads
from argosy.services.offload.service import RemoteStore
from argosy.services.offload.store import OffloadStore
from argosy.services.trainer.fullgraph.synthetic import planted_graph
from argosy.shared.errors import BlockNotFoundError
from argosy.shared.protocol import PROTOCOL_VERSION, STORE_STAT_FIELDS, SampledBatch, StoreReply, StoreRequest
from argosy.shared.redis_server import free_port
from argosy.shared.transport import create_keys
from argosy.shared.wire import decode, encode

from .fullgraph_helpers import contiguous, model


def _serve(spill, env=None):
    addr = f"tcp://127.0.0.1:{free_port()}"
    proc = subprocess.Popen([sys.executable, "-m", "argosy.services.offload", "--bind", addr,
                             "--spill-dir", str(spill), "--cache-bytes", "16K"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    assert json.loads(proc.stdout.readline())["serving"] == addr
    return addr, proc


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    addr, proc = _serve(tmp_path_factory.mktemp("spill"))
    yield addr
    proc.terminate()
    assert proc.wait(timeout=20) == 0


def _raw(addr: str, frames: list) -> StoreReply:
    s = zmq.Context.instance().socket(zmq.REQ)
    s.setsockopt(zmq.RCVTIMEO, 10_000)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(addr)
    try:
        s.send_multipart(frames)
        rep = decode(s.recv_multipart())
        assert isinstance(rep, StoreReply)
        return rep
    finally:
        s.close()


def test_stat_fields_match_the_store():
    with OffloadStore(1024) as st:
        assert set(STORE_STAT_FIELDS) | {"hit_rate"} == set(st.stats())


@pytest.mark.integration
def test_client_roundtrip_and_spill(server):
    with RemoteStore(server, timeout_ms=10_000) as rs:
        assert rs.ping()
        blocks = [torch.randn(40, 8) for _ in range(6)]
        for p, b in enumerate(blocks):
            rs.put("act", 2, p, b)
        g = rs.gather("act", 2, [(0, None), (3, np.array([1, 5, 39])), ("act", 4, np.array([2]))])
        assert torch.equal(g, torch.cat([blocks[0], blocks[3][[1, 5, 39]], blocks[4][[2]]]))
        for _ in range(2):
            rs.scatter_add("grad", 2, 1, np.array([0, 0, 3]), torch.ones(3, 8), num_rows=40)
        grad = rs.get("grad", 2, 1)
        assert float(grad[0, 0]) == 4.0 and float(grad[3, 0]) == 2.0 and float(grad[1].abs().sum()) == 0
        for p in range(6):
            rs.put("big", 0, p, torch.randn(64, 16))  # 4 KiB each: forces evictions to disk
        st = rs.stats()
        assert st["bytes_written"] > 0 and 0.0 <= st["hit_rate"] <= 1.0
        with pytest.raises(BlockNotFoundError, match="no block"):
            rs.get("act", 9, 9)
        rs.release_layer("big", 0)


@pytest.mark.integration
def test_bad_messages_get_error_replies(server):
    good = encode(StoreRequest(request_id=3, op="put", kind="a", data=np.zeros((4, 2), np.float32)))
    header = bytes(encode(StoreRequest(op="ping"))[0])
    bad = [
        [b"\xc1not msgpack"],
        [header.replace(bytes([PROTOCOL_VERSION]), bytes([PROTOCOL_VERSION + 7]), 1), b"", b"", b""],
        encode(StoreRequest(request_id=2, op="pickle.loads")),
        good[:1],  # frames missing
        [good[0], b"\x00" * 5, good[2], good[3]],  # size mismatch
        encode(SampledBatch()),  # a valid message of the wrong kind
        encode(StoreRequest(request_id=6, op="gather", kind="act", kinds="act", table=np.array([[3, 0, -1]]))),
        encode(StoreRequest(request_id=7, op="plan", kinds="a", table=np.zeros((2, 2), np.int64))),
        # block keys name spill files: no way out of the spill directory, no odd names
        encode(StoreRequest(request_id=9, op="put", kind="../../../escaped", data=np.zeros((4096, 2), np.float32))),
        encode(StoreRequest(request_id=10, op="put", kind="act/x", data=np.zeros((4096, 2), np.float32))),
        encode(StoreRequest(request_id=11, op="put", kind="act", part=-3, data=np.zeros((4, 2), np.float32))),
        encode(StoreRequest(request_id=12, op="gather", kind="act", kinds="../e", table=np.array([[0, 0, -1]]))),
    ]
    for frames in bad:
        rep = _raw(server, [bytes(f) for f in frames])
        assert rep.ok is False and rep.code == "bad_request", rep
        assert rep.message
    assert _raw(server, encode(StoreRequest(request_id=8, op="ping"))).ok  # still alive


@pytest.mark.integration
def test_curve_keys_encrypt_the_store_socket(tmp_path, monkeypatch):
    create_keys(str(tmp_path / "keys"))
    env = {**__import__("os").environ, "ARGOSY_CURVE_KEYS": str(tmp_path / "keys")}
    addr, proc = _serve(tmp_path / "spill", env)
    try:
        with pytest.raises(zmq.Again):  # a plain client cannot complete the handshake: no reply
            _raw_timeout(addr)
        monkeypatch.setenv("ARGOSY_CURVE_KEYS", str(tmp_path / "keys"))
        with RemoteStore(addr, timeout_ms=10_000) as rs:
            assert rs.ping()
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _raw_timeout(addr: str) -> None:
    s = zmq.Context.instance().socket(zmq.REQ)
    s.setsockopt(zmq.RCVTIMEO, 1500)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(addr)
    try:
        s.send_multipart(encode(StoreRequest(op="ping")))
        s.recv_multipart()
    finally:
        s.close()


@pytest.mark.integration
def test_trainer_over_remote_store_is_exact(server, tmp_path):
    g = planted_graph(200, avg_degree=5, num_classes=3, feat_dim=10, seed=2)
    (m_local, spec), (m_remote, _) = model("sage", 10, 3, 2, hidden=8, seed=1), model("sage", 10, 3, 2, hidden=8, seed=1)
    plan = build_plan(g, contiguous(g.num_nodes, 4), spec.aggr)
    with OffloadStore(1 << 20, spill_dir=str(tmp_path)) as st:
        OffloadTrainer(spec, plan, g, st, m_local, seed=1).step(0)
    with RemoteStore(server) as rs:
        OffloadTrainer(spec, plan, g, rs, m_remote, seed=1).step(0)
    a, b = flat_grads(m_local), flat_grads(m_remote)
    assert all(torch.allclose(a[k], b[k], rtol=1e-6, atol=1e-8) for k in a)
