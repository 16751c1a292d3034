"""Stage some parts of a store into a host-local directory (what a sampler/loader pod's init step does).

A staged directory is a valid store whose manifest lists every part but which holds only the
staged part directories, plus the O(n) metadata (``assignment.npy``, ``local_index.npy``) every
process may read.  Each part is copied into a temporary directory and renamed into place, so a
half-copied part is never read; an existing complete part is left alone, but only while the staged
directory was staged from this very store (same manifest): a directory staged
from another store (a volume kept across ``docker compose up`` after the store was rebuilt from
another input) is emptied first, never read as if it were this one.

Example:
    >>> stage_parts("/data/store", "/local/store", [0, 2])      # doctest: +SKIP
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
from pathlib import Path

from argosy.shared.errors import StoreFormatError
from argosy.shared.store.manifest import MANIFEST_NAME, Manifest
from argosy.shared.store.reader import PartitionStore

__all__ = ["stage_parts", "PartSource"]

_META = (MANIFEST_NAME, "assignment.npy", "local_index.npy")

logger = logging.getLogger(__name__)


def _identity(root: Path) -> str | None:
    """What identifies a store build: its manifest (sizes, cut, partitioning seconds) and the size of its
    assignment. Cheap on purpose (called at every part move): never reads the O(n) arrays."""
    if not (root / MANIFEST_NAME).exists() or not (root / "assignment.npy").exists():
        return None
    h = hashlib.sha256((root / MANIFEST_NAME).read_bytes())
    h.update(str((root / "assignment.npy").stat().st_size).encode())
    return h.hexdigest()


def _clear_if_stale(src: Path, dest: Path) -> None:
    """Empty ``dest`` when what it holds was staged from another store than ``src``.

    The manifest is staged first, so a directory without one holds no complete file of this store
    yet. Other processes' temporaries (``.NAME.staging-PID``: replacements on one host stage at
    once) are never touched: deleting one made that process's copy fail, and the job with it."""
    if not dest.exists():
        return
    man = dest / MANIFEST_NAME
    had = man.exists()
    if had and _identity(dest) == _identity(src):
        return
    if had and not (dest / "assignment.npy").exists() and man.read_bytes() == (src / MANIFEST_NAME).read_bytes():
        return                                   # this store's manifest, its assignment still being staged
    # without a manifest, one renamed in by another process since the check above is this store's
    stale = [c for c in dest.iterdir() if ".staging-" not in c.name and (had or c.name != MANIFEST_NAME)]
    if not stale:
        return
    logger.warning("%s holds parts staged from another store than %s (rebuilt since?); clearing it", dest, src)
    for child in stale:
        try:
            shutil.rmtree(child) if child.is_dir() else child.unlink()
        except FileNotFoundError:
            pass


def _copy_atomic(src: Path, dst: Path) -> None:
    tmp = dst.with_name(f".{dst.name}.staging-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp) if tmp.is_dir() else tmp.unlink()
    try:
        if src.is_dir():
            shutil.copytree(src, tmp)
        else:
            shutil.copy2(src, tmp)
        os.replace(tmp, dst) if not dst.exists() else (shutil.rmtree(tmp) if tmp.is_dir() else tmp.unlink())
    except BaseException:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink()
        raise


def stage_parts(src: str | Path, dest: str | Path, parts) -> list[int]:
    """Copy the metadata and the given parts of store ``src`` into ``dest``; returns the parts copied now."""
    src, dest = Path(src), Path(dest)
    m = Manifest.load(src)
    _clear_if_stale(src, dest)
    dest.mkdir(parents=True, exist_ok=True)
    for name in _META:
        if not (dest / name).exists():
            if not (src / name).exists():
                raise StoreFormatError(f"{src}: missing {name}; cannot stage from it")
            _copy_atomic(src / name, dest / name)
    copied = []
    for p in parts:
        if not 0 <= p < m.num_parts:
            raise StoreFormatError(f"{src}: part {p} is out of range [0, {m.num_parts})")
        rel = m.parts[p].path
        if not (dest / rel).exists():
            _copy_atomic(src / rel, dest / rel)
            copied.append(int(p))
    return copied


class PartSource:
    """Where a sampler/loader reads its own parts: the job's store, or a host-local directory
    (``ARGOSY_LOCAL_STORE``) into which missing parts are staged from the job's store first.

    The returned :class:`PartitionStore` refuses to open any part not passed to :meth:`open`.
    """

    def __init__(self, store: str | Path, local: str | Path | None = None):
        self.src, self.local = Path(store), Path(local) if local else None
        if self.local is not None:
            stage_parts(self.src, self.local, [])
        self.store = PartitionStore(self.local or self.src, parts=[])

    @property
    def src_store(self) -> PartitionStore:
        """The job's whole store (every part's files: what a host's share is measured against)."""
        return PartitionStore(self.src)

    def open(self, parts) -> PartitionStore:
        parts = sorted(int(p) for p in parts)
        if self.local is not None:
            stage_parts(self.src, self.local, parts)
        self.store.restrict(parts)
        return self.store
