"""Link batches from the real sampler core: held-out and positive edges never reach a block."""
from __future__ import annotations

import numpy as np
import pytest

from argosy.shared.config import JobConfig, LinkConfig, SamplerConfig, TrainerConfig
from argosy.shared.errors import InvalidMessageError
from argosy.shared.linkpred import pair_keys, part_pairs
from argosy.shared.plan import plan_phase
from argosy.shared.validate import BatchBounds, check_sampled_batch
from argosy.services.sampler.core import SamplerCore
from tests.shared.test_linkpred import link_store


def block_keys(b, n):
    """Every sampled edge of every hop as an undirected key (global ids)."""
    return pair_keys(b.nodes[b.edge_src], b.nodes[b.edge_dst], n)


@pytest.mark.parametrize("sampler", ["uniform", "degree", "in_batch"])
def test_no_held_out_or_own_positive_edge_in_any_block(tmp_path, sampler):
    g, store, sp = link_store(tmp_path, n=300, m=3000)
    n = g.num_nodes
    held = np.concatenate([pair_keys(v[:, 0], v[:, 1], n) for v in sp.held_out().values()])
    link = LinkConfig(negatives=3, neg_sampler=sampler)
    core = SamplerCore(store, link=link, seed=5)
    cfg = JobConfig(store=str(store.root), sampler=SamplerConfig(fanouts=(5, 5), batch_size=64),
                    trainer=TrainerConfig(task="link"), link=link)
    bounds = BatchBounds.from_job(cfg, store)
    full_deg = np.zeros(n, np.int64)
    for p in range(store.num_parts):
        pd = store.part(p)
        full_deg[np.asarray(pd.nodes)] = np.diff(pd.indptr)
    trained = []
    for epoch in range(2):
        for it in plan_phase(store, "train", epoch, 64, 1, task="link"):
            b = core.sample_item(it, (5, 5))
            check_sampled_batch(b, bounds)                           # shapes, ranges, CSR offsets, pairs
            lp = b.link_pairs
            ends = b.nodes[lp[:, :2]]
            pos = ends[lp[:, 2] == 1]
            keys = block_keys(b, n)
            assert keys.size and not np.isin(keys, held).any()
            assert not np.isin(keys, pair_keys(pos[:, 0], pos[:, 1], n)).any()
            assert (lp[:, 2] == 0).sum() == 3 * pos.shape[0]
            edges, _ = part_pairs(store, it.part, "train")
            assert np.array_equal(pos, edges[core.seeds_for(it)])
            # degrees: the training graph's, minus the batch's own positives
            minus = np.bincount(pos.reshape(-1), minlength=n)
            seeds = b.nodes[:b.num_seeds]
            assert np.array_equal(b.degrees[:b.num_seeds], full_deg[seeds] - minus[seeds])
            again = core.sample_item(it, (5, 5))                     # deterministic per (seed, epoch, batch)
            assert np.array_equal(again.link_pairs, lp) and np.array_equal(again.edge_src, b.edge_src)
            if epoch == 0:
                trained.append(pair_keys(pos[:, 0], pos[:, 1], n))
    trained = np.concatenate(trained)
    assert trained.size == np.unique(trained).size == sum(store.manifest.link["train_edges"])


def test_eval_batches_score_the_held_out_pairs(tmp_path):
    g, store, sp = link_store(tmp_path, n=300, m=3000)
    core = SamplerCore(store, link=LinkConfig())
    got = []
    for it in plan_phase(store, "test", 0, 50, 1, task="link"):
        b = core.sample_item(it, (-1, -1))
        ends = b.nodes[b.link_pairs[:, :2]]
        got.append(ends[b.link_pairs[:, 2] == 1])
    got = np.concatenate(got)
    want = sp.held_out()["test"]
    assert np.array_equal(np.unique(pair_keys(got[:, 0], got[:, 1], g.num_nodes)),
                          pair_keys(want[:, 0], want[:, 1], g.num_nodes))


def test_validator_refuses_bad_pairs(tmp_path):
    g, store, _ = link_store(tmp_path, n=200, m=1200)
    link = LinkConfig()
    cfg = JobConfig(store=str(store.root), sampler=SamplerConfig(fanouts=(3,), eval_fanouts=(-1,), batch_size=32),
                    trainer=TrainerConfig(task="link"), link=link)
    bounds = BatchBounds.from_job(cfg, store)
    it = plan_phase(store, "train", 0, 32, 1, task="link")[0]
    good = SamplerCore(store, link=link).sample_item(it, (3,))
    for mutate, match in ((lambda b: setattr(b, "link_pairs", b.link_pairs.astype(np.int64)), "int32"),
                          (lambda b: b.link_pairs.__setitem__((0, 0), b.num_seeds), "outside the"),
                          (lambda b: b.link_pairs.__setitem__((0, 2), 2), "labels"),
                          (lambda b: setattr(b, "link_pairs", b.link_pairs[:0]), "link_pairs")):
        b = SamplerCore(store, link=link).sample_item(it, (3,))
        mutate(b)
        with pytest.raises(InvalidMessageError, match=match):
            check_sampled_batch(b, bounds)
    node_bounds = BatchBounds.from_job(JobConfig(store=str(store.root), sampler=cfg.sampler), store)
    with pytest.raises(InvalidMessageError, match="task is node"):
        check_sampled_batch(good, node_bounds)


def test_task_flags_reach_the_config_from_cli_yaml_and_python(tmp_path):
    from argosy.api import train_argv
    from argosy.services.launch import build_parser
    from argosy.services.train_args import expand_job_file, finish_args, job_config, node_data_flags
    from argosy.shared.config import JobConfig

    def cfg_of(argv):
        a = finish_args(build_parser().parse_args(expand_job_file(argv)))
        return a, job_config(a, tmp_path, "j", tmp_path)

    job = tmp_path / "job.yaml"
    job.write_text("task: link\nedge-split: 0.85,0.05,0.10\nnegatives: 4\nscorer: mlp\n")
    for argv in (["train", "--config", str(job)],
                 train_argv("g.npz", task="link", edge_split="0.85,0.05,0.10", negatives=4, scorer="mlp")):
        a, cfg = cfg_of(argv)
        assert (cfg.trainer.task, cfg.link.negatives, cfg.link.scorer, cfg.link.metric) == ("link", 4, "mlp", "auc")
        assert node_data_flags(a)[-2:] == ["--edge-split", "0.85,0.05,0.10"]
        assert JobConfig.from_json(cfg.to_json()) == cfg
    _, node = cfg_of(["train"])
    assert node.trainer.task == "node"
    assert JobConfig.from_json(node.to_json()).fingerprint() == node.fingerprint()


@pytest.mark.parametrize("scorer", ["dot", "mlp"])
def test_trainer_core_learns_from_link_batches(tmp_path, scorer):
    """Real sampler, loader and trainer cores: BCE falls on a fixed batch; eval returns one score per pair."""
    import torch
    from argosy.services.loader.core import LoaderCore
    from argosy.services.trainer.core import TrainerCore
    g, store, _ = link_store(tmp_path, n=200, m=1200)
    link = LinkConfig(scorer=scorer, loss="bce")
    core = SamplerCore(store, link=link)
    fb = LoaderCore(store).load(core.sample_item(plan_phase(store, "train", 0, 64, 1, task="link")[0], (5, 5)))
    tr = TrainerCore(TrainerConfig(task="link", normalize_features=False), store.manifest.feature_dim, 1, 2, link=link)
    before = [p.detach().clone() for p in tr.model.scorer.parameters()]
    losses = [tr.train_step(fb)["loss"] for _ in range(30)]
    assert np.isfinite(losses).all() and losses[-1] < 0.8 * losses[0]
    assert all(not torch.equal(a, b) for a, b in zip(before, tr.model.scorer.parameters()))  # the scorer learns too
    ev = LoaderCore(store).load(core.sample_item(plan_phase(store, "val", 0, 1024, 1, task="link")[0], (-1, -1)))
    r = tr.eval_step(ev)
    assert r["scores"].shape == r["labels"].shape == (ev.link_pairs.shape[0],)
