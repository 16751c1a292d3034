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
    ing.rx.sock.unbind(local)
    unbind_local(local)
    assert not os.path.exists(os.path.dirname(path))


def test_a_dead_trainers_socket_directory_is_swept(tmp_path, monkeypatch):
    """A trainer SIGKILLed before unbind_local leaves argosy-ipc-PID-*; the next bind removes it
    (and leaves a live process's directory alone)."""
    import subprocess
    import tempfile
    from argosy.shared.transport import bind_local, unbind_local
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f"argosy-ipc-{dead.pid}-x"
    stale.mkdir()
    (stale / "s").write_text("")
    alive = tmp_path / f"argosy-ipc-{os.getpid()}-y"
    alive.mkdir()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    try:
        ep = bind_local(sock)
        assert ep is not None and ep.startswith(f"ipc://{tmp_path}/argosy-ipc-{os.getpid()}-")
        assert not stale.exists() and alive.exists()
    finally:
        sock.close(0)
        ctx.term()
        unbind_local(ep)
