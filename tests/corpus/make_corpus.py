"""Regenerate the hostile-input corpus of malformed graph files (committed; tiny).

Run: python tests/corpus/make_corpus.py.  Every file in graphs/ must be rejected with a clear
GraphFormatError by the readers, and by `argosy partition` with exit code 2 and no store left.
"""
import io
import zipfile
from pathlib import Path

import numpy as np

OUT = Path(__file__).parent / "graphs"


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


if __name__ == "__main__":
    main()
