"""The trainer's ingest thread over a real ZeroMQ socket and a real Redis: validate, claim, stage, ack."""
import os
import time

import numpy as np
import pytest
import zmq

from argosy.shared.config import JobConfig, SamplerConfig
from argosy.shared.store import PartitionStore
from argosy.shared.transport import make_socket, retain_large_buffers, send_msg
from argosy.shared.validate import check_feature_values
from argosy.shared.errors import InvalidMessageError
from argosy.services.loader.core import LoaderCore
from argosy.services.sampler.core import SamplerCore
from argosy.services.trainer.core import TrainerCore
from argosy.services.trainer.ingest import Ingest
from tests.workitems import publish_and_claim


@pytest.fixture
def env(small_store, redis_url, request):
    _, path = small_store
    cfg = JobConfig(job=f"ing-{request.node.name}", store=str(path),
                    sampler=SamplerConfig(fanouts=(3, 2), eval_fanouts=(3, 2), batch_size=32))
    store = PartitionStore(path)
    coord, plan, claimed, ref = publish_and_claim(redis_url, cfg, store)
    it = plan[0]
    sb = SamplerCore(store).sample_item(it, cfg.sampler.fanouts)
    sb.job = cfg.job
    sb.work_stream, sb.work_id = ref.get(it.batch_id) or claimed[0][:2]
    fb = LoaderCore(store).load(sb)
    m = store.manifest
    core = TrainerCore(cfg.trainer, m.feature_dim, m.num_classes, 2, device=__import__("torch").device("cpu"))
    ctx = zmq.Context()
    pull = make_socket(ctx, zmq.PULL, curve="server")
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    push = make_socket(ctx, zmq.PUSH)
    push.connect(f"tcp://127.0.0.1:{port}")
    ing = Ingest(pull, cfg, coord, 0, core, depth=2)
    ing.set_plan(0, "train", plan)
    ing.start()
    yield cfg, coord, store, fb, ing, push
    ing.close()
    push.close(0)
    pull.close(0)
    ctx.term()
    coord.delete_job()


def _get(ing, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        a = ing.get(0.1)
        if a is not None:
            return a
    raise AssertionError("no batch arrived")


def test_valid_batch_is_staged_claimed_and_acked_after_apply(env):
    cfg, coord, store, fb, ing, push = env
    assert send_msg(push, fb)
    a = _get(ing)
    assert a.fresh and a.fb.batch_id == fb.batch_id and a.feature_rows == fb.features.shape[0]
    assert a.ingest_seconds > 0 and a.staged.x.shape == fb.features.shape
    assert a.staged.count == int((fb.labels >= 0).sum())
    assert coord.applied_count(0, "train") == 1                 # claimed before it was handed over
    pending = coord.pending(store.num_parts)
    ing.ack(fb.work_stream, fb.work_id)                         # the compute thread applied it
    ing.flush_acks()
    assert coord.pending(store.num_parts) == pending - 1
    assert send_msg(push, fb)                                   # a re-delivery: known as such on arrival
    assert not _get(ing).fresh


def test_nonfinite_features_are_dropped_and_charged_to_the_peer(env):
    cfg, coord, store, fb, ing, push = env
    bad = type(fb)(**{**fb.__dict__, "features": fb.features.copy()})
    bad.features[1, 0] = np.nan
    with pytest.raises(InvalidMessageError, match="features hold NaN or inf"):
        check_feature_values(bad)
    assert send_msg(push, bad) and send_msg(push, fb)
    a = _get(ing)                                               # the NaN batch never arrives; the valid one does
    assert a.fresh and np.isfinite(a.staged.x.numpy()).all()
    assert ing.rx.totals["bad_messages"] == 1
    assert coord.applied_count(0, "train") == 1


@pytest.fixture
def ring_env(small_store, redis_url, request):
    """A trainer's ingest thread listening on ipc:// in shared memory, reading loaders' rings there."""
    import dataclasses
    from argosy.shared.shm_ring import RingWriter
    from argosy.shared.transport import bind_local, local_ring_dir, unbind_local
    _, path = small_store
    cfg = JobConfig(job=f"ring-{request.node.name}", store=str(path),
                    sampler=SamplerConfig(fanouts=(3, 2), eval_fanouts=(3, 2), batch_size=32))
    store = PartitionStore(path)
    coord, plan, claimed, ref = publish_and_claim(redis_url, cfg, store)
    sbs = []
    for it in plan[:3]:
        sb = SamplerCore(store).sample_item(it, cfg.sampler.fanouts)
        sb.job = cfg.job
        sb.work_stream, sb.work_id = ref[it.batch_id]
        sbs.append(sb)
    m = store.manifest
    core = TrainerCore(cfg.trainer, m.feature_dim, m.num_classes, 2, device=__import__("torch").device("cpu"))
    ctx = zmq.Context()
    pull = make_socket(ctx, zmq.PULL, curve="server")
    local = bind_local(pull)
    ring_dir = local_ring_dir(local)
    if ring_dir is None:
        pull.close(0)
        ctx.term()
        unbind_local(local)
        pytest.skip("no shared memory (/dev/shm) here: loaders send rows inline")
    push = make_socket(ctx, zmq.PUSH)
    push.connect(local)
    ing = Ingest(pull, cfg, coord, 0, core, depth=4, ring_dir=ring_dir)
    ing.set_plan(0, "train", plan)
    ing.start()
    writer = RingWriter(ring_dir, cfg.loader.shm_ring_slots, ing.validator.bounds.ring_slot_bytes)

    def through_ring(sb):
        """``sb`` loaded as a loader on this host does: rows gathered into a slot, the header names it."""
        lease = writer.acquire(1, 5.0)
        fb = LoaderCore(store).load(sb, out=lambda rows: writer.rows(lease, (rows, m.feature_dim), core_dtype))
        assert np.shares_memory(fb.features, writer.rows(lease, fb.features.shape, fb.features.dtype))
        return dataclasses.replace(fb, features=fb.features[:0], ring=writer.name, ring_slot=lease.slot,
                                   ring_seq=lease.seq, ring_bytes=fb.features.nbytes), fb.features.copy()
    core_dtype = np.dtype(m.feature_dtype or "float32")
    yield store, sbs, ing, push, writer, through_ring
    writer.close()
    ing.close()
    push.close(0)
    pull.close(0)
    ctx.term()
    unbind_local(local)
    coord.delete_job()


def test_a_batch_through_the_ring_equals_the_batch_through_the_socket(ring_env):
    store, sbs, ing, push, writer, through_ring = ring_env
    inline = LoaderCore(store).load(sbs[0])
    ringed, rows = through_ring(sbs[0])
    assert np.array_equal(rows, inline.features)
    assert send_msg(push, ringed)
    a = _get(ing)
    assert a.fresh and ing.rings.batches == 1 and writer.in_flight() == 0      # copied out, slot released
    assert a.feature_rows == inline.features.shape[0]
    assert send_msg(push, inline)                                              # the same batch inline: a re-delivery
    b = _get(ing)
    assert not b.fresh and ing.rx.totals["bad_messages"] == 0
    assert abs(a.wire_bytes - b.wire_bytes) < 128                              # the same bytes into the trainer
    assert np.array_equal(a.staged.x.numpy(), b.staged.x.numpy())
    assert np.array_equal(a.fb.labels, b.fb.labels) and np.array_equal(a.fb.edge_src, b.fb.edge_src)


def test_hostile_ring_references_are_struck_over_the_socket(ring_env):
    import dataclasses
    from argosy.shared.shm_ring import Lease
    store, sbs, ing, push, writer, through_ring = ring_env
    good, _ = through_ring(sbs[0])
    assert send_msg(push, good)
    assert _get(ing).fresh
    nan, _ = through_ring(sbs[1])
    writer.rows(Lease(nan.ring_slot, nan.ring_seq), (2, 2), np.float32)[1, 1] = np.nan
    hostile = [dataclasses.replace(good),                                      # stale: that slot was released
               dataclasses.replace(good, ring_slot=writer.slots),             # out of range
               dataclasses.replace(good, ring_seq=good.ring_seq + 100, ring_bytes=good.ring_bytes + 4),   # wrong size
               dataclasses.replace(good, ring_seq=good.ring_seq + 100, ring="ring-1-00000000000000ff"),  # missing file
               dataclasses.replace(good, ring_seq=good.ring_seq + 100, ring="../s"),                     # a path
               nan]
    for msg in hostile:
        assert send_msg(push, msg)
    last, _ = through_ring(sbs[2])
    assert send_msg(push, last)
    a = _get(ing)                                                              # the ingest thread lives on
    assert a.fb.batch_id == sbs[2].batch_id and a.fresh
    assert ing.rx.totals["bad_messages"] == len(hostile)
    assert writer.in_flight() == 0                                             # the NaN batch's slot came back too


def test_queue_bound_pushes_back(env):
    cfg, coord, store, fb, ing, push = env
    for _ in range(6):
        send_msg(push, fb, timeout=0.5)
    time.sleep(1.0)
    assert ing.q.qsize() == 2                                   # depth 2: the rest waits in the sockets


def test_retain_large_buffers_on_glibc():
    import platform
    assert retain_large_buffers() is (platform.libc_ver()[0] == "glibc")


def test_same_host_peers_connect_over_a_unix_socket(env):
    """The trainer's socket also listens on ipc:// (bind_local); a loader on this kernel picks it
    (connect_endpoint), one on another kernel the TCP endpoint; batches arrive and are validated alike."""
    import os
    from argosy.shared.transport import bind_local, connect_endpoint, host_boot_id, unbind_local
    cfg, coord, store, fb, ing, push = env
    local = bind_local(ing.rx.sock)
    assert local is not None and local.startswith("ipc://")
    path = local[len("ipc://"):]
    assert os.stat(os.path.dirname(path)).st_mode & 0o077 == 0            # this user only
    reg = {"endpoint": "tcp://10.0.0.9:5000", "local_endpoint": local, "boot_id": host_boot_id()}
    assert connect_endpoint(reg) == local
    assert connect_endpoint({**reg, "boot_id": "another-kernel"}) == "tcp://10.0.0.9:5000"
    assert connect_endpoint({"endpoint": "tcp://10.0.0.9:5000"}) == "tcp://10.0.0.9:5000"
    ctx = zmq.Context.instance()
    near = make_socket(ctx, zmq.PUSH)
    near.connect(connect_endpoint(reg))
    bad = type(fb)(**{**fb.__dict__, "features": fb.features.copy()})
    bad.features[-1, -1] = np.inf
    assert send_msg(near, bad) and send_msg(near, fb)
    a = _get(ing)
    assert a.fresh and a.fb.batch_id == fb.batch_id and ing.rx.totals["bad_messages"] == 1
    near.close(0)
    ing.close()              # the ingest thread polls its socket: a ZeroMQ socket is used by one thread at a time
    ing.rx.sock.unbind(local)
    unbind_local(local)
    assert not os.path.exists(os.path.dirname(path))


def test_a_dead_trainers_socket_directory_is_swept(tmp_path, monkeypatch):
    """A trainer SIGKILLed before unbind_local leaves argosy-ipc-PID-* (in shared memory, with its
    loaders' rings, or in the temporary directory); the next bind removes it (and leaves a live
    process's directory alone), and binds in shared memory when there is some."""
    import subprocess
    import tempfile
    from argosy.shared import transport
    from argosy.shared.transport import bind_local, local_ring_dir, unbind_local
    shm, tmp = tmp_path / "shm", tmp_path / "tmp"
    shm.mkdir()
    tmp.mkdir()
    monkeypatch.setattr(transport, "SHM_ROOT", str(shm))
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = [root / f"argosy-ipc-{dead.pid}-x" for root in (shm, tmp)]
    for d in stale:
        d.mkdir()
        (d / "s").write_text("")
        (d / "ring-1-0123456789abcdef").write_bytes(b"x" * 100)
    alive = tmp / f"argosy-ipc-{os.getpid()}-y"
    alive.mkdir()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    try:
        ep = bind_local(sock)
        assert ep is not None and ep.startswith(f"ipc://{shm}/argosy-ipc-{os.getpid()}-")
        assert local_ring_dir(ep) == os.path.dirname(ep[len("ipc://"):])
        assert not any(d.exists() for d in stale) and alive.exists()
    finally:
        sock.close(0)
        ctx.term()
        unbind_local(ep)
    monkeypatch.setattr(transport, "SHM_ROOT", str(tmp_path / "no-such-dir"))    # no shared memory: /tmp, no rings
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    try:
        ep = bind_local(sock)
        assert ep is not None and ep.startswith(f"ipc://{tmp}/") and local_ring_dir(ep) is None
    finally:
        sock.close(0)
        ctx.term()
        unbind_local(ep)
