"""Image build step: every module of the package that the role can run imports, and torch is
present exactly when the role's declaration (pyproject ``[tool.argosy.images]``) asks for it.

Usage (build stage): ``python image_check.py PYPROJECT ROLE [EXTRAS]``.

Every module under ``argosy`` is imported, not a hand-kept list: a dependency that a module
needs but the image lacks fails the build here instead of crash-looping the first replica.  In
an image without torch, modules that need torch are expected to fail on exactly that import
(they are the trainer's); the role's own entry modules must import.
"""
from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from role_requirements import load, needs_torch, roles  # noqa: E402

ENTRY = {
    "sampler": ["argosy.services.sampler.service", "argosy.services.sampler.__main__"],
    "loader": ["argosy.services.loader.service", "argosy.services.loader.__main__"],
    "trainer": ["argosy.services.trainer.service", "argosy.services.trainer.__main__"],
    "partitioner": ["argosy.services.partitioner.__main__", "argosy.services.launch", "argosy.shared.report",
                    "argosy.services.scaling", "argosy.services.driver"],
    "offload": ["argosy.services.offload.service", "argosy.services.offload.__main__"],
}
"""Modules the role's process runs (what entrypoint.sh starts): these must import in its image."""


def all_modules() -> list[str]:
    mods = []
    for top in ("argosy", "argosy.shared", "argosy.services"):       # mapped folders: walk each
        pkg = importlib.import_module(top)
        mods.append(top)
        mods += [i.name for i in pkgutil.walk_packages(pkg.__path__, top + ".")]
    return sorted(set(mods))


def check(role: str, with_torch: bool) -> tuple[list[str], list[str]]:
    """Import every module; returns (modules skipped for want of torch, failures)."""
    if not with_torch:
        sys.modules["torch"] = None            # an import of torch now fails loudly
    skipped, failures = [], []
    for m in all_modules():
        try:
            importlib.import_module(m)
        except ImportError as e:
            if not with_torch and (e.name or "").split(".")[0] == "torch":
                skipped.append(m)
            else:
                failures.append(f"{m}: {type(e).__name__}: {e}")
    for m in ENTRY[role]:
        if m in skipped:
            failures.append(f"{m} (entry module of the {role} role) needs torch, which this image lacks")
    if with_torch:
        import torch  # noqa: F401
    return skipped, failures


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    meta, role = load(argv[0]), argv[1]
    extras = argv[2] if len(argv) > 2 else ""
    if role not in roles(meta) or role not in ENTRY:
        print(f"unknown ROLE {role!r} (expected one of {', '.join(roles(meta))})", file=sys.stderr)
        return 2
    with_torch = needs_torch(meta, role, extras)
    skipped, failures = check(role, with_torch)
    if failures:
        print(f"image check for {role} FAILED: these modules do not import in this image (a dependency "
              f"missing from [tool.argosy.images] {role} in pyproject.toml?):", file=sys.stderr)
        for f in failures:
            print(f"  {f}", file=sys.stderr)
        return 1
    print(f"image check for {role}: ok ({len(all_modules()) - len(skipped)} modules import, "
          f"{'with' if with_torch else 'without'} torch"
          + (f"; {len(skipped)} torch-only modules left out" if skipped else "") + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
