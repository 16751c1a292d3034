"""The store writer with threads (``write_store_from_edges(threads=...)``) writes the same files."""

import numpy as np

from argosy.shared.store import write_store_from_edges


def _chunks(src, dst, size):
    for a in range(0, src.size, size):
        yield np.r_[src[a:a + size], dst[a:a + size]], np.r_[dst[a:a + size], src[a:a + size]]


def test_threaded_writer_writes_identical_files(tmp_path):
    rng = np.random.default_rng(0)
    n, m, k = 3000, 30000, 4
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    assign = rng.integers(0, k, n).astype(np.int32)
    feats = rng.standard_normal((n, 8)).astype(np.float32)
    labels = rng.integers(0, 5, n)
    out = {}
    for t in (1, 3):
        root = tmp_path / f"s{t}"
        write_store_from_edges(_chunks(src, dst, 4000), n, assign, root, num_parts=k,
                               node_data={"features": feats, "labels": labels}, threads=t)
        out[t] = root
    for p in range(k):
        for name in ("indices.npy", "indptr.npy", "nodes.npy", "features.npy", "labels.npy"):
            a = np.load(out[1] / f"part-{p:05d}" / name)
            b = np.load(out[3] / f"part-{p:05d}" / name)
            assert np.array_equal(a, b), (p, name)


def test_threaded_writer_reports_a_bad_chunk(tmp_path):
    import pytest

    from argosy.shared.errors import GraphFormatError

    def bad():
        yield np.array([0, 1]), np.array([1, 0])
        yield np.array([0, 99]), np.array([1, 0])

    with pytest.raises(GraphFormatError, match="out of range"):
        write_store_from_edges(bad(), 10, np.zeros(10, np.int32), tmp_path / "s", num_parts=1, threads=2)
    assert not (tmp_path / "s").exists()


def test_prefetch_holds_at_most_one_item_ahead_and_passes_errors_on():
    """The store writer's read-ahead: items in order, at most ``depth + 1`` produced and not yet
    released (each is an edge chunk of the writer's peak), the producer's error raised here."""
    import threading
    import time

    from argosy.shared.read_ahead import read_ahead

    produced, lock = [], threading.Lock()

    def items():
        for i in range(8):
            with lock:
                produced.append(i)
            yield i

    got = []
    for x in read_ahead(items(), depth=1):
        time.sleep(0.05)               # the helper has time to run ahead as far as it may
        with lock:
            ahead = len(produced) - len(got)
        assert ahead <= 2, (x, produced, got)
        got.append(x)
    assert got == list(range(8))

    def bad():
        yield 1
        raise ValueError("chunk 2 is malformed")

    out = []
    try:
        for x in read_ahead(bad()):
            out.append(x)
    except ValueError as e:
        assert "malformed" in str(e) and out == [1]
    else:
        raise AssertionError("the producer's error was lost")
