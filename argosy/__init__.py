"""Argosy: disaggregated training of graph neural networks on graphs larger than one machine's memory.

The library lives in :mod:`argosy.shared` (store format, wire protocol, coordination) and
:mod:`argosy.services` (one sub-package per process role). Both folders sit at the repository
root and are installed under this package by ``pyproject.toml``.
"""
__version__ = "0.1.0"

__all__ = ["train", "predict", "load_model", "__version__"]


def __getattr__(name: str):
    # The API imports torch; keep `import argosy` (and the CLI's start) light until it is used.
    if name in ("train", "predict", "load_model"):
        from argosy import api
        return getattr(api, name)
    raise AttributeError(f"module 'argosy' has no attribute {name!r}")
