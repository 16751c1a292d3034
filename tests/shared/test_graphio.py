"""Ingest: formats, normalisation, and clear errors on malformed graph files."""
import numpy as np
import pytest

from argosy.shared.errors import GraphFormatError
from argosy.shared.graphio import csr_from_edges, load_graph, save_graph_npz
from argosy.shared.synthetic import generate_dcsbm


def test_csr_from_edges_normalises():
    g = csr_from_edges(np.array([0, 1, 1, 2, 2]), np.array([1, 0, 1, 0, 0]), num_nodes=4)
    assert g.indptr.tolist() == [0, 2, 3, 4, 4]          # self loop and duplicates dropped, symmetric
    assert g.indices.tolist() == [1, 2, 0, 0]


def test_load_dataset(cora_path):
    g = load_graph(cora_path)
    assert (g.num_nodes, g.num_edges, g.num_classes) == (2708, 5278, 7)
    assert g.features.shape == (2708, 1433) and g.train_mask.sum() == 140


def test_text_edge_list(tmp_path):
    p = tmp_path / "g.txt"
    p.write_text("# SNAP style\n% comment\n0 1\n1\t2\n\n2 0 5.0\n3 3\n")
    g = load_graph(p)
    assert g.num_nodes == 4 and g.num_edges == 3


def test_text_edge_list_malformed_line(tmp_path):
    p = tmp_path / "g.txt"
    p.write_text("0 1\n1 2\n2 x\n")
    with pytest.raises(GraphFormatError, match="line 3"):
        load_graph(p)


def test_negative_and_out_of_range_ids(tmp_path):
    p = tmp_path / "neg.txt"
    p.write_text("0 1\n-1 2\n")
    with pytest.raises(GraphFormatError, match="negative vertex id"):
        load_graph(p)
    np.save(tmp_path / "e.npy", np.array([[0, 1], [1, 9]]))
    with pytest.raises(GraphFormatError, match="out of range"):
        load_graph(tmp_path / "e.npy", num_nodes=5)


def test_bad_npz_files(tmp_path):
    p = tmp_path / "bad.npz"
    np.savez(p, indptr=np.array([0, 2, 1]), indices=np.array([1, 0]))
    with pytest.raises(GraphFormatError, match="non-decreasing"):
        load_graph(p)
    np.savez(p, indptr=np.array([0, 1, 2]), indices=np.array([1, 5]))
    with pytest.raises(GraphFormatError, match="out of range"):
        load_graph(p)
    np.savez(p, indptr=np.array([0, 1, 2]), indices=np.array([1, 0]), features=np.array([[np.nan], [1.0]], np.float32))
    with pytest.raises(GraphFormatError, match="NaN"):
        load_graph(p)
    np.savez(p, indptr=np.array([0, 1, 2]), indices=np.array([1, 0]), labels=np.array([0, 1, 2]))
    with pytest.raises(GraphFormatError, match="labels must have shape"):
        load_graph(p)
    np.savez(p, indptr=np.array([0, 1, 2]), indices=np.array([1.0, 0.0]))
    with pytest.raises(GraphFormatError, match="integer"):
        load_graph(p)
    p.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(GraphFormatError):
        load_graph(p)
    with pytest.raises(GraphFormatError, match="no such file"):
        load_graph(tmp_path / "missing.npz")
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(GraphFormatError, match="empty"):
        load_graph(tmp_path / "empty.txt")


def test_truncated_npz_member(tmp_path, cora_path):
    data = cora_path.read_bytes()
    p = tmp_path / "trunc.npz"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(GraphFormatError):
        load_graph(p)


def test_synthetic_is_deterministic_and_learnable(tmp_path):
    a = generate_dcsbm(2000, 8, seed=3)
    b = generate_dcsbm(2000, 8, seed=3)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.features, b.features)
    # neighbours share labels far more often than chance: the graph carries signal
    rows = np.repeat(np.arange(a.num_nodes), np.diff(a.indptr))
    homophily = np.mean(a.labels[rows] == a.labels[a.indices])
    assert homophily > 0.5
    save_graph_npz(a, tmp_path / "s.npz")
    c = load_graph(tmp_path / "s.npz")
    np.testing.assert_array_equal(c.indptr, a.indptr)


def test_write_dcsbm_edge_list_is_deterministic_and_planted(tmp_path):
    """The scale-benchmark generator: same seed -> same file; ids in range; edges mostly
    stay inside their (hidden) community, as the mixing parameter says."""
    from argosy.shared.synthetic import write_dcsbm_edge_list

    a, b = tmp_path / "a.npy", tmp_path / "b.npy"
    assert write_dcsbm_edge_list(a, 5000, 40000, num_communities=10, mixing=0.1, seed=3) == 40000
    write_dcsbm_edge_list(b, 5000, 40000, num_communities=10, mixing=0.1, seed=3, chunk_edges=7777)
    x, y = np.load(a), np.load(b)
    assert x.shape == (40000, 2) and x.dtype == np.int32
    assert np.array_equal(x, y)  # chunking does not change the graph
    assert x.min() >= 0 and x.max() < 5000
    # recover communities: relabelled ids -> original contiguous blocks of 500
    rng = np.random.default_rng(3)
    rng.pareto(1.5, 5000)
    perm = rng.permutation(5000)
    orig = np.empty(5000, np.int64)
    orig[perm] = np.arange(5000)
    inside = (orig[x[:, 0]] // 500) == (orig[x[:, 1]] // 500)
    assert 0.88 < inside.mean() < 0.95  # 90 % inside + ~1 % of the 10 % land inside by chance
    assert not (tmp_path / "a.npy.tmp").exists()


def test_ogb_directory_reads_as_the_npz(tmp_path, cora_path):
    from argosy.shared.graphio import save_graph_ogb
    g = load_graph(cora_path)
    save_graph_ogb(g, tmp_path / "cora-ogb")
    h = load_graph(tmp_path / "cora-ogb")
    for name in ("indptr", "indices", "features", "labels", "train_mask", "val_mask", "test_mask"):
        np.testing.assert_array_equal(getattr(h, name), getattr(g, name), err_msg=name)
    # several splits: the user must choose one
    import shutil
    shutil.copytree(tmp_path / "cora-ogb" / "split" / "random", tmp_path / "cora-ogb" / "split" / "other")
    with pytest.raises(GraphFormatError, match="several splits"):
        load_graph(tmp_path / "cora-ogb")
    assert load_graph(tmp_path / "cora-ogb", split="other").train_mask.sum() == 140


def test_npy_any_byte_and_memory_order(tmp_path):
    from argosy.shared.graphio import NpyArray
    a = np.arange(24, dtype=np.int64).reshape(8, 3)
    for variant in (a.astype(">i8"), np.asfortranarray(a), np.asfortranarray(a.astype(">i4")), a.astype("<u2")):
        np.save(tmp_path / "a.npy", variant)
        arr = NpyArray(tmp_path / "a.npy")
        np.testing.assert_array_equal(arr.read(), a)
        np.testing.assert_array_equal(arr.read(2, 5), a[2:5])
        blocks = [b for _, b in arr.iter_blocks(3)]
        assert all(b.dtype.isnative and b.flags.c_contiguous for b in blocks)
        np.testing.assert_array_equal(np.concatenate(blocks), a)


def test_text_ids_do_not_wrap_and_extras_are_dropped(tmp_path):
    p = tmp_path / "g.csv"
    p.write_bytes(b"\xef\xbb\xbfsource,target,weight\n0,1,0.5\n1,2,7\n")
    g = load_graph(p)
    assert g.num_nodes == 3 and g.num_edges == 2
    p.write_text("0 1\n18446744073709551618 2\n")           # 2**64 + 2 must not become 2
    with pytest.raises(GraphFormatError, match="line 2: vertex id beyond int64"):
        load_graph(p)
    p.write_text("0 1\n9000000000000 2\n")                  # within int64 but absurdly sparse
    with pytest.raises(GraphFormatError, match="far beyond"):
        load_graph(p)


def test_npz_aliases_and_formats_by_content(tmp_path):
    g = generate_dcsbm(300, 3, seed=1)
    p = tmp_path / "PyG.NPZ"
    with open(p, "wb") as f:
        np.savez(f, indptr=g.indptr, indices=g.indices, x=g.features, y=g.labels.reshape(-1, 1))
    h = load_graph(p)
    np.testing.assert_array_equal(h.features, g.features)
    np.testing.assert_array_equal(h.labels, g.labels)
    q = tmp_path / "edges.txt"                                # an .npz under a text name is still an .npz
    q.write_bytes(p.read_bytes())
    assert load_graph(q).num_edges == g.num_edges


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None, derandomize=True)
@given(edges=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), min_size=1, max_size=60),
       sep=st.sampled_from([" ", "\t", ",", ", ", " \t "]), eol=st.sampled_from(["\n", "\r\n"]),
       bom=st.booleans(), header=st.booleans(), weights=st.booleans(), comments=st.booleans(),
       gz=st.booleans())
def test_text_dialects_parse_to_the_same_graph(tmp_path_factory, edges, sep, eol, bom, header, weights,
                                               comments, gz):
    import gzip
    lines = [f"{a}{sep}{b}" + (f"{sep}{0.25 * a:.2f}" if weights else "") for a, b in edges]
    if comments:
        lines.insert(len(lines) // 2, "# a comment")
    if header:
        lines.insert(0, sep.join(["src", "dst"] + (["w"] if weights else [])))
    data = (("\ufeff" if bom else "") + eol.join(lines) + eol).encode()
    p = tmp_path_factory.mktemp("t") / ("g.txt.gz" if gz else "g.txt")
    p.write_bytes(gzip.compress(data) if gz else data)
    u = np.array([a for a, _ in edges])
    v = np.array([b for _, b in edges])
    n = int(max(u.max(), v.max())) + 1
    if (u == v).all():
        g = load_graph(p)
        assert g.num_edges == 0 and g.num_nodes == n
        return
    ref = csr_from_edges(u, v, num_nodes=n)
    g = load_graph(p)
    np.testing.assert_array_equal(g.indptr, ref.indptr)
    np.testing.assert_array_equal(g.indices, ref.indices)
