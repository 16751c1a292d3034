"""Typed (heterogeneous) graph inputs: RDF N-Triples, knowledge-graph triples, graph.yaml
directories, OGB heterogeneous directories, PyG HeteroData, and one-line errors for each fault."""
import gzip
import io

import numpy as np
import pytest
import yaml

from argosy.shared.envs import datasets_dir
from argosy.shared.errors import GraphFormatError
from argosy.shared.graphio import (TypedGraph, open_typed, read_kg_triples, read_ogb_hetero, read_rdf, read_rdf_dir,
                                   read_typed_dir, save_typed_dir, typed_format)

HETERO = datasets_dir() / "hetero"
EX = "http://ex.org/"


def raises_one_line(fn, path, match=None):
    """Call ``fn``; it must raise GraphFormatError with a one-line message naming ``path``."""
    with pytest.raises(GraphFormatError, match=match) as e:
        fn()
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg, msg
    return msg


# ---- RDF N-Triples -------------------------------------------------------------------------
NT = f"""# a comment line
<{EX}alice> <{EX}knows> <{EX}bob> .
<{EX}alice> <{EX}name> "Alice \\"Al\\" A."@en-GB .

<{EX}bob> <{EX}name> "Bob"^^<http://www.w3.org/2001/XMLSchema#string> .
<{EX}bob> <{EX}knows> _:b1 .   # trailing comment
_:b1 <{EX}knows> <{EX}carol>.
<{EX}carol> <{EX}name> "Bob" .
<{EX}dave> <{EX}worksAt> <{EX}acme> .
"""


def write_rdf(tmp_path, text=NT, gz=False):
    p = tmp_path / ("g.nt.gz" if gz else "g.nt")
    p.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    (tmp_path / "trainingSet.tsv").write_text(f"person\tid\tlabel\n{EX}alice\t1\t{EX}g1\n{EX}bob\t2\t{EX}g2\n"
                                             f"{EX}carol\t3\t{EX}g1\n{EX}acme\t4\t{EX}g2\n{EX}dave\t5\t{EX}g1\n")
    (tmp_path / "testSet.tsv").write_text(f"person\tid\tlabel\n<{EX}b1>\t9\t{EX}g3\n".replace(f"<{EX}b1>", "_:b1"))
    return p


@pytest.mark.parametrize("gz", [False, True])
def test_rdf_entities_relations_literals(tmp_path, gz):
    p = write_rdf(tmp_path, gz=gz)
    tg = read_rdf(p, tmp_path / "trainingSet.tsv", tmp_path / "testSet.tsv", val_fraction=0.4, seed=1)
    names = list(tg.node_names["entity"])
    # URIs without <>, blank nodes and the full literal tokens are all vertices; "Bob" (plain) and
    # "Bob"^^xsd:string are two literals
    assert names == sorted(names) and len(names) == 9
    assert '"Alice \\"Al\\" A."@en-GB' in names and '"Bob"' in names and "_:b1" in names and f"{EX}acme" in names
    assert [r[1] for r in tg.relations] == [f"{EX}knows", f"{EX}name", f"{EX}worksAt"]
    assert tg.node_types == ["entity"] and tg.target == "entity" and tg.total_edges == 7
    s, d = tg.edges[("entity", f"{EX}knows", "entity")]
    pairs = {(names[a], names[b]) for a, b in zip(s, d)}
    assert pairs == {(f"{EX}alice", f"{EX}bob"), (f"{EX}bob", "_:b1"), ("_:b1", f"{EX}carol")}
    assert tg.label_names == [f"{EX}g1", f"{EX}g2", f"{EX}g3"]
    assert tg.labels[names.index(f"{EX}bob")] == 1 and tg.labels[names.index("_:b1")] == 2
    assert (tg.labels >= 0).sum() == 6
    assert tg.train_mask.sum() == 3 and tg.val_mask.sum() == 2 and tg.test_mask.sum() == 1
    assert not (tg.train_mask & tg.val_mask).any()
    again = read_rdf(p, tmp_path / "trainingSet.tsv", tmp_path / "testSet.tsv", val_fraction=0.4, seed=1)
    assert (again.val_mask == tg.val_mask).all()                     # seeded


def test_rdf_small_blocks_agree(tmp_path):
    p = write_rdf(tmp_path, NT.rstrip("\n"))                         # no final newline either
    whole, blocks = read_rdf(p), read_rdf(p, block_bytes=64)
    assert list(whole.node_names["entity"]) == list(blocks.node_names["entity"])
    assert all((a == b).all() for k in whole.relations for a, b in zip(whole.edges[k], blocks.edges[k]))
    p.write_text(NT + "<a> <b> oops .\n")
    raises_one_line(lambda: read_rdf(p, block_bytes=64), p, match=r"g\.nt:10: malformed")


def test_rdf_dir_and_open_typed(tmp_path):
    write_rdf(tmp_path, gz=True)
    tg = read_rdf_dir(tmp_path)
    assert tg.test_mask.sum() == 1 and tg.train_mask.sum() + tg.val_mask.sum() == 5
    assert typed_format(tmp_path) == "rdf_dir" and open_typed(tmp_path).total_edges == 7
    assert open_typed(tmp_path / "g.nt.gz").labels is None


def test_rdf_dir_finds_variant_label_files(tmp_path):
    """BGS ships trainingSet(lith).tsv / testSet(lith).tsv; two candidate files are refused."""
    write_rdf(tmp_path, gz=True)
    (tmp_path / "trainingSet.tsv").rename(tmp_path / "trainingSet(lith).tsv")
    (tmp_path / "testSet.tsv").rename(tmp_path / "TestSet(lith).tsv")
    tg = read_rdf_dir(tmp_path)
    assert tg.test_mask.sum() == 1 and tg.train_mask.sum() + tg.val_mask.sum() == 5
    (tmp_path / "trainingSet_copy.tsv").write_text((tmp_path / "trainingSet(lith).tsv").read_text())
    raises_one_line(lambda: read_rdf_dir(tmp_path), tmp_path, match=r"2 files could be the trainingset labels")


def test_rdf_malformed_line(tmp_path):
    p = write_rdf(tmp_path, NT.replace(f'<{EX}carol> <{EX}name> "Bob" .', f'<{EX}carol> <{EX}name> "Bob'))
    raises_one_line(lambda: read_rdf(p), p, match=r"g\.nt:8: malformed N-Triples line")
    p.write_text(f"<{EX}a> <{EX}p> <{EX}b>\n")
    raises_one_line(lambda: read_rdf(p), p, match=r":1: .*missing the final '\.'")


def test_rdf_labelled_uri_not_in_graph(tmp_path):
    p = write_rdf(tmp_path)
    bad = tmp_path / "trainingSet.tsv"
    bad.write_text(f"person\tid\tlabel\n{EX}alice\t1\t{EX}g1\n{EX}zoe\t2\t{EX}g2\n")
    raises_one_line(lambda: read_rdf(p, bad), bad,
                    match=r"trainingSet\.tsv:3: labelled entity .*zoe.* not in the graph")


# ---- knowledge-graph triples ---------------------------------------------------------------
def write_kg(d, train="a\tr1\tb\nb\tr2\tc\nc\tr1\ta\n", valid="a\tr2\tc\n", test="d\tr1\ta\n"):
    d.mkdir(exist_ok=True)
    (d / "train.txt").write_text(train)
    (d / "valid.txt").write_text(valid)
    (d / "test.txt").write_text(test)
    return d


def test_kg_triples(tmp_path, caplog):
    d = write_kg(tmp_path / "kg")
    with caplog.at_level("WARNING", logger="argosy"):
        tg = read_kg_triples(d)
    assert "test.txt: 1 of 1 triples have an entity that no training triple names" in caplog.text
    assert "valid.txt" not in caplog.text
    assert list(tg.node_names["entity"]) == ["a", "b", "c", "d"]      # d: only in test, still an entity
    assert [r[1] for r in tg.relations] == ["r1", "r2"]
    assert tg.total_edges == 3                                        # train triples only
    assert tg.triples["train"].tolist() == [[0, 0, 1], [1, 1, 2], [2, 0, 0]]
    assert tg.triples["valid"].tolist() == [[0, 1, 2]] and tg.triples["test"].tolist() == [[3, 0, 0]]
    s, t = tg.edges[("entity", "r1", "entity")]
    assert s.tolist() == [0, 2] and t.tolist() == [1, 0]
    assert typed_format(d) == "kg"
    ws = write_kg(tmp_path / "ws", train="a r1 b\n\nb  r2 c\n")      # whitespace-separated, blank lines
    assert read_kg_triples(ws).triples["train"].shape == (2, 3)


def test_kg_missing_column(tmp_path):
    d = write_kg(tmp_path / "kg", train="a\tr1\tb\nb\tr2\n")
    msg = raises_one_line(lambda: read_kg_triples(d), d / "train.txt")
    assert msg == f"{d / 'train.txt'}:2: expected 3 columns (head relation tail), got 2"


def test_kg_relation_only_in_test(tmp_path):
    d = write_kg(tmp_path / "kg", test="a\tr9\tb\n")
    raises_one_line(lambda: read_kg_triples(d), d / "test.txt", match="relation 'r9' does not occur in the training")


# ---- graph.yaml directories ----------------------------------------------------------------
def toy_graph() -> TypedGraph:
    rng = np.random.default_rng(0)
    rels = [("author", "writes", "paper"), ("paper", "cites", "paper")]
    return TypedGraph(
        node_types=["paper", "author"], num_nodes={"paper": 5, "author": 3}, relations=rels,
        edges={rels[0]: (np.array([0, 1, 2, 2]), np.array([0, 1, 3, 4])),
               rels[1]: (np.array([1, 2]), np.array([0, 0]))},
        features={"paper": rng.random((5, 4), dtype=np.float32), "author": rng.random((3, 2), dtype=np.float32)},
        target="paper", labels=np.array([0, 1, 1, 0, -1]), train_mask=np.array([1, 1, 0, 0, 0], bool),
        val_mask=np.array([0, 0, 1, 0, 0], bool), test_mask=np.array([0, 0, 0, 1, 0], bool),
        node_names={"author": np.array(["ann", "bo b", "cy"], dtype=object)}, label_names=["db", "ml"], name="toy")


def assert_same(a: TypedGraph, b: TypedGraph):
    assert (a.node_types, a.num_nodes, a.relations, a.target, a.label_names) == \
        (b.node_types, b.num_nodes, b.relations, b.target, b.label_names)
    for k in a.relations:
        assert all((np.asarray(x) == np.asarray(y)).all() for x, y in zip(a.edges[k], b.edges[k]))
    assert a.features.keys() == b.features.keys()
    assert all(np.allclose(a.features[t], b.features[t]) for t in a.features)
    for k in ("labels", "train_mask", "val_mask", "test_mask"):
        assert (getattr(a, k) is None) == (getattr(b, k) is None) and \
            (getattr(a, k) is None or (np.asarray(getattr(a, k)) == np.asarray(getattr(b, k))).all())


def test_typed_dir_round_trip(tmp_path):
    tg = toy_graph()
    y = save_typed_dir(tg, tmp_path / "g")
    back = read_typed_dir(tmp_path / "g")
    assert_same(tg, back)
    assert list(back.node_names["author"]) == ["ann", "bo b", "cy"] and back.name == "toy"
    assert typed_format(tmp_path / "g") == "typed_dir" and open_typed(tmp_path / "g").total_edges == 6
    assert all(a.dtype == np.int32 for e in back.edges.values() for a in e)      # held whole: 4-byte ids
    spec = yaml.safe_load(y.read_text())                     # a hand-written text edge file works too
    (tmp_path / "g" / "cites.csv").write_text("src,dst\n1,0\n2,0\n")
    spec["relations"][1]["edges"] = "cites.csv"
    y.write_text(yaml.safe_dump(spec, sort_keys=False))
    assert_same(tg, read_typed_dir(tmp_path / "g"))


def edit_yaml(d, fn):
    y = d / "graph.yaml"
    spec = yaml.safe_load(y.read_text())
    fn(spec, d)
    y.write_text(yaml.safe_dump(spec, sort_keys=False))
    return y


def test_typed_dir_relation_unknown_type(tmp_path):
    d = tmp_path / "g"
    save_typed_dir(toy_graph(), d)
    y = edit_yaml(d, lambda s, _: s["relations"][0].update(type=["venue", "writes", "paper"]))
    raises_one_line(lambda: read_typed_dir(d), y, match="unknown node type 'venue'")


def test_typed_dir_id_out_of_range(tmp_path):
    d = tmp_path / "g"
    save_typed_dir(toy_graph(), d)
    np.save(d / "bad.npy", np.array([[0, 0], [3, 1]]))                # author has 3 vertices: id 3 is out
    edit_yaml(d, lambda s, _: s["relations"][0].update(edges="bad.npy"))
    raises_one_line(lambda: read_typed_dir(d), d / "bad.npy", match="id 3 .*out of range")


@pytest.mark.parametrize("shape", [(4, 4), (5, 3)])
def test_typed_dir_features_wrong_rows_or_width(tmp_path, shape):
    d = tmp_path / "g"
    save_typed_dir(toy_graph(), d)
    f = next(d.glob("features_0_*.npy"))
    np.save(f, np.zeros(shape, np.float32))
    raises_one_line(lambda: read_typed_dir(d), f, match="features")


def test_validate_catches_faults_of_any_source():
    tg = toy_graph()
    tg.relations[0] = ("venue", "writes", "paper")
    tg.edges[("venue", "writes", "paper")] = tg.edges.pop(("author", "writes", "paper"))
    with pytest.raises(GraphFormatError, match="unknown node type 'venue'"):
        tg.validate("src")


# ---- OGB heterogeneous directories ---------------------------------------------------------
def write_csv(path, rows, fmt="%d"):
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    if isinstance(rows, str):
        buf.write(rows)
    else:
        np.savetxt(buf, np.asarray(rows), fmt=fmt, delimiter=",")
    path.write_bytes(gzip.compress(buf.getvalue().encode(), mtime=0))


def write_ogb_mag(root):
    raw = root / "raw"
    write_csv(raw / "num-node-dict.csv.gz", "author,paper\n3,4\n")
    write_csv(raw / "triplet-type-list.csv.gz", "author,writes,paper\npaper,cites,paper\n")
    rels = {"author___writes___paper": [[0, 0], [1, 1], [2, 3]], "paper___cites___paper": [[1, 0], [3, 2]]}
    for i, (name, e) in enumerate(rels.items()):
        write_csv(raw / "relations" / name / "edge.csv.gz", e)
        write_csv(raw / "relations" / name / "num-edge-list.csv.gz", [[len(e)]])
        write_csv(raw / "relations" / name / "edge_reltype.csv.gz", [[i]] * len(e))
    write_csv(raw / "node-feat" / "paper" / "node-feat.csv.gz", np.arange(8).reshape(4, 2) / 8, "%.6f")
    write_csv(raw / "node-label" / "paper" / "node-label.csv.gz", [[0], [1], [2], [1]])
    for name, ids in (("train", [0, 1]), ("valid", [2]), ("test", [3])):
        write_csv(root / "split" / "time" / "paper" / f"{name}.csv.gz", [[i] for i in ids])
    return root


def test_ogb_hetero(tmp_path):
    root = write_ogb_mag(tmp_path / "ogbn_mag")
    tg = read_ogb_hetero(root)
    assert tg.node_types == ["author", "paper"] and tg.num_nodes == {"author": 3, "paper": 4}
    assert tg.relations == [("author", "writes", "paper"), ("paper", "cites", "paper")]
    assert tg.edges[("author", "writes", "paper")][1].tolist() == [0, 1, 3]
    assert tg.features["paper"].shape == (4, 2) and "author" not in tg.features
    assert tg.target == "paper" and tg.labels.tolist() == [0, 1, 2, 1]
    assert tg.train_mask.tolist() == [True, True, False, False] and tg.test_mask.sum() == 1
    assert typed_format(root) == "ogb_hetero" and open_typed(root).total_edges == 5


def test_ogb_hetero_faults(tmp_path):
    root = write_ogb_mag(tmp_path / "mag")
    tl = root / "raw" / "triplet-type-list.csv.gz"
    write_csv(tl, "author,writes,paper\npaper,cites,venue\n")
    raises_one_line(lambda: read_ogb_hetero(root), tl, match="unknown node type 'venue'")
    write_csv(tl, "author,writes,paper\npaper,cites,paper\n")
    ef = root / "raw" / "relations" / "paper___cites___paper" / "edge.csv.gz"
    write_csv(ef, [[1, 0], [4, 2]])
    raises_one_line(lambda: read_ogb_hetero(root), ef, match="id 4 .*out of range")
    write_csv(ef, [[1, 0], [3, 2]])
    ff = root / "raw" / "node-feat" / "paper" / "node-feat.csv.gz"
    write_csv(ff, np.zeros((3, 2)), "%.1f")
    raises_one_line(lambda: read_ogb_hetero(root), ff, match="rows")


# ---- PyG HeteroData and detection ----------------------------------------------------------
def test_hetero_data_round_trip():
    pytest.importorskip("torch_geometric")
    from argosy.shared.graphio import from_hetero_data, to_hetero_data
    tg = toy_graph()
    data = to_hetero_data(tg)
    assert data["author", "writes", "paper"].edge_index.shape == (2, 4) and data["paper"].y.shape == (5,)
    assert_same(tg, from_hetero_data(data))


def test_open_typed_leaves_homogeneous_inputs(tmp_path):
    (tmp_path / "e.txt").write_text("0 1\n1 2\n")
    np.save(tmp_path / "e.npy", np.array([[0, 1]]))
    (tmp_path / "ogb" / "raw").mkdir(parents=True)
    write_csv(tmp_path / "ogb" / "raw" / "edge.csv.gz", [[0, 1]])
    for p in ("e.txt", "e.npy", "ogb", "missing.npz"):
        assert open_typed(tmp_path / p) is None
    (tmp_path / "triples.dat").write_text(f"<{EX}a> <{EX}p> <{EX}b> .\n")       # N-Triples by content
    assert typed_format(tmp_path / "triples.dat") == "rdf"


# ---- the real benchmarks -------------------------------------------------------------------
def test_aifb_counts():
    if not (HETERO / "aifb").is_dir():
        pytest.skip(f"no {HETERO / 'aifb'}")
    tg = read_rdf_dir(HETERO / "aifb")
    assert tg.num_nodes["entity"] == 8285 and len(tg.relations) == 45 and tg.total_edges == 29043
    assert tg.train_mask.sum() + tg.val_mask.sum() == 140 and tg.test_mask.sum() == 36
    assert len(tg.label_names) == 4 and (tg.labels >= 0).sum() == 176


def test_codex_s_counts():
    if not (HETERO / "codex-s").is_dir():
        pytest.skip(f"no {HETERO / 'codex-s'}")
    tg = read_kg_triples(HETERO / "codex-s")
    assert tg.num_nodes["entity"] == 2034 and len(tg.relations) == 42
    assert {k: len(v) for k, v in tg.triples.items()} == {"train": 32888, "valid": 1827, "test": 1828}


def test_typed_has_labels_agrees_with_the_readers(tmp_path):
    """The layout probe that lets preflight refuse an unlabelled node job before partitioning says
    what the reader then finds, for every typed layout with and without labels."""
    from argosy.shared.graphio.typed_open import typed_has_labels
    rdf = tmp_path / "rdf"
    rdf.mkdir()
    write_rdf(rdf)
    cases = [rdf, rdf / "g.nt"]
    save_typed_dir(toy_graph(), tmp_path / "typed")
    bare = toy_graph()
    bare.target = bare.labels = bare.train_mask = bare.val_mask = bare.test_mask = bare.label_names = None
    save_typed_dir(bare, tmp_path / "typed_bare")
    cases += [tmp_path / "typed", tmp_path / "typed_bare", write_ogb_mag(tmp_path / "ogb")]
    import shutil
    shutil.copytree(tmp_path / "ogb", tmp_path / "ogb_bare")
    shutil.rmtree(tmp_path / "ogb_bare" / "raw" / "node-label")
    cases.append(tmp_path / "ogb_bare")
    seen = {}
    for p in cases:
        seen[p.name] = typed_has_labels(p)
        assert seen[p.name] == (open_typed(p).labels is not None), p
    assert seen == {"rdf": True, "g.nt": False, "typed": True, "typed_bare": False, "ogb": True, "ogb_bare": False}
    (rdf / "trainingSet.tsv").unlink()
    assert not typed_has_labels(rdf) and not open_typed(rdf).train_mask.any()     # test labels only: none to train on
