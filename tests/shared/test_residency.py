"""Parts that do not fit the memory budget: the decision, the hot-row cache, the disk counters."""
import numpy as np
import pytest

from argosy.shared.hot_rows import HotRows, hottest
from argosy.shared.store import PartitionStore
from argosy.shared.store.residency import (FIT_FRACTION, ROW_CACHE_FRACTION, DiskCounters, Residency, cgroup_memory_limit,
                                           disk_summary, memory_budget, plan_residency)
from argosy.shared.store.row_cache import RowCache
from argosy.services.loader.core import LoaderCore


def _store_bytes(root) -> int:
    return sum(f.stat().st_size for f in root.glob("part-*/*.npy")
               if f.stem in ("indptr", "indices", "features", "labels", "edge_weight", "weighted_degree"))


def test_cgroup_limit_v1_takes_the_tightest_ancestor(tmp_path):
    proc = tmp_path / "cgroup"
    proc.write_text("9:cpu:/\n4:memory:/jobs/one\n0::/\n")
    root = tmp_path / "fs"
    for rel, lim in (("memory", 1 << 62), ("memory/jobs", 3 << 30), ("memory/jobs/one", 5 << 30)):
        (root / rel).mkdir(parents=True)
        (root / rel / "memory.limit_in_bytes").write_text(str(lim))
    assert cgroup_memory_limit(str(proc), str(root)) == 3 << 30


def test_cgroup_limit_v2_and_none(tmp_path):
    proc = tmp_path / "cgroup"
    proc.write_text("0::/svc\n")
    (tmp_path / "fs" / "svc").mkdir(parents=True)
    (tmp_path / "fs" / "svc" / "memory.max").write_text("max\n")
    assert cgroup_memory_limit(str(proc), str(tmp_path / "fs")) is None
    (tmp_path / "fs" / "svc" / "memory.max").write_text("2147483648\n")
    assert cgroup_memory_limit(str(proc), str(tmp_path / "fs")) == 2 << 30


def test_configured_budget_wins():
    assert memory_budget(123 << 20) == (123 << 20, "--memory-budget")


def test_plan_counts_the_part_files(small_store):
    _, root = small_store
    store = PartitionStore(root)
    total = _store_bytes(root)
    assert plan_residency(store, range(4), int(total / FIT_FRACTION)).fits
    small = plan_residency(store, range(4), int(total / FIT_FRACTION) - 1)
    assert not small.fits and small.part_bytes == total and small.mode == "out-of-core"
    assert small.row_cache_bytes(2) == int(small.budget * ROW_CACHE_FRACTION) // 2
    assert Residency(None, "none", 10**12).fits


def test_hottest_ranks_by_degree_then_id():
    deg = np.array([3, 9, 3, 9, 1, 3])
    ids = np.array([50, 40, 10, 20, 0, 30])
    assert hottest(deg, ids, 4).tolist() == [3, 1, 2, 5]          # 9@20, 9@40, 3@10, 3@30
    assert hottest(deg, ids, 6).tolist() == [3, 1, 2, 5, 0, 4]
    assert hottest(deg, None, 2).tolist() == [1, 3]


def test_hot_rows_keeps_its_set(small_store):
    """HotRows (the trainer's device cache) ranks with the shared function: same set as before."""
    _, root = small_store
    store = PartitionStore(root)
    deg = np.zeros(store.manifest.num_nodes, np.int64)
    for p in range(store.num_parts):
        deg[store.part(p).nodes] = np.diff(store.part(p).indptr)
    hot = HotRows.build(store, 37)
    want = sorted(range(deg.shape[0]), key=lambda v: (-deg[v], v))[:37]
    assert hot.ids.tolist() == want


@pytest.mark.parametrize("rows", [0, 1, 60, 500])
def test_row_cache_holds_the_hottest_rows_of_held_parts(small_store, rows):
    g, root = small_store
    store = PartitionStore(root, parts=[1, 3])
    feats = {p: store.read_part(p, ("features",))["features"] for p in (1, 3)}
    row_bytes = g.features.shape[1] * g.features.dtype.itemsize
    rc = RowCache(store, feats, rows * row_bytes)
    held = np.concatenate([store.part(p).nodes for p in (1, 3)])
    deg = np.concatenate([np.diff(store.part(p).indptr) for p in (1, 3)])
    k = min(rows, held.shape[0])
    want = set(held[sorted(range(held.shape[0]), key=lambda i: (-deg[i], held[i]))[:k]].tolist())
    assign, local = np.asarray(store.assignment), np.asarray(store.local_index)
    slots = rc.lookup(assign[held].astype(np.int64), local[held].astype(np.int64))
    assert set(held[slots >= 0].tolist()) == want and rc.rows == k
    np.testing.assert_array_equal(rc.buf[slots[slots >= 0]], g.features[held[slots >= 0]])


def test_out_of_core_loader_gathers_the_same_rows(small_store):
    """A loader whose parts exceed its budget serves the same bytes (cache hits and map reads) and
    counts both; below the budget there is no row cache and nothing is counted."""
    g, root = small_store
    nodes = np.random.default_rng(3).integers(0, g.num_nodes, 700)
    need = _store_bytes(root)
    fit = LoaderCore(PartitionStore(root), held_parts=list(range(4)), memory_budget=4 * need)
    assert fit.residency.fits and fit.row_cache is None
    ref = fit.gather_rows(nodes)
    np.testing.assert_array_equal(ref, g.features[nodes].astype(ref.dtype))
    assert fit.stats["row_cache_hits"] == fit.stats["row_cache_misses"] == 0
    ooc = LoaderCore(PartitionStore(root), held_parts=list(range(4)), memory_budget=need)
    assert not ooc.residency.fits and ooc.row_cache is not None
    assert 0 < ooc.row_cache.rows < g.num_nodes
    np.testing.assert_array_equal(ooc.gather_rows(nodes), ref)
    hits, misses = ooc.stats["row_cache_hits"], ooc.stats["row_cache_misses"]
    assert hits > 0 and misses > 0 and hits + misses == nodes.shape[0]


def test_disk_counters_see_a_read(tmp_path):
    """Bytes read from the block device: a file written, dropped from the page cache, read back."""
    import os
    f = tmp_path / "blob"
    f.write_bytes(os.urandom(4 << 20))
    fd = os.open(f, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        c = DiskCounters()
        os.read(fd, 4 << 20)
        got = c.take()
    finally:
        os.close(fd)
    if not os.path.exists("/proc/self/io"):
        pytest.fail("no /proc/self/io: the disk counters cannot work here")
    assert got["disk_read_bytes"] >= 4 << 20
    assert c.take()["disk_read_bytes"] == 0


def test_disk_summary_per_epoch():
    m = {"disk_read_bytes": 30.0, "disk_read_bytes_e0": 10.0, "disk_read_bytes_e1": 20.0, "major_faults": 5.0,
         "major_faults_e1": 5.0, "row_cache_hits": 6.0, "row_cache_misses": 2.0,
         "row_cache_hits_e0": 3.0, "row_cache_misses_e0": 1.0, "row_cache_hits_e1": 3.0,
         "row_cache_misses_e1": 1.0}
    s = disk_summary(m)
    assert s["disk_read_bytes_per_epoch"] == [10.0, 20.0] and s["major_faults_per_epoch"] == [0, 5]
    assert s["row_cache_hit_rate"] == 0.75 and s["row_cache_hit_rate_per_epoch"] == [0.75, 0.75]
    assert disk_summary({})["row_cache_hit_rate"] is None


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_pooled_gather_equals_the_serial_one(dtype):
    """Out of core, map rows are copied by a thread pool in slices: the same bytes land in the same places."""
    from concurrent.futures import ThreadPoolExecutor
    from argosy.shared.store.gather import gather_feature_rows
    rng = np.random.default_rng(0)
    feats = [rng.standard_normal((3000, 24)).astype(dtype) for _ in range(3)]
    m = 5000
    parts, rows = rng.integers(0, 3, m), rng.integers(0, 3000, m)
    dst = rng.permutation(m + 7)[:m]
    serial, pooled = np.full((m + 7, 24), -1, dtype), np.full((m + 7, 24), -1, dtype)
    gather_feature_rows(feats, parts, rows, dst, serial)
    with ThreadPoolExecutor(8) as pool:
        gather_feature_rows(feats, parts, rows, dst, pooled, pool)
    np.testing.assert_array_equal(pooled, serial)
    np.testing.assert_array_equal(serial[dst], np.stack([feats[p][r] for p, r in zip(parts, rows)]))


def test_a_budget_the_store_fits_bounds_nothing(small_store):
    """Queues, waiting batches and kept heap follow the budget only when the store does not fit it."""
    from argosy.shared.store.residency import queue_depth, tight_budget
    _, root = small_store
    store = PartitionStore(root)
    total = _store_bytes(root)
    assert tight_budget(int(total / FIT_FRACTION) + 1, store) is None
    assert tight_budget(total, store) == total
    assert queue_depth(8, None) == 8 and queue_depth(8, total) == 2 and queue_depth(1, total) == 1
