"""The streamed DC-SBM dataset writer: any chunk size writes the same bytes, labels follow the
planted communities, the edges stay mostly inside them, features carry the labels' centroids."""
from __future__ import annotations

import filecmp
import json

import numpy as np
import pytest

from argosy.shared.synthetic_big import (DATASET_FILES, dcsbm_communities, partition_argv, preset,
                                         write_dcsbm_dataset)

PARAMS = dict(num_nodes=6000, num_edges=48000, feature_dim=16, num_classes=8, num_communities=32,
              num_train=1800, num_val=600, num_test=1200, seed=3)


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    d = tmp_path_factory.mktemp("ds")
    write_dcsbm_dataset(d / "a", **PARAMS, feature_dtype="float32")
    write_dcsbm_dataset(d / "b", **PARAMS, feature_dtype="float32", chunk_rows=777)
    return d


def test_chunking_does_not_change_a_byte(ds):
    for name in DATASET_FILES:
        assert filecmp.cmp(ds / "a" / f"{name}.npy", ds / "b" / f"{name}.npy", shallow=False), name
    assert not list((ds / "a").glob("*.tmp"))


def test_labels_follow_communities_and_edges_stay_inside(ds):
    d = ds / "a"
    labels = np.load(d / "labels.npy")
    comm = dcsbm_communities(6000, 32, 1.5, 3)
    np.testing.assert_array_equal(labels, comm % 8)
    assert labels.dtype == np.int16
    e = np.load(d / "edges.npy")
    assert e.shape == (48000, 2) and e.dtype == np.int32
    assert np.mean(comm[e[:, 0]] == comm[e[:, 1]]) > 0.85          # mixing 0.1: ~90 % inside


def test_features_carry_the_label_and_splits_are_disjoint(ds):
    d = ds / "a"
    x, y = np.load(d / "features.npy"), np.load(d / "labels.npy")
    assert x.shape == (6000, 16) and x.dtype == np.float32
    means = np.stack([x[y == c].mean(0) for c in range(8)])
    centroids = np.random.default_rng(4).standard_normal((8, 16))   # seed + 1
    np.testing.assert_allclose(means, centroids, atol=0.5)           # noise 5 over ~750 rows: std ~0.18
    assert abs(x.std() - np.sqrt(1 + 25)) < 0.3
    masks = [np.load(d / f"{s}_mask.npy") for s in ("train", "val", "test")]
    assert sum(m.astype(int) for m in masks).max() == 1
    rec = json.loads((d / "dataset.json").read_text())
    for m, (key, want) in zip(masks, (("train", 1800), ("val", 600), ("test", 1200))):
        assert rec["splits"][key] == int(m.sum()) and abs(int(m.sum()) - want) < 5 * np.sqrt(want)


def test_float16_features_are_the_float32_ones_rounded(ds, tmp_path):
    write_dcsbm_dataset(tmp_path, **PARAMS, edges=False)
    assert not (tmp_path / "edges.npy").exists()
    np.testing.assert_array_equal(np.load(tmp_path / "features.npy"),
                                  np.load(ds / "a" / "features.npy").astype(np.float16))


def test_preset_scales_and_rejects_bad_input(tmp_path):
    p = preset("papers100m", 0.01)
    assert (p["num_nodes"], p["num_edges"], p["num_train"]) == (1_110_600, 16_156_859, 12_072)
    assert p["feature_dim"] == 128 and p["feature_dtype"] == "float16" and p["num_classes"] == 172
    with pytest.raises(ValueError, match="unknown preset 'ogbn'"):
        preset("ogbn")
    with pytest.raises(ValueError, match=r"scale must be in \(0, 1\] \(got 2"):
        preset("papers100m", 2)
    with pytest.raises(ValueError, match="sum to at most num_nodes=10"):
        write_dcsbm_dataset(tmp_path, 10, 20, num_train=8, num_val=8)
    with pytest.raises(ValueError, match="float16 or float32 \\(got 'int8'\\)"):
        write_dcsbm_dataset(tmp_path, 10, 20, feature_dtype="int8")
    assert partition_argv(tmp_path)[0] == str(tmp_path / "edges.npy")
