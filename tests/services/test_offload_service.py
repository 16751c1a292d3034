"""The offload store over ZeroMQ: a real server process, the client API, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import msgpack
import numpy as np
import pytest
import torch
import zmq

from argosy.services.fullgraph.fullgraph import OffloadTrainer
from argosy.services.fullgraph.graph import build_plan, partition_vertices
from argosy.services.fullgraph.model import ModelSpec, flat_grads, init_params
from argosy.services.fullgraph.sar import free_port
from argosy.services.fullgraph.service import RemoteStore, RemoteStoreError
from argosy.services.fullgraph.store import OffloadStore
from argosy.services.fullgraph.synthetic import planted_graph
from argosy.services.fullgraph.wire import PROTOCOL_VERSION, encode


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    spill = tmp_path_factory.mktemp("spill")
    addr = f"tcp://127.0.0.1:{free_port()}"
    proc = subprocess.Popen([sys.executable, "-m", "argosy.services.fullgraph", "serve", "--bind", addr,
                             "--spill-dir", str(spill), "--cache-bytes", "16K"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    assert json.loads(line)["serving"] == addr
    yield addr
    proc.terminate()
    assert proc.wait(timeout=20) == 0


def _raw(addr: str, frames: list) -> dict:
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.REQ)
    s.setsockopt(zmq.RCVTIMEO, 10_000)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(addr)
    try:
        s.send_multipart(frames)
        return msgpack.unpackb(s.recv_multipart()[0], raw=False)
    finally:
        s.close()


@pytest.mark.integration
def test_client_roundtrip_and_spill(server):
    with RemoteStore(server, timeout_ms=10_000) as rs:
        assert rs.ping()
        blocks = [torch.randn(40, 8) for _ in range(6)]  # 7.5 KiB total > ... 16 KiB cache after grads
        for p, b in enumerate(blocks):
            rs.put("act", 2, p, b)
        g = rs.gather("act", 2, [(0, None), (3, np.array([1, 5, 39]))])
        assert torch.equal(g, torch.cat([blocks[0], blocks[3][[1, 5, 39]]]))
        for _ in range(2):
            rs.scatter_add("grad", 2, 1, np.array([0, 0, 3]), torch.ones(3, 8), num_rows=40)
        grad = rs.get("grad", 2, 1)
        assert float(grad[0, 0]) == 4.0 and float(grad[3, 0]) == 2.0 and float(grad[1].abs().sum()) == 0
        for p in range(6):
            rs.put("big", 0, p, torch.randn(64, 16))  # 4 KiB each: forces evictions to disk
        st = rs.stats()
        assert st["bytes_written"] > 0 and 0.0 <= st["hit_rate"] <= 1.0
        with pytest.raises(RemoteStoreError, match="not_found"):
            rs.get("act", 9, 9)
        rs.release_layer("big", 0)


@pytest.mark.integration
def test_bad_messages_get_error_replies(server):
    bad = [
        [b"\xc1not msgpack"],
        [msgpack.packb([1, 2, 3])],
        [msgpack.packb({"v": PROTOCOL_VERSION + 7, "op": "ping", "id": 1})],
        [msgpack.packb({"v": PROTOCOL_VERSION, "op": "pickle.loads", "id": 2})],
        encode("put", 3, [np.zeros(4, np.float32)], kind="act", layer=0, part=0)[:1],  # missing frame
        [msgpack.packb({"v": PROTOCOL_VERSION, "op": "put", "id": 4, "kind": "a", "layer": 0, "part": 0,
                        "arrays": [{"dtype": "float32", "shape": [3]}]}), b"\x00" * 5],  # size mismatch
        [msgpack.packb({"v": PROTOCOL_VERSION, "op": "put", "id": 5, "kind": "a", "layer": 0, "part": 0,
                        "arrays": [{"dtype": "object", "shape": [1]}]}), b"\x00" * 8],  # bad dtype
        encode("get", 6, kind="act", layer="zero", part=0),
        encode("plan", 7, schedule="nope"),
    ]
    for frames in bad:
        rep = _raw(server, frames)
        assert rep["ok"] is False and rep["code"] == "bad_request", rep
        assert rep["message"]
    assert _raw(server, encode("ping", 8))["ok"] is True  # still alive


@pytest.mark.integration
def test_trainer_over_remote_store_is_exact(server, tmp_path):
    g = planted_graph(200, avg_degree=5, num_classes=3, feat_dim=10, seed=2)
    spec = ModelSpec("sage", (10, 8, 3), dropout=0.0)
    plan = build_plan(g, partition_vertices(g.num_nodes, 4), spec.aggr)
    p_local, p_remote = init_params(spec, 1), init_params(spec, 1)
    with OffloadStore(1 << 20, spill_dir=str(tmp_path)) as st:
        OffloadTrainer(spec, plan, g, st, p_local, seed=1).step(0)
    with RemoteStore(server) as rs:
        OffloadTrainer(spec, plan, g, rs, p_remote, seed=1).step(0)
    a, b = flat_grads(p_local), flat_grads(p_remote)
    assert all(torch.allclose(a[k], b[k], rtol=1e-6, atol=1e-8) for k in a)
