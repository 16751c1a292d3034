"""Open a partitioned store: memory-mapped CSR, features and labels per part.

Example:
    >>> store = PartitionStore("STORE")            # doctest: +SKIP
    >>> part = store.part(0); part.indptr.shape    # doctest: +SKIP
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from argosy.shared.errors import StoreFormatError
from argosy.shared.store.features import FeatureLayout
from argosy.shared.store.manifest import Manifest
from argosy.shared.store.residency import advise

__all__ = ["PartitionStore", "PartData"]


@dataclass
class PartData:
    """One part's arrays, memory-mapped read-only.

    Shapes:
        nodes: int64[n_p] global ids; indptr: int64[n_p + 1]; indices: int[e_p] global ids;
        features: float[n_p, F] | None; labels: int64[n_p] | None; masks: bool[n_p] | None;
        edge_weight: float32[e_p] aligned with indices | None (unweighted store);
        weighted_degree: float32[n_p] row sums of edge_weight | None.
    """

    part: int
    nodes: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    features: np.ndarray | None
    labels: np.ndarray | None
    train_mask: np.ndarray | None
    val_mask: np.ndarray | None
    test_mask: np.ndarray | None
    edge_weight: np.ndarray | None = None
    weighted_degree: np.ndarray | None = None
    edge_type: np.ndarray | None = None


def _min_max(path: Path, window: int = 1 << 22) -> tuple[int, int]:
    """Smallest and largest value of a 1-d ``.npy`` array, read in windows without mapping it
    (a scan of a mapped file leaves all of its pages in this process's RSS until unmapped)."""
    with open(path, "rb") as f:
        major, _ = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(f)
        left = int(np.prod(shape))
        lo, hi = 0, -1
        first = True
        while left > 0:
            w = np.fromfile(f, dtype=dtype, count=min(window, left))
            if w.size == 0:
                raise StoreFormatError(f"{path}: truncated array ({left} values missing)")
            left -= w.size
            wl, wh = int(w.min()), int(w.max())
            lo, hi = (wl, wh) if first else (min(lo, wl), max(hi, wh))
            first = False
    return lo, hi


def _verify_weights(root: Path, part: int, pd: PartData) -> None:
    """A weighted part's ``edge_weight`` (one finite value >= 0 per entry) and ``weighted_degree``."""
    w, wd = pd.edge_weight, pd.weighted_degree
    if w.dtype != np.float32 or w.shape != pd.indices.shape:
        raise StoreFormatError(f"{root}: part {part}: edge_weight must be float32[{pd.indices.shape[0]}] "
                               f"(got {w.dtype}{list(w.shape)})")
    if wd.dtype != np.float32 or wd.shape != pd.nodes.shape:
        raise StoreFormatError(f"{root}: part {part}: weighted_degree must be float32[{pd.nodes.shape[0]}] "
                               f"(got {wd.dtype}{list(wd.shape)})")
    for a in range(0, w.shape[0], 1 << 22):
        blk = np.asarray(w[a:a + (1 << 22)])
        if not np.isfinite(blk).all() or (blk < 0).any():
            raise StoreFormatError(f"{root}: part {part}: edge_weight holds a value that is not finite and >= 0")


class PartitionStore:
    """Read access to a store directory written by :func:`shared.store.write_store`."""

    def __init__(self, root: str | Path, parts: list[int] | None = None):
        self.root = Path(root)
        self.manifest = Manifest.load(self.root)
        self._parts: dict[int, PartData] = {}
        self.allowed: frozenset[int] | None = None
        if parts is not None:
            self.restrict(parts)

    def restrict(self, parts) -> None:
        """Allow opening only ``parts`` from now on (a process that owns some parts); forget the others."""
        self.allowed = frozenset(int(p) for p in parts)
        for p in [p for p in self._parts if p not in self.allowed]:
            del self._parts[p]

    def read_part(self, p: int, names: tuple[str, ...], advice: str | None = "willneed") -> dict[str, np.ndarray | None]:
        """Arrays ``names`` of part ``p``, memory-mapped read-only (plain ndarray views of the maps).

        Every process on a host that opens the same file maps the same page-cache pages: replicas of
        a tier share one copy of their host's parts (their RSS counts the pages each touched, their
        PSS splits them).  ``advice``: ``willneed`` asks the kernel to read the files ahead, so the
        first batches do not fault page by page (parts that fit in memory); ``random`` turns off
        read-around (parts served from disk, :mod:`shared.store.residency`); None leaves it.
        """
        self.part(p)                     # checks the part is allowed and its arrays exist
        d = self.manifest.parts[p].path
        out = {}
        for n in names:
            m = self._load(f"{d}/{n}.npy", required=False)
            advise(m, advice)
            out[n] = None if m is None else np.asarray(m)
        return out

    def __repr__(self) -> str:
        m = self.manifest
        return f"PartitionStore({str(self.root)!r}, n={m.num_nodes}, m={m.num_edges}, parts={m.num_parts})"

    def _load(self, rel: str, required: bool = True, mmap: bool = True) -> np.ndarray | None:
        path = self.root / rel
        if not path.exists():
            if required:
                raise StoreFormatError(f"{self.root}: missing array {rel}")
            return None
        try:
            return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
        except (ValueError, OSError) as e:
            raise StoreFormatError(f"{path}: unreadable array ({e})") from None

    @property
    def num_parts(self) -> int:
        return self.manifest.num_parts

    @cached_property
    def assignment(self) -> np.ndarray:
        """int32[n]: the part owning each global vertex id."""
        return self._load("assignment.npy")

    @cached_property
    def local_index(self) -> np.ndarray:
        """int[n]: row of each global vertex inside its part's arrays."""
        return self._load("local_index.npy")

    @cached_property
    def features(self) -> "FeatureLayout":
        """Where each vertex's feature row is (:mod:`shared.store.features`)."""
        return FeatureLayout(self)

    def part(self, p: int) -> PartData:
        """The arrays of part ``p`` (memory-mapped, cached)."""
        if not 0 <= p < self.num_parts:
            raise StoreFormatError(f"part {p} is out of range [0, {self.num_parts})")
        if self.allowed is not None and p not in self.allowed:
            raise StoreFormatError(f"{self.root}: part {p} is not held by this process (it may open only "
                                   f"parts {sorted(self.allowed)})")
        if p not in self._parts:
            d = self.manifest.parts[p].path
            self._parts[p] = PartData(
                part=p, nodes=self._load(f"{d}/nodes.npy"), indptr=self._load(f"{d}/indptr.npy"),
                indices=self._load(f"{d}/indices.npy"),
                features=self._load(f"{d}/features.npy", required=False),
                labels=self._load(f"{d}/labels.npy", required=False),
                train_mask=self._load(f"{d}/train_mask.npy", required=False),
                val_mask=self._load(f"{d}/val_mask.npy", required=False),
                test_mask=self._load(f"{d}/test_mask.npy", required=False),
                edge_weight=self._load(f"{d}/edge_weight.npy") if self.manifest.edge_weights else None,
                weighted_degree=self._load(f"{d}/weighted_degree.npy") if self.manifest.edge_weights else None,
                edge_type=self._load(f"{d}/edge_type.npy") if self.manifest.num_relations else None)
        return self._parts[p]

    def split_nodes(self, split: str, parts: list[int] | None = None) -> np.ndarray:
        """Global ids of the ``split`` (train/val/test) vertices of ``parts`` (default: all), ascending."""
        out = []
        for p in (range(self.num_parts) if parts is None else parts):
            pd = self.part(p)
            mask = getattr(pd, f"{split}_mask")
            if mask is not None:
                out.append(np.asarray(pd.nodes)[np.asarray(mask)])
        return np.sort(np.concatenate(out)) if out else np.empty(0, np.int64)

    def verify(self) -> None:
        """Check every invariant readers rely on; raise :class:`StoreFormatError` naming the first broken one."""
        m = self.manifest
        n = m.num_nodes
        assign = self.assignment
        if assign.shape != (n,) or self.local_index.shape != (n,):
            raise StoreFormatError(f"{self.root}: assignment/local_index must have shape ({n},)")
        if n and (assign.min() < 0 or assign.max() >= m.num_parts):
            raise StoreFormatError(f"{self.root}: assignment values outside [0, {m.num_parts})")
        total_nodes = total_entries = 0
        layout = self.features
        for entry in m.parts:
            cached = entry.part in self._parts
            pd = self.part(entry.part)
            k = pd.nodes.shape[0]
            if k != entry.num_nodes or pd.indptr.shape != (k + 1,):
                raise StoreFormatError(f"{self.root}: part {entry.part}: {k} nodes but manifest says {entry.num_nodes}")
            if pd.indptr[0] != 0 or np.any(np.diff(pd.indptr) < 0) or pd.indptr[-1] != pd.indices.shape[0]:
                raise StoreFormatError(f"{self.root}: part {entry.part}: indptr is not a valid CSR offset array")
            if pd.indices.shape[0] != entry.num_edges:
                raise StoreFormatError(f"{self.root}: part {entry.part}: {pd.indices.shape[0]} edges, manifest says {entry.num_edges}")
            lo, hi = _min_max(self.root / entry.path / "indices.npy")
            if pd.indices.size and (lo < 0 or hi >= n):
                raise StoreFormatError(f"{self.root}: part {entry.part}: neighbour ids outside [0, {n})")
            if k and np.any(assign[pd.nodes] != entry.part):
                raise StoreFormatError(f"{self.root}: part {entry.part}: owns vertices assigned elsewhere")
            for name in ("features", "labels", "train_mask", "val_mask", "test_mask"):
                arr = getattr(pd, name)
                if arr is not None and arr.shape[0] != k:
                    raise StoreFormatError(f"{self.root}: part {entry.part}: {name} has {arr.shape[0]} rows for {k} nodes")
            if layout.per_type:
                if int(layout.counts[entry.part].sum()) != k:
                    raise StoreFormatError(f"{self.root}: part {entry.part}: part_type_counts sum to "
                                           f"{int(layout.counts[entry.part].sum())} vertices, the part has {k}")
                layout.read(entry.part, advice=None)        # every type's file: its rows, width and dtype
            if m.edge_weights:
                _verify_weights(self.root, entry.part, pd)
            if m.num_relations:
                et = pd.edge_type
                if et.shape != pd.indices.shape or et.dtype.kind != "i":
                    raise StoreFormatError(f"{self.root}: part {entry.part}: edge_type must be int[{pd.indices.shape[0]}] "
                                           f"(got {et.dtype}{et.shape})")
                if et.size and (int(et.min()) < 0 or int(et.max()) >= m.num_relations):
                    raise StoreFormatError(f"{self.root}: part {entry.part}: edge_type outside [0, {m.num_relations})")
            total_nodes += k
            total_entries += pd.indices.shape[0]
            if not cached:                   # unmap what only this check opened (its pages count in RSS)
                del self._parts[entry.part], pd
        if total_nodes != n:
            raise StoreFormatError(f"{self.root}: parts own {total_nodes} vertices, manifest says {n}")
        if total_entries != (1 if m.directed else 2) * m.num_edges:
            raise StoreFormatError(f"{self.root}: {total_entries} adjacency entries for {m.num_edges} "
                                   f"{'arcs' if m.directed else 'undirected edges'}")

    def global_csr(self, weights: bool = False):
        """Stitch the parts into one global CSR (for small graphs, tests and full-graph baselines):
        ``(indptr, indices)``, plus the aligned ``edge_weight`` float32 with ``weights`` (a weighted store)."""
        n = self.manifest.num_nodes
        if weights and not self.manifest.edge_weights:
            raise StoreFormatError(f"{self.root}: the store has no edge weights")
        deg = np.zeros(n, np.int64)
        for p in range(self.num_parts):
            pd = self.part(p)
            deg[pd.nodes] = np.diff(pd.indptr)
        indptr = np.zeros(n + 1, np.int64)
        np.cumsum(deg, out=indptr[1:])
        indices = np.empty(indptr[-1], np.dtype(self.manifest.index_dtype))
        w = None
        for p in range(self.num_parts):
            pd = self.part(p)
            starts = indptr[pd.nodes]
            lens = np.diff(pd.indptr)
            pos = np.repeat(starts - pd.indptr[:-1], lens) + np.arange(pd.indices.shape[0])
            indices[pos] = pd.indices
            if weights:
                if w is None:
                    w = np.empty(indptr[-1], np.float32)
                w[pos] = pd.edge_weight
        if weights:
            return indptr, indices, (w if w is not None else np.empty(0, np.float32))
        return indptr, indices
