"""Edge weights: read from every input, merged by one rule, kept in the store (docs/python-api.md)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from argosy.shared.errors import GraphFormatError
from argosy.shared.graphio import csr_from_edges, load_graph
from argosy.shared.store import PartitionStore, write_store
import argosy.shared.store.part_csr as part_csr
import argosy.shared.store.writer as writer


def _random_weighted(n=400, m=3000, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, m), rng.integers(0, n, m), rng.random(m).astype(np.float32), n


def test_duplicates_sum_and_a_reverse_edge_gets_its_edges_weight():
    # 0->1 twice (summed), 1->2 once (its reverse mirrored), 2->0 and 0->2 each given (each keeps its own)
    g = csr_from_edges(np.array([0, 1, 0, 2, 0]), np.array([1, 2, 1, 0, 2]), 3,
                       weights=np.array([1.0, 2.0, 4.0, 3.0, 7.0]))
    w = {(r, int(c)): float(x) for r in range(3) for c, x in zip(g.indices[g.indptr[r]:g.indptr[r + 1]],
                                                                   g.edge_weight[g.indptr[r]:g.indptr[r + 1]])}
    # entry (row v, neighbour u) weighs the message u -> v
    assert w == {(1, 0): 5.0, (0, 1): 5.0, (2, 1): 2.0, (1, 2): 2.0, (0, 2): 3.0, (2, 0): 7.0}


def test_text_npz_and_side_file_give_the_same_weights(tmp_path):
    u, v, w, n = _random_weighted()
    w = np.round(w, 6)
    ref = csr_from_edges(u, v, n, weights=w)
    (tmp_path / "h.txt").write_text("src,dst,weight\n" + "".join(f"{a},{b},{c:.6f}\n" for a, b, c in zip(u, v, w)))
    (tmp_path / "p.txt").write_text("".join(f"{a} {b} {c:.6f}\n" for a, b, c in zip(u, v, w)))
    np.save(tmp_path / "w.npy", w)
    np.savez(tmp_path / "e.npz", src=u, dst=v, edge_weight=w)
    np.savez(tmp_path / "c.npz", indptr=ref.indptr, indices=ref.indices, data=ref.edge_weight)  # scipy's names
    for g in (load_graph(tmp_path / "h.txt"), load_graph(tmp_path / "p.txt", edge_weights="column"),
              load_graph(tmp_path / "p.txt", edge_weights=tmp_path / "w.npy"), load_graph(tmp_path / "e.npz")):
        assert np.array_equal(g.indices, ref.indices)
        np.testing.assert_allclose(g.edge_weight, ref.edge_weight, rtol=1e-6)
    g = load_graph(tmp_path / "c.npz")
    assert np.array_equal(g.edge_weight, ref.edge_weight)   # a weighted symmetric CSR is kept as it is
    assert load_graph(tmp_path / "p.txt").edge_weight is None            # a bare third column is not a weight
    assert load_graph(tmp_path / "e.npz", edge_weights=False).edge_weight is None


@pytest.mark.parametrize("bad, match", [
    (np.array([1.0, np.nan, 2.0]), r"finite and >= 0 \(got nan at edge 1"),
    (np.array([1.0, -2.0, 2.0]), r"finite and >= 0 \(got -2.0 at edge 1"),
    (np.array([1.0, 2.0]), r"expected one weight per edge row, float\[3\] \(got 2\)"),
])
def test_bad_weights_name_expected_and_got(tmp_path, bad, match):
    np.savez(tmp_path / "e.npz", src=np.array([0, 1, 2]), dst=np.array([1, 2, 0]), edge_weight=bad)
    with pytest.raises(GraphFormatError, match=match):
        load_graph(tmp_path / "e.npz")


def test_text_weight_column_faults_name_the_line(tmp_path):
    (tmp_path / "g.txt").write_text("0 1 0.5\n1 2\n")
    with pytest.raises(GraphFormatError, match=r"line 2: expected a weight in column 3"):
        load_graph(tmp_path / "g.txt", edge_weights="column")
    (tmp_path / "g.txt").write_text("0 1 0.5\n1 2 heavy\n")
    with pytest.raises(GraphFormatError, match=r"line 2: the weight in column 3 is not a number"):
        load_graph(tmp_path / "g.txt", edge_weights="column")


@pytest.mark.parametrize("slab", [1 << 22, 500])
def test_store_keeps_weights_aligned_with_indices(tmp_path, monkeypatch, slab):
    monkeypatch.setattr(part_csr, "SLAB_ENTRIES", slab)     # 500: every part is built in several slabs
    u, v, w, n = _random_weighted()
    g = csr_from_edges(u, v, n, weights=w)
    assign = np.random.default_rng(1).integers(0, 3, n)
    m = write_store(g, assign, tmp_path / "s", num_parts=3)
    assert m.edge_weights
    st = PartitionStore(tmp_path / "s")
    ip, ind, ew = st.global_csr(weights=True)
    assert np.array_equal(ip, g.indptr) and np.array_equal(ind, g.indices) and np.array_equal(ew, g.edge_weight)
    wd = np.zeros(n, np.float32)
    for p in range(3):
        wd[st.part(p).nodes] = st.part(p).weighted_degree
    np.testing.assert_allclose(wd, np.bincount(np.repeat(np.arange(n), np.diff(g.indptr)), g.edge_weight, n),
                               rtol=1e-6)
    # an unsorted stream with duplicates and mirrored entries merges to the same CSR
    mir = np.zeros(u.size, np.uint8)
    chunks = [(np.concatenate([v[a:a + 700], u[a:a + 700]]), np.concatenate([u[a:a + 700], v[a:a + 700]]),
               np.concatenate([w[a:a + 700]] * 2), np.concatenate([mir[a:a + 700], mir[a:a + 700] + 1]))
              for a in range(0, u.size, 700)]
    writer.write_store_from_edges(chunks, n, assign, tmp_path / "t", num_parts=3, weighted=True)
    _, ind2, ew2 = PartitionStore(tmp_path / "t").global_csr(weights=True)
    assert np.array_equal(ind2, g.indices)
    np.testing.assert_allclose(ew2, g.edge_weight, rtol=1e-6)


def test_unweighted_manifest_does_not_mention_weights(tmp_path):
    u, v, _, n = _random_weighted()
    write_store(csr_from_edges(u, v, n), np.zeros(n, np.int64), tmp_path / "s", num_parts=1)
    assert "edge_weights" not in json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert PartitionStore(tmp_path / "s").part(0).edge_weight is None


def test_partitioner_reads_a_side_file_and_refuses_a_wrong_length(tmp_path, capsys):
    from argosy.services.partitioner.__main__ import main

    u, v, w, n = _random_weighted(n=200, m=1000)
    np.save(tmp_path / "e.npy", np.stack([u, v], 1))
    np.save(tmp_path / "w.npy", w)
    np.save(tmp_path / "short.npy", w[:-1])
    assert main([str(tmp_path / "e.npy"), "-k", "2", "--out", str(tmp_path / "s"), "--method", "hash",
                 "--edge-weights", str(tmp_path / "w.npy")]) == 0
    _, ind, ew = PartitionStore(tmp_path / "s").global_csr(weights=True)
    ref = csr_from_edges(u, v, n, weights=w)
    assert np.array_equal(ind, ref.indices) and np.array_equal(ew, ref.edge_weight)
    assert main([str(tmp_path / "e.npy"), "-k", "2", "--out", str(tmp_path / "t"), "--method", "hash",
                 "--edge-weights", str(tmp_path / "short.npy")]) == 2
    assert "float[1000] (got 999)" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()
