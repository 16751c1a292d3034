"""Argosy: disaggregated training of graph neural networks on graphs larger than one machine's memory.

The library lives in :mod:`argosy.shared` (store format, wire protocol, coordination) and
:mod:`argosy.services` (one sub-package per process role). Both folders sit at the repository
root and are installed under this package by ``pyproject.toml``.
"""
__version__ = "0.1.0"
