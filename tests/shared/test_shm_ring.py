"""The shared-memory ring with real files: the fused read, slot reuse only after release, hostile references."""
import dataclasses
import os

import numpy as np
import pytest

from argosy.shared import keys
from argosy.shared.config import JobConfig, LoaderConfig, SamplerConfig
from argosy.shared.errors import InvalidMessageError
from argosy.shared.shm_ring import HEADER_BYTES, RingReader, RingWriter
from argosy.shared.store import PartitionStore
from argosy.shared.validate import MessageValidator, job_plan, read_finite
from argosy.services.loader.core import LoaderCore
from argosy.services.sampler.core import SamplerCore

JOB = "ringjob"


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_read_finite_copies_and_checks_in_one_pass(tmp_path, dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1000, 37)).astype(dtype)       # not a multiple of the read chunk
    f = tmp_path / "f"
    f.write_bytes(b"\0" * 100 + x.tobytes())
    fd = os.open(f, os.O_RDWR)
    try:
        out = np.empty_like(x)
        assert read_finite(fd, 100, out) == (x.nbytes, True) and np.array_equal(out, x)
        for bad in (np.nan, np.inf, -np.inf):
            y = x.copy()
            y[999, 36] = bad                                  # the very last value
            os.pwrite(fd, y.tobytes(), 100)
            got, finite = read_finite(fd, 100, out)
            assert got == x.nbytes and not finite
        os.ftruncate(fd, 100 + x.nbytes // 2)                 # truncated: a short count, no SIGBUS
        got, _ = read_finite(fd, 100, out)
        assert got == x.nbytes // 2
    finally:
        os.close(fd)


@pytest.fixture
def env(small_store, tmp_path):
    _, path = small_store
    cfg = JobConfig(job=JOB, store=str(path), loader=LoaderConfig(shm_ring_slots=2),
                    sampler=SamplerConfig(fanouts=(3, 2), eval_fanouts=(3, 2), batch_size=16))
    store = PartitionStore(path)
    plan = job_plan(cfg, store, 0, "train")
    sb = SamplerCore(store).sample_item(plan[0], cfg.sampler.fanouts)
    sb.job, sb.work_stream, sb.work_id = JOB, keys.work_stream(JOB, plan[0].part), "1700000000000-3"
    fb = LoaderCore(store).load(sb)
    v = MessageValidator(cfg, "trainer", rank=0, job=JOB, rings=True)
    v.set_plan(0, "train", plan)
    ring_dir = tmp_path / "ring"
    ring_dir.mkdir(mode=0o700)
    writer = RingWriter(str(ring_dir), 2, v.bounds.ring_slot_bytes)
    reader = RingReader(str(ring_dir), v.bounds)
    yield fb, v, writer, reader.wrap(v), reader
    writer.close()
    reader.close()


def _through(fb, writer, lease):
    """``fb`` as a loader sends it through ``writer``: rows in the slot, the header names it."""
    writer.rows(lease, fb.features.shape, fb.features.dtype)[:] = fb.features
    return dataclasses.replace(fb, features=fb.features[:0], ring=writer.name, ring_slot=lease.slot,
                               ring_seq=lease.seq, ring_bytes=fb.features.nbytes)


def test_slot_is_reused_only_after_the_trainer_released_it(env):
    fb, v, writer, check, reader = env
    a, b = writer.acquire(fb.features.nbytes, 1.0), writer.acquire(fb.features.nbytes, 1.0)
    assert {a.slot, b.slot} == {0, 1} and b.seq == a.seq + 1
    assert writer.acquire(fb.features.nbytes, 0.05) is None          # both in flight: wait, then give up
    assert writer.acquire(writer.slot_bytes + 1, 1.0) is None        # never fits
    msg = _through(fb, writer, a)
    got = check(msg)
    assert np.array_equal(got.features, fb.features) and got.features.flags.owndata   # its own buffer
    assert writer.in_flight() == 1
    c = writer.acquire(fb.features.nbytes, 1.0)
    assert c.slot == a.slot and c.seq > b.seq                        # the released one, with a new number
    writer.cancel(b)                                                 # not sent: free again without the trainer
    assert writer.acquire(fb.features.nbytes, 0.05).slot == b.slot


def test_the_copy_is_the_trainers_own(env):
    """A loader rewriting the slot after the read cannot change the checked rows."""
    fb, v, writer, check, reader = env
    lease = writer.acquire(fb.features.nbytes, 1.0)
    got = check(_through(fb, writer, lease))
    writer.rows(lease, fb.features.shape, fb.features.dtype)[:] = np.nan
    assert np.array_equal(got.features, fb.features)


def test_hostile_references_are_refused_never_raised_otherwise(env, tmp_path):
    fb, v, writer, check, reader = env
    lease = writer.acquire(fb.features.nbytes, 1.0)
    good = _through(fb, writer, lease)

    def refused(msg, match):
        with pytest.raises(InvalidMessageError, match=match):
            check(dataclasses.replace(msg))        # a fresh message each time, as decoded off the wire

    assert check(dataclasses.replace(good)).batch_id == fb.batch_id
    refused(good, "already released at sequence number")             # a replay: stale
    refused(dataclasses.replace(good, ring_slot=2), r"ring slot 2 outside \[0, 2\)")
    refused(dataclasses.replace(good, ring_slot=-1), "ring slot -1 outside")
    refused(dataclasses.replace(good, ring_bytes=good.ring_bytes - 4), "bytes, its .* feature rows need")
    refused(dataclasses.replace(good, ring="../../etc/passwd"), "is not a ring file name")
    refused(dataclasses.replace(good, ring="ring-1-0123456789abcdef"), "does not exist")
    refused(dataclasses.replace(good, ring_seq=0), "sequence number 0 outside")
    refused(dataclasses.replace(good, features=fb.features), r"must be float32\[0, ")      # rows inline and in a ring
    other = RingWriter(str(reader.dir), 1, 4096)                      # a file of another layout
    refused(dataclasses.replace(good, ring=other.name), "is not this job's ring file")
    other.close()
    os.symlink("/etc/hostname", os.path.join(reader.dir, "ring-1-00000000000000aa"))
    refused(dataclasses.replace(good, ring="ring-1-00000000000000aa"), "cannot be opened")
    lease = writer.acquire(fb.features.nbytes, 1.0)
    bad = _through(fb, writer, lease)
    writer.rows(lease, fb.features.shape, fb.features.dtype)[3, 1] = np.inf
    refused(bad, "features hold NaN or inf")
    assert writer.in_flight() == 0                                     # a refused batch's slot is released too
    lease = writer.acquire(fb.features.nbytes, 1.0)
    late = _through(fb, writer, lease)
    os.truncate(writer.path, HEADER_BYTES + lease.slot * writer.slot_bytes + 8)   # truncated under the reader
    refused(late, "the file was truncated")


def test_a_receiver_without_rings_refuses_references(env, small_store):
    fb, v, writer, check, reader = env
    _, path = small_store
    cfg = JobConfig(job=JOB, store=str(path), loader=LoaderConfig(shm_ring_slots=2),
                    sampler=SamplerConfig(fanouts=(3, 2), eval_fanouts=(3, 2), batch_size=16))
    plain = MessageValidator(cfg, "trainer", rank=0, job=JOB)
    lease = writer.acquire(fb.features.nbytes, 1.0)
    with pytest.raises(InvalidMessageError, match="this receiver reads none"):
        plain(_through(fb, writer, lease))


def test_rings_of_dead_loaders_are_removed(env):
    import subprocess
    fb, v, writer, check, reader = env
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = os.path.join(reader.dir, f"ring-{dead.pid}-0123456789abcdef")
    open(stale, "wb").close()
    reader.sweep()
    assert not os.path.exists(stale) and os.path.exists(writer.path)
    writer.close()
    assert not writer.alive() and not os.path.exists(writer.path)
