"""Synthetic graphs for the embedded default: a degree-corrected stochastic block model.

Power-law degrees (Pareto propensities), planted communities, and node features / labels that
are correlated with the communities, so a GNN has something real to learn: features alone give
a weak signal (noisy community centroids), neighbourhoods sharpen it.  Deterministic by seed.
Vertex ids are randomly permuted so that file order does not reveal the communities.

Example:
    >>> g = generate_dcsbm(num_nodes=1000, avg_degree=8, seed=0)
    >>> g.num_nodes, g.features.shape[1], g.num_classes
    (1000, 32, 8)
"""
from __future__ import annotations

import numpy as np

from argosy.shared.graphio import Graph, csr_from_edges

__all__ = ["generate_dcsbm", "dcsbm_edge_chunks", "write_dcsbm_edge_list", "write_planted_edge_list",
           "planted_blocks", "write_rmat_edge_list", "write_regular_edge_list",
           "write_geometric_edge_list", "write_chunglu_edge_list", "write_skewed_sbm_edge_list",
           "road_edge_chunks"]


def _model(num_nodes: int, num_communities: int, power_law: float, rng: np.random.Generator):
    comm = rng.integers(0, num_communities, num_nodes)
    theta = rng.pareto(power_law, num_nodes) + 1.0          # power-law degree propensities
    theta = np.minimum(theta, np.sqrt(num_nodes))           # keep hubs below sqrt(n) expected degree
    order = np.argsort(comm, kind="stable")                 # nodes grouped by community
    counts = np.bincount(comm, minlength=num_communities)
    starts = np.concatenate([[0], np.cumsum(counts)])
    cdf_all = np.cumsum(theta)
    cdf_all /= cdf_all[-1]
    cdf_comm = np.cumsum(theta[order])                      # within-community cdf, by blocks
    return comm, theta, order, starts, cdf_all, cdf_comm


def dcsbm_edge_chunks(num_nodes: int, num_edges: int, num_communities: int = 16, mixing: float = 0.2,
                      power_law: float = 2.1, seed: int = 0, chunk_edges: int = 1 << 22):
    """Yield ``(src, dst)`` int64 chunks of a DC-SBM edge list (may hold duplicates/self loops;
    readers normalise them).  Memory is O(n + chunk), so it scales to 100M+ edges on disk.

    Args:
        mixing: fraction of edges whose endpoint is drawn outside the source's community.
    """
    rng = np.random.default_rng(seed)
    comm, theta, order, starts, cdf_all, cdf_comm = _model(num_nodes, num_communities, power_law, rng)
    perm = rng.permutation(num_nodes)                       # hide community structure from file order
    done = 0
    while done < num_edges:
        b = min(chunk_edges, num_edges - done)
        src = np.searchsorted(cdf_all, rng.random(b), side="right")
        src = np.minimum(src, num_nodes - 1)
        c = comm[src]
        lo, hi = starts[c], starts[c + 1]
        base = np.where(lo > 0, cdf_comm[np.maximum(lo - 1, 0)], 0.0)
        top = cdf_comm[hi - 1]
        u = base + rng.random(b) * (top - base)
        inside = order[np.clip(np.searchsorted(cdf_comm, u, side="right"), lo, hi - 1)]
        anywhere = np.minimum(np.searchsorted(cdf_all, rng.random(b), side="right"), num_nodes - 1)
        dst = np.where(rng.random(b) < mixing, anywhere, inside)
        yield perm[src], perm[dst]
        done += b


def generate_dcsbm(num_nodes: int = 20_000, avg_degree: float = 10.0, num_communities: int | None = None,
                   num_classes: int = 8, feature_dim: int = 32, mixing: float = 0.2,
                   feature_noise: float = 4.0, power_law: float = 2.1, train_fraction: float = 0.3,
                   val_fraction: float = 0.1, test_fraction: float = 0.2, seed: int = 0) -> Graph:
    """Generate an in-memory DC-SBM graph with features, labels and splits.

    Args:
        num_nodes: vertices.  avg_degree: mean undirected degree (before de-duplication).
        num_communities: planted communities (default ``num_classes``); label = community mod classes.
        feature_noise: std of Gaussian noise around each community centroid (centroids ~ N(0, 1)).
            At the default 4.0 a nearest-centroid classifier on features alone gets ~48% on 8
            classes, on features averaged over 2 hops ~87%: the graph carries most of the signal.
    Returns:
        A :class:`~shared.graphio.Graph` with float32 features, int64 labels and random masks.
    """
    if num_nodes < 2:
        raise ValueError(f"num_nodes must be >= 2 (got {num_nodes})")
    if not 0 <= mixing <= 1:
        raise ValueError(f"mixing must be in [0, 1] (got {mixing})")
    num_communities = num_communities or num_classes
    num_edges = int(num_nodes * avg_degree / 2)
    srcs, dsts = zip(*dcsbm_edge_chunks(num_nodes, num_edges, num_communities, mixing, power_law, seed))
    g = csr_from_edges(np.concatenate(srcs), np.concatenate(dsts), num_nodes=num_nodes)
    # recover the permuted id -> community map exactly as dcsbm_edge_chunks built it
    rng2 = np.random.default_rng(seed)
    comm, *_ = _model(num_nodes, num_communities, power_law, rng2)
    perm = rng2.permutation(num_nodes)
    comm_of = np.empty(num_nodes, np.int64)
    comm_of[perm] = comm
    frng = np.random.default_rng(seed + 1)
    centroids = frng.standard_normal((num_communities, feature_dim)).astype(np.float32)
    g.features = centroids[comm_of] + feature_noise * frng.standard_normal((num_nodes, feature_dim)).astype(np.float32)
    g.labels = comm_of % num_classes
    split = frng.random(num_nodes)
    g.train_mask = split < train_fraction
    g.val_mask = (split >= train_fraction) & (split < train_fraction + val_fraction)
    g.test_mask = (split >= train_fraction + val_fraction) & (split < train_fraction + val_fraction + test_fraction)
    g.name = f"dcsbm-{num_nodes}"
    return g


# ------------------------------------------------------------------------------------------------
# large edge lists on disk (partitioner scale benchmarks, `argosy generate X.npy`)
# ------------------------------------------------------------------------------------------------
def _numba():
    import numba  # lazy: the in-memory generator above does not need it

    return numba


_KERNELS = {}


def _kernels():
    """Compile (once, cached on disk) the numba kernels of :func:`write_dcsbm_edge_list`."""
    if _KERNELS:
        return _KERNELS
    nb = _numba()

    @nb.njit(cache=True)
    def alias_build(w, lo, hi, prob, alias, small, large):
        """Vose's alias table for weights ``w[lo:hi]`` (entries index into [lo, hi))."""
        m = hi - lo
        total = 0.0
        for i in range(lo, hi):
            total += w[i]
        ns = 0
        nl = 0
        for i in range(lo, hi):
            p = w[i] * m / total
            prob[i] = p
            alias[i] = i
            if p < 1.0:
                small[ns] = i
                ns += 1
            else:
                large[nl] = i
                nl += 1
        while ns > 0 and nl > 0:
            s = small[ns - 1]
            ns -= 1
            g = large[nl - 1]
            alias[s] = g
            prob[g] = prob[g] + prob[s] - 1.0
            if prob[g] < 1.0:
                nl -= 1
                small[ns] = g
                ns += 1
        for i in range(ns):
            prob[small[i]] = 1.0
        for i in range(nl):
            prob[large[i]] = 1.0

    from argosy.shared.hashing import splitmix64 as splitmix

    @nb.njit(cache=True)
    def unit(x):
        return (x >> np.uint64(11)) * (1.0 / 9007199254740992.0)

    @nb.njit(parallel=True, cache=True)
    def edges(first, out, n, size, mixing, prob, alias, bprob, balias, perm, seed):
        """Edge ``first + i`` for every row of ``out``: counter-based, so any thread count
        and any chunking give the same graph."""
        for i in nb.prange(out.shape[0]):
            h = splitmix(np.uint64(seed) ^ (np.uint64(first + i) * np.uint64(0xD1B54A32D192ED03)))
            j = np.int64(unit(h) * n)
            h = splitmix(h)
            u = j if unit(h) < prob[j] else alias[j]
            h = splitmix(h)
            if unit(h) >= mixing:  # inside u's community (contiguous id block)
                lo = (u // size) * size
                hi = min(lo + size, n)
                h = splitmix(h)
                j = lo + np.int64(unit(h) * (hi - lo))
                h = splitmix(h)
                v = j if unit(h) < bprob[j] else balias[j]
            else:
                h = splitmix(h)
                j = np.int64(unit(h) * n)
                h = splitmix(h)
                v = j if unit(h) < prob[j] else alias[j]
            out[i, 0] = perm[u]
            out[i, 1] = perm[v]

    _KERNELS.update(alias_build=alias_build, edges=edges)
    return _KERNELS


def write_dcsbm_edge_list(path, num_nodes: int, num_edges: int, num_communities: int = 1024,
                          mixing: float = 0.1, power_law: float = 1.5, seed: int = 0,
                          chunk_edges: int = 1 << 23, progress=None) -> int:
    """Write a DC-SBM edge list of ``num_edges`` rows to an (m, 2) ``.npy`` file, fast.

    Why: partitioner scale runs need 10^8-10^9 edges; sampling them with numpy searchsorted
    takes tens of minutes.  Here every edge is drawn by O(1) alias sampling in a parallel
    numba loop with a counter-based RNG (same file for any thread count).  Communities are
    ``num_communities`` contiguous id blocks of equal size; each vertex has a Pareto
    (``power_law``) propensity; an edge picks its source by propensity and, with probability
    ``1 - mixing``, its destination by propensity inside the source's community, else
    anywhere.  Ids are then relabelled by a seeded random permutation, so file order says
    nothing about the communities.  Duplicates and self loops are left in (readers drop them).
    Memory: about 60 bytes per vertex while the alias tables are built (36 after) plus one
    chunk (16 B per edge row, 128 MiB at the default).  The file is written as ``path.tmp`` and
    renamed when complete.

    Returns:
        int: rows written.
    """
    if num_nodes < 2 or num_edges < 1:
        raise ValueError(f"need num_nodes >= 2 and num_edges >= 1, got {num_nodes}, {num_edges}")
    if not 0 <= mixing <= 1:
        raise ValueError(f"mixing must be in [0, 1] (got {mixing})")
    k = _kernels()
    n = int(num_nodes)
    rng = np.random.default_rng(seed)
    theta = rng.pareto(power_law, n) + 1.0
    perm = rng.permutation(n).astype(np.int32 if n < 2 ** 31 else np.int64)
    size = -(-n // max(1, int(num_communities)))
    prob = np.empty(n, np.float64)
    alias = np.empty(n, np.int64)
    small = np.empty(n, np.int64)
    large = np.empty(n, np.int64)
    k["alias_build"](theta, 0, n, prob, alias, small, large)
    bprob = np.empty(n, np.float64)
    balias = np.empty(n, np.int64)
    for lo in range(0, n, size):
        k["alias_build"](theta, lo, min(lo + size, n), bprob, balias, small, large)
    del small, large, theta
    dtype = np.int32 if n < 2 ** 31 else np.int64
    return _write_rows(path, num_edges, dtype,
                       lambda a, buf: k["edges"](a, buf, n, size, float(mixing), prob, alias, bprob, balias,
                                                 perm, seed), chunk_edges, progress)


# ------------------------------------------------------------------------------------------------
# more graph families on disk (partitioner family sweep): planted partition, R-MAT, near-regular
# random, random geometric.  Same conventions as write_dcsbm_edge_list: counter-based RNG per
# edge (any chunking gives the same file), ids shuffled, duplicates/self loops left to readers.
# ------------------------------------------------------------------------------------------------
_FAMILY_KERNELS = {}


def _family_kernels():
    if _FAMILY_KERNELS:
        return _FAMILY_KERNELS
    nb = _numba()

    from argosy.shared.hashing import splitmix64 as mix

    @nb.njit(cache=True)
    def unit(x):
        return (x >> np.uint64(11)) * (1.0 / 9007199254740992.0)

    @nb.njit(cache=True)
    def seed_of(seed, i):
        return mix(np.uint64(seed) ^ (np.uint64(i) * np.uint64(0xD1B54A32D192ED03)))

    @nb.njit(parallel=True, cache=True)
    def planted(first, out, n, blocks, mixing, perm, seed):
        size = -(-n // blocks)
        for i in nb.prange(out.shape[0]):
            h = seed_of(seed, first + i)
            u = np.int64(unit(h) * n)
            h = mix(h)
            if unit(h) >= mixing:
                lo = (u // size) * size
                hi = min(lo + size, n)
                h = mix(h)
                v = lo + np.int64(unit(h) * (hi - lo))
            else:
                h = mix(h)
                v = np.int64(unit(h) * n)
            out[i, 0] = perm[u]
            out[i, 1] = perm[v]

    @nb.njit(parallel=True, cache=True)
    def rmat(first, out, scale, a, b, c, perm, seed):
        for i in nb.prange(out.shape[0]):
            h = seed_of(seed, first + i)
            u = np.int64(0)
            v = np.int64(0)
            for _ in range(scale):
                h = mix(h)
                r = unit(h)
                u <<= 1
                v <<= 1
                if r < a:
                    pass
                elif r < a + b:
                    v |= 1
                elif r < a + b + c:
                    u |= 1
                else:
                    u |= 1
                    v |= 1
            out[i, 0] = perm[u]
            out[i, 1] = perm[v]

    @nb.njit(parallel=True, cache=True)
    def regular(first, out, n, half, perm, seed):
        for i in nb.prange(out.shape[0]):
            r = first + i
            u = (r // half) % n
            h = seed_of(seed, r)
            v = np.int64(unit(h) * n)
            out[i, 0] = perm[u]
            out[i, 1] = perm[v]

    @nb.njit(cache=True)
    def geo_cells(x, y, g):
        n = x.size
        cell = np.empty(n, np.int64)
        for i in range(n):
            cx = min(np.int64(x[i] * g), g - 1)
            cy = min(np.int64(y[i] * g), g - 1)
            cell[i] = cx * g + cy
        return cell

    @nb.njit(parallel=True, cache=True)
    def geo_edges(x, y, start, g, r2, counts, out, fill):
        """Pairs (i < j) within distance sqrt(r2); points sorted by cell, ``start`` = cell ptr.
        ``fill`` False: count per point into ``counts``; True: write from ``counts`` offsets."""
        n = x.size
        for i in nb.prange(n):
            cx = min(np.int64(x[i] * g), g - 1)
            cy = min(np.int64(y[i] * g), g - 1)
            c = 0
            w = counts[i] if fill else 0
            for dx in range(-1, 2):
                ax = cx + dx
                if ax < 0 or ax >= g:
                    continue
                for dy in range(-1, 2):
                    ay = cy + dy
                    if ay < 0 or ay >= g:
                        continue
                    cc = ax * g + ay
                    for j in range(start[cc], start[cc + 1]):
                        if j <= i:
                            continue
                        ddx = x[i] - x[j]
                        ddy = y[i] - y[j]
                        if ddx * ddx + ddy * ddy <= r2:
                            if fill:
                                out[w + c, 0] = i
                                out[w + c, 1] = j
                            c += 1
            if not fill:
                counts[i] = c

    _FAMILY_KERNELS.update(planted=planted, rmat=rmat, regular=regular, geo_cells=geo_cells,
                           geo_edges=geo_edges)
    return _FAMILY_KERNELS


def _write_rows(path, num_edges: int, dtype, fill, chunk_edges: int = 1 << 23, progress=None) -> int:
    """Write ``num_edges`` rows produced by ``fill(first, buf)`` to an (m, 2) ``.npy``
    (as ``path.tmp``, renamed when complete).  Appended with ``write``, not through a memory map:
    a mapped file's dirty pages count in the writer's RSS, which then grows with the file."""
    import os

    tmp = str(path) + ".tmp"
    buf = np.empty((min(chunk_edges, num_edges), 2), dtype)
    with open(tmp, "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                                  "fortran_order": False, "shape": (int(num_edges), 2)})
        for a in range(0, num_edges, chunk_edges):
            c = min(chunk_edges, num_edges - a)
            fill(a, buf[:c])
            fh.write(buf[:c].data)
            if progress is not None:
                progress(a + c, num_edges)
    os.replace(tmp, path)
    return int(num_edges)


def write_planted_edge_list(path, num_nodes: int, num_edges: int, blocks: int = 16,
                            mixing: float = 0.2, seed: int = 0) -> int:
    """Planted partition: ``blocks`` equal blocks, uniform degrees; an edge stays in its source's
    block with probability ``1 - mixing``, else goes anywhere (so about
    ``mixing * (1 - 1/blocks)`` of the edges cross blocks).  Ids shuffled.  The block of the
    vertex with (shuffled) id ``i`` is :func:`planted_blocks` ``[i]``."""
    if num_nodes < 2 or num_edges < 1 or blocks < 1 or not 0 <= mixing <= 1:
        raise ValueError(f"bad planted-partition parameters: n={num_nodes}, m={num_edges}, "
                         f"blocks={blocks}, mixing={mixing}")
    k = _family_kernels()
    n = int(num_nodes)
    perm = np.random.default_rng(seed).permutation(n).astype(np.int32)
    return _write_rows(path, num_edges, np.int32,
                       lambda a, buf: k["planted"](a, buf, n, int(blocks), float(mixing), perm,
                                                   seed))


def planted_blocks(num_nodes: int, blocks: int, seed: int = 0) -> np.ndarray:
    """Planted block of every (shuffled) vertex id of :func:`write_planted_edge_list`."""
    perm = np.random.default_rng(seed).permutation(num_nodes)
    size = -(-num_nodes // blocks)
    out = np.empty(num_nodes, np.int64)
    out[perm] = np.arange(num_nodes) // size
    return out


def write_rmat_edge_list(path, scale: int, num_edges: int, a: float = 0.57, b: float = 0.19,
                         c: float = 0.19, seed: int = 0) -> int:
    """R-MAT / Kronecker power-law graph on ``2**scale`` vertices (Graph500 defaults
    a, b, c = 0.57, 0.19, 0.19), ids shuffled (Graph500 permutes them too)."""
    if not 1 <= scale <= 31 or num_edges < 1 or min(a, b, c) < 0 or a + b + c >= 1:
        raise ValueError(f"bad R-MAT parameters: scale={scale}, m={num_edges}, a={a}, b={b}, c={c}")
    k = _family_kernels()
    n = 1 << int(scale)
    perm = np.random.default_rng(seed).permutation(n).astype(np.int32)
    return _write_rows(path, num_edges, np.int32,
                       lambda f, buf: k["rmat"](f, buf, int(scale), float(a), float(b), float(c),
                                                perm, seed))


def write_chunglu_edge_list(path, num_nodes: int, num_edges: int, exponent: float = 2.1,
                            seed: int = 0) -> int:
    """Chung-Lu power-law graph: both ends of every edge drawn with probability proportional
    to a vertex weight ``(i + 1) ** (-1 / (exponent - 1))``, so degrees follow a power law with
    that exponent (2.1: heavier-tailed than R-MAT's, hubs of ~1M edges at 20M) and nothing else
    is structured: no communities, no hierarchy.  Duplicate edges and self loops are left in,
    as sampled.  Ids shuffled."""
    if num_nodes < 2 or num_edges < 1 or exponent <= 1.0:
        raise ValueError(f"bad Chung-Lu parameters: n={num_nodes}, m={num_edges}, "
                         f"exponent={exponent}")
    n = int(num_nodes)
    cdf = np.cumsum(np.arange(1, n + 1, dtype=np.float64) ** (-1.0 / (exponent - 1.0)))
    cdf /= cdf[-1]
    perm = np.random.default_rng(seed).permutation(n).astype(np.int32)

    def fill(a, buf):
        rng = np.random.default_rng([seed, a])
        for j in range(2):
            ends = np.searchsorted(cdf, rng.random(buf.shape[0]), side="right")
            buf[:, j] = perm[np.minimum(ends, n - 1)]

    return _write_rows(path, num_edges, np.int32, fill, chunk_edges=1 << 22)


def write_skewed_sbm_edge_list(path, num_nodes: int, num_edges: int, communities: int = 64,
                               zipf: float = 1.2, mixing: float = 0.05, seed: int = 0) -> int:
    """Stochastic block model with Zipf-sized communities: community ``i`` holds a share
    ``(i + 1) ** -zipf`` of the vertices (64 communities, 1.2: the largest 29 % of n, the
    smallest 0.2 %), so a k-way partition must pack whole communities and split the few larger
    than a block.  Uniform degrees; an edge's source is uniform, its destination uniform inside
    the source's community with probability ``1 - mixing``, else anywhere.  Ids shuffled."""
    if num_nodes < communities or num_edges < 1 or communities < 1 or not 0 <= mixing <= 1:
        raise ValueError(f"bad skewed-SBM parameters: n={num_nodes}, m={num_edges}, "
                         f"communities={communities}, mixing={mixing}")
    n = int(num_nodes)
    share = np.arange(1, communities + 1, dtype=np.float64) ** -float(zipf)
    sizes = np.maximum(1, (share / share.sum() * n).astype(np.int64))
    sizes[0] += n - sizes.sum()
    start = np.concatenate([[0], np.cumsum(sizes)])
    comm = np.repeat(np.arange(communities), sizes)
    perm = np.random.default_rng(seed).permutation(n).astype(np.int32)

    def fill(a, buf):
        rng = np.random.default_rng([seed, a])
        src = rng.integers(0, n, buf.shape[0])
        c = comm[src]
        dst = start[c] + (rng.random(buf.shape[0]) * sizes[c]).astype(np.int64)
        out = rng.random(buf.shape[0]) < mixing
        dst[out] = rng.integers(0, n, int(out.sum()))
        buf[:, 0] = perm[src]
        buf[:, 1] = perm[dst]

    return _write_rows(path, num_edges, np.int32, fill, chunk_edges=1 << 22)


def write_regular_edge_list(path, num_nodes: int, degree: int = 20, seed: int = 0) -> int:
    """Near-regular random graph: every vertex sends ``degree // 2`` edges to uniformly random
    vertices (degree = degree/2 + Poisson(degree/2)); no structure to find."""
    half = max(1, int(degree) // 2)
    if num_nodes < 2:
        raise ValueError(f"num_nodes must be >= 2 (got {num_nodes})")
    k = _family_kernels()
    n = int(num_nodes)
    perm = np.random.default_rng(seed).permutation(n).astype(np.int32)
    return _write_rows(path, n * half, np.int32,
                       lambda a, buf: k["regular"](a, buf, n, half, perm, seed))


def write_geometric_edge_list(path, num_nodes: int, avg_degree: float = 10.0,
                              seed: int = 0) -> int:
    """Random geometric graph in the unit square (road-/mesh-like: tiny optimal cuts, no hubs):
    points uniform, an edge between points closer than ``r`` with ``n pi r^2 = avg_degree``.
    Ids shuffled.  Memory ~ 40 bytes per vertex plus the output rows' count."""
    import math

    if num_nodes < 2 or avg_degree <= 0:
        raise ValueError(f"bad geometric parameters: n={num_nodes}, avg_degree={avg_degree}")
    k = _family_kernels()
    n = int(num_nodes)
    rng = np.random.default_rng(seed)
    x = rng.random(n)
    y = rng.random(n)
    r = math.sqrt(avg_degree / (math.pi * n))
    g = max(1, int(1.0 / r))
    cell = k["geo_cells"](x, y, g)
    o = np.argsort(cell, kind="stable")
    x, y, cell = x[o], y[o], cell[o]
    del o
    start = np.zeros(g * g + 1, np.int64)
    np.cumsum(np.bincount(cell, minlength=g * g), out=start[1:])
    del cell
    counts = np.zeros(n, np.int64)
    dummy = np.empty((1, 2), np.int32)
    k["geo_edges"](x, y, start, g, r * r, counts, dummy, False)
    m = int(counts.sum())
    offs = np.zeros(n, np.int64)
    np.cumsum(counts[:-1], out=offs[1:])
    perm = rng.permutation(n).astype(np.int32)
    tmp = str(path) + ".tmp"
    mm = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.int32, shape=(m, 2))
    k["geo_edges"](x, y, start, g, r * r, offs, mm, True)
    for a in range(0, m, 1 << 23):  # shuffle ids in place, chunk by chunk
        mm[a:a + (1 << 23)] = perm[mm[a:a + (1 << 23)]]
    mm.flush()
    del mm
    import os

    os.replace(tmp, path)
    return m


def road_edge_chunks(num_nodes: int, avg_degree: float = 2.6, shortcut: float = 0.02, seed: int = 0,
                     chunk_rows: int = 256):
    """Yield ``(src, dst)`` int64 chunks of a road-like graph: a perturbed 2-D lattice.

    Why: real road networks of >= 1M vertices (the full-graph mode's hardest case: low degree, tiny
    cuts, so a part's own rows dominate) are not available offline.  Vertices sit on a
    ``ceil(sqrt(n))``-wide grid in row-major order; each lattice edge (right, down) is kept with
    probability ``(avg_degree - 2 * shortcut) / 4``, so most vertices have degree 2-3 with dead ends and
    junctions like a road map (above bond percolation's 1/2 at the default, so one giant component),
    and a ``shortcut`` fraction of vertices gets one more edge to a random vertex within 4 grid steps
    (diagonals, overpasses).  Ids are randomly permuted (file order does not reveal the geometry).
    Memory is O(n + chunk): one id permutation and ``chunk_rows`` grid rows at a time.

    Args:
        num_nodes: vertices.  avg_degree: mean degree (approximate; dedup and the grid's border trim it).
        shortcut: extra edges per vertex.  chunk_rows: grid rows per yielded chunk.
    """
    n = int(num_nodes)
    keep = (avg_degree - 2 * shortcut) / 4
    if n < 2 or not 0 < keep <= 1 or shortcut < 0:
        raise ValueError(f"bad road parameters: n={num_nodes} (want >= 2), avg_degree={avg_degree} "
                         f"(want (0, 4 + 2 * shortcut]), shortcut={shortcut} (want >= 0)")
    w = int(np.ceil(np.sqrt(n)))
    rows = -(-n // w)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    for r0 in range(0, rows, chunk_rows):
        r1 = min(rows, r0 + chunk_rows)
        v = np.arange(r0 * w, min(n, r1 * w), dtype=np.int64)
        c = v % w
        right = v[(c + 1 < w) & (v + 1 < n)]
        down = v[v + w < n]
        src = [s[rng.random(len(s)) < keep] for s in (right, down)]       # lattice edges kept
        dst = [src[0] + 1, src[1] + w]
        sc = v[rng.random(len(v)) < shortcut]
        if len(sc):
            dr = rng.integers(-4, 5, len(sc))
            dc = rng.integers(-4, 5, len(sc))
            rr, cc = sc // w + dr, sc % w + dc
            t = rr * w + cc
            ok = (rr >= 0) & (cc >= 0) & (cc < w) & (t < n) & (t != sc)
            src.append(sc[ok])
            dst.append(t[ok])
        yield perm[np.concatenate(src)], perm[np.concatenate(dst)]
