"""Numba's on-disk cache and default arguments do not mix: ``coarsening.lp_cluster(..., threads=1)``
compiled once with ``threads`` given and once with it left out wrote two cache entries, and the next
process that loaded the second one crashed with a segmentation fault (CI, 2026-11-29: the partitioner
job died on a 200-vertex ring after a 1,000-vertex demo graph had filled the cache). No cached
compiled function may take a default argument; this test finds any that does."""
import importlib
import inspect
import pkgutil

import numba

import argosy.services
import argosy.shared


def _cached_dispatchers():
    for pkg in (argosy.services, argosy.shared):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            mod = importlib.import_module(info.name)
            for name, obj in vars(mod).items():
                if (isinstance(obj, numba.core.dispatcher.Dispatcher) and obj.__module__ == mod.__name__
                        and type(obj._cache).__name__ != "NullCache"):
                    yield f"{info.name}.{name}", obj


def test_no_cached_compiled_function_takes_a_default_argument():
    found = list(_cached_dispatchers())
    assert len(found) > 50, "the scan found too few cached functions to mean anything"
    with_defaults = [f"{name}({', '.join(p.name for p in inspect.signature(d.py_func).parameters.values() if p.default is not p.empty)})"
                     for name, d in found
                     if any(p.default is not p.empty for p in inspect.signature(d.py_func).parameters.values())]
    assert not with_defaults, f"cached numba functions with default arguments (pass them explicitly): {with_defaults}"
