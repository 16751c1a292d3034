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


def _grouped_chunks(n, src, dst, size):
    """Both directions of every edge, self loops and repeats dropped, grouped by source in
    ascending id with sorted neighbours (the partitioner's regrouped stream), ``size`` at a time."""
    key = np.unique(np.r_[src * n + dst, dst * n + src])
    key = key[key // n != key % n]
    for a in range(0, key.size, size):
        yield key[a:a + size] // n, key[a:a + size] % n


def test_ordered_writer_writes_the_files_the_spilled_path_writes(tmp_path):
    """``ordered=True`` (neighbours straight to the parts' files, no spill) gives byte-identical arrays
    and the same manifest figures as the spill-and-sort path, with and without threads."""
    from argosy.shared.store.reader import PartitionStore

    rng = np.random.default_rng(1)
    n, m, k = 2500, 20000, 5
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    assign = rng.integers(0, k, n).astype(np.int32)
    feats = rng.standard_normal((n, 4)).astype(np.float32)
    roots = {}
    for ordered, t in ((False, 1), (True, 1), (True, 2)):
        root = tmp_path / f"s{ordered}{t}"
        write_store_from_edges(_grouped_chunks(n, src, dst, 3001), n, assign, root, num_parts=k,
                               node_data={"features": feats}, threads=t, ordered=ordered)
        roots[ordered, t] = root
    ref = PartitionStore(roots[False, 1]).manifest
    for key in ((True, 1), (True, 2)):
        man = PartitionStore(roots[key]).manifest
        assert man.num_edges == ref.num_edges and man.partition == ref.partition
        assert [(pe.num_edges, pe.cut_edges) for pe in man.parts] == [(pe.num_edges, pe.cut_edges) for pe in ref.parts]
        for p in range(k):
            for name in ("indices.npy", "indptr.npy", "nodes.npy", "features.npy"):
                a = np.load(roots[False, 1] / f"part-{p:05d}" / name)
                b = np.load(roots[key] / f"part-{p:05d}" / name)
                assert a.dtype == b.dtype and np.array_equal(a, b), (key, p, name)


def test_ordered_writer_refuses_entries_out_of_order(tmp_path):
    """An entry that breaks the promised order (a neighbour repeated, a source going back, a self
    loop) is a GraphFormatError naming it, and nothing is left at the store's path."""
    import pytest

    from argosy.shared.errors import GraphFormatError

    bad = {"repeat": [(np.array([0, 0, 1]), np.array([1, 1, 0]))],
           "source back": [(np.array([0, 1]), np.array([1, 0])), (np.array([0]), np.array([2]))],
           "self loop": [(np.array([0, 1]), np.array([0, 2]))]}
    for what, chunks in bad.items():
        with pytest.raises(GraphFormatError, match="breaks the promised order"):
            write_store_from_edges(iter(chunks), 3, np.zeros(3, np.int32), tmp_path / "s", num_parts=1,
                                   ordered=True)
        assert not (tmp_path / "s").exists(), what


def test_writer_refuses_sources_and_neighbours_of_two_lengths(tmp_path):
    """A chunk whose two arrays differ in length is a GraphFormatError on both paths (ordered and
    spilled), not a kernel reading past the shorter one."""
    import pytest

    from argosy.shared.errors import GraphFormatError

    for ordered in (False, True):
        with pytest.raises(GraphFormatError, match="differ in shape"):
            write_store_from_edges(iter([(np.array([0, 1, 2]), np.array([1, 0]))]), 3, np.zeros(3, np.int32),
                                   tmp_path / "s", num_parts=1, ordered=ordered)
        assert not (tmp_path / "s").exists()
