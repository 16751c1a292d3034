"""Typed graphs on disk as a directory: Argosy's own ``graph.yaml`` layout (read and written) and
OGB's heterogeneous node-property layout (``ogbn-mag``; read).

Why this module exists: a heterogeneous graph has per-type vertex counts, per-type feature
widths and one edge list per relation, which no single-array file holds; ``graph.yaml`` names
each piece, and :func:`save_typed_dir` / :func:`read_typed_dir` round-trip a :class:`TypedGraph`.

The ``graph.yaml`` layout (paths relative to the directory; node type order = global id order)::

    DIR/graph.yaml
        version: 1
        name: toy
        node_types:
          paper:  {count: 4, features: paper_x.npy, feature_dim: 8}   # features: float (n, F)
          author: {count: 3, names: author_names.txt}                 # names: one per line
        relations:                                  # edges: .npy int (m, 2) or text "src dst"
          - {type: [author, writes, paper], edges: writes.npy}        #   lines, type-local ids
        target: {type: paper, labels: y.npy, train_mask: train.npy, val_mask: val.npy,
                 test_mask: test.npy, label_names: [db, ml]}
        triples: {train: triples_train.npy}         # knowledge graphs: int (m, 3) global ids

Every fault is one ``GraphFormatError`` line naming the file: edge files and node data are
checked as read (ids against their type's count, feature rows and ``feature_dim``), and
:meth:`TypedGraph.validate` runs last on the whole graph.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import yaml

from argosy.shared.errors import GraphFormatError

from .columns import CsvColumn, node_column_from_file, read_index_list
from .formats import SPLITS, check_ids, graph_format
from .npy import NpyArray, PairArrayReader
from .strings import iter_text_blocks
from .text import TextEdgeReader
from .typed import TypedGraph

__all__ = ["read_typed_dir", "save_typed_dir", "read_ogb_hetero", "read_edge_file", "is_ogb_hetero_dir",
           "TYPED_YAML"]

TYPED_YAML = "graph.yaml"
_MASKS = dict(zip(SPLITS, ("train", "valid", "test")))


def read_edge_file(path, rel, n_src: int, n_dst: int) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` type-local ids of relation ``rel`` from an ``.npy`` (m, 2) integer array or a
    text/CSV edge list, range-checked against the two types' vertex counts.  int32 when both types
    have fewer than 2**31 vertices (half the memory of int64: a typed graph is held whole), read
    and checked in blocks."""
    p = Path(path)
    dt = np.int32 if max(int(n_src), int(n_dst)) < 2 ** 31 else np.int64
    if graph_format(p) == "npy":
        pair = PairArrayReader(pair=NpyArray(p))
        s, d = np.empty(pair.num_edges, dt), np.empty(pair.num_edges, dt)
        for a, u, v in pair.iter_blocks(1 << 22):
            check_ids(u, n_src, f"the source ids of {tuple(rel)} (type {rel[0]!r})", path=p, base_index=a)
            check_ids(v, n_dst, f"the destination ids of {tuple(rel)} (type {rel[2]!r})", path=p, base_index=a)
            s[a:a + u.shape[0]], d[a:a + v.shape[0]] = u, v
        return s, d
    blocks = [(u, v) for u, v, _ in TextEdgeReader(p).iter_blocks()]
    s = np.concatenate([u for u, _ in blocks]) if blocks else np.empty(0, np.int64)
    d = np.concatenate([v for _, v in blocks]) if blocks else np.empty(0, np.int64)
    check_ids(s, n_src, f"the source ids of {tuple(rel)} (type {rel[0]!r})", path=p)
    check_ids(d, n_dst, f"the destination ids of {tuple(rel)} (type {rel[2]!r})", path=p)
    return s.astype(dt, copy=False), d.astype(dt, copy=False)


def _file(d: Path, entry, where: str) -> Path:
    if not isinstance(entry, str) or not entry:
        raise GraphFormatError(f"{where}: expected a file name (got {entry!r})")
    p = d / entry
    if not p.is_file():
        raise GraphFormatError(f"{where}: {p}: no such file")
    return p


def _read_names(p: Path, n: int) -> np.ndarray:
    text = "".join(t for _, t in iter_text_blocks(p))
    names = text.split("\n")
    if names and names[-1] == "":
        names.pop()
    if len(names) != n:
        raise GraphFormatError(f"{p}: {len(names)} names, expected one per vertex ({n})")
    return np.array([s.rstrip("\r") for s in names], dtype=object)


def read_typed_dir(path) -> TypedGraph:
    """Read a directory described by ``graph.yaml`` (see the module docstring)."""
    d = Path(path)
    y = d / TYPED_YAML
    try:
        spec = yaml.safe_load(y.read_text(encoding="utf-8"))
    except OSError as e:
        raise GraphFormatError(f"{y}: cannot be read ({e.strerror or e})") from None
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise GraphFormatError(f"{y}: not valid YAML ({' '.join(str(e).split())})") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("node_types"), dict) or not spec["node_types"]:
        raise GraphFormatError(f"{y}: expected a mapping with 'node_types' (type: {{count: N, ...}})")
    if spec.get("version", 1) != 1:
        raise GraphFormatError(f"{y}: unsupported version {spec.get('version')!r} (this reader knows 1)")
    types, num, feats, names = [], {}, {}, {}
    for t, ent in spec["node_types"].items():
        ent = {"count": ent} if isinstance(ent, int) else ent
        if not isinstance(ent, dict) or not isinstance(ent.get("count"), int) or ent["count"] < 0:
            raise GraphFormatError(f"{y}: node type {t!r} needs 'count: N' (N >= 0), got {ent!r}")
        t, n = str(t), int(ent["count"])
        types.append(t)
        num[t] = n
        if ent.get("features") is not None:
            f = _file(d, ent["features"], f"{y}: node type {t!r} features")
            x = node_column_from_file("features", f, n).read()
            dim = ent.get("feature_dim")
            if dim is not None and x.shape[1] != int(dim):
                raise GraphFormatError(f"{f}: features of node type {t!r} have width {x.shape[1]}, "
                                       f"but {TYPED_YAML} says feature_dim: {dim}")
            feats[t] = x
        if ent.get("names") is not None:
            names[t] = _read_names(_file(d, ent["names"], f"{y}: node type {t!r} names"), n)
    relations, edges = [], {}
    for i, r in enumerate(spec.get("relations") or []):
        key = r.get("type") if isinstance(r, dict) else None
        if not isinstance(key, (list, tuple)) or len(key) != 3:
            raise GraphFormatError(f"{y}: relation #{i} needs 'type: [src_type, relation, dst_type]' (got {r!r})")
        key = tuple(str(k) for k in key)
        for t in (key[0], key[2]):
            if t not in num:
                raise GraphFormatError(f"{y}: relation {key!r} names unknown node type {t!r} "
                                       f"(types: {', '.join(types)})")
        relations.append(key)
        edges[key] = read_edge_file(_file(d, r.get("edges"), f"{y}: relation {key!r} edges"), key,
                                    num[key[0]], num[key[2]])
    tg = TypedGraph(node_types=types, num_nodes=num, relations=relations, edges=edges, features=feats,
                    node_names=names, name=str(spec.get("name") or d.name))
    tgt = spec.get("target")
    if tgt is not None:
        if not isinstance(tgt, dict) or tgt.get("type") not in num:
            raise GraphFormatError(f"{y}: target needs 'type:' naming a node type (types: {', '.join(types)})")
        tg.target = str(tgt["type"])
        n = num[tg.target]
        for k in ("labels", *SPLITS):
            if tgt.get(k) is not None:
                setattr(tg, k, node_column_from_file(k, _file(d, tgt[k], f"{y}: target {k}"), n).read())
        if tgt.get("label_names") is not None:
            tg.label_names = [str(s) for s in tgt["label_names"]]
    for split, f in (spec.get("triples") or {}).items():
        arr = NpyArray(_file(d, f, f"{y}: {split} triples"))
        if len(arr.shape) != 2 or arr.shape[1] != 3 or arr.dtype.kind not in "iu":
            raise GraphFormatError(f"{arr.where}: {split} triples must be an int (m, 3) array (got "
                                   f"{arr.dtype}{list(arr.shape)})")
        tg.triples[str(split)] = arr.read().astype(np.int64)
    return tg.validate(str(y))


def _safe(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s).strip("._")[:60] or "x"


def save_typed_dir(tg: TypedGraph, path) -> Path:
    """Write ``tg`` as ``path/graph.yaml`` plus ``.npy``/``.txt`` files; returns the yaml path."""
    tg.validate("save_typed_dir")
    d = Path(path)
    d.mkdir(parents=True, exist_ok=True)
    spec: dict = {"version": 1, "name": tg.name, "node_types": {}, "relations": []}
    for i, t in enumerate(tg.node_types):
        ent: dict = {"count": int(tg.num_nodes[t])}
        if t in tg.features:
            ent["features"] = f"features_{i}_{_safe(t)}.npy"
            ent["feature_dim"] = int(tg.features[t].shape[1])
            np.save(d / ent["features"], np.ascontiguousarray(tg.features[t]))
        if t in tg.node_names:
            names = [str(s) for s in tg.node_names[t]]
            if any("\n" in s or "\r" in s for s in names):
                raise GraphFormatError(f"{d}: a vertex name of type {t!r} holds a line break; cannot save it")
            ent["names"] = f"names_{i}_{_safe(t)}.txt"
            (d / ent["names"]).write_text("".join(s + "\n" for s in names), encoding="utf-8")
        spec["node_types"][t] = ent
    for i, key in enumerate(tg.relations):
        f = f"edges_{i:04d}_{_safe(key[1])}.npy"
        s, dd = tg.edges[key]
        np.save(d / f, np.stack([np.asarray(s, np.int64), np.asarray(dd, np.int64)], axis=1))
        spec["relations"].append({"type": list(key), "edges": f})
    if tg.target is not None:
        tgt: dict = {"type": tg.target}
        for k in ("labels", *SPLITS):
            if getattr(tg, k) is not None:
                tgt[k] = f"{k}.npy"
                np.save(d / tgt[k], np.asarray(getattr(tg, k)))
        if tg.label_names is not None:
            tgt["label_names"] = [str(s) for s in tg.label_names]
        spec["target"] = tgt
    if tg.triples:
        spec["triples"] = {}
        for split, tr in tg.triples.items():
            spec["triples"][split] = f"triples_{_safe(split)}.npy"
            np.save(d / spec["triples"][split], np.asarray(tr, np.int64))
    y = d / TYPED_YAML
    y.write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return y


# ---- OGB heterogeneous node-property directories (ogbn-mag) ----------------------------------
def _ogb_file(p: Path) -> Path | None:
    return next((q for q in (p.with_name(p.name + ".gz"), p) if q.is_file()), None)


def is_ogb_hetero_dir(path) -> bool:
    """Whether ``path`` is an OGB heterogeneous dataset directory (``raw/relations/`` present)."""
    return (Path(path) / "raw" / "relations").is_dir()


def _csv_rows(p: Path) -> list[list[str]]:
    text = "".join(t for _, t in iter_text_blocks(p))
    return [[c.strip() for c in ln.split(",")] for ln in text.split("\n") if ln.strip()]


def read_ogb_hetero(path, split: str | None = None) -> TypedGraph:
    """Read an OGB heterogeneous node-property directory (``ogbn-mag`` layout)::

        raw/num-node-dict.csv.gz           type names (one line), vertex counts (next line)
        raw/triplet-type-list.csv.gz       src_type,relation,dst_type per line
        raw/relations/S___R___D/edge.csv.gz  src,dst per line (+ num-edge-list.csv.gz: the count)
        raw/node-feat/T/node-feat.csv.gz   raw/node-label/T/node-label.csv.gz  (target = labelled T)
        split/NAME/T/{train,valid,test}.csv.gz

    ``edge_reltype.csv.gz`` and other per-edge or per-node extras (``node_year``) are ignored.
    """
    d = Path(path)
    raw = d / "raw"
    nd = _ogb_file(raw / "num-node-dict.csv")
    if nd is None:
        raise GraphFormatError(f"{raw}: no num-node-dict.csv.gz (where an OGB heterogeneous dataset names "
                               "its node types)")
    rows = _csv_rows(nd)
    if len(rows) != 2 or len(rows[0]) != len(rows[1]):
        raise GraphFormatError(f"{nd}: expected a line of node type names and a line of as many counts")
    try:
        num = {t: int(c) for t, c in zip(rows[0], rows[1])}
    except ValueError:
        raise GraphFormatError(f"{nd}: vertex counts must be integers (got {rows[1]})") from None
    tl = _ogb_file(raw / "triplet-type-list.csv")
    rel_dir = raw / "relations"
    if tl is not None:
        relations = [tuple(r) for r in _csv_rows(tl)]
        bad = next((r for r in relations if len(r) != 3), None)
        if bad is not None:
            raise GraphFormatError(f"{tl}: expected src_type,relation,dst_type per line (got {','.join(bad)})")
    else:
        relations = [tuple(q.name.split("___")) for q in sorted(rel_dir.iterdir()) if q.is_dir()]
    tg = TypedGraph(node_types=list(num), num_nodes=num, relations=relations, edges={}, name=d.name)
    for key in relations:
        for t in (key[0], key[2]):
            if t not in num:
                raise GraphFormatError(f"{tl or rel_dir}: relation {key!r} names unknown node type {t!r} "
                                       f"(types: {', '.join(num)})")
        rd = rel_dir / "___".join(key)
        ef = _ogb_file(rd / "edge.csv")
        if ef is None:
            raise GraphFormatError(f"{rd}: no edge.csv.gz for relation {key!r}")
        tg.edges[key] = read_edge_file(ef, key, num[key[0]], num[key[2]])
        cf = _ogb_file(rd / "num-edge-list.csv")
        if cf is not None and _csv_rows(cf) != [[str(len(tg.edges[key][0]))]]:
            raise GraphFormatError(f"{cf}: says {_csv_rows(cf)[:1]} edges but {ef.name} holds {len(tg.edges[key][0])}")
    for t in num:
        f = _ogb_file(raw / "node-feat" / t / "node-feat.csv")
        if f is not None:
            tg.features[t] = CsvColumn("features", f, num[t]).read()
    labelled = [t for t in num if _ogb_file(raw / "node-label" / t / "node-label.csv") is not None]
    if len(labelled) > 1:
        raise GraphFormatError(f"{raw / 'node-label'}: labels for several node types {labelled}; one target expected")
    if labelled:
        tg.target = t = labelled[0]
        tg.labels = CsvColumn("labels", _ogb_file(raw / "node-label" / t / "node-label.csv"), num[t]).read()
        sd = d / "split"
        names = sorted(q.name for q in sd.iterdir() if q.is_dir()) if sd.is_dir() else []
        if split is None and len(names) > 1:
            raise GraphFormatError(f"{sd}: several splits {names}; choose one (split=NAME)")
        if split is not None and split not in names:
            raise GraphFormatError(f"{sd}: no split {split!r} (found {names})")
        for mask, fname in _MASKS.items():
            f = _ogb_file(sd / (split or names[0]) / t / f"{fname}.csv") if names else None
            if f is not None:
                setattr(tg, mask, read_index_list(f, num[t]))
    return tg.validate(str(d))
