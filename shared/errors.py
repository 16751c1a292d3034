"""Every exception Argosy raises on purpose, in one place.

Messages say what was expected and what was received, e.g. ``"(got 7)"``.
"""
from __future__ import annotations

__all__ = [
    "ArgosyError", "GraphFormatError", "StoreFormatError", "ProtocolError", "InvalidMessageError",
    "CoordinationError", "PeerDeadError", "RequestFailedError", "ConfigError",
    "MemoryBudgetError", "OffloadError", "CacheBudgetError", "DiskBudgetError", "BlockNotFoundError",
    "DiskFullError",
]


class ArgosyError(Exception):
    """Base class of all Argosy errors."""


class ConfigError(ArgosyError, ValueError):
    """A configuration value (flag, env var, job spec) is invalid."""


class GraphFormatError(ArgosyError, ValueError):
    """An input graph file is malformed (bad ids, wrong dtypes, mismatched lengths, ...)."""


class StoreFormatError(ArgosyError):
    """A partitioned store on disk is missing, corrupt, or of an unknown format version."""


class ProtocolError(ArgosyError):
    """A wire message could not be decoded: wrong version, unknown kind, bad frames, too big."""


class InvalidMessageError(ProtocolError):
    """A message decoded but its content is impossible for this job (ids out of range, foreign
    work stream, batch not in the plan, ...): dropped and counted, never applied."""


class CoordinationError(ArgosyError):
    """Redis could not be reached or holds an unexpected state."""


class PeerDeadError(ArgosyError):
    """A peer this process depends on stopped answering (unrecoverable for this process)."""


class RequestFailedError(ArgosyError):
    """A peer answered a request with an error (recoverable: retry or skip)."""


class MemoryBudgetError(ArgosyError):
    """A job cannot run within the memory budget it was given."""


class OffloadError(ArgosyError):
    """The full-graph offload store failed (base of the store's errors; also a failed remote request)."""


class CacheBudgetError(OffloadError, MemoryBudgetError):
    """The offload store's host cache cannot hold a block and has nowhere to spill it."""


class DiskBudgetError(OffloadError):
    """The offload store's spill budget, or the disk itself, is full."""


class BlockNotFoundError(OffloadError, KeyError):
    """An offload-store block was read before it was written (or after it was released)."""


class DiskFullError(ArgosyError, OSError):
    """An output location ran out of space (ENOSPC/EDQUOT): the message names the path written,
    not the input that was being read."""
