"""Link models beyond the dot product: DistMult, the margin loss, learned node embeddings.

Real sampler, loader and trainer cores on small stores (the pipeline test in
``tests/integration/test_link_pipeline.py`` runs the same through the processes and ``predict``).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from argosy.shared.config import JobConfig, LinkConfig, TrainerConfig
from argosy.shared.errors import ConfigError
from argosy.shared.plan import plan_phase
from argosy.shared.preflight import TrainInputError, check_trainable
from argosy.services.loader.core import LoaderCore
from argosy.services.sampler.core import SamplerCore
from argosy.services.trainer.core import TrainerCore
from tests.shared.test_linkpred import link_store


def _batches(store, link, phase="train", size=64):
    core = SamplerCore(store, link=link)
    fanouts = (5, 5) if phase == "train" else (-1, -1)
    return [LoaderCore(store).load(core.sample_item(it, fanouts))
            for it in plan_phase(store, phase, 0, size if phase == "train" else 1024, 1, task="link")]


@pytest.mark.parametrize("scorer, loss", [("distmult", "bce"), ("dot", "margin"), ("distmult", "margin"),
                                          ("mlp", "margin")])
def test_scorers_and_losses_train(tmp_path, scorer, loss):
    _, store, _ = link_store(tmp_path, n=200, m=1200)
    link = LinkConfig(scorer=scorer, loss=loss, negatives=2)
    fb = _batches(store, link)[0]
    tr = TrainerCore(TrainerConfig(task="link", normalize_features=False), store.manifest.feature_dim, 1, 2, link=link)
    before = [p.detach().clone() for p in tr.model.scorer.parameters()]
    losses = [tr.train_step(fb)["loss"] for _ in range(60)]
    assert np.isfinite(losses).all() and losses[-1] < 0.8 * losses[0], losses
    changed = [not torch.equal(a, b) for a, b in zip(before, tr.model.scorer.parameters())]
    assert len(changed) == {"dot": 0, "distmult": 1, "mlp": 4}[scorer] and (not changed or any(changed))  # r / MLP learn
    if scorer == "distmult":
        z = torch.randn(4, tr.cfg.hidden)
        pairs = torch.tensor([[0, 1], [2, 3]])
        want = (z[[0, 2]] * tr.model.scorer.rel * z[[1, 3]]).sum(1)
        torch.testing.assert_close(tr.model.score(z, pairs), want)
    ev = _batches(store, link, "val")[0]
    r = tr.eval_step(ev)
    assert r["scores"].shape == (ev.link_pairs.shape[0],) and np.isfinite(r["loss_sum"])


def test_margin_loss_is_the_ranking_hinge(tmp_path):
    """Training batch: each positive against its own K negatives; eval batch: against every negative."""
    _, store, _ = link_store(tmp_path, n=200, m=1200)
    link = LinkConfig(loss="margin", margin=0.5, negatives=3)
    tr = TrainerCore(TrainerConfig(task="link", normalize_features=False), store.manifest.feature_dim, 1, 2, link=link)
    fb = _batches(store, link)[0]
    b = tr.stage(fb)
    P = b.positives
    assert P * 4 == b.count and (fb.link_pairs[:P, 2] == 1).all() and (fb.link_pairs[P:, 2] == 0).all()
    with torch.no_grad():
        s, loss, _ = tr._forward(tr.model, b)
    brute = np.mean([max(0.0, 0.5 - float(s[i]) + float(s[P + i * 3 + j])) for i in range(P) for j in range(3)])
    assert float(loss) / b.count == pytest.approx(brute, rel=1e-5)
    fb.link_pairs = fb.link_pairs[::-1].copy()          # not the sampler's layout: ranked as a whole batch
    assert tr.stage(fb).positives == 0
    ev = tr.stage(_batches(store, link, "val")[0])
    assert ev.positives == 0
    with torch.no_grad():
        s, loss, _ = tr._forward(tr.model, ev)
    y = ev.pairs[:, 2].numpy() == 1
    brute = np.maximum(0.0, 0.5 - s.numpy()[y][:, None] + s.numpy()[~y][None, :]).mean()
    assert float(loss) / ev.count == pytest.approx(brute, rel=1e-5)


def test_featureless_store_learns_node_embeddings_sparsely(tmp_path):
    g, store, _ = link_store(tmp_path, n=300, m=2000, features=0)
    assert store.manifest.feature_dim == 0
    cfg = JobConfig(store=str(store.root), trainer=TrainerConfig(task="link"), link=LinkConfig())
    check_trainable(store, cfg)                          # featureless is fine: embeddings are on by default
    assert cfg.trainer.normalize_features is False
    link = cfg.link
    fb = _batches(store, link)[0]
    assert fb.features.shape == (fb.nodes.shape[0], 0)    # the loader sends ids only
    n = store.manifest.num_nodes
    tr = TrainerCore(cfg.trainer, 0, 1, 2, link=link, num_nodes=n)
    assert tr.embedding_dim == 64 and tr.in_dim == 64 and tr.sparse_opt is not None
    table = tr.model.embedding.table.weight
    before = table.detach().clone()
    losses = [tr.train_step(fb)["loss"] for _ in range(20)]
    assert losses[-1] < 0.7 * losses[0], losses
    assert table.grad is None or table.grad.is_sparse
    moved = (table.detach() != before).any(1).numpy()
    assert moved.any() and np.array_equal(np.flatnonzero(moved), np.unique(fb.nodes))  # only the batch's rows
    state = tr.state()
    tr2 = TrainerCore(cfg.trainer, 0, 1, 2, link=link, num_nodes=n, seed=9)
    tr2.load_state(state)                                 # a resumed trainer has the table and its moments
    assert torch.equal(tr2.model.embedding.table.weight, table)
    assert tr2.sparse_opt.state_dict()["state"].keys() == tr.sparse_opt.state_dict()["state"].keys()


def test_featureless_needs_embeddings_and_node_task_is_unchanged(tmp_path):
    _, store, _ = link_store(tmp_path, n=200, m=1200, features=0)
    off = JobConfig(store=str(store.root), trainer=TrainerConfig(task="link"), link=LinkConfig(node_embeddings=0))
    with pytest.raises(TrainInputError, match="no node features.*--node-embeddings DIM"):
        check_trainable(store, off)
    with pytest.raises(TrainInputError, match="no node features"):
        check_trainable(store, JobConfig(store=str(store.root)))            # node classification: refused as before
    with pytest.raises(ConfigError, match="no input"):
        TrainerCore(TrainerConfig(task="link"), 0, 1, 2, link=LinkConfig(node_embeddings=0), num_nodes=200)
    with pytest.raises(ConfigError, match="link loss must be one of bce, margin"):
        LinkConfig(loss="hinge")
    with pytest.raises(ConfigError, match="margin must be > 0"):
        LinkConfig(margin=0)


def test_new_link_flags_reach_the_config_from_cli_yaml_and_python(tmp_path):
    from argosy.api import train_argv
    from argosy.services.launch import build_parser
    from argosy.services.train_args import expand_job_file, finish_args, job_config

    def cfg_of(argv):
        return job_config(finish_args(build_parser().parse_args(expand_job_file(argv))), tmp_path, "j", tmp_path)

    job = tmp_path / "job.yaml"
    job.write_text("task: link\nedge-split: 0.85,0.05,0.10\nscorer: distmult\nlink-loss: margin\nmargin: 0.5\n"
                   "node-embeddings: 32\n")
    for argv in (["train", "--config", str(job)],
                 train_argv("g.npz", task="link", edge_split="0.85,0.05,0.10", scorer="distmult", link_loss="margin",
                            margin=0.5, node_embeddings=32)):
        cfg = cfg_of(argv)
        assert (cfg.link.scorer, cfg.link.loss, cfg.link.margin, cfg.link.node_embeddings) == ("distmult", "margin",
                                                                                               0.5, 32)
        assert JobConfig.from_json(cfg.to_json()) == cfg
    plain = cfg_of(["train", "--task", "link"])
    assert (plain.link.loss, plain.link.node_embeddings) == ("margin", None)
    assert plain.fingerprint() != cfg.fingerprint()
