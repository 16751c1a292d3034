"""Integration: ``argosy train --task link`` through real sampler/loader/trainer processes on Cora."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from argosy.shared.store import PartitionStore
from tests.integration.test_local_pipeline import argosy, last_json

pytestmark = pytest.mark.integration


def test_link_job_trains_every_training_edge_once_per_epoch(cora_path, tmp_path):
    res = last_json(argosy("train", "--data", str(cora_path), "--task", "link", "--edge-split", "0.85,0.05,0.10",
                           "--parts", "2", "--partition-method", "random", "--epochs", "2", "--patience", "0",
                           "--samplers", "2", "--batch-size", "256", "--run-dir", str(tmp_path / "run"), "--json"))
    store = PartitionStore(tmp_path / "run" / "store")
    link = store.manifest.link
    train_edges = sum(link["train_edges"])
    assert link["split"]["kind"] == "random" and link["split"]["val_edges"] > 0
    # the stored graph holds only the training edges (Cora: 5278 undirected edges in all)
    assert store.manifest.num_edges == train_edges == 5278 - link["split"]["val_edges"] - link["split"]["test_edges"]
    assert res["task"] == "link"
    assert res["seeds_planned"] == res["seeds_trained"] == 2 * train_edges
    assert res["duplicates"] == 0 and res["seeds_dropped"] == 0
    for k in ("val_auc", "val_ap", "test_auc", "test_ap", "test_hits", "test_mrr"):
        assert 0.0 <= res[k] <= 1.0
    best = torch.load(tmp_path / "run" / "best.pt", weights_only=True)
    assert json.loads(best["spec"])["trainer"]["task"] == "link"
    assert any(k.startswith("encoder.") for k in best["model"])


def test_link_task_needs_an_edge_split(cora_path, tmp_path):
    p = argosy("train", "--data", str(cora_path), "--task", "link", "--run-dir", str(tmp_path / "r"))
    assert p.returncode != 0 and "--edge-split" in p.stderr
