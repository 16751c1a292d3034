"""Text edge lists, plain or gzip, parsed block by block by a numba kernel
(:mod:`argosy.shared.textparse`).

Why this module exists: SNAP-style text files are the most common input and the most hostile
one (headers, comments, BOMs, weights, truncated gzip); one reader handles them for the
partitioner's streams and for whole-graph loads.
"""
from __future__ import annotations

import gzip
import zlib
from typing import Iterator

import numpy as np

from argosy.shared.errors import GraphFormatError

from .weights import check_weights

__all__ = ["GzipReader", "TextEdgeReader"]


class GzipReader:
    """Sequential gzip decompression that, unlike :mod:`gzip`, treats a stream cut before its
    trailer (CRC and size) as truncated.  Concatenated members are read in turn."""

    def __init__(self, path):
        self.path = str(path)
        self._f = open(self.path, "rb")
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._buf = b""

    def _fill(self, n: int) -> None:
        """Decompress until ``n`` bytes are buffered or the data ends."""
        while len(self._buf) < n:
            if self._d.eof:
                rest = self._d.unused_data
                if not rest.strip(b"\x00"):
                    rest = self._f.read(1 << 20)
                    if not rest.strip(b"\x00"):
                        return
                self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            else:
                rest = self._d.unconsumed_tail or self._f.read(1 << 20)
                if not rest:
                    raise EOFError("compressed data ended before the end of the gzip stream")
            self._buf += self._d.decompress(rest, max(n - len(self._buf), 1 << 16))

    def read(self, n: int) -> bytes:
        self._fill(n)
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def readline(self) -> bytes:
        start = 0
        while b"\n" not in self._buf[start:]:
            start = len(self._buf)
            self._fill(len(self._buf) + (1 << 16))
            if len(self._buf) == start:
                break
        i = self._buf.find(b"\n")
        i = len(self._buf) if i < 0 else i + 1
        out, self._buf = self._buf[:i], self._buf[i:]
        return out

    def readlines(self, hint: int) -> list:
        data = self.read(max(hint, 1))
        if not data:
            return []
        if not data.endswith(b"\n"):
            data += self.readline()
        return data.splitlines(keepends=True)

    def close(self):
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class TextEdgeReader:
    """A text edge list (plain or gzip), parsed block by block by a numba kernel.

    A UTF-8 BOM and one header line (first content line starting with a letter or quote) are
    skipped; columns after the second are dropped; ids are overflow-checked.
    """

    def __init__(self, path, block_bytes: int = 16 << 20):
        self.path = str(path)
        self.block_bytes = max(1 << 10, int(block_bytes))
        with open(self.path, "rb") as f:
            self.gzipped = f.read(2) == b"\x1f\x8b"
        self.seekable = False

    def _open(self):
        return GzipReader(self.path) if self.gzipped else open(self.path, "rb")

    def _raise(self, code: int, line: int, block: bytes, pos: int) -> None:
        end = block.find(b"\n", pos)
        text = block[pos:end if end >= 0 else len(block)].decode("utf-8", "replace").strip()[:80]
        why = {1: "malformed line (expected two integer vertex ids)",
               2: "expected at least 2 fields (two integer vertex ids)",
               3: "negative vertex id",
               4: "vertex id beyond int64 (ids must be 0..n-1)",
               5: "expected a weight in column 3 (--edge-weights column)",
               6: "the weight in column 3 is not a number"}[code]
        raise GraphFormatError(f"{self.path}: line {line + 1}: {why}: {text!r}")

    @staticmethod
    def _blank_header(block: bytes) -> bytes:
        """Blank out a leading BOM and a header line (the first content line, if it starts with a
        letter or a quote) so that the parser sees an empty line and line numbers stay right."""
        if block.startswith(b"\xef\xbb\xbf"):
            block = b"   " + block[3:]
        pos = 0
        while pos < len(block):
            end = block.find(b"\n", pos)
            end = len(block) if end < 0 else end
            s = block[pos:end].strip(b" \t\r,")
            if not s or s[:1] in (b"#", b"%"):
                pos = end + 1
                continue
            if s[:1].isalpha() or s[:1] in (b'"', b"'"):
                return block[:pos] + b" " * (end - pos) + block[end:]
            break
        return block

    def header(self) -> list[str] | None:
        """The header line's fields (lower case), when the file has one (see :meth:`_blank_header`)."""
        try:
            with self._open() as f:
                head = f.read(1 << 16)
        except (EOFError, zlib.error, gzip.BadGzipFile, OSError):
            return None                  # the block reader reports the fault when the edges are read
        for raw in head.split(b"\n")[:-1] or [head]:
            s = raw.lstrip(b"\xef\xbb\xbf").strip(b" \t\r,")
            if not s or s[:1] in (b"#", b"%"):
                continue
            if s[:1].isalpha() or s[:1] in (b'"', b"'"):
                return [t.strip(b"\"'").decode("utf-8", "replace").lower()
                        for t in s.replace(b",", b" ").replace(b"\t", b" ").split()]
            return None
        return None

    def iter_weighted_blocks(self, num_nodes: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Yield ``(u, v, w)`` per block: ids as :meth:`iter_blocks`, ``w`` float32 from column 3 (checked)."""
        done = 0
        for u, v, line, w in self._blocks(num_nodes, True):
            yield u, v, check_weights(w, u.size, f"{self.path} (column 3)", done)
            done += u.size

    def iter_blocks(self, num_nodes: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Yield ``(u, v, line)`` int64 arrays per block; ids checked against ``num_nodes``."""
        for u, v, line, _ in self._blocks(num_nodes, False):
            yield u, v, line

    def _blocks(self, num_nodes, want_w: bool):
        from argosy.shared.textparse import NO_WEIGHTS, empty_out, parse_edge_block

        line0, rest, first = 0, b"", True
        try:
            with self._open() as f:
                while True:
                    data = f.read(self.block_bytes)
                    eof = not data
                    block = rest + data
                    if not eof:
                        cut = block.rfind(b"\n")
                        if cut < 0:
                            if len(block) > (64 << 20):
                                raise GraphFormatError(f"{self.path}: line {line0 + 1}: a line longer than 64 MiB "
                                                       "(not a text edge list?)")
                            rest = block
                            continue
                        block, rest = block[:cut + 1], block[cut + 1:]
                    else:
                        rest = b""
                    if first and block:
                        first = False
                        block = self._blank_header(block)
                    if block:
                        buf = np.frombuffer(block, dtype=np.uint8)
                        out = empty_out(buf.size)
                        wout = np.empty(out.shape[0], np.float64) if want_w else NO_WEIGHTS
                        cnt, line1, err, err_line, err_pos = parse_edge_block(buf, out, line0, wout, want_w)
                        if err:
                            self._raise(int(err), int(err_line), block, int(err_pos))
                        pairs = out[:cnt]
                        if num_nodes is not None and cnt:
                            bad = np.flatnonzero((pairs[:, 0] >= num_nodes) | (pairs[:, 1] >= num_nodes))
                            if bad.size:
                                r = int(bad[0])
                                raise GraphFormatError(
                                    f"{self.path}: line {int(pairs[r, 2]) + 1}: vertex id "
                                    f"{int(pairs[r, :2].max())} is out of range: num_nodes={num_nodes}")
                        line0 = int(line1)
                        yield pairs[:, 0], pairs[:, 1], pairs[:, 2], wout[:cnt]
                    if eof:
                        break
        except GraphFormatError:
            raise
        except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as e:
            if isinstance(e, OSError) and not isinstance(e, gzip.BadGzipFile) and e.errno is not None:
                raise GraphFormatError(f"{self.path}: cannot be read ({e.strerror or e})") from None
            raise GraphFormatError(f"{self.path}: truncated or corrupt gzip data ({e})") from None

    def scan(self, num_nodes: int | None = None) -> tuple[int, int, int]:
        """One validation pass: ``(edges, largest id, blocks)``."""
        count, hi, blocks = 0, -1, 0
        for u, v, _ in self.iter_blocks(num_nodes):
            count += u.size
            blocks += 1
            if u.size:
                hi = max(hi, int(u.max()), int(v.max()))
        return count, hi, blocks
