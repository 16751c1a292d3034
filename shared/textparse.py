"""The numba kernel that parses text edge lists (kept apart so that importing
:mod:`argosy.shared.graphio` does not compile or import numba until a text file is read).

Ids are parsed with an explicit overflow check: a 20-digit id does not wrap around.
"""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["parse_edge_block", "ERR_MALFORMED", "ERR_FIELDS", "ERR_NEGATIVE", "ERR_OVERFLOW", "ERR_NO_WEIGHT",
           "ERR_BAD_WEIGHT"]

ERR_MALFORMED, ERR_FIELDS, ERR_NEGATIVE, ERR_OVERFLOW, ERR_NO_WEIGHT, ERR_BAD_WEIGHT = 1, 2, 3, 4, 5, 6
_LIM = (2**63 - 1) // 10  # v * 10 + d overflows int64 beyond this


@numba.njit(cache=True)
def _sep(c):
    return c == 32 or c == 9 or c == 13 or c == 44  # space, tab, CR, comma


@numba.njit(cache=True)
def _parse_float(buf, j, n):
    """A decimal float (``-1.5e3``, ``nan``, ``inf``) at ``buf[j]``: ``(value, next j, ok)``."""
    neg = False
    if j < n and (buf[j] == 45 or buf[j] == 43):
        neg = buf[j] == 45
        j += 1
    if j < n and (buf[j] | 32) in (110, 105):           # 'n'an / 'i'nf (any case)
        v = np.nan if (buf[j] | 32) == 110 else np.inf
        while j < n and ((buf[j] | 32) >= 97 and (buf[j] | 32) <= 122):
            j += 1
        return (-v if neg else v), j, True
    v = 0.0
    digits = 0
    while j < n and buf[j] >= 48 and buf[j] <= 57:
        v = v * 10.0 + (buf[j] - 48)
        j += 1
        digits += 1
    if j < n and buf[j] == 46:                           # '.'
        j += 1
        scale = 0.1
        while j < n and buf[j] >= 48 and buf[j] <= 57:
            v += (buf[j] - 48) * scale
            scale *= 0.1
            j += 1
            digits += 1
    if digits == 0:
        return 0.0, j, False
    if j < n and (buf[j] | 32) == 101:                   # 'e'
        j += 1
        eneg = False
        if j < n and (buf[j] == 45 or buf[j] == 43):
            eneg = buf[j] == 45
            j += 1
        e = 0
        ed = 0
        while j < n and buf[j] >= 48 and buf[j] <= 57:
            e = min(e * 10 + (buf[j] - 48), 400)
            j += 1
            ed += 1
        if ed == 0:
            return 0.0, j, False
        v *= 10.0 ** (-e if eneg else e)
    return (-v if neg else v), j, True


@numba.njit(cache=True)
def parse_edge_block(buf, out, line0, wout, want_w):
    """Parse ``u v [weight] [ignored columns...]`` lines from a byte block ending at a line boundary.

    Space, tab and comma separate fields; lines starting with ``#`` or ``%`` are comments;
    with ``want_w`` the third field is parsed as a float weight into ``wout[row]`` (5: missing,
    6: not a number), else it is skipped with the fields after it (weights, timestamps).  Writes
    ``(u, v, line)`` rows to ``out`` and returns ``(count, lines, err_code, err_line, err_pos)``
    where ``err_code`` is 0 (ok), 1 (malformed), 2 (fewer than two fields), 3 (negative id) or 4
    (id beyond int64).
    """
    n = buf.size
    i = 0
    cnt = 0
    line = line0
    while i < n:
        j = i
        while j < n and _sep(buf[j]):
            j += 1
        if j >= n:
            break
        c = buf[j]
        if c == 10:
            line += 1
            i = j + 1
            continue
        if c == 35 or c == 37:  # '#' or '%'
            while j < n and buf[j] != 10:
                j += 1
            line += 1
            i = j + 1
            continue
        ntok = 0
        t0 = 0
        t1 = 0
        while ntok < 2:
            while j < n and _sep(buf[j]):
                j += 1
            if j >= n or buf[j] == 10:
                break
            neg = False
            if buf[j] == 45:  # '-'
                neg = True
                j += 1
            elif buf[j] == 43:  # '+'
                j += 1
            if j >= n or buf[j] < 48 or buf[j] > 57:
                return cnt, line, 1, line, i
            v = 0
            while j < n and buf[j] >= 48 and buf[j] <= 57:
                d = buf[j] - 48
                if v > _LIM or (v == _LIM and d > 7):
                    return cnt, line, 4, line, i
                v = v * 10 + d
                j += 1
            if j < n and not (_sep(buf[j]) or buf[j] == 10):
                return cnt, line, 1, line, i
            if neg and v != 0:
                return cnt, line, 3, line, i
            if ntok == 0:
                t0 = v
            else:
                t1 = v
            ntok += 1
        if ntok != 2:
            return cnt, line, 2, line, i
        if want_w:
            while j < n and _sep(buf[j]):
                j += 1
            if j >= n or buf[j] == 10:
                return cnt, line, 5, line, i
            w, j, ok = _parse_float(buf, j, n)
            if not ok or (j < n and not (_sep(buf[j]) or buf[j] == 10)):
                return cnt, line, 6, line, i
            wout[cnt] = w
        while j < n and buf[j] != 10:  # extra columns are ignored
            j += 1
        out[cnt, 0] = t0
        out[cnt, 1] = t1
        out[cnt, 2] = line
        cnt += 1
        line += 1
        i = j + 1
    return cnt, line, 0, line, i


NO_WEIGHTS = np.empty(0, np.float64)
"""``wout`` of a parse that reads no weights."""


def empty_out(nbytes: int) -> np.ndarray:
    """Output buffer for a block of ``nbytes`` (the shortest edge line, ``0 1\\n``, is 4 bytes)."""
    return np.empty((nbytes // 4 + 1, 3), dtype=np.int64)
