"""A ``MODULE:FACTORY`` model after training: where its module came from, and its embeddings.

``argosy train`` imports a user's module in processes started from the directory it was run in
(``python -m`` puts that directory first on ``sys.path``).  :func:`record_source` writes what is
needed to import the same module again into the run directory (``model.json``: the module, its
file, the ``sys.path`` entry it was found under), and :func:`import_path` puts that entry back,
so ``argosy predict RUN`` and ``argosy.load_model(RUN)`` work from any directory.

Embeddings of a user model follow one documented convention (:func:`embedding_module`): the
input of its last layer.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from argosy.shared.errors import ConfigError

if TYPE_CHECKING:          # torch stays out of `argosy submit` (the partitioner image has none)
    from torch import nn

__all__ = ["SOURCE_FILE", "with_cwd_on_path", "locate", "record_source", "import_path", "embedding_module"]

SOURCE_FILE = "model.json"
"""In the run directory: where the ``MODULE:FACTORY`` module was imported from."""


@contextlib.contextmanager
def with_cwd_on_path(extra: str | None = None):
    """Import as a service would: ``python -m`` starts with the working directory (and ``extra``) first."""
    added = [p for p in dict.fromkeys([extra, os.getcwd()]) if p and p not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for p in added:
            with contextlib.suppress(ValueError):
                sys.path.remove(p)


def locate(spec: str) -> dict:
    """``{"model", "module", "file", "path"}`` of ``MODULE:FACTORY``; ``path`` is the ``sys.path``
    entry the module is found under (the directory ``train`` ran in for a local ``mymodel.py``)."""
    module = spec.partition(":")[0]
    with with_cwd_on_path():
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            found = None
    out = {"model": spec, "module": module, "file": None, "path": None}
    if found is None or not found.origin or found.origin in ("built-in", "frozen"):
        return out
    f = Path(found.origin).resolve()
    root = f.parent.parent if f.name == "__init__.py" else f.parent
    for _ in range(module.count(".")):
        root = root.parent
    out.update(file=str(f), path=str(root))
    return out


def record_source(run_dir: str | Path, spec: str) -> dict | None:
    """Write ``RUN_DIR/model.json`` for a ``MODULE:FACTORY`` model (nothing for built-in models)."""
    if ":" not in spec:
        return None
    info = locate(spec)
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    (Path(run_dir) / SOURCE_FILE).write_text(json.dumps(info, indent=1))
    return info


@contextlib.contextmanager
def import_path(run_dir: str | Path | None):
    """While inside, the module recorded for ``run_dir`` imports as it did in training.

    Raises ConfigError when the recorded file is gone (moved or deleted since training)."""
    src = Path(run_dir) / SOURCE_FILE if run_dir is not None else None
    info = json.loads(src.read_text()) if src is not None and src.is_file() else {}
    if info.get("file") and not Path(info["file"]).exists():
        raise ConfigError(f"{src}: the model's module {info['module']!r} was imported from {info['file']}, "
                          "which no longer exists; put it back or make the module importable (PYTHONPATH)")
    with with_cwd_on_path(info.get("path")):
        yield info


def embedding_module(model: "nn.Module") -> "nn.Module":
    """The layer whose input is a user model's embedding (``argosy predict --embeddings``).

    The convention, in order: the submodule named by the model's ``argosy_embedding`` attribute
    (e.g. ``"convs.1"``); else the model's last direct child that has parameters, or the last
    entry of it when that child is a ``ModuleList``/``Sequential`` (PyG's ``BasicGNN``: the last of
    ``convs``, or ``lin`` with ``jk``).  The embedding is that layer's first positional input.
    """
    name = getattr(model, "argosy_embedding", None)
    if name:
        try:
            return model.get_submodule(name)
        except AttributeError:
            raise ConfigError(f"{type(model).__name__}.argosy_embedding = {name!r} names no submodule") from None
    last = None
    for child in model.children():
        if any(True for _ in child.parameters()):
            last = child
    from torch import nn
    while isinstance(last, (nn.ModuleList, nn.Sequential)) and len(last):
        last = last[-1]
    if last is None:
        raise ConfigError(f"{type(model).__name__} has no layer with parameters; set its argosy_embedding "
                          "attribute to the name of the layer whose input is the embedding")
    return last
