"""Write a partitioned store atomically and in bounded memory.

Edges are streamed once and bucketed by the part of their source vertex into per-part spill
files on disk (local row, neighbour); then each part's CSR is built from its bucket
(:mod:`.part_csr`) in slabs of at most ``SLAB_ENTRIES`` entries (row ranges cut from a row histogram), so peak memory is
O(n + slab), not O(m) and not O(largest part): on a power-law graph one part can hold half the
edges (R-MAT, 20M edges, k = 16: 20M of 38M entries in one part).  Node data (features, labels, masks) is streamed the same
way, column by column in row blocks: each block's rows are appended to their parts' ``.npy``
files (written header first), so a feature matrix larger than memory never has to be held.
A full disk is reported as :class:`~argosy.shared.errors.DiskFullError` naming the store path.  Everything is written into ``<out>.tmp-<pid>``, verified
(edge counts, monotone ``indptr``, ids in range) and only then renamed to ``<out>``: a crash never
leaves a half-written store behind under the final name.
"""
from __future__ import annotations

import errno
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
from numba import njit

from argosy.shared.errors import DiskFullError, GraphFormatError, StoreFormatError
from argosy.shared.graphio import ArrayColumn, Graph, NodeColumn, index_dtype
from argosy.shared.store.features import PER_TYPE, type_file
from argosy.shared.store.manifest import FORMAT_VERSION, MANIFEST_NAME, Manifest, PartEntry
from argosy.shared.store.part_csr import WREC, TypeSplitter, part_csr
from argosy.shared.intrinsics import prefetch
from argosy.shared.read_ahead import read_ahead

__all__ = ["write_store", "write_store_from_edges", "graph_edge_chunks", "partition_stats"]

logger = logging.getLogger(__name__)

NODE_ARRAYS = ("features", "labels", "train_mask", "val_mask", "test_mask")
_NODE_BLOCK_ROWS = 1 << 16


@njit(cache=True, nogil=True)
def _part_local_ids(assign, k, local_index, order):
    """Each vertex's row in its part (its rank among the part's ids, ascending) into ``local_index``, and
    the parts' ids in that order, part after part, into ``order``: a counting sort, O(n + k) with no
    temporaries (a stable argsort and its index arithmetic held five n-long int64 arrays at once, 0.6 GB
    on a 15M-vertex graph). Returns the per-part offsets into ``order`` (k + 1)."""
    starts = np.zeros(k + 1, np.int64)
    for v in range(assign.size):
        starts[assign[v] + 1] += 1
    for p in range(k):
        starts[p + 1] += starts[p]
    fill = starts[:k].copy()
    for v in range(assign.size):
        p = assign[v]
        local_index[v] = fill[p] - starts[p]
        order[fill[p]] = v
        fill[p] += 1
    return starts


@njit(cache=True, nogil=True)
def _bucket_by_part(src, dst, assign, local_index, k, pairs, last, ordered, slots, drop_loops):
    """Counting-sort one chunk's entries by their source's part into ``pairs`` (local row,
    neighbour), self loops dropped; return the ``k + 1`` part offsets.

    Also checks, per part and across chunks (``last`` holds each part's previous entry), that
    the entries arrive strictly increasing: ``ordered[p]`` stays True only then, and part
    ``p``'s CSR needs no sort and no deduplication.  A stream grouped by source with sorted,
    unique neighbours (the partitioner's regrouped buckets, a sorted CSR) arrives that way.
    ``slots`` (int64[c], or empty: not wanted) receives the row of ``pairs`` each entry went to
    (-1: a self loop), so that edge weights follow their entries.  ``drop_loops`` False: ``dst``
    holds typed keys (self loops were dropped by the caller), so no entry is compared with its source."""
    want = slots.size > 0
    offs = np.zeros(k + 1, np.int64)
    for i in range(src.size):
        if src[i] != dst[i] or not drop_loops:
            offs[assign[src[i]] + 1] += 1
    for p in range(k):
        offs[p + 1] += offs[p]
    pos = offs[:k].copy()
    for i in range(src.size):
        s = src[i]
        d = dst[i]
        if s != d or not drop_loops:
            p = assign[s]
            j = pos[p]
            r = local_index[s]
            pairs[j, 0] = r
            pairs[j, 1] = d
            pos[p] = j + 1
            if want:
                slots[i] = j
            if ordered[p]:
                if r < last[p, 0] or (r == last[p, 0] and d <= last[p, 1]):
                    ordered[p] = False
                last[p, 0] = r
                last[p, 1] = d
    return offs


@njit(cache=True, nogil=True)
def _split_by_part(src, dst, assign, k, nbrs, last):
    """The direct path of an ordered stream (see :func:`write_store_from_edges`, ``ordered``): one
    chunk's neighbours counting-sorted by their source's part into ``nbrs``.  Returns the ``k + 1``
    part offsets, or ``-1 - i`` if entry ``i`` is a self loop or does not follow its part's previous
    one (``last``: per part, the previous entry's global source and neighbour) strictly increasing."""
    offs = np.zeros(k + 1, np.int64)
    for i in range(src.size):
        s = src[i]
        d = dst[i]
        p = assign[s]
        if s == d or s < last[p, 0] or (s == last[p, 0] and d <= last[p, 1]):
            return np.full(1, -1 - i, np.int64)
        last[p, 0] = s
        last[p, 1] = d
        offs[p + 1] += 1
    for p in range(k):
        offs[p + 1] += offs[p]
    pos = offs[:k].copy()
    for i in range(src.size):
        p = assign[src[i]]
        nbrs[pos[p]] = dst[i]
        pos[p] += 1
    return offs


# the cut count reads the part of every entry's neighbour: one random read per entry into an
# n-long array (111 MB on the 1/4-scale papers100M graph), issued this many entries ahead
CUT_PREFETCH_AHEAD = 16


@njit(cache=True, nogil=True)
def _count_degree_and_cut(src, dst, assign, degree, cut):
    """Each source's entries into ``degree`` (by global id), each part's cut entries into ``cut``."""
    base = assign.ctypes.data
    for i in range(src.size):
        if i + CUT_PREFETCH_AHEAD < src.size:
            prefetch(base + assign.itemsize * dst[i + CUT_PREFETCH_AHEAD])
        s = src[i]
        degree[s] += 1
        p = assign[s]
        if assign[dst[i]] != p:
            cut[p] += 1


def graph_edge_chunks(g: Graph, chunk_edges: int = 1 << 22) -> Iterator[tuple[np.ndarray, ...]]:
    """Yield the directed adjacency entries of a CSR graph as ``(src, dst)`` chunks, or
    ``(src, dst, weight, mirrored)`` ones when the graph has edge weights (none mirrored)."""
    n = g.num_nodes
    row = 0
    while row < n:
        end = int(np.searchsorted(g.indptr, g.indptr[row] + chunk_edges, side="right")) - 1
        end = max(end, row + 1)
        end = min(end, n)
        lo, hi = int(g.indptr[row]), int(g.indptr[end])
        src = np.repeat(np.arange(row, end, dtype=np.int64), np.diff(g.indptr[row:end + 1]))
        if g.edge_weight is None:
            yield src, np.asarray(g.indices[lo:hi], dtype=np.int64)
        else:
            yield (src, np.asarray(g.indices[lo:hi], dtype=np.int64), np.asarray(g.edge_weight[lo:hi], np.float32),
                   np.zeros(hi - lo, np.uint8))
        row = end


def partition_stats(assignment: np.ndarray, num_parts: int, cut_entries: int, num_edges: int,
                    part_entries=None, sizes: np.ndarray | None = None) -> dict:
    """Edge-cut fraction and balance of an assignment (``cut_entries`` counts directed entries);
    with ``part_entries`` (adjacency entries stored per part) also the edge balance, max / mean.
    ``sizes``: the vertices per part when the caller has them (``np.bincount`` widens an int32
    assignment to an n-long int64 temporary: 123 MB on a 15M-vertex graph)."""
    if sizes is None:
        sizes = np.bincount(assignment, minlength=num_parts)
    out = {
        "edge_cut": int(cut_entries // 2),
        "edge_cut_fraction": float(cut_entries / 2 / max(num_edges, 1)),
        "balance": float(sizes.max() / max(sizes.mean(), 1e-9)),
        "part_sizes": sizes.tolist(),
    }
    if part_entries is not None:
        pe = np.asarray(part_entries, np.int64)
        out["edge_balance"] = float(pe.max() / max(pe.mean(), 1e-9)) if pe.size else 0.0
    return out


def write_store(g: Graph, assignment: np.ndarray, out: str | os.PathLike, num_parts: int | None = None,
                partition_info: dict | None = None, feature_dtype: str = "float32",
                overwrite: bool = False, chunk_edges: int = 1 << 22) -> Manifest:
    """Write an in-memory graph + vertex->part assignment as a store at ``out``.

    Args:
        g: the graph (symmetric CSR) and its node data.
        assignment: int[n] part of every vertex, in ``[0, num_parts)``.
        partition_info: method/order/seconds etc., recorded in the manifest.
        feature_dtype: ``float32`` or ``float16`` (halves feature bytes on disk and on the wire).
    Returns:
        The manifest written.
    """
    node_data = {k: getattr(g, k) for k in NODE_ARRAYS if getattr(g, k) is not None}
    return write_store_from_edges(graph_edge_chunks(g, chunk_edges), g.num_nodes, assignment, out,
                                  num_parts=num_parts, node_data=node_data, partition_info=partition_info,
                                  feature_dtype=feature_dtype, overwrite=overwrite, name=g.name,
                                  weighted=g.edge_weight is not None)


def write_store_from_edges(edge_chunks: Iterable[tuple[np.ndarray, np.ndarray]], num_nodes: int,
                           assignment: np.ndarray, out: str | os.PathLike, num_parts: int | None = None,
                           node_data: dict | None = None, partition_info: dict | None = None,
                           feature_dtype: str = "float32", overwrite: bool = False,
                           name: str = "graph", directed: bool = False, weighted: bool = False,
                           finish=None, num_relations: int = 0, typed: dict | None = None,
                           threads: int = 1, ordered: bool = False) -> Manifest:
    """Stream directed adjacency entries into a store (see module docstring).

    ``ordered``: the caller promises ``(src, dst)`` chunks grouped by source in ascending id, each
    source's neighbours ascending and unique, with no self loops (the partitioner's regrouped stream):
    the neighbours then go straight to the parts' files, with no spill to write and read back.  An
    entry out of that order raises GraphFormatError.  Ignored for weighted and typed stores.

    ``threads`` > 1: the next edge chunk and the next node-data block are read on a helper thread
    while the current one is bucketed or scattered, and the parts' CSRs are built that many at a
    time (memory: one more chunk, block and slab per extra thread; the files written are the
    same as with one thread).

    ``weighted``: the chunks are ``(src, dst, weight float32, mirrored uint8)``: each part's CSR
    gets ``edge_weight.npy`` (aligned with ``indices``, duplicates merged by
    :func:`~argosy.shared.graphio.coalesce_weights`) and ``weighted_degree.npy`` (row sums).

    ``num_relations`` R > 0: a typed store; every chunk carries one more array last, the entry's
    relation id (int, ``[0, R)``), and each part gets ``edge_type.npy`` (int16|int32, aligned with
    ``indices``).  Entries are kept per ``(row, neighbour, relation)``: two relations between the same
    pair are two entries, sorted by neighbour then relation.  ``typed`` (node types, relations,
    target type, per-type feature widths) is recorded in the manifest.

    ``edge_chunks`` must contain both directions of every undirected edge (as a symmetric CSR
    does) unless ``directed``, where each entry is an arc and ``num_edges`` counts arcs; self
    loops and duplicates are dropped per part.  ``node_data`` maps names to arrays or
    :class:`~argosy.shared.graphio.NodeColumn` objects (streamed in row blocks).  ``finish(tmp_root,
    manifest) -> manifest`` adds files to the store before it is verified and renamed (the link
    prediction arrays, :func:`~argosy.shared.linkpred.write_link_arrays`).

    Raises:
        DiskFullError: the disk holding ``out`` filled up (nothing is left at ``out``).
    """
    out = Path(out)
    assignment = np.asarray(assignment)
    if assignment.shape != (num_nodes,):
        raise GraphFormatError(f"assignment must have shape ({num_nodes},) (got {assignment.shape})")
    if num_nodes == 0:
        raise GraphFormatError("cannot write a store for an empty graph")
    k = int(num_parts if num_parts is not None else assignment.max() + 1)
    if assignment.min() < 0 or assignment.max() >= k:
        raise GraphFormatError(f"assignment values must lie in [0, {k}) (got [{assignment.min()}, {assignment.max()}])")
    if feature_dtype not in ("float32", "float16"):
        raise GraphFormatError(f"feature_dtype must be float32 or float16 (got {feature_dtype!r})")
    if out.exists() and not overwrite:
        raise StoreFormatError(f"{out} already exists (pass overwrite=True / --overwrite to replace it)")
    columns, type_cols = {}, []
    for key, arr in (node_data or {}).items():
        if key == "features" and isinstance(arr, dict):      # per node type: {type: (first global id, rows)}
            for t, (base, a) in sorted(arr.items()):
                col = a if isinstance(a, NodeColumn) else ArrayColumn(key, a, feature_dtype=feature_dtype)
                if not 0 <= int(base) <= num_nodes - col.rows:
                    raise GraphFormatError(f"features of node type {t}: {col.rows} rows from id {base} run past "
                                           f"the {num_nodes} nodes")
                type_cols.append((int(t), int(base), col))
            continue
        if key not in NODE_ARRAYS:
            raise GraphFormatError(f"unknown node array {key!r} (expected one of {NODE_ARRAYS})")
        col = arr if isinstance(arr, NodeColumn) else ArrayColumn(key, arr, feature_dtype=feature_dtype)
        if col.rows != num_nodes:
            raise GraphFormatError(f"node array {key!r} has {col.rows} rows for {num_nodes} nodes")
        columns[key] = col

    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    made = [d for d in [out.parent, *out.parent.parents] if not d.exists()]
    try:
        tmp.mkdir(parents=True)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(f"disk full at {out}") from None
        raise
    try:
        manifest = _write(tmp, edge_chunks, num_nodes, assignment.astype(np.int32, copy=False), k, columns,
                          partition_info or {}, feature_dtype, name, directed, weighted, int(num_relations),
                          typed or {}, max(1, int(threads)), type_cols, bool(ordered))
        if finish is not None:
            manifest = finish(tmp, manifest)
        _verify(tmp, manifest)
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        for d in made:  # parent directories created for this store
            try:
                d.rmdir()
            except OSError:
                pass
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(f"disk full at {out} (while writing the store; nothing was left there)") from None
        raise
    logger.info("wrote store %s: %d nodes, %d edges, %d parts", out, manifest.num_nodes, manifest.num_edges, k)
    return manifest


def _write(root: Path, edge_chunks, n: int, assign: np.ndarray, k: int, columns: dict,
           partition_info: dict, feature_dtype: str, name: str, directed: bool = False,
           weighted: bool = False, R: int = 0, typed: dict | None = None, threads: int = 1,
           type_cols: list | None = None, ordered: bool = False) -> Manifest:
    idt = index_dtype(n)
    # A typed store spills each entry's neighbour as the key ``neighbour * R + relation`` (int64), so the
    # one sort/deduplicate/slab path below keeps one entry per (row, neighbour, relation) unchanged;
    # each part's CSR splits the key back into ``indices`` and ``edge_type`` (:class:`~.part_csr.TypeSplitter`).
    if R and n * R >= 2**62 // max(n, 1):
        raise GraphFormatError(f"typed store of {n:,} vertices and {R} relations is beyond the int64 entry key")
    sdt = np.dtype(np.int64) if R else idt                # the spill files' id dtype
    local_index = np.empty(n, idt)
    order = np.empty(n, idt)                             # owned ids per part, ascending
    starts = _part_local_ids(assign, k, local_index, order)
    sizes = np.diff(starts)
    np.save(root / "assignment.npy", assign)
    np.save(root / "local_index.npy", local_index)

    t0 = time.perf_counter()
    if ordered and not weighted and not R:
        parts = _write_ordered(root, edge_chunks, n, assign, k, idt, order, starts, threads)
    else:
        parts = _write_spilled(root, edge_chunks, n, assign, k, idt, sdt, local_index, order, starts, weighted,
                               R, threads)
    total_entries = sum(pe.num_edges for pe in parts)
    total_cut = sum(pe.cut_edges for pe in parts)
    logger.info("store: %d parts' CSRs written in %.1f s", k, time.perf_counter() - t0)
    t0 = time.perf_counter()

    # pass 3: node data, column by column in row blocks, appended to each part's .npy
    stats = {key: _scatter_column(root, col, assign, sizes, k, threads > 1) for key, col in columns.items()}
    if "train_mask" in stats:
        for p, entry in enumerate(parts):
            entry.num_train = int(stats["train_mask"]["per_part"][p])
    feats = columns.get("features")
    typed = dict(typed or {})
    if type_cols:           # one file per part and featured type, each in its own width (shared/store/features.py)
        for t, base, col in type_cols:
            _scatter_column(root, col, assign[base:base + col.rows], None, k, threads > 1, type_file(t))
        feats = max((c for _, _, c in type_cols), key=lambda c: c.row_shape[0])
        off = np.asarray(typed["type_offsets"], np.int64)
        typed["feature_files"] = PER_TYPE
        typed["part_type_counts"] = np.stack([np.bincount(assign[off[t]:off[t + 1]], minlength=k)   # [part][type]
                                              for t in range(off.shape[0] - 1)], axis=1).tolist()
    if columns or type_cols:
        logger.info("store: node data (%s) written in %.1f s", ", ".join([*columns, *(["features"] * bool(type_cols))]),
                    time.perf_counter() - t0)
    splits = {s.replace("_mask", ""): int(stats[s]["count"]) for s in ("train_mask", "val_mask", "test_mask")
              if s in stats}
    num_edges = total_entries if directed else total_entries // 2
    info = dict(partition_info)
    info.update(partition_stats(assign, k, total_cut * (2 if directed else 1), num_edges,
                                [pe.num_edges for pe in parts], sizes))
    manifest = Manifest(
        num_nodes=n, num_edges=num_edges, num_parts=k, index_dtype=str(idt),
        feature_dim=int(feats.row_shape[0]) if feats is not None else 0,
        feature_dtype=str(feats.dtype) if feats is not None else "",
        num_classes=int(stats["labels"]["max"]) + 1 if "labels" in stats else 0,
        splits=splits, partition=info, parts=parts, name=name, format_version=FORMAT_VERSION,
        directed=bool(directed), edge_weights=bool(weighted), typed=typed)
    (root / MANIFEST_NAME).write_text(manifest.to_json())
    return manifest


def _edge_ids(chunk, n: int, want: int, names: str):
    """An edge chunk's ``(src, dst)``: integer arrays of one shape (other dtypes cast to int64) with
    every id in ``[0, n)``, or None when it is empty.  GraphFormatError for a tuple of the wrong
    length (``want``, spelled ``names``), arrays of two shapes or an id out of range."""
    if len(chunk) != want:
        raise GraphFormatError(f"edge chunks must be {names} (got a tuple of {len(chunk)})")
    src, dst = np.asarray(chunk[0]), np.asarray(chunk[1])
    if src.dtype.kind not in "iu" or dst.dtype.kind not in "iu":
        src, dst = src.astype(np.int64), dst.astype(np.int64)
    if src.shape != dst.shape:
        raise GraphFormatError(f"edge chunk sources and neighbours differ in shape ({src.shape} vs {dst.shape})")
    if src.size == 0:
        return None
    lo, hi = min(src.min(), dst.min()), max(src.max(), dst.max())
    if lo < 0 or hi >= n:
        raise GraphFormatError(f"edge id {lo if lo < 0 else hi} is out of range [0, {n})")
    return src, dst


def _write_spilled(root: Path, edge_chunks, n: int, assign: np.ndarray, k: int, idt, sdt, local_index: np.ndarray,
                   order: np.ndarray, starts: np.ndarray, weighted: bool, R: int, threads: int) -> list:
    """The parts' CSRs from entries in any order: spilled by part, then each part sorted and deduplicated
    (:func:`~.part_csr.part_csr`; a part whose entries arrived ordered is only copied)."""
    # pass 1: bucket directed entries by the part of their source vertex
    spill = root / "_spill"
    spill.mkdir()
    files = [open(spill / f"{p}.bin", "wb") for p in range(k)]
    wfiles = [open(spill / f"{p}.w", "wb") for p in range(k)] if weighted else []
    last = np.full((k, 2), -1, np.int64)                 # per part: the last entry appended
    ordered = np.ones(k, np.bool_)                       # per part: entries strictly increasing so far
    no_slots = np.empty(0, np.int64)
    try:
        for chunk in (read_ahead(edge_chunks) if threads > 1 else edge_chunks):
            names = "(src, dst" + (", weight, mirrored" if weighted else "") + (", relation" if R else "") + ")"
            ids = _edge_ids(chunk, n, (4 if weighted else 2) + (1 if R else 0), names)
            if ids is None:
                continue
            src, dst = ids
            if R:
                rel = np.asarray(chunk[-1])
                if rel.shape != src.shape or rel.dtype.kind not in "iu":
                    raise GraphFormatError(f"edge chunk relations must be integers, one per entry (got {rel.dtype}{rel.shape})")
                if rel.size and (int(rel.min()) < 0 or int(rel.max()) >= R):
                    raise GraphFormatError(f"relation id {int(rel.min()) if rel.min() < 0 else int(rel.max())} "
                                           f"is out of range [0, {R})")
                loop = src == dst                                # self loops dropped here: the key hides them
                if loop.any():
                    keep = ~loop
                    src, dst, rel = src[keep], dst[keep], rel[keep]
                    chunk = tuple(np.asarray(c)[keep] for c in chunk)
                dst = dst.astype(np.int64) * R + rel
            pairs = np.empty((src.size, 2), sdt)                  # (local row, neighbour[ * R + relation])
            slots = np.full(src.size, -1, np.int64) if weighted else no_slots
            bounds = _bucket_by_part(src, dst, assign, local_index, k, pairs, last, ordered, slots, not R)
            if weighted:
                rec = np.empty(pairs.shape[0], WREC)
                ok = slots >= 0
                rec["w"][slots[ok]] = np.asarray(chunk[2], np.float32)[ok]
                rec["m"][slots[ok]] = np.asarray(chunk[3], np.uint8)[ok]
            for p in np.flatnonzero(np.diff(bounds)):
                files[p].write(pairs[bounds[p]:bounds[p + 1]].data)
                if weighted:
                    wfiles[p].write(rec[bounds[p]:bounds[p + 1]].data)
    finally:
        for f in files + wfiles:
            f.close()


    # pass 2: build each part's CSR from its bucket
    def build(p: int) -> PartEntry:
        pdir = root / f"part-{p:05d}"
        pdir.mkdir()
        nodes = order[starts[p]:starts[p + 1]].astype(np.int64)
        counts, entries, cut = part_csr(spill / f"{p}.bin", pdir / "indices.npy", len(nodes), n, sdt, assign, p,
                                         bool(ordered[p]), pdir if weighted else None,
                                         TypeSplitter(pdir, R, idt) if R else None)
        indptr = np.zeros(len(nodes) + 1, np.int64)
        np.cumsum(counts, out=indptr[1:])
        np.save(pdir / "nodes.npy", nodes)
        np.save(pdir / "indptr.npy", indptr)
        return PartEntry(part=p, num_nodes=len(nodes), num_edges=entries, num_train=0, cut_edges=cut,
                         path=pdir.name)

    if threads > 1 and k > 1:        # numpy's sorts and the file reads release the GIL
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(min(threads, k)) as pool:
            parts = list(pool.map(build, range(k)))
    else:
        parts = [build(p) for p in range(k)]
    spill.rmdir()
    return parts


def _write_ordered(root: Path, edge_chunks, n: int, assign: np.ndarray, k: int, idt, order: np.ndarray,
                   starts: np.ndarray, threads: int) -> list:
    """The parts' CSRs from entries that arrive ordered (grouped by source in ascending id, each source's
    neighbours ascending and unique, no self loops): each chunk's neighbours go straight to their part's
    ``indices.npy``, with no spill file to write, read back and copy (the 1/4-scale papers100M graph's
    765M entries: 12 GB less written and read).  Raises GraphFormatError at the first entry out of order."""
    files = []
    degree = np.zeros(n, idt)                            # entries per source, by global id
    cut = np.zeros(k, np.int64)
    last = np.full((k, 2), -1, np.int64)                 # per part: the last entry's (source, neighbour)
    done = 0
    counting, pending = None, None
    if threads > 1:
        from concurrent.futures import ThreadPoolExecutor
        counting = ThreadPoolExecutor(1, thread_name_prefix="argosy-store-cut")
    try:
        for p in range(k):
            pdir = root / f"part-{p:05d}"
            pdir.mkdir()
            f = open(pdir / "indices.npy", "wb")
            files.append(f)
            f.write(b" " * _NPY_HEADER_BYTES)           # the header, once the entries are counted
        for chunk in (read_ahead(edge_chunks) if threads > 1 else edge_chunks):
            ids = _edge_ids(chunk, n, 2, "(src, dst)")
            if ids is None:
                continue
            src, dst = ids
            nbrs = np.empty(src.size, idt)
            offs = _split_by_part(src, dst, assign, k, nbrs, last)
            if offs[0] < 0:
                i = int(-1 - offs[0])
                raise GraphFormatError(f"entry {done + i} ({int(src[i])}, {int(dst[i])}) breaks the promised "
                                       "order (by source, neighbours ascending and unique, no self loops)")
            if counting is not None:    # the cut's random reads on the helper while this thread writes
                if pending is not None:
                    pending.result()
                pending = counting.submit(_count_degree_and_cut, src, dst, assign, degree, cut)
            else:
                _count_degree_and_cut(src, dst, assign, degree, cut)
            for p in np.flatnonzero(np.diff(offs)):
                files[p].write(nbrs[offs[p]:offs[p + 1]].data)
            done += src.size
        if pending is not None:
            pending.result()
    finally:
        if counting is not None:
            counting.shutdown(wait=True)
        for f in files:
            f.close()
    parts = []
    for p in range(k):
        pdir = root / f"part-{p:05d}"
        nodes = order[starts[p]:starts[p + 1]].astype(np.int64)
        indptr = np.zeros(len(nodes) + 1, np.int64)
        np.cumsum(degree[nodes], out=indptr[1:])
        entries = int(indptr[-1])
        with open(pdir / "indices.npy", "r+b") as f:
            _write_reserved_npy_header(f, _NPY_HEADER_BYTES, idt, entries)
        np.save(pdir / "nodes.npy", nodes)
        np.save(pdir / "indptr.npy", indptr)
        parts.append(PartEntry(part=p, num_nodes=len(nodes), num_edges=entries, num_train=0, cut_edges=int(cut[p]),
                               path=pdir.name))
    return parts


_NPY_HEADER_BYTES = 128
"""Bytes reserved for a ``.npy`` header written before its length is known (version 1.0 pads it with spaces)."""


def _write_reserved_npy_header(f, size: int, dtype, rows: int) -> None:
    """The ``.npy`` version 1.0 header of a 1-D array of ``rows`` into the ``size`` bytes reserved at the
    file's start (the dictionary padded with spaces, as numpy pads it, so the data's offset is unchanged)."""
    d = "{'descr': %r, 'fortran_order': False, 'shape': (%d,), }" % (np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                                                       rows)
    pad = size - len(np.lib.format.MAGIC_PREFIX) - 2 - 2 - len(d) - 1
    if pad < 0:
        raise ValueError(f"a .npy header for {rows} rows does not fit {size} bytes")
    f.seek(0)
    f.write(np.lib.format.MAGIC_PREFIX + bytes([1, 0]) + (size - 10).to_bytes(2, "little") + d.encode("latin1")
            + b" " * pad + b"\n")


def _scatter_column(root: Path, col: NodeColumn, assign: np.ndarray, sizes: np.ndarray | None, k: int,
                    prefetch: bool = False, fname: str | None = None) -> dict:
    """Stream one node column into ``part-*/NAME.npy``: every part's file gets its header first,
    then each row block's rows are appended to their parts' files in global id order (the order of
    the part's ``nodes``).  Memory: one block.  Returns the column's summary statistics.

    ``assign`` covers the column's rows (one node type's id range for a per-type feature file,
    ``fname``); ``sizes`` None: counted from it."""
    if sizes is None:
        sizes = np.bincount(assign, minlength=k)
    files = []
    dt = np.dtype(col.dtype)
    count, hi = 0, -1
    per_part = np.zeros(k, np.int64)
    try:
        for p in range(k):
            f = open(root / f"part-{p:05d}" / f"{fname or col.name}.npy", "wb")
            files.append(f)
            np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(dt),
                                                     "fortran_order": False,
                                                     "shape": (int(sizes[p]),) + tuple(col.row_shape)})
        blocks = col.iter_blocks(_NODE_BLOCK_ROWS)
        for a, blk in (read_ahead(blocks) if prefetch else blocks):
            blk = np.ascontiguousarray(blk, dtype=dt)
            p_of = assign[a:a + blk.shape[0]]
            o = np.argsort(p_of, kind="stable")
            bounds = np.searchsorted(p_of[o], np.arange(k + 1))
            grouped = blk[o]                            # one gather; each part's rows written from it uncopied
            for p in np.flatnonzero(np.diff(bounds)):
                files[p].write(memoryview(grouped[bounds[p]:bounds[p + 1]]).cast("B"))
            if col.name == "labels" and blk.size:
                hi = max(hi, int(blk.max()))
            elif col.name.endswith("_mask"):
                count += int(blk.sum())
                per_part += np.bincount(p_of[blk], minlength=k)
    finally:
        for f in files:
            f.close()
    return {"count": count, "max": hi, "per_part": per_part}


def _verify(root: Path, manifest: Manifest) -> None:
    """Re-open what was written and check the invariants a reader relies on."""
    from argosy.shared.store.reader import PartitionStore
    store = PartitionStore(root)
    store.verify()
