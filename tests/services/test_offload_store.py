"""Contract and policy tests of the offload store (in-process library)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from argosy.services.offload.policy import Schedule
from argosy.services.offload.store import OffloadStore
from argosy.shared.errors import BlockNotFoundError, CacheBudgetError, DiskBudgetError

from tests.full_disk import run_on_full_disk

BLK = 1024  # bytes of one 16x16 float32 block


def blk(v: float) -> torch.Tensor:
    return torch.full((16, 16), float(v))


def test_put_get_spill_roundtrip(tmp_path):
    with OffloadStore(cache_bytes=2 * BLK, spill_dir=str(tmp_path), policy="lru") as s:
        for p in range(5):
            s.put("act", 1, p, blk(p))
        st = s.stats()
        assert st["resident_bytes"] <= 2 * BLK
        assert st["bytes_written"] >= 3 * BLK and st["evictions"] >= 3
        for p in range(5):
            assert torch.equal(s.get("act", 1, p), blk(p))
        assert s.stats()["bytes_read"] > 0
        assert len(list(tmp_path.iterdir())) >= 3


def test_gather_and_scatter_add_exact(tmp_path):
    rng = np.random.default_rng(0)
    blocks = [torch.from_numpy(rng.normal(size=(8 + q, 3)).astype(np.float32)) for q in range(3)]
    with OffloadStore(cache_bytes=200, spill_dir=str(tmp_path)) as s:  # forces spills
        for q, b in enumerate(blocks):
            s.put("act", 0, q, b.clone())
        rows = {1: np.array([0, 4, 8]), 2: np.array([9])}
        g = s.gather("act", 0, [(0, None), (1, rows[1]), (2, rows[2])])
        assert torch.equal(g, torch.cat([blocks[0], blocks[1][rows[1]], blocks[2][rows[2]]]))
        ref = torch.zeros(10, 3)
        for _ in range(3):
            src = torch.from_numpy(rng.normal(size=(3, 3)).astype(np.float32))
            idx = np.array([1, 1, 7])
            s.scatter_add("grad", 0, 2, idx, src, num_rows=10)
            ref.index_add_(0, torch.from_numpy(idx), src)
        s.scatter_add("grad", 0, 2, None, torch.ones(10, 3))
        assert torch.allclose(s.get("grad", 0, 2), ref + 1)


def test_async_ops_keep_order(tmp_path):
    with OffloadStore(cache_bytes=3 * BLK, spill_dir=str(tmp_path)) as s:
        futs = [s.put_async("act", 0, p, blk(p)) for p in range(6)]
        futs += [s.scatter_add_async("grad", 0, 0, None, torch.ones(16, 16), num_rows=16) for _ in range(5)]
        assert torch.equal(s.get("act", 0, 5), blk(5))  # waits for the queued put
        assert torch.equal(s.get("grad", 0, 0), blk(5))
        for f in futs:
            f.result()
        assert torch.equal(s.get_async("act", 0, 2).result(), blk(2))


def test_budget_errors_are_loud(tmp_path):
    with OffloadStore(cache_bytes=2 * BLK, spill_dir=None) as s:
        s.put("act", 0, 0, blk(0))
        s.put("act", 0, 1, blk(1))
        with pytest.raises(CacheBudgetError, match="no spill directory"):
            s.put("act", 0, 2, blk(2))
        assert torch.equal(s.get("act", 0, 0), blk(0))  # nothing dropped
    with OffloadStore(cache_bytes=BLK, spill_dir=str(tmp_path), disk_bytes=BLK) as s:
        s.put("act", 0, 0, blk(0))
        s.put("act", 0, 1, blk(1))  # spills block 0
        with pytest.raises(DiskBudgetError, match="disk budget"):
            s.put("act", 0, 2, blk(2))
    with OffloadStore(cache_bytes=BLK, spill_dir=str(tmp_path / "x")) as s:
        s.put("act", 0, 0, blk(0))
        s.put("act", 0, 1, blk(1))
        s.pin([("act", 0, 1)])
        with pytest.raises(CacheBudgetError, match="cannot pin"):
            s.pin([("act", 0, 0)])
        s.unpin([("act", 0, 1)])
        s.pin([("act", 0, 0)])
        with pytest.raises(BlockNotFoundError):
            s.get("act", 3, 3)
        s.release("act", 0, 0)
        with pytest.raises(BlockNotFoundError):
            s.get("act", 0, 0)


def _min_misses(seq, resident, cap):
    """Reference Belady (MIN with bypass) miss count for unit-size blocks."""
    cache, misses = set(resident), 0
    for i, k in enumerate(seq):
        if k in cache:
            continue
        misses += 1
        nxt = lambda b: next((j for j in range(i + 1, len(seq)) if seq[j] == b), float("inf"))  # noqa
        if len(cache) < cap:
            cache.add(k)
            continue
        victim = max(list(cache) + [k], key=nxt)
        if victim != k:
            cache.discard(victim)
            cache.add(k)
    return misses


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_belady_is_optimal_and_beats_lru(tmp_path, seed):
    rng = np.random.default_rng(seed)
    nblocks, cap = 10, 4
    seq = [int(x) for x in rng.integers(0, nblocks, 120)]
    seq += list(range(nblocks)) * 3  # a cyclic tail: LRU's worst case
    results = {}
    for policy in ("belady", "lru"):
        with OffloadStore(cache_bytes=cap * BLK, spill_dir=str(tmp_path / policy), policy=policy,
                          prefetch=False) as s:
            for p in range(nblocks):
                s.put("act", 0, p, blk(p))
            resident = [p for p in range(nblocks) if s.is_resident("act", 0, p)]
            s.plan(Schedule([("act", 0, p, "r") for p in seq], cyclic=False))
            s.stats(reset=True)
            for p in seq:
                assert torch.equal(s.get("act", 0, p), blk(p))
            results[policy] = s.stats()
            if policy == "belady":
                assert results[policy]["misses"] == _min_misses(seq, resident, cap)
                assert results[policy]["unplanned_accesses"] == 0
    assert results["belady"]["hit_rate"] > results["lru"]["hit_rate"]
    assert results["belady"]["bytes_read"] < results["lru"]["bytes_read"]


def test_prefetch_turns_misses_into_hits(tmp_path):
    seq = list(range(8)) * 3
    hits = {}
    for pf in (False, True):
        with OffloadStore(cache_bytes=4 * BLK, spill_dir=str(tmp_path / str(pf)), prefetch=pf) as s:
            for p in range(8):
                s.put("act", 0, p, blk(p))
            s.plan(Schedule([("act", 0, p, "r") for p in seq]))
            s.stats(reset=True)
            for p in seq:
                assert torch.equal(s.get("act", 0, p), blk(p))
            s.sync()
            hits[pf] = s.stats()
    assert hits[True]["hits"] > hits[False]["hits"]
    assert hits[True]["prefetch_loads"] > 0


def test_a_released_keys_file_is_reused_and_close_removes_every_file(tmp_path):
    """A released block's spill file stays for the key's next block, which is written over it in place
    (a shorter block cuts it); reads see only the current block; close removes every file."""
    with OffloadStore(cache_bytes=0, spill_dir=str(tmp_path)) as s:  # every block goes to disk
        for round_ in range(3):
            s.put("act", 1, 0, blk(round_))
            assert torch.equal(s.get("act", 1, 0), blk(round_))
            s.release("act", 1, 0)
            with pytest.raises(BlockNotFoundError):
                s.get("act", 1, 0)
        assert [f.name for f in tmp_path.iterdir()] == ["act-1-0.blk"]
        s.put("act", 1, 0, torch.arange(6.0).reshape(3, 2))  # smaller than the file it overwrites
        assert (tmp_path / "act-1-0.blk").stat().st_size == 24
        assert torch.equal(s.get("act", 1, 0), torch.arange(6.0).reshape(3, 2))
        st = s.stats()
        assert st["file_bytes"] == 24 and st["disk_bytes"] == 24 and st["peak_file_bytes"] == BLK
    assert not list(tmp_path.iterdir())


def test_a_block_without_a_file_takes_over_a_kept_file_of_its_size(tmp_path):
    """The evaluation pass's blocks reuse the training step's released files and the next step reuses
    theirs: one file per size in use, not one per key; a live block's file is never taken."""
    with OffloadStore(cache_bytes=0, spill_dir=str(tmp_path)) as s:
        for epoch in range(3):
            s.put("act", 1, 0, blk(epoch))
            s.put("acth", 1, 5, torch.ones(3, 16))          # another size: a file of its own
            assert torch.equal(s.get("act", 1, 0), blk(epoch))
            s.release("act", 1, 0)
            s.put("eval", 1, 0, blk(10 + epoch))           # takes a released file of its size
            if epoch == 0:
                assert sorted(f.name for f in tmp_path.iterdir()) == ["acth-1-5.blk", "eval-1-0.blk"]
            s.put("grad", 1, 0, blk(20 + epoch))           # eval's block is live: not its file
            assert len(list(tmp_path.iterdir())) == 3      # two of BLK live at once, whatever the epoch
            assert torch.equal(s.get("eval", 1, 0), blk(10 + epoch))
            assert torch.equal(s.get("grad", 1, 0), blk(20 + epoch))
            for k in ("eval", "grad", "acth"):
                s.release(k, 1, 5 if k == "acth" else 0)
        assert s.stats()["file_bytes"] == 2 * BLK + 3 * 16 * 4 == s.stats()["peak_file_bytes"]


def test_a_spill_file_removed_underneath_is_named(tmp_path):
    """A spill file deleted by someone else (a /tmp cleaner) is an OffloadError naming the block and the
    file, not a bare FileNotFoundError."""
    from argosy.shared.errors import OffloadError

    with OffloadStore(cache_bytes=0, spill_dir=str(tmp_path)) as s:
        s.put("gradh", 1, 17, blk(1))
        (tmp_path / "gradh-1-17.blk").unlink()
        with pytest.raises(OffloadError, match=r"spill file of block \('gradh', 1, 17\) is gone"):
            s.get("gradh", 1, 17)


def test_kept_files_give_way_to_the_disk_budget(tmp_path):
    """Kept files of released keys count as disk use: a write that would take the spill files over the
    disk budget unlinks them first, so the budget bounds the bytes on disk, and only live blocks can
    make a write fail."""
    with OffloadStore(cache_bytes=0, spill_dir=str(tmp_path), disk_bytes=2 * BLK) as s:
        for p in range(6):
            s.put("act", 0, p, blk(p))
            s.release("act", 0, p)
            assert s.stats()["file_bytes"] <= 2 * BLK
            assert sum(f.stat().st_size for f in tmp_path.iterdir()) <= 2 * BLK
        s.put("act", 1, 0, blk(10))
        s.put("act", 1, 1, blk(11))
        assert torch.equal(s.get("act", 1, 0), blk(10)) and torch.equal(s.get("act", 1, 1), blk(11))
        with pytest.raises(DiskBudgetError, match="disk budget"):
            s.put("act", 1, 2, blk(12))
        assert torch.equal(s.get("act", 1, 1), blk(11))  # nothing dropped


def test_writes_run_unlocked_and_lose_nothing(tmp_path):
    """Spill writes run with the store's lock released: threads putting, reading, gathering and releasing
    blocks at once (a 3-block cache, every put evicting or bypassing) all see every block's own contents."""
    import threading

    errors: list[str] = []
    with OffloadStore(cache_bytes=3 * 4 * 256 * 256, spill_dir=str(tmp_path), policy="lru") as s:
        def worker(t: int) -> None:
            try:
                for i in range(60):
                    s.put("act", t, i, torch.full((256, 256), float(t * 1000 + i)))
                    if i >= 1:                        # the block the other threads' puts are evicting now
                        got = s.get("act", t, i - 1)
                        if not bool((got == t * 1000 + i - 1).all()):
                            errors.append(f"thread {t} block {i - 1}: got {float(got[0, 0])}")
                    if i >= 2:
                        got = s.get("act", t, i - 2)
                        if not bool((got == t * 1000 + i - 2).all()):
                            errors.append(f"thread {t} block {i - 2}: got {float(got[0, 0])}")
                        g = s.gather("act", t, [(i - 1, np.array([3, 5])), (i, None)])
                        if g.shape != (258, 256) or float(g[0, 0]) != t * 1000 + i - 1 or float(g[-1, 0]) != t * 1000 + i:
                            errors.append(f"thread {t} gather {i}")
                        s.release("act", t, i - 2)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(f"thread {t}: {type(e).__name__}: {e}")

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        st = s.stats()
        assert not errors, errors[:5]
        assert st["bytes_written"] > 0 and st["resident_bytes"] <= s.cache_bytes
        assert st["peak_resident_bytes"] <= s.cache_bytes


_FULL_DISK_SCRIPT = """
import sys, torch
from argosy.services.offload.store import OffloadStore
from argosy.shared.errors import DiskBudgetError, OffloadError
blk = lambda v: torch.full((64, 64), float(v))  # 16 KiB
with OffloadStore(cache_bytes=0, spill_dir=sys.argv[1]) as s:
    for p in range(5):  # 80 KiB of kept files in a 96 KiB disk
        s.put("act", 0, p, blk(p))
        s.release("act", 0, p)
    for p in range(5):  # ENOSPC: the kept files are given back and the write retried
        s.put("act", 1, p, blk(10 + p))
    print("live", all(torch.equal(s.get("act", 1, p), blk(10 + p)) for p in range(5)))
    try:
        for p in range(5, 20):
            s.put("act", 1, p, blk(10 + p))
    except DiskBudgetError as e:
        print("full", "disk full while spilling block" in str(e))
    print("kept", all(torch.equal(s.get("act", 1, p), blk(10 + p)) for p in range(5)))
    try:  # write-behind: the failure reaches the caller's next call, and every call after it
        for p in range(20, 40):
            s.put_async("act", 2, p, blk(p))
        s.sync()
        print("async", "silent")
    except OffloadError as e:
        print("async", "disk full while spilling block" in str(e.__cause__))
    try:
        s.get("act", 1, 0)
    except OffloadError as e:
        print("after", "queued write" in str(e))
"""


def test_a_full_disk_takes_back_kept_files_then_says_so(tmp_path):
    """A real ENOSPC (a 96 KiB tmpfs in a user namespace): the kept files of released keys are unlinked
    and the write retried; when live blocks fill the disk the put fails with 'disk full' and every
    block already stored still reads back; a queued (write-behind) put that fails is reported by the
    next call and every call after it, never dropped silently."""
    r = run_on_full_disk(tmp_path, "96k", _FULL_DISK_SCRIPT)
    assert r.stdout.split() == ["live", "True", "full", "True", "kept", "True", "async", "True", "after", "True"], \
        r.stdout + r.stderr
