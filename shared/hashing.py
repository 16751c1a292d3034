"""splitmix64: the one 64-bit integer hash of Argosy (numba; scalars and uint64 arrays alike).

Why this module exists: the hash partitioner, the symmetry check of a CSR read in blocks and
the counter-based graph generators all need a cheap, well-mixed, reproducible 64-bit hash; one
definition keeps them the same function.  Arithmetic wraps modulo 2**64.

Example:
    >>> import numpy as np
    >>> int(splitmix64(np.uint64(0)))
    16294208416658607535
"""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["splitmix64", "mix64", "GOLDEN_GAMMA"]

GOLDEN_GAMMA = 0x9E3779B97F4A7C15
"""splitmix64's increment (2**64 / golden ratio), also a good multiplier to spread ids."""


@numba.njit(cache=True)
def mix64(z):
    """splitmix64's finaliser: a bijective avalanche of a uint64 (or each entry of a uint64 array)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@numba.njit(cache=True)
def splitmix64(x):
    """splitmix64 of a uint64 (or of each entry of a uint64 array): ``mix64(x + GOLDEN_GAMMA)``."""
    return mix64(x + np.uint64(0x9E3779B97F4A7C15))
