"""Named-entity text inputs (RDF N-Triples, knowledge-graph triples) read block by block, and
the string -> dense id table they share.

Why this module exists: these formats name their vertices with strings, so a reader must stream
lines (files can be GBs) and intern names without keeping one Python string per *occurrence*;
:func:`iter_text_blocks` and :class:`Interner` are that machinery, shared by :mod:`.rdf` and
:mod:`.kgtriples`.
"""
from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from argosy.shared.errors import GraphFormatError

from .text import GzipReader

__all__ = ["iter_text_blocks", "Interner"]


def iter_text_blocks(path, block_bytes: int = 16 << 20) -> Iterator[tuple[int, str]]:
    """Yield ``(line0, text)``: whole lines of the (plain or gzip) UTF-8 file ``path``, about
    ``block_bytes`` at a time; ``line0`` is the 0-based number of the block's first line.

    Raises:
        GraphFormatError: ``FILE: no such file``, ``FILE:LINE: not UTF-8 text``, or truncated gzip.
    """
    p = Path(path)
    if not p.is_file():
        raise GraphFormatError(f"{p}: no such file")
    with open(p, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    line0, rest = 0, b""
    try:
        with (GzipReader(p) if gz else open(p, "rb")) as f:
            while True:
                data = f.read(block_bytes)
                block = rest + data
                if data:
                    cut = block.rfind(b"\n")
                    if cut < 0:
                        rest = block
                        continue
                    block, rest = block[:cut + 1], block[cut + 1:]
                if not block:
                    return
                if line0 == 0 and block.startswith(b"\xef\xbb\xbf"):
                    block = block[3:]
                try:
                    text = block.decode("utf-8")
                except UnicodeDecodeError as e:
                    line = line0 + block.count(b"\n", 0, e.start) + 1
                    raise GraphFormatError(f"{p}:{line}: not UTF-8 text ({e.reason})") from None
                yield line0, text
                line0 += block.count(b"\n")
                if not data:
                    return
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise GraphFormatError(f"{p}: truncated or corrupt gzip ({e})") from None


class Interner:
    """Strings -> dense ids, first seen first; :meth:`sorted_ids` renumbers them by name.

    Each distinct string is stored once; a block's occurrences are mapped by C-level dict
    lookups (``dict.fromkeys`` for the block's new names, ``map(dict.__getitem__)`` for ids).
    """

    def __init__(self):
        self.ids: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, names: Sequence[str]) -> np.ndarray:
        """int64[len(names)]: the id of every name, new names numbered after the known ones."""
        ids = self.ids
        new = [k for k in dict.fromkeys(names) if k not in ids]
        ids.update(zip(new, range(len(ids), len(ids) + len(new))))
        return np.array(list(map(ids.__getitem__, names)), np.int64)  # faster than np.fromiter(map)

    def sorted_ids(self, rename=None) -> tuple[list[str], np.ndarray]:
        """``(names, remap)``: the names (after ``rename``) in sorted order, and int64 ``remap``
        with ``remap[first_seen_id]`` = the id in that order."""
        names = list(self.ids) if rename is None else [rename(k) for k in self.ids]
        order = sorted(range(len(names)), key=names.__getitem__)
        remap = np.empty(len(names), np.int64)
        remap[np.asarray(order, np.int64)] = np.arange(len(names), dtype=np.int64)
        return [names[i] for i in order], remap
