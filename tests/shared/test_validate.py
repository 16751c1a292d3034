"""Contract tests of the semantic validator: real batches pass, every poisoned variant is refused."""
import dataclasses

import msgpack
import numpy as np
import pytest

from argosy.shared import keys
from argosy.shared.config import JobConfig, SamplerConfig, TrainerConfig
from argosy.shared.errors import InvalidMessageError, ProtocolError
from argosy.shared.protocol import ErrorReply, SampledBatch
from argosy.shared.store import PartitionStore
from argosy.shared.validate import BatchBounds, MessageValidator, job_plan
from argosy.shared.wire import decode, encode
from argosy.services.loader.core import LoaderCore
from argosy.services.sampler.core import SamplerCore

JOB = "vjob"


@pytest.fixture
def env(small_store):
    _, path = small_store
    cfg = JobConfig(job=JOB, store=str(path), num_trainers=2,
                    sampler=SamplerConfig(fanouts=(5, 5), eval_fanouts=(-1, -1), batch_size=16, eval_batch_size=32),
                    trainer=TrainerConfig(epochs=3))
    store = PartitionStore(path)
    plan = job_plan(cfg, store, 1, "train")
    it = plan[0]
    sb = SamplerCore(store).sample_item(it, cfg.sampler.fanouts)
    sb.job, sb.work_stream, sb.work_id = JOB, keys.work_stream(JOB, it.part), "1700000000000-3"
    fb = LoaderCore(store).load(sb)
    return cfg, store, sb, fb


def _loader(cfg):
    return MessageValidator(cfg, "loader", job=JOB)


def _trainer(cfg, rank):
    return MessageValidator(cfg, "trainer", rank=rank, job=JOB)


def _with(b, **kw):
    return dataclasses.replace(b, **kw)


def test_real_batches_pass(env):
    cfg, store, sb, fb = env
    assert _loader(cfg)(sb) is sb
    assert _trainer(cfg, fb.trainer_rank)(fb) is fb
    # and after a trip over the wire (read-only views on frames)
    assert _loader(cfg)(decode([bytes(f) for f in encode(sb)])).batch_id == sb.batch_id


def test_every_planned_eval_batch_passes(env):
    """Exact eval batches (fanout -1) of every part stay within the derived bounds."""
    cfg, store, _, _ = env
    v, core = _loader(cfg), SamplerCore(store)
    for it in job_plan(cfg, store, 0, "val"):
        b = core.sample_item(it, cfg.sampler.eval_fanouts)
        b.job, b.work_stream, b.work_id = JOB, keys.work_stream(JOB, it.part), "1-0"
        v(b)


@pytest.mark.parametrize("bad, match", [
    (1_000_000_000_000, r"node ids span \[.*1000000000000\], outside the store's \[0, 500\)"),
    (-5, r"node ids span \[-5, .*outside the store's"),
])
def test_node_ids_outside_store(env, bad, match):
    cfg, _, sb, _ = env
    nodes = sb.nodes.copy()
    nodes[-1] = bad
    with pytest.raises(InvalidMessageError, match=match):
        _loader(cfg)(_with(sb, nodes=nodes))


def test_edge_ids_outside_batch(env):
    cfg, _, sb, _ = env
    src = sb.edge_src.copy()
    src[0] = sb.nodes.shape[0] + 7
    with pytest.raises(InvalidMessageError, match="edge_src holds local ids outside"):
        _loader(cfg)(_with(sb, edge_src=src))
    dst = sb.edge_dst.copy()
    dst[-1] = int(sb.hop_nodes[-2])           # a hop-2 edge may only point at hop-1 nodes
    with pytest.raises(InvalidMessageError, match="edge_dst holds local ids outside"):
        _loader(cfg)(_with(sb, edge_dst=dst))


def test_hop_counts_inconsistent(env):
    cfg, _, sb, _ = env
    v = _loader(cfg)
    with pytest.raises(InvalidMessageError, match=r"this job samples 2 hops \(expected 3\)"):
        v(_with(sb, hop_nodes=sb.hop_nodes[:2], hop_edges=sb.hop_edges[:2]))
    hn = sb.hop_nodes.copy()
    hn[1] = hn[2] + 1                          # not a monotone prefix
    with pytest.raises(InvalidMessageError, match="hop_nodes .* must rise"):
        v(_with(sb, hop_nodes=hn))
    he = sb.hop_edges.copy()
    he[-1] -= 1
    with pytest.raises(InvalidMessageError, match="hop_edges .* must rise from 0 to"):
        v(_with(sb, hop_edges=he))
    with pytest.raises(InvalidMessageError, match="degrees .* must match"):
        v(_with(sb, degrees=sb.degrees[:-1]))
    with pytest.raises(InvalidMessageError, match="nodes must be 1-d int64"):
        v(_with(sb, nodes=sb.nodes.astype(np.float64)))


def test_dst_ptr_inconsistent(env):
    cfg, _, sb, fb = env
    v = _loader(cfg)
    assert v(_with(sb, dst_ptr=np.empty(0, np.int32)))                  # optional: the trainer builds it
    with pytest.raises(InvalidMessageError, match="dst_ptr has .* offsets, the hops' destinations need"):
        v(_with(sb, dst_ptr=sb.dst_ptr[:-1]))
    p = sb.dst_ptr.copy()
    p[int(sb.hop_nodes[0])] += 1                # hop 1's last offset no longer its edge count
    with pytest.raises(InvalidMessageError, match="dst_ptr must rise from 0 to each hop's edges"):
        v(_with(sb, dst_ptr=p))
    p = sb.dst_ptr.copy()
    p[1] = p[2] + 1                             # falls within hop 1 (16 seeds: offsets 0..16)
    with pytest.raises(InvalidMessageError, match="dst_ptr offsets fall within a hop"):
        v(_with(sb, dst_ptr=p))


def test_huge_well_formed_batch_is_bounded(env):
    cfg, store, sb, _ = env
    b = BatchBounds.from_job(cfg, store)
    n = b.max_nodes + 1
    huge = _with(sb, nodes=np.arange(n, dtype=np.int64) % 500, degrees=np.zeros(n, np.int32),
                 hop_nodes=np.array([1, 2, n]), edge_src=np.empty(0, np.int32), edge_dst=np.empty(0, np.int32),
                 hop_edges=np.zeros(3, np.int64))
    with pytest.raises(InvalidMessageError, match=rf"{n} nodes, outside \[1, {b.max_nodes}\]"):
        _loader(cfg)(huge)
    v = _loader(cfg)
    v.bounds = dataclasses.replace(v.bounds, max_message_bytes=10_000)     # 400 rows x 16 float32 = 25,600 B
    with pytest.raises(InvalidMessageError, match="400 nodes need 25600 feature bytes, over the wire.max_message_bytes"):
        v(_with(sb, nodes=np.arange(400, dtype=np.int64), degrees=np.zeros(400, np.int32),
                hop_nodes=np.array([1, 2, 400]), edge_src=np.empty(0, np.int32), edge_dst=np.empty(0, np.int32),
                hop_edges=np.zeros(3, np.int64)))


def test_overflowing_declared_shape_rejected_before_allocation():
    frames = [bytes(f) for f in encode(SampledBatch(nodes=np.arange(3)))]
    h = msgpack.unpackb(frames[0], raw=False)
    h[3][0][2] = [2**32, 2**32, 2**32, 4]      # int64 product wraps to 0; an empty frame would "match"
    frames[0], frames[1] = msgpack.packb(h), b""
    with pytest.raises(ProtocolError, match=r"declared shape \[4294967296, .* exceeds the limit of"):
        decode(frames)
    h[3][0][2] = [2**39, 2**39, 0]              # zero bytes, yet numpy cannot even make the empty array
    frames[0] = msgpack.packb(h)
    with pytest.raises(ProtocolError, match=r"declared shape \[549755813888, 549755813888, 0\] .* exceeds the limit of"):
        decode(frames)


def test_labels_outside_classes(env):
    cfg, _, _, fb = env
    y = fb.labels.copy()
    y[0] = 4                                   # 4 classes: 0..3, -1 = unlabelled
    with pytest.raises(InvalidMessageError, match=r"labels span .* outside \[-1, 4\)"):
        _trainer(cfg, fb.trainer_rank)(_with(fb, labels=y))
    x = np.array(fb.features)
    x[0, 0] = np.inf
    with pytest.raises(InvalidMessageError, match="features hold NaN or inf"):
        _trainer(cfg, fb.trainer_rank)(_with(fb, features=x))
    with pytest.raises(InvalidMessageError, match=r"features float32\[.*\] must be float32\[.*, 16\]"):
        _trainer(cfg, fb.trainer_rank)(_with(fb, features=x[:, :8].copy()))


@pytest.mark.parametrize("stream", [keys.state(JOB), keys.spec(JOB), keys.work_stream("otherjob", 0),
                                    keys.work_stream(JOB, 99), "argosy:vjob:work:0\r\nFLUSHALL"])
def test_work_reference_must_name_this_jobs_stream(env, stream):
    cfg, _, _, fb = env
    with pytest.raises(InvalidMessageError, match="work_stream .* is not this job's stream of part"):
        _trainer(cfg, fb.trainer_rank)(_with(fb, work_stream=stream))


def test_work_id_and_scalars(env):
    cfg, _, sb, _ = env
    v = _loader(cfg)
    with pytest.raises(InvalidMessageError, match="work_id .* is not a stream entry id"):
        v(_with(sb, work_id="$"))
    with pytest.raises(InvalidMessageError, match="belongs to job 'other'"):
        v(_with(sb, job="other"))
    with pytest.raises(InvalidMessageError, match=r"epoch 3 outside \[0, 3\)"):
        v(_with(sb, epoch=3))
    with pytest.raises(InvalidMessageError, match="phase 'warmup' is not one of"):
        v(_with(sb, phase="warmup"))
    with pytest.raises(InvalidMessageError, match=r"trainer_rank 2 outside \[0, 2\)"):
        v(_with(sb, trainer_rank=2))
    with pytest.raises(InvalidMessageError, match="sample_seconds nan is not a finite duration"):
        v(_with(sb, sample_seconds=float("nan")))


def test_batch_ids_must_belong_to_the_plan(env):
    cfg, store, sb, fb = env
    v = _loader(cfg)
    with pytest.raises(InvalidMessageError, match="is not in the plan of epoch 1 train"):
        v(_with(sb, batch_id=10_000))
    other = next(it for it in job_plan(cfg, store, 1, "train") if it.part != sb.part)
    with pytest.raises(InvalidMessageError, match="plan says part"):
        v(_with(sb, batch_id=other.batch_id))
    # a forged batch taking a real batch's slot: right id, part and rank, other seeds
    nodes = sb.nodes.copy()
    nodes[0], nodes[int(sb.hop_nodes[0])] = nodes[int(sb.hop_nodes[0])], nodes[0]
    with pytest.raises(InvalidMessageError, match="seeds differ from the plan's"):
        v(_with(sb, nodes=nodes))
    with pytest.raises(InvalidMessageError, match=f"addressed to trainer rank {fb.trainer_rank}, this is rank"):
        _trainer(cfg, 1 - fb.trainer_rank)(fb)


def test_duplicate_seeds(env):
    cfg, _, sb, _ = env
    nodes = sb.nodes.copy()
    nodes[1] = nodes[0]
    with pytest.raises(InvalidMessageError, match="duplicate seed ids"):
        _loader(cfg)(_with(sb, nodes=nodes))


def test_wrong_message_type(env):
    cfg, _, sb, fb = env
    with pytest.raises(InvalidMessageError, match="a loader accepts SampledBatch only .got FeatureBatch"):
        _loader(cfg)(fb)
    with pytest.raises(InvalidMessageError, match="a trainer accepts FeatureBatch only .got ErrorReply"):
        _trainer(cfg, 0)(ErrorReply())


def test_trainer_plan_handed_in_is_used(env):
    """The trainer hands its own plan to the validator; a batch outside it is refused."""
    cfg, store, _, fb = env
    v = _trainer(cfg, fb.trainer_rank)
    v.set_plan(1, "train", [])
    with pytest.raises(InvalidMessageError, match="is not in the plan"):
        v(fb)


def test_value_check_can_move_to_the_caller_and_still_holds(env):
    """check_values=False keeps every structural check and leaves only the per-byte one to the caller."""
    from argosy.shared.validate import check_feature_values
    cfg, _, _, fb = env
    x = np.array(fb.features)
    x[-1, -1] = np.nan
    deferred = MessageValidator(cfg, "trainer", rank=fb.trainer_rank, job=JOB, check_values=False)
    bad = _with(fb, features=x)
    assert deferred(bad) is bad
    with pytest.raises(InvalidMessageError, match="features hold NaN or inf"):
        check_feature_values(bad)
    y = fb.labels.copy()
    y[0] = 4
    with pytest.raises(InvalidMessageError, match="outside"):
        deferred(_with(fb, labels=y))


@pytest.mark.parametrize("dtype,uint", [(np.float16, np.uint16), (np.float32, np.uint32), (np.float64, np.uint64)])
def test_all_finite_agrees_with_isfinite_on_every_kind_of_value(dtype, uint):
    """The exponent-bit kernel answers exactly as np.isfinite(x).all(): random bit patterns (NaN
    payloads, +-inf, subnormals, -0) row by row, read-only and strided arrays, one bad value anywhere."""
    from argosy.shared.validate import all_finite
    rng = np.random.default_rng(0)
    bits = rng.integers(0, np.iinfo(uint).max, size=(2000, 5), dtype=uint, endpoint=True)
    rows = bits.view(dtype)
    want = np.isfinite(rows).all(axis=1)
    assert 0 < want.sum() < rows.shape[0]                    # both kinds of row are drawn
    assert [all_finite(r) for r in rows] == want.tolist()
    x = np.full((257, 9), np.finfo(dtype).max, dtype)        # the largest finite values are finite
    x[::2] = np.finfo(dtype).smallest_subnormal
    assert all_finite(x) and all_finite(x[:, ::2]) and all_finite(x[:0])
    for bad in (np.nan, np.inf, -np.inf, -np.nan):
        for pos in ((0, 0), (128, 4), (256, 8)):
            y = x.copy()
            y[pos] = bad
            y.flags.writeable = False                         # as received: views of the frames
            assert not all_finite(y) and not all_finite(y[:, ::2] if pos[1] % 2 == 0 else y[:, 1::2])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_received_nonfinite_features_are_refused(env, bad):
    """A decoded (read-only, frame-backed) batch with one non-finite feature is refused by the trainer's validator."""
    cfg, _, _, fb = env
    x = np.array(fb.features)
    x[x.shape[0] // 2, -1] = bad
    msg = decode([bytes(f) for f in encode(_with(fb, features=x))])
    assert not msg.features.flags.writeable
    with pytest.raises(InvalidMessageError, match="features hold NaN or inf"):
        _trainer(cfg, fb.trainer_rank)(msg)
    assert _trainer(cfg, fb.trainer_rank)(decode([bytes(f) for f in encode(fb)])).batch_id == fb.batch_id
