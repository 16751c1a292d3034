"""One entry point for typed (heterogeneous) inputs: :func:`open_typed` recognises a typed file or
directory by its content and layout and reads it into a :class:`TypedGraph`.

Why this module exists: callers (``argosy partition``/``train --data``) hold one path; typed
inputs must be told apart from homogeneous ones without a flag, and anything not typed must fall
through untouched to :func:`open_graph`, so :func:`open_typed` returns ``None`` for it.

Detection, first match wins:

============================================================  =====================
``FILE.nt`` / ``FILE.nt.gz`` (or a text file whose first line   :func:`read_rdf`
is an N-Triples triple); a directory holding one ``.nt[.gz]``   :func:`read_rdf_dir`
a directory with ``graph.yaml``                                 :func:`read_typed_dir`
a directory with ``raw/relations/`` (OGB heterogeneous)         :func:`read_ogb_hetero`
a directory with ``train.txt`` (+ ``valid``/``test``)           :func:`read_kg_triples`
============================================================  =====================
"""
from __future__ import annotations

from pathlib import Path

from .kgtriples import find_kg_files, read_kg_triples
from .rdf import _LINE_RX, _label_file, is_ntriples_file, read_rdf, read_rdf_dir
from .text import GzipReader
from .typed import TypedGraph
from .typed_dir import TYPED_YAML, _ogb_file, is_ogb_hetero_dir, read_ogb_hetero, read_typed_dir

__all__ = ["open_typed", "typed_format", "typed_has_labels"]


def _looks_like_ntriples(p: Path) -> bool:
    """A text file (any name) whose first content line is a well-formed N-Triples triple; reads
    at most the first 64 KiB (decompressed)."""
    try:
        with open(p, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        with (GzipReader(p) if gz else open(p, "rb")) as f:
            head = f.read(1 << 16)
    except Exception:  # unreadable or corrupt: not ours; the homogeneous path reports it
        return False
    for ln in head.decode("utf-8", "replace").split("\n"):
        s = ln.strip()
        if s and not s.startswith(("#", "%")):
            return s[:1] in ("<", "_") and _LINE_RX.fullmatch(ln) is not None
    return False


def typed_format(path) -> str | None:
    """``"rdf"``, ``"rdf_dir"``, ``"typed_dir"``, ``"ogb_hetero"``, ``"kg"`` or ``None`` for ``path``."""
    p = Path(path)
    if p.is_file():
        return "rdf" if is_ntriples_file(p) or _looks_like_ntriples(p) else None
    if not p.is_dir():
        return None
    if (p / TYPED_YAML).is_file():
        return "typed_dir"
    if is_ogb_hetero_dir(p):
        return "ogb_hetero"
    if any(q.is_file() and is_ntriples_file(q) for q in p.iterdir()):
        return "rdf_dir"
    if "train" in find_kg_files(p):
        return "kg"
    return None


def open_typed(path, **opts) -> TypedGraph | None:
    """Read ``path`` as a typed graph if it is one (see the module table), else return ``None``.

    ``opts`` go to the reader: ``labels_train``/``labels_test``/``val_fraction``/``seed`` (RDF),
    ``split`` (OGB heterogeneous).

    Raises:
        GraphFormatError: from the reader, for a typed input with a fault.
    """
    fmt = typed_format(path)
    if fmt is None:
        return None
    reader = {"rdf": read_rdf, "rdf_dir": read_rdf_dir, "typed_dir": read_typed_dir,
              "ogb_hetero": read_ogb_hetero, "kg": read_kg_triples}[fmt]
    return reader(path, **opts)


def typed_has_labels(path) -> bool:
    """Whether the typed input at ``path`` carries node labels, found from its layout alone (no
    graph is read), so a node-classification job on an unlabelled input is refused before it is
    partitioned.  A knowledge graph's triples are its labels; a layout fault answers True and is
    left to the reader, which names it."""
    fmt, p = typed_format(path), Path(path)
    try:
        if fmt == "rdf":
            return False                        # a lone .nt file: its labelled-entity TSVs live beside it in a directory
        if fmt == "rdf_dir":
            return _label_file(p, "trainingset") is not None
        if fmt == "typed_dir":
            import yaml
            spec = yaml.safe_load((p / TYPED_YAML).read_text(encoding="utf-8")) or {}
            tgt = spec.get("target")
            return bool(spec.get("triples")) or tgt is not None and (not isinstance(tgt, dict) or tgt.get("labels") is not None)
        if fmt == "ogb_hetero":
            d = p / "raw" / "node-label"
            return d.is_dir() and any(_ogb_file(q / "node-label.csv") for q in d.iterdir() if q.is_dir())
    except Exception:                           # noqa: BLE001 - the reader reports the fault itself
        return True
    return True
