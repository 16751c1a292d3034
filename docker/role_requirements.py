"""Resolve what one container image installs from the package's own declaration (pyproject.toml).

``[tool.argosy.images]`` names, per role, which of ``[project] dependencies`` and optional
dependencies the image needs; the version specifiers come from those lists, so an image cannot
drift from the package (a dependency added to the package for a role is added to its image by the
same edit).  ``EXTRAS`` (comma-separated optional-dependency groups, e.g. ``pyg``) add whole
groups.

Usage (docker/Dockerfile build stage)::

    python3 role_requirements.py pyproject.toml ROLE [EXTRAS] --common   # what every role shares
    python3 role_requirements.py pyproject.toml ROLE [EXTRAS]            # the rest, torch excluded
    python3 role_requirements.py pyproject.toml ROLE [EXTRAS] --torch    # torch's line, or nothing
"""
from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

__all__ = ["load", "requirements", "needs_torch", "roles"]


def _name(req: str) -> str:
    """Normalised distribution name of a requirement line (PEP 503)."""
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
    if not m:
        raise ValueError(f"cannot read a package name from requirement {req!r}")
    return re.sub(r"[-_.]+", "-", m.group(1)).lower()


def load(pyproject: str | Path) -> dict:
    with open(pyproject, "rb") as f:
        return tomllib.load(f)


def roles(meta: dict) -> list[str]:
    return [r for r in meta["tool"]["argosy"]["images"] if r != "common"]


def _catalogue(meta: dict) -> dict[str, str]:
    """Every requirement line the package declares, by normalised name (core first, then extras)."""
    cat: dict[str, str] = {}
    for line in meta["project"]["dependencies"]:
        cat.setdefault(_name(line), line)
    for group in meta["project"].get("optional-dependencies", {}).values():
        for line in group:
            cat.setdefault(_name(line), line)
    return cat


def requirements(meta: dict, role: str, extras: str = "", common_only: bool = False) -> list[str]:
    """Requirement lines of ``role``'s image (torch included when the role needs it)."""
    images = meta["tool"]["argosy"]["images"]
    if role not in images or role == "common":
        raise SystemExit(f"unknown ROLE {role!r} (expected one of {', '.join(roles(meta))})")
    cat = _catalogue(meta)
    names = list(images.get("common", [])) if common_only else [*images.get("common", []), *images[role]]
    lines = []
    for n in names:
        if _name(n) not in cat:
            raise SystemExit(f"[tool.argosy.images] {role}: {n!r} is not a dependency of the package "
                             f"(add it to [project] dependencies or an optional group first)")
        lines.append(cat[_name(n)])
    if not common_only:
        groups = meta["project"].get("optional-dependencies", {})
        for g in filter(None, (x.strip() for x in extras.split(","))):
            if g not in groups:
                raise SystemExit(f"EXTRAS: no optional-dependency group {g!r} (have: {', '.join(groups)})")
            lines += [x for x in groups[g] if _name(x) not in {_name(y) for y in lines}]
    return lines


def needs_torch(meta: dict, role: str, extras: str = "") -> bool:
    return any(_name(x) == "torch" for x in requirements(meta, role, extras))


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--")]
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    meta, role, extras = load(args[0]), args[1], (args[2] if len(args) > 2 else "")
    reqs = requirements(meta, role, extras, common_only="--common" in argv)
    if "--torch" in argv:
        reqs = [x for x in reqs if _name(x) == "torch"]
    elif "--common" not in argv:
        common = set(requirements(meta, role, common_only=True))
        reqs = [x for x in reqs if _name(x) != "torch" and x not in common]
    print("\n".join(reqs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
