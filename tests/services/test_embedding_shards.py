"""Learned node embeddings split between trainers (issue 29): each part's rows live with its owner.

Two shards of one store behind real halo servers (ZeroMQ) with a real Redis registry: a lookup
through either trainer returns the owners' rows, a backward pass applies on each owner exactly the
SparseAdam step one whole table would take, and hostile requests are refused without harm.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import zmq

from argosy.shared.coord import Coordinator
from argosy.shared.errors import RequestFailedError
from argosy.shared.halo import HaloClient, HaloServer
from argosy.shared.ownership import Membership, assign_parts
from argosy.shared.protocol import ErrorReply, HaloRequest
from argosy.shared.store import PartitionStore
from argosy.shared.traffic import WireCounter
from argosy.shared.wire import decode, encode
from argosy.services.trainer.embedding_shards import EmbeddingShard, ShardedNodeEmbedding, owned_parts


def test_owned_parts_follow_the_hosts_and_split_a_hosts_parts():
    # one host, three trainers: its parts in turn, every part once
    got = [owned_parts(8, ["a", "a", "a"], r) for r in range(3)]
    assert sorted(sum(got, [])) == list(range(8)) and got[0] == [0, 3, 6]
    # two hosts: each trainer takes the parts its host's samplers and loaders hold
    hosts = ["h0", "h1"]
    tiers = assign_parts(8, [("h0", "loader-x"), ("h1", "loader-y")])
    assert [owned_parts(8, hosts, r) for r in range(2)] == [tiers["loader-x"], tiers["loader-y"]]
    with pytest.raises(ValueError, match="rank 2 out of range"):
        owned_parts(8, hosts, 2)


class _Trainer:
    """One trainer's shard, its halo server and client, registered as the trainer tier does."""

    def __init__(self, url, job, rank, store, parts, zctx, dim=8):
        self.coord = Coordinator(url, job)
        self.shard = EmbeddingShard(store, parts, dim, lr=0.1, seed=rank)
        self.wire = WireCounter()
        self.server = HaloServer(zctx, self.shard.serve, self.wire)
        self.sid = f"trainer-{rank}"
        self.coord.register("trainer", self.sid, {"held": parts, "halo": self.server.endpoint,
                                                  "host_label": f"h{rank}"}, 0.5, 5)
        self.members = Membership(self.coord, "trainer", store.num_parts, self.sid, f"h{rank}")
        self.client = HaloClient(zctx, self.members, store.assignment, self.wire, timeout=5)
        self.emb = ShardedNodeEmbedding(self.shard, self.client, torch.device("cpu"))

    def close(self):
        self.server.close()
        self.client.close()
        self.coord.deregister("trainer", self.sid)
        self.coord.close()


@pytest.fixture
def two_trainers(small_store, redis_url):
    _, path = small_store
    store = PartitionStore(path)
    job = "emb-shards"
    Coordinator(redis_url, job).delete_job()
    zctx = zmq.Context()
    ts = [_Trainer(redis_url, job, r, store, [2 * r, 2 * r + 1], zctx) for r in range(2)]
    for t in ts:
        t.members.refresh()
    yield store, ts
    for t in ts:
        t.close()
    zctx.term()


def _whole(store, ts):
    """The table one trainer would hold: every shard's rows at their vertex ids."""
    table = torch.empty(store.manifest.num_nodes, ts[0].shard.dim)
    for t in ts:
        ids, rows = t.shard.table_rows()
        table[torch.from_numpy(ids)] = torch.from_numpy(rows)
    return table


def test_lookup_and_backward_match_one_sparse_adam_table(two_trainers):
    store, (a, b) = two_trainers
    n = store.manifest.num_nodes
    assert a.shard.rows + b.shard.rows == n                       # every row once, split by part
    ref = torch.nn.Embedding(n, 8, sparse=True)
    ref.weight.data.copy_(_whole(store, (a, b)))
    opt = torch.optim.SparseAdam(list(ref.parameters()), lr=0.1)
    rng = np.random.default_rng(0)
    for step in range(3):                                          # batches through trainer a, then b
        t = (a, b)[step % 2]
        ids = torch.from_numpy(rng.choice(n, 40, replace=False).astype(np.int64))
        w = torch.randn(40, 8)
        out = t.emb(ids)
        torch.testing.assert_close(out, ref(ids).detach())         # pulled rows = the whole table's
        (out * w).sum().backward()                                 # pushes each owner its rows' gradients
        opt.zero_grad()
        (ref(ids) * w).sum().backward()
        opt.step()
        torch.testing.assert_close(_whole(store, (a, b)), ref.weight.detach(), rtol=1e-6, atol=1e-6)
    assert a.emb.rows_pulled > 0 and b.emb.rows_pulled > 0        # rows of the other's parts crossed
    sent = a.wire.drain()
    assert sent["halo_requests"] >= 2 and sent["halo_bytes_sent"] > 40 * 8 * 4


def test_hostile_requests_are_refused_and_the_shard_survives(two_trainers):
    store, (a, b) = two_trainers
    before = a.shard.table_rows()[1]
    mine = np.flatnonzero(np.isin(np.asarray(store.assignment), a.shard.parts))[:5].astype(np.int64)
    theirs = np.flatnonzero(np.isin(np.asarray(store.assignment), b.shard.parts))[:5].astype(np.int64)
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.connect(a.server.endpoint)
    bad = [HaloRequest(request_id=1, what="embeddings", ids=np.array([-1, 3], np.int64)),
           HaloRequest(request_id=2, what="embeddings", ids=theirs),
           HaloRequest(request_id=3, what="embedding_grads", ids=mine, values=np.ones((4, 8), np.float32)),
           HaloRequest(request_id=4, what="embedding_grads", ids=mine, values=np.full((5, 8), np.nan, np.float32)),
           HaloRequest(request_id=5, what="embedding_grads", ids=mine, values=np.ones((5, 8), np.float64)),
           HaloRequest(request_id=6, what="features", ids=mine)]
    codes = []
    for req in bad:
        sock.send_multipart(encode(req))
        assert sock.poll(5000)
        reply = decode(sock.recv_multipart())
        assert isinstance(reply, ErrorReply), req
        codes.append(reply.code)
    assert codes == ["bad_request", "not_owner", "bad_request", "bad_request", "bad_request", "bad_request"]
    np.testing.assert_array_equal(a.shard.table_rows()[1], before)          # nothing was applied
    sock.send_multipart(encode(HaloRequest(request_id=7, what="embeddings", ids=mine)))   # still serving
    assert sock.poll(5000)
    np.testing.assert_array_equal(decode(sock.recv_multipart()).features, a.shard.pull(mine))
    sock.close(0)
    with pytest.raises(RequestFailedError, match="not held here"):
        a.shard.pull(theirs)


def test_shard_state_round_trips_and_refuses_another_split(small_store):
    _, path = small_store
    store = PartitionStore(path)
    s = EmbeddingShard(store, [0, 2], 4, lr=0.05)
    ids = np.flatnonzero(np.asarray(store.assignment) == 2)[:3].astype(np.int64)
    s.push(ids, np.ones((3, 4), np.float32))
    t = EmbeddingShard(store, [0, 2], 4, lr=0.05, seed=7)
    t.load_state(s.state())
    np.testing.assert_array_equal(t.pull(ids), s.pull(ids))
    assert t.opt.state_dict()["state"].keys() == s.opt.state_dict()["state"].keys()
    with pytest.raises(ValueError, match="does not match"):
        EmbeddingShard(store, [1], 4, lr=0.05).load_state(s.state())
