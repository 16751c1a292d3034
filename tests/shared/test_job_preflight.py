"""Fail fast, once, completely: `check_job` looks at the whole job (data, split, model, device)
before anything is partitioned or started, and reports every problem in one error.  Each test is a
new-user mistake from issue 31, with the message the user reads."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from argosy.shared.config import JobConfig, SamplerConfig, TrainerConfig
from argosy.shared.errors import ConfigError
from argosy.shared.graphio import save_graph_npz
from argosy.shared.preflight import JobInputs, TrainInputError, check_job
from argosy.shared.splits import make_split, parse_split
from tests.graphs import random_graph

ROOT = Path(__file__).resolve().parents[2]

MODELS = '''
import torch
from torch import nn


class Wide(nn.Module):                       # ignores out_channels: 64 logits on a 3-class graph
    def __init__(self, in_channels, hidden_channels, num_layers, out_channels):
        super().__init__()
        self.lin = nn.Linear(in_channels, 64)

    def forward(self, x, edge_index):
        return self.lin(x)


class Fine(nn.Module):
    def __init__(self, in_channels, hidden_channels, num_layers, out_channels):
        super().__init__()
        self.lin = nn.Linear(in_channels, out_channels)

    def forward(self, x, edge_index):
        return self.lin(x)


def wrong_signature(in_dim, classes):        # not Argosy's keyword arguments
    return Fine(in_dim, 8, 2, classes)


def crashes(**kw):
    m = Fine(**kw)
    m.forward = lambda x, edge_index: x @ torch.ones(3, 3)
    return m
'''


@pytest.fixture
def models(tmp_path, monkeypatch):
    """A user's model module in the working directory, as `argosy train` is run next to it."""
    (tmp_path / "usermodels.py").write_text(MODELS)
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("usermodels", None)
    yield "usermodels"
    sys.modules.pop("usermodels", None)


@pytest.fixture
def graph(tmp_path):
    g = random_graph(200, 900, seed=4, features=8, classes=3)
    path = tmp_path / "g.npz"
    save_graph_npz(g, path)
    return path


def _cfg(model="sage", device="cpu"):
    return JobConfig(sampler=SamplerConfig(fanouts=(5, 5), eval_fanouts=(-1, -1)),
                     trainer=TrainerConfig(model=model, device=device))


def test_output_width_that_does_not_match_the_classes_is_an_error(models, graph):
    with pytest.raises(TrainInputError, match=r"--model usermodels:Wide: the model's output has shape \(6, 64\) "
                                              r"on 6 vertices, expected \(6, 3\): one logit per class"):
        check_job(_cfg("usermodels:Wide"), JobInputs(data=str(graph)))
    check_job(_cfg("usermodels:Fine"), JobInputs(data=str(graph)))          # the right width passes


def test_factory_with_the_wrong_signature_is_reported_with_the_call_argosy_makes(models, graph):
    with pytest.raises(TrainInputError, match=r"--model usermodels:wrong_signature: wrong_signature\(in_channels=8, "
                                              r"hidden_channels=64, num_layers=2, out_channels=3\) failed: "
                                              r"wrong_signature\(\) got an unexpected keyword argument 'in_channels'"):
        check_job(_cfg("usermodels:wrong_signature"), JobInputs(data=str(graph)))


def test_forward_that_raises_is_reported(models, graph):
    with pytest.raises(TrainInputError, match=r"a forward pass on a 6-vertex test graph \(8 features, 2 hops\) "
                                              r"failed: RuntimeError"):
        check_job(_cfg("usermodels:crashes"), JobInputs(data=str(graph)))


def test_unimportable_module_is_reported(graph):
    with pytest.raises(TrainInputError, match=r"cannot import no_such_module_xyz"):
        check_job(_cfg("no_such_module_xyz:Net"), JobInputs(data=str(graph)))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_device_cuda_without_cuda_is_an_error_up_front(graph):
    with pytest.raises(TrainInputError, match=r"--device cuda: no CUDA device is available on this machine"):
        check_job(_cfg(device="cuda"), JobInputs(data=str(graph)))


def test_a_raw_edge_list_gets_every_missing_item_in_one_error(tmp_path, models):
    """The SNAP edge list that used to fail three times in a row, one missing item at a time."""
    edges = tmp_path / "edges.txt"
    edges.write_text("0 1\n1 2\n2 0\n2 3\n")
    with pytest.raises(TrainInputError) as err:
        check_job(_cfg("usermodels:Wide"), JobInputs(data=str(edges), side={"labels": str(tmp_path / "missing.npy")}))
    msg = str(err.value)
    assert msg.startswith("3 problems:"), msg
    assert "missing.npy: no such file (given for labels)" in msg
    assert "the graph has no node features" in msg and "--random-features DIM" in msg
    assert "no train_mask, val_mask, test_mask" in msg and "--split random:0.6,0.2,0.2" in msg


def test_side_files_and_a_generated_split_pass(tmp_path):
    edges = tmp_path / "edges.txt"
    edges.write_text("0 1\n1 2\n2 0\n2 3\n3 4\n4 5\n")
    np.save(tmp_path / "x.npy", np.ones((6, 5), np.float32))
    np.save(tmp_path / "y.npy", np.array([0, 1, 0, 1, 0, 1]))
    check_job(_cfg(), JobInputs(data=str(edges), split="random:0.5,0.25,0.25",
                                side={"features": str(tmp_path / "x.npy"), "labels": str(tmp_path / "y.npy")}))


@pytest.mark.parametrize("text, match", [
    ("random:0.6,0.3,0.3", r"the fractions must .* sum to at most 1 \(got sum 1.2\)"),
    ("per-class:20.5,500,1000", r"per-class takes whole counts"),
    ("stratified:1,2,3", r"unknown split kind 'stratified'"),
    ("random:0.6,0.2", r"expected three non-negative numbers \(got '0.6,0.2'\)"),
])
def test_bad_split_specs(text, match):
    with pytest.raises(ConfigError, match=match):
        parse_split(text)


def test_per_class_split_is_planetoid_style_and_seeded():
    labels = np.repeat(np.arange(4), 300)
    labels[::7] = -1                                        # unlabelled vertices are never in a split
    masks, rec = make_split(labels, parse_split("per-class:20,100,200"), seed=3)
    assert [int(np.count_nonzero(masks["train_mask"] & (labels == c))) for c in range(4)] == [20] * 4
    assert rec == {"spec": {"kind": "per-class", "train": 20.0, "val": 100.0, "test": 200.0}, "seed": 3,
                   "train": 80, "val": 100, "test": 200}
    union = masks["train_mask"].astype(int) + masks["val_mask"] + masks["test_mask"]
    assert union.max() == 1 and not union[labels < 0].any()
    again, _ = make_split(labels, parse_split("per-class:20,100,200"), seed=3)
    other, _ = make_split(labels, parse_split("per-class:20,100,200"), seed=4)
    assert all((again[k] == masks[k]).all() for k in masks)
    assert not (other["train_mask"] == masks["train_mask"]).all()
    with pytest.raises(ConfigError, match=r"class 0 has only .* labelled vertices \(want 400 per class\)"):
        make_split(labels, parse_split("per-class:400,1,1"), seed=0)


def test_random_split_fractions():
    masks, rec = make_split(np.arange(1000) % 5, parse_split("random:0.6,0.2,0.2"), seed=0)
    assert (rec["train"], rec["val"], rec["test"]) == (600, 200, 200)


def test_cli_fails_before_partitioning_and_leaves_no_run_dir(tmp_path, graph):
    (tmp_path / "usermodels.py").write_text(MODELS)
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "argosy.services.launch", "train", "--data", str(graph),
                           "--model", "usermodels:Wide", "--run-dir", str(run_dir), "--json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "output has shape (6, 64)" in proc.stderr
    assert not run_dir.exists()                       # nothing partitioned, no service, no directory left


def test_generated_split_is_recorded_in_the_manifest(tmp_path):
    g = random_graph(300, 1500, seed=2, features=4, classes=3)
    g.train_mask = g.val_mask = g.test_mask = None
    save_graph_npz(g, tmp_path / "g.npz")
    proc = subprocess.run([sys.executable, "-m", "argosy.services.partitioner", str(tmp_path / "g.npz"),
                           "--parts", "2", "--method", "hash", "--out", str(tmp_path / "s"), "--seed", "5",
                           "--split", "per-class:10,50,100"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    from argosy.shared.store import PartitionStore
    m = PartitionStore(tmp_path / "s").manifest
    assert m.partition["split"]["seed"] == 5 and m.partition["split"]["train"] == 30
    assert m.splits["train"] == 30 and m.splits["val"] == 50 and m.splits["test"] == 100


def test_a_factory_signature_error_is_deterministic_in_the_trainer_too(models):
    """Past the preflight (a spec submitted by hand), the trainer exits as cannot-start (ValueError is
    in lifecycle's deterministic errors), so the driver fails the job instead of restarting it 3 times."""
    from argosy.shared.lifecycle import _CANNOT_START
    from argosy.shared.models import build_model
    from argosy.shared.usermodel import with_cwd_on_path
    with with_cwd_on_path(), pytest.raises(_CANNOT_START, match=r"unexpected keyword argument 'in_channels'"):
        build_model("usermodels:wrong_signature", 8, 16, 3, 2)


def test_the_model_check_runs_in_a_child_when_torch_is_not_loaded(models, graph, monkeypatch):
    """The launcher never imports torch (the probe runs in a child): same refusals, same sentences."""
    monkeypatch.delitem(sys.modules, "torch")
    with pytest.raises(TrainInputError, match=r"--model usermodels:Wide: the model's output has shape \(6, 64\) "
                                              r"on 6 vertices, expected \(6, 3\)"):
        check_job(_cfg("usermodels:Wide"), JobInputs(data=str(graph)))
    check_job(_cfg("usermodels:Fine"), JobInputs(data=str(graph)))
    assert "torch" not in sys.modules


def test_a_launcher_process_checks_a_job_without_importing_torch(graph):
    import subprocess
    code = ("import sys\n"
            "from argosy.shared.config import JobConfig, SamplerConfig, TrainerConfig\n"
            "from argosy.shared.preflight import JobInputs, check_job\n"
            "check_job(JobConfig(sampler=SamplerConfig(fanouts=(5, 5)), trainer=TrainerConfig(model='sage', "
            "device='cpu')), JobInputs(data=sys.argv[1]))\n"
            "print('torch' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code, str(graph)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "False"
