"""Fuzz target ``wire``: the decoder, the semantic validator, and whatever consumes an accepted batch.

An input is one multipart message, stored as ``msgpack([frame0, frame1, ...])`` (the corpus files
``tests/corpus/wire/*.bin``).  The oracle: decoding + validation either refuses the message with a
:class:`ProtocolError` (``InvalidMessageError`` included), or accepts it, and then the consumer
(the loader's feature gather for a SampledBatch, the trainer's forward pass for a FeatureBatch)
must run without any exception.  Anything else is a crash.

The mutator knows the message layout: it rewrites scalars (ids, the job's state key as work
stream, huge and negative ints), array specs (overflowing shapes, wrong dtypes, extra dims),
array contents (ids 1e12 / -5 / n, duplicated seeds, NaN), and frames (cut, dropped, repeated),
besides plain byte mutations of one frame.
"""
from __future__ import annotations

import atexit
import random
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path

import msgpack
import numpy as np

from argosy.shared import keys
from argosy.shared.errors import ProtocolError
from argosy.shared.protocol import PROTOCOL_VERSION, FeatureBatch, SampledBatch
from tests.fuzz import CORPUS, mutate_bytes

EXPECTED = (ProtocolError,)
JOB = "fuzzjob"
N = 300
DIR = CORPUS / "wire"
HOT_ROWS = 100
"""Rows the fuzz trainers keep in their feature cache (a third of the graph)."""


@lru_cache(maxsize=1)
def _env():
    """A small real store, job config, validators and consumers (built once per process)."""
    from argosy.shared.config import JobConfig, SamplerConfig, TrainerConfig
    from argosy.shared.hot_rows import HotRows
    from argosy.shared.store import PartitionStore, write_store
    from argosy.shared.validate import MessageValidator
    from argosy.services.loader.core import LoaderCore
    from argosy.services.trainer.core import TrainerCore
    from tests.graphs import random_graph
    root = Path(tempfile.mkdtemp(prefix="argosy-fuzz-"))
    atexit.register(shutil.rmtree, root, True)  # every process that sets up the target made one
    g = random_graph(N, 1500, seed=3, features=8, classes=3)
    write_store(g, np.random.default_rng(0).integers(0, 3, N), root / "store")
    cfg = JobConfig(job=JOB, store=str(root / "store"), num_trainers=2,
                    sampler=SamplerConfig(fanouts=(3, 3), eval_fanouts=(-1, -1), batch_size=8, eval_batch_size=16),
                    trainer=TrainerConfig(epochs=2, hidden=8, device="cpu"))
    store = PartitionStore(cfg.store)
    train = TrainerCore(cfg.trainer, 8, 3, 2, seed=0, device=None)
    hot = train.fill_cache(store, HOT_ROWS * 8 * 4)     # the trainers cache the hottest rows: both batch forms arrive
    return {"cfg": cfg, "store": store, "loader": MessageValidator(cfg, "loader", job=JOB), "hot": hot,
            "trainer": [MessageValidator(cfg, "trainer", rank=r, job=JOB, hot=hot) for r in range(2)],
            "load": LoaderCore(store), "train": train}


def pack(frames) -> bytes:
    return msgpack.packb([bytes(f) for f in frames], use_bin_type=True)


def unpack(data: bytes) -> list[bytes]:
    try:
        frames = msgpack.unpackb(data, raw=False, max_array_len=256, max_bin_len=1 << 26)
    except Exception:                       # noqa: BLE001 - not a framed message: one raw frame
        return [data]
    if isinstance(frames, list) and frames and all(isinstance(f, bytes) for f in frames):
        return frames
    return [data]


def valid_batches() -> list:
    """Real batches of every phase: what samplers and loaders send in a job."""
    from argosy.shared.validate import job_plan
    from argosy.services.sampler.core import SamplerCore
    env = _env()
    cfg, store = env["cfg"], env["store"]
    core, out = SamplerCore(store), []
    for epoch, phase in ((0, "train"), (1, "train"), (0, "val"), (0, "test")):
        for it in job_plan(cfg, store, epoch, phase)[:3]:
            sb = core.sample_item(it, cfg.sampler.fanouts if phase == "train" else cfg.sampler.eval_fanouts)
            sb.job, sb.work_stream, sb.work_id = JOB, keys.work_stream(JOB, it.part), f"{1700000000000 + it.batch_id}-0"
            out += [sb, env["load"].load(sb)]
    return out


def cached_batches() -> list:
    """The FeatureBatches of :func:`valid_batches` as loaders send them to a trainer with a feature cache."""
    env = _env()
    return [env["load"].load(sb, env["hot"]) for sb in valid_batches()[0::2]]


def hostile_messages() -> dict[str, list[bytes]]:
    """One message per hostile class the services must drop (the corpus's named files)."""
    from argosy.shared.wire import encode
    sb, fb = valid_batches()[0], valid_batches()[1]
    fr = lambda m: [bytes(f) for f in encode(m)]                     # noqa: E731
    out = {}
    h = msgpack.unpackb(fr(sb)[0], raw=False)
    h[3][0][2] = [2**32, 2**32, 2**32, 4]
    out["overflow_shape"] = [msgpack.packb(h), b"", *fr(sb)[2:]]
    big = SampledBatch(**{**sb.__dict__, "nodes": np.arange(20000, dtype=np.int64) % N,
                          "degrees": np.zeros(20000, np.int32), "hop_nodes": np.array([8, 9, 20000]),
                          "edge_src": np.empty(0, np.int32), "edge_dst": np.empty(0, np.int32),
                          "hop_edges": np.zeros(3, np.int64)})
    out["huge_well_formed"] = fr(big)
    for name, v in (("id_1e12", 10**12), ("id_minus5", -5)):
        nodes = sb.nodes.copy()
        nodes[-1] = v
        out[name] = fr(SampledBatch(**{**sb.__dict__, "nodes": nodes}))
    out["state_key_stream"] = fr(FeatureBatch(**{**fb.__dict__, "work_stream": keys.state(JOB)}))
    nodes = sb.nodes.copy()
    nodes[1] = nodes[0]
    out["duplicate_seeds"] = fr(SampledBatch(**{**sb.__dict__, "nodes": nodes}))
    out["foreign_batch_id"] = fr(SampledBatch(**{**sb.__dict__, "batch_id": 99999}))
    out["garbage"] = [b"\x93\x01\xff garbage \x00" * 3]
    h = msgpack.unpackb(fr(fb)[0], raw=False)
    h[0] = PROTOCOL_VERSION + 1
    out["wrong_version"] = [msgpack.packb(h), *fr(fb)[1:]]
    cb = cached_batches()[0]
    out["cached_rows_short"] = fr(FeatureBatch(**{**cb.__dict__, "features": cb.features[:-1]}))
    out["foreign_cache"] = fr(FeatureBatch(**{**cb.__dict__, "feature_cache": "0123456789abcdef"}))
    out["ring_reference"] = fr(FeatureBatch(**{**fb.__dict__, "features": fb.features[:0], "ring": "ring-1-00000000000000ff",
                                               "ring_slot": 0, "ring_seq": 1, "ring_bytes": fb.features.nbytes}))
    return out


def write_corpus() -> None:
    """(Re)write ``tests/corpus/wire/``: valid seeds and one file per hostile class."""
    from argosy.shared.wire import encode
    DIR.mkdir(parents=True, exist_ok=True)
    for i, b in enumerate(valid_batches()[:6]):
        (DIR / f"valid_{i}_{type(b).__name__}.bin").write_bytes(pack(encode(b)))
    for i, b in enumerate(cached_batches()[:2]):
        (DIR / f"valid_cached_{i}_{type(b).__name__}.bin").write_bytes(pack(encode(b)))
    for name, frames in hostile_messages().items():
        (DIR / f"hostile_{name}.bin").write_bytes(pack(frames))


def seeds() -> list[bytes]:
    files = sorted(DIR.glob("*.bin")) + sorted((DIR / "crashes").glob("*.bin"))
    if not files:
        write_corpus()
        files = sorted(DIR.glob("*.bin"))
    return [f.read_bytes() for f in files]


def run_one(data: bytes) -> None:
    from argosy.shared.wire import Limits, decode
    env = _env()
    msg = decode(unpack(data), Limits(max_frame_bytes=1 << 26, max_message_bytes=1 << 26))
    if type(msg) is SampledBatch:
        env["load"].load(env["loader"](msg))
    elif type(msg) is FeatureBatch:
        r = msg.trainer_rank if isinstance(msg.trainer_rank, int) and 0 <= msg.trainer_rank < 2 else 0
        env["train"].eval_step(env["trainer"][r](msg))
    else:
        env["loader"](msg)                 # any other kind: refused


_INTS = [0, 1, -1, -5, 2, 7, N - 1, N, N + 1, 2**31 - 1, 2**31, 2**32, 10**12, 2**62, 2**63 - 1, -(2**63)]


def _mutate_array(raw: bytes, dtype: str, rng: random.Random) -> bytes:
    a = np.frombuffer(raw, dtype=dtype).copy()
    if a.size == 0:
        return raw
    i = rng.randrange(a.size)
    if a.dtype.kind == "f":
        a.flat[i] = rng.choice([np.nan, np.inf, -np.inf, 1e38, -0.0, 3.0])
    elif a.dtype.kind in "iu":
        v = rng.choice(_INTS + [int(a.flat[rng.randrange(a.size)])])
        info = np.iinfo(a.dtype)
        a.flat[i] = min(max(v, info.min), info.max)
    else:
        a.flat[i] = not a.flat[i]
    return a.tobytes()


def mutate(data: bytes, rng: random.Random) -> bytes:
    frames = unpack(data)
    try:
        h = msgpack.unpackb(frames[0], raw=False)
        ok = isinstance(h, list) and len(h) == 4 and isinstance(h[2], dict) and isinstance(h[3], list)
    except Exception:                       # noqa: BLE001
        ok = False
    op = rng.randrange(10)
    if not ok or op == 0:
        i = rng.randrange(len(frames))
        frames[i] = mutate_bytes(frames[i], rng)
        return pack(frames)
    if op <= 3 and h[2]:                                   # a scalar
        k = rng.choice(sorted(h[2]))
        h[2][k] = rng.choice(_INTS + [keys.state(JOB), keys.spec(JOB), keys.work_stream(JOB, 1),
                                      keys.work_stream("other", 0), "", "x" * 300, 1.5, float("nan"), "train", "val"])
    elif op <= 5 and h[3]:                                 # an array spec
        j = rng.randrange(len(h[3]))
        spec = h[3][j]
        if isinstance(spec, list) and len(spec) == 3 and isinstance(spec[2], list):
            choice = rng.randrange(4)
            if choice == 0 and spec[2]:
                spec[2][rng.randrange(len(spec[2]))] = rng.choice([0, 1, 2**31, 2**39, 10**12])
            elif choice == 1:
                spec[1] = rng.choice(["int32", "int64", "float64", "uint64", "bool", "float16", "object", "<i8"])
            elif choice == 2:
                spec[2] = spec[2] + [rng.choice([1, 2, 2**20])]
            else:
                spec[2] = [2**32, 2**32, 2**32, 4][:max(1, len(spec[2]))]
    elif op <= 8 and len(frames) > 1 and h[3]:            # array contents, spec kept consistent
        j = rng.randrange(min(len(h[3]), len(frames) - 1))
        spec = h[3][j]
        try:
            frames[1 + j] = _mutate_array(frames[1 + j], spec[1], rng)
        except (TypeError, ValueError, IndexError):
            pass
    else:                                                  # frames dropped, repeated or cut
        c = rng.randrange(3)
        if c == 0 and len(frames) > 1:
            del frames[rng.randrange(1, len(frames))]
        elif c == 1:
            frames.append(frames[rng.randrange(len(frames))])
        else:
            i = rng.randrange(len(frames))
            frames[i] = frames[i][:rng.randrange(len(frames[i]) + 1)]
    try:
        frames[0] = msgpack.packb(h, use_bin_type=True)
    except (TypeError, ValueError, OverflowError):
        pass
    return pack(frames)
