"""Regenerate the hostile-input corpus of malformed graph files (committed; tiny).

Run: python tests/corpus/make_corpus.py.  Every file in graphs/ must be rejected with a clear
GraphFormatError by the readers, and by `argosy partition` with exit code 2 and no store left.
Every file in accepted/ is a hostile-looking but valid encoding of the same small graph
(REFERENCE_EDGES, 6 vertices) and must load as exactly that graph.

Classes (by file name prefix): text_*, npz_* (and the original npz names), npy_*, fs_*
(filesystem), zip_*, num_* (numeric edge cases).
"""
import gzip
import io
import zipfile
from pathlib import Path

import numpy as np

OUT = Path(__file__).parent / "graphs"
ACCEPT = Path(__file__).parent / "accepted"
REFERENCE_EDGES = [(0, 1), (1, 2), (2, 0), (2, 3), (3, 4), (4, 5)]


def npz(name, **arrays):
    np.savez(OUT / name, **arrays)


def main():
    OUT.mkdir(exist_ok=True)
    ok = dict(indptr=np.array([0, 1, 2]), indices=np.array([1, 0], np.int32))
    npz("indptr_decreasing.npz", indptr=np.array([0, 2, 1]), indices=np.array([1, 0]))
    npz("indptr_len_mismatch.npz", indptr=np.array([0, 1, 5]), indices=np.array([1, 0]))
    npz("neighbor_out_of_range.npz", indptr=np.array([0, 1, 2]), indices=np.array([1, 7]))
    npz("neighbor_negative.npz", indptr=np.array([0, 1, 2]), indices=np.array([1, -3]))
    npz("float_indices.npz", indptr=np.array([0, 1, 2]), indices=np.array([1.0, 0.0]))
    npz("features_nan.npz", **ok, features=np.array([[np.nan], [1.0]], np.float32))
    npz("features_inf.npz", **ok, features=np.array([[np.inf], [1.0]], np.float32))
    npz("features_wrong_rows.npz", **ok, features=np.ones((3, 2), np.float32))
    npz("features_int.npz", **ok, features=np.ones((2, 2), np.int64))
    npz("labels_wrong_len.npz", **ok, labels=np.array([0, 1, 1]))
    npz("labels_float.npz", **ok, labels=np.array([0.5, 1.0]))
    npz("mask_wrong_len.npz", **ok, train_mask=np.array([True]))
    npz("no_graph_arrays.npz", x=np.arange(3))
    full = io.BytesIO()
    np.savez(full, **ok, features=np.ones((2, 64), np.float32))
    (OUT / "truncated.npz").write_bytes(full.getvalue()[: len(full.getvalue()) // 2])
    (OUT / "not_a_zip.npz").write_bytes(b"this is not a zip archive at all")
    # a member whose .npy header declares a huge array (10^12 x 2) but holds 16 bytes
    header = np.lib.format.header_data_from_array_1_0(np.zeros((1, 2), np.int64))
    header["shape"] = (10**12, 2)
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    buf.write(b"\x00" * 16)
    with zipfile.ZipFile(OUT / "huge_declared.npz", "w") as z:
        z.writestr("indptr.npy", buf.getvalue())
        z.writestr("indices.npy", buf.getvalue())
    (OUT / "huge_declared.npy").write_bytes(buf.getvalue())
    (OUT / "edges_wrong_shape.npy").write_bytes(b"")
    np.save(OUT / "edges_wrong_shape.npy", np.arange(9).reshape(3, 3))
    np.save(OUT / "edges_negative.npy", np.array([[0, 1], [-1, 2]]))
    (OUT / "text_garbage.txt").write_text("0 1\n1 2\nhello world\n")
    (OUT / "text_one_column.txt").write_text("0 1\n5\n")
    (OUT / "text_negative.txt").write_text("# c\n0 1\n-4 2\n")
    (OUT / "text_float_ids.txt").write_text("0 1\n1.5 2\n")
    (OUT / "text_empty.txt").write_text("# only comments\n\n")
    (OUT / "text_binary.txt").write_bytes(bytes(range(256)) * 4)
    hostile_more()
    accepted()


def _npy_bytes(arr) -> bytes:
    b = io.BytesIO()
    np.save(b, arr, allow_pickle=True)
    return b.getvalue()


def _npy_with_header(header: bytes, body: bytes = b"") -> bytes:
    pad = 64 - (10 + len(header) + 1) % 64
    h = header + b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + len(h).to_bytes(2, "little") + h + body


def _zip(path, members: dict, method=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", method) as z:
        for name, data in members.items():
            z.writestr(name, data)


def hostile_more():
    """The second half of the corpus: one or more files per class of fault."""
    ok = dict(indptr=np.array([0, 1, 2]), indices=np.array([1, 0], np.int32))
    # text
    (OUT / "text_overflow_u64.txt").write_text("0 1\n18446744073709551618 2\n")      # 2**64 + 2
    (OUT / "text_beyond_int64.txt").write_text("0 1\n99999999999999999999999 3\n")
    (OUT / "text_utf16.txt").write_bytes("0 1\n1 2\n".encode("utf-16"))
    (OUT / "text_only_header.csv").write_text("src,dst\n")
    (OUT / "text_two_headers.csv").write_text("src,dst\nfrom,to\n0,1\n")
    (OUT / "text_semicolon.txt").write_text("0;1\n1;2\n")
    (OUT / "text_hex_ids.txt").write_text("0x1 0x2\n")
    (OUT / "text_long_line.txt").write_text("1" * 100_000)
    (OUT / "text_truncated.txt.gz").write_bytes(gzip.compress(bytes(range(48, 58)) * 400, mtime=0)[:-12])
    (OUT / "text_gz_garbage.txt.gz").write_bytes(b"\x1f\x8b\x08\x00" + bytes(range(200)))
    (OUT / "text_gz_binary.txt.gz").write_bytes(gzip.compress(bytes(range(256)) * 4, mtime=0))
    (OUT / "text_empty.txt.gz").write_bytes(gzip.compress(b"", mtime=0))
    # npz members
    objs = np.empty(2, object)
    objs[:] = [1, 0]
    _zip(OUT / "npz_pickled_indices.npz", {"indptr.npy": _npy_bytes(ok["indptr"]), "indices.npy": _npy_bytes(objs)})
    feats = np.empty((2, 1), object)
    feats[:] = [[1.0], [2.0]]
    _zip(OUT / "npz_pickled_features.npz", {"indptr.npy": _npy_bytes(ok["indptr"]),
                                            "indices.npy": _npy_bytes(ok["indices"]), "features.npy": _npy_bytes(feats)})
    npz("npz_features_f64_overflow.npz", **ok, features=np.array([[1e300], [1.0]]))
    npz("npz_features_f16_inf.npz", **ok, features=np.array([[np.inf], [1.0]], np.float16))
    npz("npz_labels_negative.npz", **ok, labels=np.array([0, -5]))
    npz("npz_labels_out_of_range.npz", **ok, labels=np.array([0, 10**9]))
    npz("npz_mask_float.npz", **ok, labels=np.array([0, 1]), train_mask=np.array([1.0, 0.0]))
    npz("npz_masks_overlap.npz", **ok, labels=np.array([0, 1]), train_mask=np.array([True, False]),
        test_mask=np.array([True, True]))
    npz("npz_train_unlabelled.npz", **ok, labels=np.array([0, -1]), train_mask=np.array([False, True]))
    npz("npz_x_and_features.npz", **ok, x=np.ones((2, 1), np.float32), features=np.ones((2, 1), np.float32))
    npz("npz_indices_2d.npz", indptr=np.array([0, 1, 2]), indices=np.array([[1], [0]]))
    npz("npz_indptr_not_zero.npz", indptr=np.array([1, 2, 3]), indices=np.array([1, 0, 1]))
    npz("npz_num_nodes_huge.npz", src=np.array([0]), dst=np.array([1]), num_nodes=np.int64(10**15))
    npz("npz_src_dst_mismatch.npz", src=np.array([0, 1]), dst=np.array([1]))
    npz("npz_complex_features.npz", **ok, features=np.ones((2, 1), np.complex64))
    npz("npz_string_labels.npz", **ok, labels=np.array(["a", "b"]))
    npz("npz_features_zero_columns.npz", **ok, features=np.ones((2, 0), np.float32))
    npz("npz_mask_values_2.npz", **ok, labels=np.array([0, 1]), train_mask=np.array([2, 0]))
    # zip containers
    indptr_b = _npy_bytes(np.array([0, 1, 2, 3, 4]))
    ind = _npy_bytes(np.array([1, 0, 3, 2], np.int64))
    _zip(OUT / "zip_short_stored_member.npz", {"indptr.npy": indptr_b, "indices.npy": ind[:-16]})
    (OUT / "zip_zero_byte.npz").write_bytes(b"")
    full = io.BytesIO()
    np.savez(full, indptr=np.array([0, 1, 2, 3, 4]), indices=np.array([1, 0, 3, 2]))
    (OUT / "zip_truncated_central_dir.npz").write_bytes(full.getvalue()[:-10])
    comp = io.BytesIO()
    np.savez_compressed(comp, indptr=np.array([0, 1, 2, 3, 4]), indices=np.arange(4000) % 4)
    b = bytearray(comp.getvalue())
    mid = b.find(b"indices.npy") + 200
    b[mid] ^= 0xFF
    (OUT / "zip_bad_crc.npz").write_bytes(bytes(b))
    enc = bytearray(full.getvalue())
    for sig, off in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        i = enc.find(sig)
        while i >= 0:
            enc[i + off] |= 1
            i = enc.find(sig, i + 4)
    (OUT / "zip_encrypted_flag.npz").write_bytes(bytes(enc))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _zip(OUT / "zip_duplicate_members.npz", {"indptr.npy": indptr_b, "indices.npy": ind})
        with zipfile.ZipFile(OUT / "zip_duplicate_members.npz", "a") as z:
            z.writestr("indices.npy", ind)
    _zip(OUT / "zip_no_npy_members.npz", {"readme.txt": b"hello"})
    # npy
    (OUT / "npy_object.npy").write_bytes(_npy_bytes(np.array([[0, 1], [1, None]], object)))
    np.save(OUT / "npy_float_edges.npy", np.array([[0.0, 1.0], [1.0, 2.0]]))
    np.save(OUT / "npy_1d.npy", np.arange(6))
    (OUT / "npy_truncated.npy").write_bytes(_npy_bytes(np.zeros((100, 2), np.int64))[:200])
    (OUT / "npy_bad_version.npy").write_bytes(b"\x93NUMPY\x09\x00" + b"\x00" * 64)
    np.save(OUT / "npy_uint64_huge.npy", np.array([[0, 1], [2**63 + 5, 2]], np.uint64))
    np.save(OUT / "npy_structured.npy", np.zeros(3, dtype=[("a", "<i4"), ("b", "<i4")]))
    (OUT / "npy_header_garbage.npy").write_bytes(_npy_with_header(b"{'descr': '<i8', 'shape': (2, 2), (((", b"\0" * 32))
    (OUT / "npy_negative_shape.npy").write_bytes(
        _npy_with_header(b"{'descr': '<i8', 'fortran_order': False, 'shape': (-2, 2), }", b"\0" * 32))
    # filesystem
    d = OUT / "fs_directory.npz"
    d.mkdir(exist_ok=True)
    (d / "README").write_text("a directory named like a graph file\n")
    (OUT / "fs_zero_byte.npy").write_bytes(b"")
    (OUT / "fs_unknown_format.graphml").write_text("<graphml></graphml>\n")
    (OUT / "fs_zero_byte.txt").write_bytes(b"")
    # numeric edge cases
    (OUT / "num_int64_max_id.txt").write_text("0 9223372036854775807\n")
    np.save(OUT / "num_int64_min.npy", np.array([[0, 1], [-(2**63), 2]], np.int64))
    npz("num_labels_int64_max.npz", **ok, labels=np.array([0, 2**63 - 1]))
    npz("num_features_f64_min.npz", **ok, features=np.array([[-1e39], [0.0]]))
    np.save(OUT / "num_sparse_ids.npy", np.array([[0, 1], [2**40, 3]], np.int64))


def accepted():
    """Valid files in awkward encodings: each must load as REFERENCE_EDGES."""
    ACCEPT.mkdir(exist_ok=True)
    e = np.array(REFERENCE_EDGES, np.int64)
    u, v = e[:, 0], e[:, 1]
    np.save(ACCEPT / "bigendian.npy", e.astype(">i8"))
    np.save(ACCEPT / "fortran.npy", np.asfortranarray(e.astype(np.int32)))
    np.save(ACCEPT / "fortran_bigendian_u16.npy", np.asfortranarray(e.astype(">u2")))
    s = np.concatenate([u, v])
    t = np.concatenate([v, u])
    o = np.lexsort((t, s))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(s, minlength=6))])
    feats = np.arange(12, dtype=np.float64).reshape(6, 2)
    with open(ACCEPT / "UPPER.NPZ", "wb") as f:  # np.savez(path) would append ".npz"
        np.savez(f, indptr=indptr.astype(">i8"), indices=t[o].astype(">i4"),
                 x=np.asfortranarray(feats), y=np.array([0, 1, 0, 1, 0, 1]))
    np.savez_compressed(ACCEPT / "compressed_fortran.npz", indptr=indptr, indices=t[o],
                        features=np.asfortranarray(feats.astype(">f4")))
    # asymmetric CSR (one direction only): symmetrised with a warning
    o1 = np.argsort(u, kind="stable")
    np.savez(ACCEPT / "asymmetric.npz", indptr=np.concatenate([[0], np.cumsum(np.bincount(u, minlength=6))]),
             indices=v[o1])
    np.savez(ACCEPT / "src_dst.npz", src=u.astype(np.uint32), dst=v.astype(np.uint32), num_nodes=np.int64(6))
    lines = [f"{a} {b}" for a, b in REFERENCE_EDGES]
    (ACCEPT / "bom_header.csv").write_bytes(b"\xef\xbb\xbf" + ("source,target\n" + "\n".join(
        ln.replace(" ", ",") for ln in lines) + "\n").encode())
    (ACCEPT / "weighted.tsv").write_text("".join(f"{a}\t{b}\t{0.5 + a}\n" for a, b in REFERENCE_EDGES))
    (ACCEPT / "snap.txt.gz").write_bytes(gzip.compress(("# Directed graph\n# FromNodeId\tToNodeId\n" + "\n".join(
        lines) + "\n").encode(), mtime=0))
    (ACCEPT / "crlf_no_final_newline.TXT").write_bytes("\r\n".join(lines).encode())
    (ACCEPT / "plus_minus_zero.el").write_text("-0 +1\n1 2\n2 0\n+2 3\n3 4\n4 5\n4 5\n5 5\n")
    (ACCEPT / "quoted_header.csv").write_text('"src","dst","w"\n' + "\n".join(
        ln.replace(" ", ",") + ",1" for ln in lines) + "\n")


if __name__ == "__main__":
    main()
