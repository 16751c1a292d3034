"""Training flags: defaults come from the config dataclasses; the YAML job file; flags override it."""

import pytest

from argosy.services.launch import build_parser
from argosy.services.train_args import expand_job_file, finish_args, job_config
from argosy.shared.config import MODEL_DEFAULTS, SamplerConfig, TrainerConfig
from argosy.shared.errors import ConfigError


def _args(*argv):
    return finish_args(build_parser().parse_args(expand_job_file(["train", *argv])))


def test_defaults_are_the_dataclasses(tmp_path):
    cfg = job_config(_args("--data", "g.npz"), tmp_path, "j", tmp_path)
    t, s = TrainerConfig(), SamplerConfig()
    assert (cfg.trainer.epochs, cfg.trainer.patience, cfg.trainer.model) == (t.epochs, t.patience, t.model)
    assert (cfg.sampler.fanouts, cfg.sampler.batch_size) == (s.fanouts, s.batch_size)
    assert cfg.trainer.normalize_features is None                        # decided by the preflight check
    for model in ("gcn", "gat"):
        c = job_config(_args("--model", model), tmp_path, "j", tmp_path).trainer
        assert (c.hidden, c.dropout, c.lr) == tuple(MODEL_DEFAULTS[model][k] for k in ("hidden", "dropout", "lr"))


def test_job_file_values_and_command_line_override(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("model: gat\nfanouts: [5, 3]\nbatch-size: 64\nnormalize_features: false\njson: true\nepochs: 7\n")
    a = _args("--config", str(job), "--epochs", "3")
    assert (a.model, a.fanouts, a.batch_size, a.normalize_features, a.json, a.epochs) == \
        ("gat", "5,3", 64, False, True, 3)
    assert a.lr == MODEL_DEFAULTS["gat"]["lr"]


@pytest.mark.parametrize("text, match", [("modle: gat\n", "unknown key 'modle'"), ("- 1\n- 2\n", "expected a mapping"),
                                         ("json: 3\n", "json must be true or false"), ("a: [\n", "not valid YAML")])
def test_bad_job_files_are_clear_errors(tmp_path, text, match):
    job = tmp_path / "job.yaml"
    job.write_text(text)
    with pytest.raises(ConfigError, match=match):
        expand_job_file(["train", "--config", str(job)])


def test_sage_aggregator_flag(tmp_path):
    assert job_config(_args("--data", "g.npz"), tmp_path, "j", tmp_path).trainer.aggregator == "mean"
    assert job_config(_args("--aggregator", "gcn"), tmp_path, "j", tmp_path).trainer.aggregator == "gcn"
    with pytest.raises(ConfigError, match="applies to --model sage only"):
        job_config(_args("--model", "gcn", "--aggregator", "gcn"), tmp_path, "j", tmp_path)
    with pytest.raises(SystemExit):                       # argparse: not one of the choices
        _args("--aggregator", "max")


def test_edge_limit_reaches_the_partitioner_and_is_refused_with_a_store(tmp_path, small_store):
    """``argosy train --data G --max-edge-balance X`` (and ``argosy.train(G, max_edge_balance=X)``)
    hands the limit to the partitioner; with ``--store`` nothing is partitioned, so it is an error,
    not a silently ignored flag."""
    from argosy.api import train_argv
    from argosy.services.driver import run_local
    from argosy.services.train_args import node_data_flags
    from argosy.shared.errors import ArgosyError
    assert node_data_flags(_args("--data", "g.npz", "--max-edge-balance", "1.1"))[-2:] == \
        ["--max-edge-balance", "1.1"]
    assert "--max-edge-balance" not in node_data_flags(_args("--data", "g.npz"))
    assert "--max-edge-balance=1.2" in train_argv("g.npz", max_edge_balance=1.2)
    args = _args("--store", str(small_store[1]), "--max-edge-balance", "1.1", "--run-dir", str(tmp_path / "r"))
    with pytest.raises(ArgosyError, match="--max-edge-balance applies when partitioning --data"):
        run_local(args)
    sub = build_parser().parse_args(["submit", "--store", str(small_store[1]), "--max-edge-balance", "1.1",
                                     "--redis", "redis://127.0.0.1:1/0", "--run-dir", str(tmp_path / "s")])
    with pytest.raises(ArgosyError, match="--max-edge-balance applies"):
        sub.func(sub)                       # refused before any Redis connection


def test_no_edge_weights_from_a_job_file_and_how_runs_say_it(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("no_edge_weights: true\n")
    off = job_config(_args("--config", str(job)), tmp_path, "j", tmp_path).trainer
    on = job_config(_args("--data", "g.npz"), tmp_path, "j", tmp_path).trainer
    assert (off.edge_weights, on.edge_weights) == (False, True)
    job.write_text("no-edge-weights: false\n")
    assert job_config(_args("--config", str(job)), tmp_path, "j", tmp_path).trainer.edge_weights is True
    assert [off.edge_weights_used(True), on.edge_weights_used(True), on.edge_weights_used(False),
            off.edge_weights_used(False)] == ["off (--no-edge-weights)", True, False, False]
    assert on.edge_weights_used(None).startswith("on if the store has them")
    assert TrainerConfig(model="gat").edge_weights_used(True).startswith("ignored (GAT")
    assert TrainerConfig(model="pkg.mod:make").edge_weights_used(True).startswith("ignored (a MODULE:FACTORY")


def test_a_store_given_as_data_is_trained_as_the_store(tmp_path, capsys):
    """`--data DIR` naming a partitioned store (a manifest.json) means `--store DIR`, said once."""
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "manifest.json").write_text("{}")
    a = _args("--data", str(tmp_path / "store"))
    assert (a.store, a.data) == (str(tmp_path / "store"), None)
    assert "is a partitioned store" in capsys.readouterr().err
    b = _args("--data", str(tmp_path))                  # a plain directory stays --data (its own errors)
    assert (b.store, b.data) == (None, str(tmp_path))


def test_kg_scorer_and_width_flags(tmp_path):
    """A knowledge graph's scorer and entity width are flags (and job-file keys); bad values are refused."""
    from argosy.shared.config import LinkConfig
    lk = job_config(_args("--data", "g.npz"), tmp_path, "j", tmp_path).link
    assert (lk.kg_scorer, lk.kg_dim) == (LinkConfig().kg_scorer, LinkConfig().kg_dim)
    lk = job_config(_args("--kg-scorer", "distmult", "--kg-dim", "64"), tmp_path, "j", tmp_path).link
    assert (lk.kg_scorer, lk.kg_dim) == ("distmult", 64)
    with pytest.raises(ConfigError, match="kg_dim must be even"):
        job_config(_args("--kg-dim", "63"), tmp_path, "j", tmp_path)
    with pytest.raises(SystemExit):
        _args("--kg-scorer", "transe")
