"""Image build step: the role's modules import, and torch is present exactly when it was asked for.

Usage (build stage): ``python image_check.py ROLE TORCH_SPEC`` (TORCH_SPEC empty: no torch).
"""
from __future__ import annotations

import importlib
import sys

MODULES = {
    "sampler": ["argosy.services.sampler.service", "numba"],
    "loader": ["argosy.services.loader.service"],
    "trainer": ["argosy.services.trainer.service"],
    "partitioner": ["argosy.services.partitioner.core", "argosy.services.launch", "argosy.shared.report", "matplotlib"],
    "offload": ["argosy.services.offload.service"],
}


def main(role: str, torch_spec: str) -> int:
    if role not in MODULES:
        print(f"unknown ROLE {role!r} (expected one of {', '.join(MODULES)})", file=sys.stderr)
        return 2
    if not torch_spec:
        sys.modules["torch"] = None            # an import of torch now fails loudly
    for m in MODULES[role]:
        importlib.import_module(m)
    if torch_spec:
        import torch  # noqa: F401
    print(f"image check for {role}: ok ({'with' if torch_spec else 'without'} torch)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""))
