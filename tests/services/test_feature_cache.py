"""The trainer's feature cache (``--gpu-cache``): loaders leave the cached rows out, the trainer fills
them in; equal batches and equal training, mismatches refused, hostile cached-row frames refused,
exactly-once through the real ingest thread."""
import time

import numpy as np
import pytest
import torch
import zmq

from argosy.shared.config import JobConfig, SamplerConfig, TrainerConfig
from argosy.shared.errors import ConfigError, InvalidMessageError
from argosy.shared.hot_rows import HotRows, cache_rows
from argosy.shared.store import PartitionStore
from argosy.shared.transport import make_socket, send_msg
from argosy.shared.validate import MessageValidator, job_plan
from argosy.shared.wire import decode, encode
from argosy.services.loader.core import LoaderCore
from argosy.services.sampler.core import SamplerCore
from argosy.services.trainer.core import TrainerCore, cache_budget
from argosy.services.trainer.ingest import Ingest
from tests.workitems import publish_and_claim

CPU = torch.device("cpu")


def _cfg(path, job="fc"):
    return JobConfig(job=job, store=str(path), sampler=SamplerConfig(fanouts=(3, 2), eval_fanouts=(3, 2), batch_size=32),
                     trainer=TrainerConfig(hidden=8, device="cpu", dropout=0.0))


def _batches(cfg, store, n=4):
    core, out = SamplerCore(store), []
    for it in job_plan(cfg, store, 0, "train")[:n]:
        sb = core.sample_item(it, cfg.sampler.fanouts)
        sb.job, sb.work_stream, sb.work_id = cfg.job, f"argosy:{cfg.job}:work:{it.part}", f"{1700000000000 + it.batch_id}-0"
        out.append(sb)
    return out


def _core(cfg, store, budget=0):
    m = store.manifest
    core = TrainerCore(cfg.trainer, m.feature_dim, m.num_classes, 2, seed=7, device=CPU)
    core.fill_cache(store, budget)
    return core


@pytest.fixture
def job(small_store):
    _, path = small_store
    store = PartitionStore(path)
    cfg = _cfg(path)
    return cfg, store, _batches(cfg, store)


def test_hot_rows_are_the_top_degrees_ties_by_id_and_deterministic(job):
    cfg, store, _ = job
    hot = HotRows.build(store, 50)
    deg = np.zeros(store.manifest.num_nodes, np.int64)
    for p in range(store.num_parts):
        deg[store.part(p).nodes] = np.diff(store.part(p).indptr)
    want = np.lexsort((np.arange(deg.shape[0]), -deg))[:50]
    assert np.array_equal(hot.ids, want)
    assert (hot.slot[want] == np.arange(50)).all() and (hot.slot >= 0).sum() == 50
    assert HotRows.build(PartitionStore(store.root), 50).digest == hot.digest != HotRows.build(store, 51).digest
    feats = np.concatenate([store.part(p).features for p in range(store.num_parts)])
    order = np.concatenate([store.part(p).nodes for p in range(store.num_parts)])
    ref = np.empty_like(feats)
    ref[order] = feats
    assert np.array_equal(hot.gather(store), ref[hot.ids])
    assert cache_rows(store, 10**12) == store.manifest.num_nodes and cache_rows(store, 0) == 0
    assert cache_budget(-1, CPU, 10**9) == 0 and cache_budget(1234, CPU, 10**9) == 1234


@pytest.mark.parametrize("rows", [60, 500])          # part of the graph; all of it (ids only on the wire)
def test_cached_batches_equal_uncached_bit_for_bit_and_smaller_on_the_wire(job, rows):
    cfg, store, sbs = job
    row_bytes = store.manifest.feature_dim * 4
    plain, cached = _core(cfg, store), _core(cfg, store, rows * row_bytes)
    hot = cached.hot
    assert hot.rows == rows
    loader = LoaderCore(store)
    v_plain, v_hot = MessageValidator(cfg, "trainer", job=cfg.job), MessageValidator(cfg, "trainer", job=cfg.job, hot=hot)
    hits = 0
    for sb in sbs:
        full, part = loader.load(sb), loader.load(sb, hot)
        assert part.feature_cache == hot.digest and full.feature_cache == ""
        sent = np.flatnonzero(hot.slot[sb.nodes] < 0)
        assert np.array_equal(part.features, full.features[sent])
        hits += sb.nodes.shape[0] - sent.shape[0]
        ef, ep = encode(full), encode(part)                 # the frames shrink by the cached rows exactly
        frames = lambda e: sum(len(bytes(f)) for f in e[1:])    # noqa: E731
        assert frames(ep) == frames(ef) - (sb.nodes.shape[0] - sent.shape[0]) * row_bytes
        got = v_hot(decode(encode(part)))
        a, b = plain.stage(v_plain(decode(encode(full)))), cached.stage(got)
        assert torch.equal(a.x, b.x)
        assert cached.stage(v_hot(decode(encode(full)))).x.equal(a.x)   # a full batch is still fine
    assert hits > 0
    if rows == store.manifest.num_nodes:
        assert all(loader.load(sb, hot).features.shape[0] == 0 for sb in sbs)
    for _ in range(2):                                # same seed, same batches: the same training
        for sb in sbs:
            plain.train_step(loader.load(sb))
            cached.train_step(loader.load(sb, hot))
    for p, q in zip(plain.model.parameters(), cached.model.parameters()):
        assert torch.equal(p, q)


def test_a_loader_trainer_cache_mismatch_is_refused(job, tmp_path):
    cfg, store, sbs = job
    hot = HotRows.build(store, 40)
    other = HotRows.build(store, 41)
    loader = LoaderCore(store)
    msg = decode(encode(loader.load(sbs[0], other)))
    with pytest.raises(InvalidMessageError, match=r"built for feature cache '[0-9a-f]{16}', this trainer caches 40 rows"):
        MessageValidator(cfg, "trainer", job=cfg.job, hot=hot)(msg)
    with pytest.raises(InvalidMessageError, match="this trainer caches no rows"):
        MessageValidator(cfg, "trainer", job=cfg.job)(msg)
    # the loader side: a published cache it cannot reproduce is refused (it then sends every row)
    assert HotRows.matching(store, hot.published(10**6)).digest == hot.digest
    assert HotRows.matching(store, {"rows": 0}) is None
    with pytest.raises(ConfigError, match="trainer rank 1 caches 40 feature rows as 'f00', .*every row will be sent"):
        HotRows.matching(store, {"rows": 40, "digest": "f00"}, who="trainer rank 1")


def test_hostile_cached_row_frames_are_refused(job):
    cfg, store, sbs = job
    hot = HotRows.build(store, 60)
    check = MessageValidator(cfg, "trainer", job=cfg.job, hot=hot)
    fb = LoaderCore(store).load(sbs[0], hot)
    M = fb.features.shape[0]
    assert M and check(decode(encode(fb)))
    bad = {
        "one row short": fb.features[:-1],
        "one row extra": np.concatenate([fb.features, fb.features[:1]]),
        "every row": LoaderCore(store).load(sbs[0]).features,
    }
    for what, x in bad.items():
        msg = decode(encode(type(fb)(**{**fb.__dict__, "features": x})))
        with pytest.raises(InvalidMessageError, match=rf"must be float32\[{M}, 16\] \(the {M} rows its feature cache lacks\)"):
            check(msg)
    for digest in ("x" * 300, hot.digest.upper(), " "):
        with pytest.raises(InvalidMessageError, match="built for feature cache"):
            check(decode(encode(type(fb)(**{**fb.__dict__, "feature_cache": digest}))))
    nan = type(fb)(**{**fb.__dict__, "features": fb.features.copy()})
    nan.features[0, 0] = np.inf
    with pytest.raises(InvalidMessageError, match="NaN or inf"):
        check(decode(encode(nan)))


def test_exactly_once_through_the_ingest_thread_with_a_cache(small_store, redis_url, request):
    _, path = small_store
    cfg = _cfg(path, job=f"fc-{request.node.name}")
    store = PartitionStore(path)
    coord, plan, claimed, ref = publish_and_claim(redis_url, cfg, store)
    core = _core(cfg, store, 100 * store.manifest.feature_dim * 4)
    loader, sampler = LoaderCore(store), SamplerCore(store)
    fbs = []
    for it in plan[:3]:
        sb = sampler.sample_item(it, cfg.sampler.fanouts)
        sb.job = cfg.job
        sb.work_stream, sb.work_id = ref[it.batch_id]
        fbs.append(loader.load(sb, core.hot))
    ctx = zmq.Context()
    pull = make_socket(ctx, zmq.PULL, curve="server")
    push = make_socket(ctx, zmq.PUSH)
    push.connect(f"tcp://127.0.0.1:{pull.bind_to_random_port('tcp://127.0.0.1')}")
    ing = Ingest(pull, cfg, coord, 0, core, depth=8)
    ing.set_plan(0, "train", plan)
    ing.start()
    try:
        pending = coord.pending(store.num_parts)
        for fb in fbs + fbs[:2]:                     # two re-deliveries
            assert send_msg(push, fb)
        got, deadline = [], time.monotonic() + 10
        while len(got) < 5 and time.monotonic() < deadline:
            a = ing.get(0.1)
            if a is not None:
                got.append(a)
                ing.ack(a.fb.work_stream, a.fb.work_id)
        ing.flush_acks()
        assert [a.fresh for a in got] == [True] * 3 + [False] * 2
        assert coord.applied_count(0, "train") == 3
        assert coord.pending(store.num_parts) == pending - 3
        a = got[0]
        assert a.feature_rows == fbs[0].nodes.shape[0] and 0 < a.cached_rows < a.feature_rows
        assert a.cached_rows == a.feature_rows - fbs[0].features.shape[0]
        assert a.wire_bytes == sum(len(bytes(f)) for f in encode(fbs[0]))
        assert torch.equal(a.staged.x, _core(cfg, store).stage(loader.load(
            sampler.sample_item(plan[0], cfg.sampler.fanouts))).x)
    finally:
        ing.close()
        push.close(0)
        pull.close(0)
        ctx.term()
        coord.delete_job()
