"""Fuzz target for the graph file readers (``shared/graphio/`` and the partitioner's streams).

An input is one byte choosing the file name's suffix followed by the file's bytes.  Each input is
written to a scratch file and read twice: whole (:func:`load_graph`) and streamed
(:func:`open_edge_stream`, every chunk, every node column).  A clean rejection is a
``GraphFormatError``; anything else is a crash, and so is a disagreement between the two readers
(one accepts what the other rejects, or they build different graphs).

The mutator knows the formats: it rewrites ``.npy`` header fields (dtype, byte order, Fortran
order, shape), mutates one zip member and re-packs the archive (stored or deflated), and splices
hostile tokens (20-digit ids, BOMs, header lines, weights) into text.
"""
from __future__ import annotations

import gzip
import io
import logging
import os
import random
import resource
import tempfile
import warnings
import zipfile
from pathlib import Path

import numpy as np

from argosy.shared.errors import GraphFormatError

EXPECTED = (GraphFormatError,)
SUFFIXES = (".npz", ".npy", ".txt", ".csv", ".txt.gz", ".NPZ", ".el", ".Npy")
CORPUS = Path(__file__).resolve().parents[1] / "corpus"

# a hostile input must not take the fuzzer (or the machine) down: big allocations fail instead
try:
    _soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    if _soft == resource.RLIM_INFINITY:
        resource.setrlimit(resource.RLIMIT_AS, (12 << 30, _hard))
except (ValueError, OSError):  # pragma: no cover - platform dependent
    pass

warnings.filterwarnings("ignore", message="Duplicate name")   # the mutator writes duplicate zip members
_DIR = Path(tempfile.mkdtemp(prefix="argosy-fuzz-file-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))


def _suffix_of(name: str) -> int:
    low = name.lower()
    if low.endswith(".gz"):
        return SUFFIXES.index(".txt.gz")
    for i, s in enumerate(SUFFIXES[:5]):
        if low.endswith(s):
            return i
    return SUFFIXES.index(".txt")


def _valid_seeds() -> list[tuple[str, bytes]]:
    """Small well-formed files of every format (the mutator's best starting points)."""
    out = []
    rng = np.random.default_rng(0)
    u, v = rng.integers(0, 12, 30), rng.integers(0, 12, 30)
    n = 12
    rows = np.repeat(np.arange(n), 2)
    ind = (rows + 1 + np.tile([0, 4], n)) % n
    src = np.concatenate([rows, ind])
    dst = np.concatenate([ind, rows])
    o = np.lexsort((dst, src))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))])
    feats = rng.standard_normal((n, 3)).astype(np.float32)
    labels = rng.integers(-1, 3, n)
    train = np.zeros(n, bool)
    train[(labels >= 0) & (np.arange(n) < 6)] = True
    for compress in (np.savez, np.savez_compressed):
        b = io.BytesIO()
        compress(b, indptr=indptr, indices=dst[o].astype(np.int32), features=feats, labels=labels, train_mask=train)
        out.append((".npz", b.getvalue()))
    b = io.BytesIO()
    np.savez(b, src=u, dst=v, num_nodes=np.int64(n), x=feats.astype(">f8"), y=labels.astype(">i4"))
    out.append((".npz", b.getvalue()))
    for arr in (np.stack([u, v], 1).astype(np.int32), np.asfortranarray(np.stack([u, v], 1).astype(">i8"))):
        b = io.BytesIO()
        np.save(b, arr)
        out.append((".npy", b.getvalue()))
    text = "".join(f"{a} {c}\n" for a, c in zip(u, v))
    out.append((".txt", ("# c\n" + text).encode()))
    out.append((".csv", ("\ufeffsrc,dst,weight\n" + text.replace(" ", ",").replace("\n", ",0.5\n")).encode()))
    out.append((".txt.gz", gzip.compress(text.encode(), mtime=0)))
    return out


def seeds() -> list[bytes]:
    out = [bytes([_suffix_of(name)]) + data for name, data in _valid_seeds()]
    for d in ("graphs", "accepted", "file"):
        root = CORPUS / d
        if not root.is_dir():
            continue
        for p in sorted(root.rglob("*")):
            if p.is_file() and "crashes" not in p.parts:
                out.append(bytes([_suffix_of(p.name)]) + p.read_bytes())
    return out


# ---------------------------------------------------------------------------------------------
# running one input
# ---------------------------------------------------------------------------------------------
def _edge_set(indptr, indices):
    rows = np.repeat(np.arange(indptr.size - 1, dtype=np.int64), np.diff(indptr))
    return np.unique(rows * (indptr.size - 1) + np.asarray(indices, np.int64))


def run_one(data: bytes) -> None:
    log = logging.getLogger("argosy")
    level = log.level
    log.setLevel(logging.ERROR)  # symmetrisation warnings are expected here
    try:
        _run_one(data)
    finally:
        log.setLevel(level)


def _run_one(data: bytes) -> None:
    from argosy.services.partitioner.file_streams import open_edge_stream
    from argosy.shared.graphio import check_node_columns, load_graph

    if not data:
        data = b"\x00"
    path = _DIR / ("g" + SUFFIXES[data[0] % len(SUFFIXES)])
    path.write_bytes(data[1:])
    whole_err = stream_err = None
    g = None
    try:
        g = load_graph(path)
    except GraphFormatError as e:
        whole_err = e
    try:
        st = open_edge_stream(path, chunk_edges=7)
        if st.num_nodes == 0:
            raise GraphFormatError(f"{path}: the graph is empty")
        keys = []
        n = st.num_nodes
        for s, d in st:
            keys.append(np.asarray(s, np.int64) * n + np.asarray(d, np.int64))
        cols = st.source.node_columns(n)
        check_node_columns(cols, n)
        data_cols = {name: c.read() for name, c in cols.items()}
    except GraphFormatError as e:
        stream_err = e
    if (whole_err is None) != (stream_err is None):
        raise AssertionError(f"readers disagree on {path.name}: whole={whole_err!r} stream={stream_err!r}")
    if whole_err is not None:
        raise whole_err
    # both accepted: the same graph and node data
    assert n == g.num_nodes, (n, g.num_nodes)
    got = np.unique(np.concatenate(keys)) if keys else np.empty(0, np.int64)
    want = _edge_set(g.indptr, g.indices)
    assert np.array_equal(got, want), "streamed edges differ from the whole-graph load"
    assert np.all(np.diff(g.indptr) >= 0) and (g.indices.size == 0 or g.indices.max() < n)
    for name, arr in data_cols.items():
        ref = getattr(g, name)
        assert ref is not None and np.array_equal(arr, ref), f"{name} differs"
        if name == "features":
            assert np.isfinite(arr).all()
    _check_store(path, g)


def _check_store(path: Path, g) -> None:
    """An accepted file also partitions (exit 0) into a store holding the same graph and node data."""
    import contextlib
    import shutil

    from argosy.services.partitioner.__main__ import main
    from argosy.shared.store.reader import PartitionStore

    out = _DIR / "store"
    shutil.rmtree(out, ignore_errors=True)
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = main([str(path), "--parts", "2" if g.num_nodes > 1 else "1", "--method", "hash", "--out", str(out)])
    assert rc == 0, f"load_graph accepted {path.name} but the partitioner failed: {err.getvalue()[-500:]}"
    store = PartitionStore(out)
    indptr, indices = store.global_csr()
    assert np.array_equal(indptr, g.indptr) and np.array_equal(indices, g.indices), "store CSR differs"
    for p in range(store.num_parts):
        pd = store.part(p)
        for name in ("features", "labels", "train_mask", "val_mask", "test_mask"):
            ref = getattr(g, name)
            got = getattr(pd, name)
            assert (ref is None) == (got is None), f"store {name} presence differs"
            if ref is not None:
                assert np.array_equal(np.asarray(got), ref[np.asarray(pd.nodes)]), f"store {name} differs"
    shutil.rmtree(out, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# structure-aware mutation
# ---------------------------------------------------------------------------------------------
_TOKENS = [b"18446744073709551618", b"9223372036854775807", b"9223372036854775808", b"-1", b"-0", b"+3",
           b"1e5", b"1.5", b"\xef\xbb\xbf", b"src,dst\n", b"# c\n", b"% c\n", b"0 1 0.25\n", b"\r\n", b",",
           b"\t", b"\x00", b"4294967296", b"2147483647", b"99999999"]
_DESCRS = ["<i4", ">i4", "<i8", ">i8", "<u8", ">u2", "|u1", "|b1", "<f4", ">f8", "<f2", "|O", "<c8", "V8",
           "<M8[s]", "|S3", "<U2", "[('a', '<i4')]"]


def _mutate_npy(raw: bytes, rng: random.Random) -> bytes:
    try:
        f = io.BytesIO(raw)
        version = np.lib.format.read_magic(f)
        hdr = (np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0)(f)
        body = raw[f.tell():]
    except Exception:                                          # noqa: BLE001 - not parseable: bytes only
        from tests.fuzz import mutate_bytes
        return mutate_bytes(raw, rng)
    shape, fortran, dtype = hdr
    descr = np.lib.format.dtype_to_descr(dtype)
    op = rng.randrange(4)
    if op == 0:
        descr = rng.choice(_DESCRS)
    elif op == 1:
        fortran = not fortran
    elif op == 2 and shape:
        shape = list(shape)
        i = rng.randrange(len(shape))
        shape[i] = rng.choice([0, 1, shape[i] + 1, max(0, shape[i] - 1), 2**31, 2**40, 2**62])
        shape = tuple(shape)
    else:
        shape = rng.choice([(), (1,), tuple(shape) + (1,), tuple(shape[:1])])
    head = ("{'descr': %r, 'fortran_order': %r, 'shape': %r, }" % (descr, fortran, tuple(shape))).encode()
    if isinstance(descr, str) and descr.startswith("["):
        head = head.replace(repr(descr).encode(), descr.encode())
    pad = 64 - (10 + len(head) + 1) % 64
    head = head + b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head + body


def _mutate_zip(raw: bytes, rng: random.Random) -> bytes:
    from tests.fuzz import mutate_bytes

    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as zf:
            members = [(i.filename, zf.read(i)) for i in zf.infolist()]
    except Exception:                                          # noqa: BLE001
        return mutate_bytes(raw, rng)
    if not members:
        return mutate_bytes(raw, rng)
    i = rng.randrange(len(members))
    name, data = members[i]
    op = rng.randrange(6)
    if op <= 1:
        data = _mutate_npy(data, rng)
    elif op == 2:
        data = mutate_bytes(data, rng)
    elif op == 3:
        name = rng.choice(["x.npy", "y.npy", "features.npy", "labels.npy", "indices.npy", "src.npy",
                           "train_mask.npy", "val_mask.npy", "num_nodes.npy", "junk"])
    elif op == 4:
        data = data[: rng.randrange(len(data) + 1)]
    else:
        del members[i]
        name = None
    if name is not None:
        members[i] = (name, data)
    out = io.BytesIO()
    method = rng.choice([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
    with zipfile.ZipFile(out, "w", method) as zf:
        for nm, d in members:
            zf.writestr(nm, d)
    b = out.getvalue()
    if rng.random() < 0.1:  # damage the archive itself now and then
        b = mutate_bytes(b, rng)
    return b


def _mutate_text(raw: bytes, rng: random.Random) -> bytes:
    from tests.fuzz import mutate_bytes

    gz = raw[:2] == b"\x1f\x8b"
    if gz:
        try:
            raw = gzip.decompress(raw)
        except Exception:                                      # noqa: BLE001
            return mutate_bytes(raw, rng)
    b = bytearray(raw)
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(b) + 1)
        if rng.random() < 0.7:
            b[i:i] = rng.choice(_TOKENS)
        else:
            b = bytearray(mutate_bytes(bytes(b), rng))
    out = bytes(b)
    if gz:
        out = gzip.compress(out, mtime=0)
        if rng.random() < 0.1:
            out = out[: rng.randrange(len(out) + 1)]
    return out


def mutate(data: bytes, rng: random.Random) -> bytes:
    """Format-aware mutation; a mutator bug falls back to plain byte mutation (never stops a run)."""
    from tests.fuzz import mutate_bytes

    try:
        return _mutate(data, rng)
    except Exception:                                          # noqa: BLE001
        return mutate_bytes(data, rng)


def _mutate(data: bytes, rng: random.Random) -> bytes:
    from tests.fuzz import mutate_bytes

    if not data:
        return bytes([rng.randrange(len(SUFFIXES))])
    tag, body = data[0], data[1:]
    if rng.random() < 0.05:
        tag = rng.randrange(len(SUFFIXES))
    if body[:4] == b"PK\x03\x04":
        body = _mutate_zip(body, rng)
    elif body[:6] == b"\x93NUMPY":
        body = _mutate_npy(body, rng) if rng.random() < 0.5 else mutate_bytes(body, rng)
    else:
        body = _mutate_text(body, rng) if body else mutate_bytes(body, rng)
    return bytes([tag]) + body
