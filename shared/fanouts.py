"""Fanouts: how many neighbours each hop samples, per relation on a typed store.

``--fanouts 25,10`` samples up to 25 neighbours of every seed and 10 of every vertex one hop out.
On a typed store the count is *per relation* (each relation into a vertex gives up to that many),
as DGL's and PyG's heterogeneous samplers do, and named relations can have their own:
``--fanouts "25,10 cites=15,5 rev_writes=0,0"`` (0 drops a relation from that hop).  A name is a
relation's name (every relation of that name) or ``src:relation:dst``.  A plain graph is the
one-relation case: a per-relation fanout there is the fanout.

:func:`parse_fanouts` reads the flag, :func:`relation_fanout_table` resolves the names against a
store's relations (an unknown name is an error naming the relations there are).
"""
from __future__ import annotations

import re

import numpy as np

from argosy.shared.errors import ConfigError

__all__ = ["parse_fanouts", "format_fanouts", "relation_fanout_table", "hop_caps"]


def _hops(text: str, what: str, allow_zero: bool) -> tuple[int, ...]:
    try:
        hops = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ConfigError(f"{what}: expected comma-separated integers like 25,10 (got {text!r})") from None
    low = 0 if allow_zero else 1
    if not hops or any(f != -1 and f < low for f in hops):
        raise ConfigError(f"{what}: each hop's fanout must be {'>= 0' if allow_zero else 'positive'} or -1 "
                          f"(all neighbours) (got {text!r})")
    return hops


def parse_fanouts(text: str, flag: str = "--fanouts") -> tuple[tuple[int, ...], dict[str, tuple[int, ...]]]:
    """``"25,10 cites=15,5"`` -> ``((25, 10), {"cites": (15, 5)})``; entries split on spaces or ``;``.

    Raises:
        ConfigError: no default entry, two defaults, a malformed entry, or a relation's fanouts with
            another number of hops than the default's.
    """
    default: tuple[int, ...] | None = None
    per: dict[str, tuple[int, ...]] = {}
    for entry in (e for e in re.split(r"[\s;]+", str(text).strip()) if e):
        if "=" in entry:
            name, hops = entry.split("=", 1)
            if not name or name in per:
                raise ConfigError(f"{flag}: {'an empty' if not name else 'a repeated'} relation name in {entry!r}")
            per[name] = _hops(hops, f"{flag} {name}", allow_zero=True)
        elif default is not None:
            raise ConfigError(f"{flag}: two default fanouts ({','.join(map(str, default))} and {entry}); "
                              "name the relation of one of them (relation=15,5)")
        else:
            default = _hops(entry, flag, allow_zero=False)
    if default is None:
        raise ConfigError(f"{flag}: a default for the other relations is needed, e.g. \"25,10 {next(iter(per), 'cites')}=15,5\"")
    for name, hops in per.items():
        if len(hops) != len(default):
            raise ConfigError(f"{flag}: {name} has {len(hops)} hops, the default {len(default)} "
                              f"({','.join(map(str, default))}); one fanout per model layer")
    return default, per


def format_fanouts(default, per: dict) -> str:
    """The inverse of :func:`parse_fanouts` (for reports and job files)."""
    return " ".join([",".join(map(str, default))] + [f"{k}={','.join(map(str, v))}" for k, v in per.items()])


def relation_fanout_table(default, per: dict, relations: list) -> np.ndarray:
    """int64[hops, R]: hop ``h``'s fanout through relation ``r`` (``relations``: the manifest's
    ``[src_type, relation, dst_type]`` per relation id; none = a plain graph, one relation).

    Raises:
        ConfigError: a name that matches no relation of the store.
    """
    R = max(len(relations), 1)
    table = np.repeat(np.asarray(default, np.int64)[:, None], R, axis=1)
    for name, hops in per.items():
        hit = [i for i, (s, r, d) in enumerate(relations) if name in (r, f"{s}:{r}:{d}")]
        if not hit:
            known = ", ".join(r for _, r, _ in relations[:12]) + (" ..." if len(relations) > 12 else "")
            raise ConfigError(f"--fanouts names relation {name!r}, which this store does not have "
                              f"({'relations: ' + known if relations else 'an untyped store: give plain fanouts'}; "
                              "a name is a relation or src:relation:dst)")
        table[:, hit] = np.asarray(hops, np.int64)[:, None]
    return table


def hop_caps(table: np.ndarray) -> list[int]:
    """Per hop, the most edges one vertex can get (-1: no bound): the sum of its relations' fanouts."""
    return [-1 if (row < 0).any() else int(row.sum()) for row in np.asarray(table)]
