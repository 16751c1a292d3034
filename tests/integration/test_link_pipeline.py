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
    assert best["metrics"]["test_auc"] == res["test_auc"]

    # slice 2: predict reproduces the test AUC training reported, from best.pt alone
    pred = last_json(argosy("predict", str(tmp_path / "run"), "--out", str(tmp_path / "s.npz"), "--json"))
    assert pred["test_auc"] == pytest.approx(res["test_auc"], abs=1e-6)
    assert pred["test_ap"] == pytest.approx(res["test_ap"], abs=1e-6)
    assert pred["run_test_auc"] == res["test_auc"]
    with np.load(tmp_path / "s.npz") as z:
        assert z["scores"].shape == (pred["pairs"],) and z["edges"].shape == (pred["pairs"], 2)
    pairs = np.array([[0, 633], [1, 2], [5, 6]])
    np.save(tmp_path / "pairs.npy", pairs)
    cli = last_json(argosy("predict", str(tmp_path / "run"), "--edges", str(tmp_path / "pairs.npy"), "--embeddings",
                           "--out", str(tmp_path / "p.npz"), "--json"))
    assert cli["pairs"] == 3 and "test_auc" not in cli
    import argosy as api
    got = api.predict(tmp_path / "run", edges=pairs, embeddings=True)
    with np.load(tmp_path / "p.npz") as z:
        assert np.allclose(got["scores"], z["scores"]) and z["embeddings"].shape == (store.manifest.num_nodes, 32)
    z = got["embeddings"]
    assert np.allclose(got["scores"], (z[pairs[:, 0]] * z[pairs[:, 1]]).sum(1), atol=1e-4)   # the dot scorer
    model = api.load_model(tmp_path / "run")
    assert model.argosy_info["metrics"]["test_auc"] == res["test_auc"]


def test_link_task_needs_an_edge_split(cora_path, tmp_path):
    p = argosy("train", "--data", str(cora_path), "--task", "link", "--run-dir", str(tmp_path / "r"))
    assert p.returncode != 0 and "--edge-split" in p.stderr


def test_killed_sampler_mid_epoch_every_training_edge_once(cora_path, redis_url, tmp_path):
    """SIGKILL a sampler of a link job mid-epoch: its claimed edge ranges are re-claimed, every training
    edge is trained exactly once per epoch (the node pipeline's exactly-once machinery, unchanged)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from argosy.shared.coord import Coordinator
    from tests.integration.test_local_pipeline import ROOT
    store = tmp_path / "store"
    last_json(argosy("partition", str(cora_path), "--parts", "2", "--method", "random", "--edge-split",
                     "0.85,0.05,0.10", "--out", str(store), "--json"))
    train_edges = sum(PartitionStore(store).manifest.link["train_edges"])
    job = "kill-link-sampler"
    proc = subprocess.Popen([sys.executable, "-m", "argosy.services.launch", "train", "--store", str(store),
                             "--task", "link", "--epochs", "4", "--patience", "0", "--samplers", "2",
                             "--batch-size", "64", "--redis", redis_url, "--job", job, "--run-dir", str(tmp_path / "run"),
                             "--claim-timeout", "3", "--json",
                             "--simulate-gpu-step", "0.02"],   # a floor on the job's length: the restart lands in it
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    coord = Coordinator(redis_url, job)
    deadline, victim = time.time() + 120, None
    while time.time() < deadline and victim is None:
        if len(coord.epochs()) >= 1:
            victim = next((s["pid"] for s in coord.services("sampler")), None)
        time.sleep(0.1)
    assert victim, "no sampler registered"
    os.kill(victim, signal.SIGKILL)
    out, err = proc.communicate(timeout=400)
    assert proc.returncode == 0, err[-3000:]
    res = json.loads(out.strip().splitlines()[-1])
    assert res["seeds_trained"] == res["seeds_planned"] == 4 * train_edges
    assert res["duplicates"] == 0 and res["restarts"] >= 1


def test_featureless_graph_learns_node_embeddings_distmult_margin(cora_path, tmp_path):
    """Cora without its features: the trainer learns a 64-wide input row per vertex (the loader sends
    ids only), scored by DistMult and trained by the margin loss; best.pt holds the table and
    ``argosy predict`` reproduces the test AUC training reported from it."""
    with np.load(cora_path) as z:
        np.savez(tmp_path / "nofeat.npz", indptr=z["indptr"], indices=z["indices"])
    run = tmp_path / "run"
    res = last_json(argosy("train", "--data", str(tmp_path / "nofeat.npz"), "--task", "link", "--edge-split",
                           "0.85,0.05,0.10", "--scorer", "distmult", "--link-loss", "margin", "--epochs", "3",
                           "--patience", "0", "--run-dir", str(run), "--json"))
    assert (res["scorer"], res["link_loss"], res["node_embeddings"]) == ("distmult", "margin", 64)
    assert res["seeds_planned"] == res["seeds_trained"] and res["duplicates"] == 0
    best = torch.load(run / "best.pt", weights_only=True)
    assert best["model"]["embedding.table.weight"].shape == (2708, 64) and best["in_dim"] == 0
    assert json.loads(best["spec"])["link"]["loss"] == "margin"
    pred = last_json(argosy("predict", str(run), "--out", str(tmp_path / "s.npz"), "--json"))
    assert pred["test_auc"] == pytest.approx(res["test_auc"], abs=1e-6) and res["test_auc"] > 0.6
    import argosy as api
    pairs = np.array([[0, 633], [1, 2], [5, 6]])
    got = api.predict(run, edges=pairs, embeddings=True)
    z, rel = got["embeddings"], api.load_model(run).scorer.rel.detach().numpy()
    assert np.allclose(got["scores"], (z[pairs[:, 0]] * rel * z[pairs[:, 1]]).sum(1), atol=1e-4)  # DistMult


def test_node_embeddings_split_between_two_trainers_survive_a_killed_trainer(cora_path, tmp_path, redis_url):
    """Two trainers on a featureless graph: each holds only its parts' rows of the learned table
    (the other's are pulled and their gradients pushed back over the halo exchange).  One trainer is
    SIGKILLed after epoch 2: both restart from the checkpoint (each rank's rows and moments from its
    own file), every training edge is still trained once per epoch, best.pt holds the whole table
    gathered from both, and predict reproduces the test AUC from it."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from argosy.shared.coord import Coordinator
    from tests.integration.test_local_pipeline import ROOT
    with np.load(cora_path) as z:
        np.savez(tmp_path / "nofeat.npz", indptr=z["indptr"], indices=z["indices"])
    run, job = tmp_path / "run", "link-shards"
    proc = subprocess.Popen([sys.executable, "-m", "argosy.services.launch", "train", "--data", str(tmp_path / "nofeat.npz"),
                             "--task", "link", "--edge-split", "0.85,0.05,0.10", "--trainers", "2", "--epochs", "5",
                             "--patience", "0", "--node-embeddings", "16", "--parts", "4", "--run-dir", str(run),
                             "--redis", redis_url, "--job", job, "--peer-timeout", "60", "--claim-timeout", "3", "--json"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    coord = Coordinator(redis_url, job)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None and len(coord.epochs()) < 2:
        time.sleep(0.1)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    shards = sorted(p.name for p in run.glob("checkpoint.embeddings-*"))
    assert shards == ["checkpoint.embeddings-0-of-2.pt", "checkpoint.embeddings-1-of-2.pt"]
    os.kill(next(s for s in coord.services("trainer") if s.get("rank") == 1)["pid"], signal.SIGKILL)
    out, err = proc.communicate(timeout=400)
    assert proc.returncode == 0, err[-3000:]
    res = json.loads(out.strip().splitlines()[-1])
    store = PartitionStore(run / "store")
    train_edges = sum(store.manifest.link["train_edges"])
    assert res["trainer_restarts"] == 1 and res["resumed_from_epoch"] >= 1 and res["epochs"] == 5
    assert res["seeds_trained"] == res["seeds_planned"] == 5 * train_edges and res["duplicates"] == 0
    rows = res["node_embedding_rows"]                       # every row on exactly one trainer
    assert len(rows) == 2 and sum(rows) == 2708 and min(rows) > 0
    assert res["embedding_rows_pulled"] > 0 and res["embedding_bytes"] > 0
    shard = torch.load(run / "checkpoint.embeddings-1-of-2.pt", weights_only=True)
    assert shard["weight"].shape == (rows[1], 16)           # a rank's file: its rows only
    best = torch.load(run / "best.pt", weights_only=True)
    assert best["model"]["embedding.table.weight"].shape == (2708, 16)
    pred = last_json(argosy("predict", str(run), "--out", str(tmp_path / "s.npz"), "--json"))
    assert pred["test_auc"] == pytest.approx(res["test_auc"], abs=1e-6) and res["test_auc"] > 0.6
