"""Graphs bigger than memory, written to disk in bounded memory: the DC-SBM edge list of
:func:`~argosy.shared.synthetic.write_dcsbm_edge_list` plus its node data (features, labels,
train/val/test masks), every array streamed in row chunks by parallel numba kernels.

Why: ``argosy generate X.npz`` builds the graph in memory (a CSR, float32 features), which
stops at a few million vertices on a modest machine; the out-of-core benchmark needs a
papers100M-shaped graph (111M vertices, 1.6B edges, 28 GB of float16 features) on a 24 GiB
box.  Here memory is about 68 bytes per vertex (the edge kernel's alias tables, ~60, then the
id permutation and its inverse, 8) plus one chunk, whatever the edge and feature counts.

The signal is the DC-SBM's: vertex ``u`` (before the id shuffle) belongs to community
``u // size`` of ``num_communities`` equal id blocks, and its label is ``community % num_classes``;
``1 - mixing`` of the edges stay inside a community.  Features are the label's centroid
(N(0, 1) per dimension) plus N(0, ``feature_noise``^2) noise per dimension, so features alone
give a weak signal and neighbourhoods (mostly the same community, so the same label) sharpen it:
with the preset's 5.0 (128-d, 172 classes, 1/1000 scale) the nearest true centroid gets 33 % of
the vertices right from their features, 99 % from their neighbours' mean features.
Splits are Bernoulli per vertex (a counter hash), so their counts match the targets in
expectation.  Everything is counter-based: any chunk size and any thread count write the same
bytes.

Example:
    >>> info = write_dcsbm_dataset("DIR", **preset("papers100m", scale=1e-3))   # doctest: +SKIP
    >>> sorted(info["files"])                                                   # doctest: +SKIP
    ['edges', 'features', 'labels', 'test_mask', 'train_mask', 'val_mask']
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

__all__ = ["PRESETS", "preset", "write_dcsbm_dataset", "dcsbm_communities", "partition_argv", "DATASET_FILES"]

PRESETS = {
    # ogbn-papers100M's shape: 111,059,956 vertices, 1,615,685,872 (directed) edges, 128-d
    # features, 172 classes, 1,207,179 / 125,265 / 214,338 train / val / test vertices
    "papers100m": dict(num_nodes=111_059_956, num_edges=1_615_685_872, feature_dim=128, num_classes=172,
                       num_train=1_207_179, num_val=125_265, num_test=214_338, feature_dtype="float16",
                       num_communities=1024, mixing=0.1, power_law=1.5, feature_noise=5.0),
}
DATASET_FILES = ("edges", "features", "labels", "train_mask", "val_mask", "test_mask")


def preset(name: str, scale: float = 1.0) -> dict:
    """The preset's parameters with vertices, edges and split sizes multiplied by ``scale``
    (``0.01`` is 1/100 of the graph; degrees, feature width and classes stay)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r} (expected one of {sorted(PRESETS)})")
    if not 0 < scale <= 1:
        raise ValueError(f"scale must be in (0, 1] (got {scale})")
    p = dict(PRESETS[name])
    for key in ("num_nodes", "num_edges", "num_train", "num_val", "num_test"):
        p[key] = max(2, int(round(p[key] * scale)))
    p["num_communities"] = min(p["num_communities"], max(1, p["num_nodes"] // 64))
    return p


_KERNELS = {}


def _kernels():
    if _KERNELS:
        return _KERNELS
    import numba as nb

    from argosy.shared.hashing import splitmix64 as mix

    @nb.njit(cache=True)
    def unit(x):
        return (x >> np.uint64(11)) * (1.0 / 9007199254740992.0)

    @nb.njit(parallel=True, cache=True)
    def node_rows(first, inv, size, num_classes, centroids, noise, seed, fr, fv, ft, feats, labels, tr, va, te):
        """Rows ``first ..`` of every node array: label from the vertex's community, features
        centroid + Gaussian noise (Box-Muller on a counter hash), split by one uniform draw."""
        dim = feats.shape[1]
        for r in nb.prange(labels.shape[0]):
            i = first + r
            lab = (np.int64(inv[i]) // size) % num_classes
            labels[r] = lab
            h = mix(np.uint64(seed) ^ (np.uint64(i) * np.uint64(0xD1B54A32D192ED03)))
            u = unit(h)
            tr[r] = u < fr
            va[r] = fr <= u < fr + fv
            te[r] = fr + fv <= u < fr + fv + ft
            for j in range(0, dim, 2):
                h = mix(h)
                u1 = max(unit(h), 1e-300)
                h = mix(h)
                u2 = unit(h)
                rad = noise * np.sqrt(-2.0 * np.log(u1))
                feats[r, j] = centroids[lab, j] + rad * np.cos(2.0 * np.pi * u2)
                if j + 1 < dim:
                    feats[r, j + 1] = centroids[lab, j + 1] + rad * np.sin(2.0 * np.pi * u2)

    _KERNELS.update(node_rows=node_rows)
    return _KERNELS


def _permutation(num_nodes: int, power_law: float, seed: int) -> np.ndarray:
    """The id shuffle of :func:`write_dcsbm_edge_list` (same RNG draws in the same order)."""
    rng = np.random.default_rng(seed)
    rng.pareto(power_law, num_nodes)                        # the propensities come first there
    return rng.permutation(num_nodes).astype(np.int32 if num_nodes < 2 ** 31 else np.int64)


def dcsbm_communities(num_nodes: int, num_communities: int, power_law: float, seed: int) -> np.ndarray:
    """Community of every (shuffled) vertex id of :func:`write_dcsbm_edge_list`."""
    perm = _permutation(num_nodes, power_law, seed)
    size = -(-num_nodes // max(1, num_communities))
    out = np.empty(num_nodes, np.int64)
    out[perm] = np.arange(num_nodes) // size
    return out


def _open_npy(path: Path, dtype, shape):
    f = open(path, "wb")
    np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                             "fortran_order": False, "shape": tuple(int(s) for s in shape)})
    return f


def write_dcsbm_dataset(out_dir, num_nodes: int, num_edges: int, feature_dim: int = 128,
                        feature_dtype: str = "float16", num_classes: int = 172, num_communities: int = 1024,
                        mixing: float = 0.1, power_law: float = 1.5, feature_noise: float = 5.0,
                        num_train: int | None = None, num_val: int | None = None, num_test: int | None = None,
                        seed: int = 0, chunk_rows: int = 1 << 16, edges: bool = True, progress=None) -> dict:
    """Write a DC-SBM graph with node data into ``out_dir`` as ``.npy`` files: ``edges.npy``
    (m, 2) int32/int64 undirected edge rows (duplicates and self loops left to readers),
    ``features.npy`` [n, F] ``feature_dtype``, ``labels.npy`` int16/int32, ``train_mask.npy``,
    ``val_mask.npy``, ``test_mask.npy`` bool, and ``dataset.json`` (parameters, counts, seconds).

    ``num_train`` / ``num_val`` / ``num_test`` default to 30 / 10 / 20 % of the vertices.
    ``edges=False`` writes the node data only.  Each file is written as ``NAME.npy.tmp`` and
    renamed when complete.

    Returns:
        The ``dataset.json`` record.
    """
    from argosy.shared.synthetic import write_dcsbm_edge_list

    n, m = int(num_nodes), int(num_edges)
    if n < 2 or m < 1:
        raise ValueError(f"need num_nodes >= 2 and num_edges >= 1 (got {num_nodes}, {num_edges})")
    if feature_dim < 1 or num_classes < 1 or num_communities < 1:
        raise ValueError(f"feature_dim, num_classes and num_communities must be >= 1 "
                         f"(got {feature_dim}, {num_classes}, {num_communities})")
    if feature_dtype not in ("float16", "float32"):
        raise ValueError(f"feature_dtype must be float16 or float32 (got {feature_dtype!r})")
    counts = [n * 3 // 10 if num_train is None else num_train, n // 10 if num_val is None else num_val,
              n // 5 if num_test is None else num_test]
    if min(counts) < 0 or sum(counts) > n:
        raise ValueError(f"split sizes {counts} must be >= 0 and sum to at most num_nodes={n}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    seconds = {}
    t0 = time.perf_counter()
    if edges:
        write_dcsbm_edge_list(out / "edges.npy", n, m, num_communities=num_communities, mixing=mixing,
                              power_law=power_law, seed=seed,
                              progress=(lambda d, t: progress("edges", d, t)) if progress else None)
    seconds["edges"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    k = _kernels()
    perm = _permutation(n, power_law, seed)
    inv = np.empty_like(perm)
    inv[perm] = np.arange(n, dtype=perm.dtype)
    del perm
    size = -(-n // num_communities)
    centroids = np.random.default_rng(seed + 1).standard_normal((num_classes, feature_dim))
    label_dtype = np.int16 if num_classes <= 2 ** 15 else np.int32
    specs = {"features": (feature_dtype, (n, feature_dim)), "labels": (label_dtype, (n,)),
             "train_mask": (np.bool_, (n,)), "val_mask": (np.bool_, (n,)), "test_mask": (np.bool_, (n,))}
    files = {name: _open_npy(out / f"{name}.npy.tmp", dt, shape) for name, (dt, shape) in specs.items()}
    fr, fv, ft = (c / n for c in counts)
    rows = max(1, min(int(chunk_rows), n))
    feats = np.empty((rows, feature_dim), np.float32)
    bufs = {name: np.empty(rows, dt) for name, (dt, _) in specs.items() if name != "features"}
    made = np.zeros(3, np.int64)
    try:
        for a in range(0, n, rows):
            c = min(rows, n - a)
            b = {name: v[:c] for name, v in bufs.items()}
            k["node_rows"](a, inv, size, num_classes, centroids, float(feature_noise), np.uint64(seed + 0x5EED),
                           fr, fv, ft, feats[:c], b["labels"], b["train_mask"], b["val_mask"], b["test_mask"])
            files["features"].write(feats[:c].astype(feature_dtype, copy=False).tobytes())
            for name, v in b.items():
                files[name].write(v.tobytes())
            made += [int(b["train_mask"].sum()), int(b["val_mask"].sum()), int(b["test_mask"].sum())]
            if progress is not None:
                progress("nodes", a + c, n)
    finally:
        for f in files.values():
            f.close()
    for name in files:
        os.replace(out / f"{name}.npy.tmp", out / f"{name}.npy")
    seconds["nodes"] = time.perf_counter() - t0
    record = {"generator": "dcsbm", "num_nodes": n, "num_edges": m, "feature_dim": int(feature_dim),
              "feature_dtype": feature_dtype, "num_classes": int(num_classes), "num_communities": int(num_communities),
              "mixing": float(mixing), "power_law": float(power_law), "feature_noise": float(feature_noise),
              "seed": int(seed), "splits": {"train": int(made[0]), "val": int(made[1]), "test": int(made[2])},
              "files": {name: f"{name}.npy" for name in DATASET_FILES}, "seconds": seconds}
    (out / "dataset.json").write_text(json.dumps(record, indent=1))
    return record


def partition_argv(out_dir) -> list[str]:
    """The ``argosy partition`` input and side-file flags for a directory this module wrote."""
    d = Path(out_dir)
    return [str(d / "edges.npy"), "--features", str(d / "features.npy"), "--labels", str(d / "labels.npy"),
            "--train-mask", str(d / "train_mask.npy"), "--val-mask", str(d / "val_mask.npy"),
            "--test-mask", str(d / "test_mask.npy")]
