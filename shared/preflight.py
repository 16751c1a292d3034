"""Checks a job before anything runs: no silent fallbacks, every problem reported at once.

:func:`check_job` runs before partitioning and before any service starts (``argosy train``,
``argosy.train(...)``, ``argosy submit``).  It looks at the whole job: the graph file and its side
files (features, labels, split masks or a generated ``--split``), the model (a ``MODULE:FACTORY``
model is built and run once on a tiny graph on the CPU, with the real feature width and class
count; an output of the wrong width is an error) and the device.  Every problem found goes into
one :class:`TrainInputError`, so a new graph does not take one failed attempt per missing item.

:func:`check_trainable` checks a written store the same way (features, labels, non-empty splits)
and resolves the choices left to Argosy (``normalize_features=None``) with a warning that says what
was chosen.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import logging
from dataclasses import dataclass, field

from pathlib import Path

import numpy as np

from argosy.shared.config import JobConfig
from argosy.shared.errors import ArgosyError, ConfigError, StoreFormatError
from argosy.shared.store import PartitionStore
from argosy.shared.graphio.typed import looks_typed

__all__ = ["TrainInputError", "Preflight", "JobInputs", "check_trainable", "check_job", "probe_model",
           "probe_model_isolated"]

logger = logging.getLogger("argosy")

_ROWS_PER_CHUNK = 65_536


class TrainInputError(ConfigError):
    """The store lacks what training needs (features, labels, seeds of a split)."""


@dataclass
class Preflight:
    """What :func:`check_trainable` found: split sizes and the warnings it printed."""

    train: int = 0
    val: int = 0
    test: int = 0
    labelled_train: int = 0
    warnings: list[str] = field(default_factory=list)


def _non_negative(features: list[np.ndarray]) -> bool:
    for f in features:
        for i in range(0, f.shape[0], _ROWS_PER_CHUNK):
            if np.asarray(f[i:i + _ROWS_PER_CHUNK]).min(initial=0) < 0:
                return False
    return True


def check_trainable(store: PartitionStore | str, cfg: JobConfig) -> Preflight:
    """Raise :class:`TrainInputError` unless ``store`` has features, labels and train/val/test seeds.

    Sets ``cfg.trainer.normalize_features`` when it is None (row-normalise when every feature is
    non-negative, as bag-of-words features are) and warns about that choice.
    """
    store = store if isinstance(store, PartitionStore) else PartitionStore(store)
    problems = _store_problems(store, out := Preflight(), cfg.trainer.task, cfg.trainer.edge_weights,
                               _learned(cfg, bool(store.manifest.num_relations))) + _fanout_problems(cfg, store)
    if problems:
        raise TrainInputError(_join(problems))
    t = cfg.trainer
    if t.normalize_features is None and not store.manifest.feature_dim:
        t.normalize_features = False          # no features (learned node embeddings only): nothing to normalise
    if t.normalize_features is None:
        t.normalize_features = _non_negative([a for p in range(store.num_parts) for a in store.features.read(p).values()])
        msg = ("features are all non-negative: row-normalising them to sum 1 (pass --no-normalize-features "
               "to keep them as they are)" if t.normalize_features else
               "features have negative values: using them as they are (pass --normalize-features to "
               "row-normalise)")
        out.warnings.append(msg)
        logger.warning(msg)
    return out


def _fanout_problems(cfg: JobConfig, store: PartitionStore) -> list[str]:
    """Relations named in ``--fanouts`` that the store does not have."""
    from argosy.shared.fanouts import relation_fanout_table
    try:
        relation_fanout_table(cfg.sampler.fanouts, cfg.sampler.relation_fanouts, store.manifest.typed.get("relations", []))
    except ArgosyError as e:
        return [str(e)]
    return []


def _join(problems: list[str]) -> str:
    if len(problems) == 1:
        return problems[0]
    return f"{len(problems)} problems:\n" + "\n".join(f"  - {p}" for p in problems)


def _learned(cfg: JobConfig, typed: bool = False) -> bool:
    """The job learns node embeddings on a featureless store: a link job, a typed graph (its featureless
    types), or ``--node-embeddings DIM`` asked for; ``--node-embeddings 0`` turns them off."""
    wanted = cfg.trainer.task == "link" or typed or bool(cfg.link.node_embeddings)
    return wanted and cfg.link.embedding_dim(0) > 0


def _no_features(where) -> str:
    return (f"{where}: the graph has no node features. Give a graph with features (an .npz with `features` or "
            f"`x`, or --features F.npy), or pass --random-features DIM to train on random features (a systems "
            f"benchmark: the model then learns from the graph structure only); --task link learns node "
            f"embeddings instead (--node-embeddings DIM)")


def _no_labels(where, typed: bool = False) -> str:
    how = ("a typed input's labels: trainingSet.tsv/testSet.tsv beside an RDF file, `target:` in graph.yaml, "
           "an OGB directory's node-label files; or --task link" if typed else
           "an .npz with `labels` or `y`, or --labels L.npy")
    return f"{where}: the graph has no labels ({how}); node classification needs them"


def _store_problems(store: PartitionStore, out: Preflight, task: str = "node", edge_weights: bool = True,
                    learned: bool = False) -> list[str]:
    """``learned``: the job learns node embeddings, so a store without features is fine."""
    m, root = store.manifest, store.root
    parts = [store.part(p) for p in range(store.num_parts)]
    problems = []
    if m.feature_dim == 0 and not learned:
        problems.append(_no_features(root))
    elif m.feature_dim:
        try:
            for p in range(store.num_parts):
                store.features.read(p, advice=None)
        except StoreFormatError as e:
            problems.append(str(e))
    if task == "link" and edge_weights and m.edge_weights:
        # a link batch removes its positive edges from the blocks and the degrees; the weighted
        # degrees would still count them (not built yet)
        problems.append(f"{root}: --task link does not use edge weights yet, and this store has them: pass "
                        f"--no-edge-weights to train the link predictor without them")
    if task == "link":                   # link prediction needs the edge split, not labels or masks
        from argosy.shared.linkpred import link_counts
        try:
            for split in ("train", "val", "test"):
                setattr(out, split, int(link_counts(store, split).sum()))
                if getattr(out, split) == 0:
                    problems.append(f"{root}: the edge split has no {split} edges")
        except ConfigError as e:
            problems.append(str(e))
        return problems
    has_labels = m.num_classes >= 1 and all(pd.labels is not None for pd in parts)
    if not has_labels:
        problems.append(_no_labels(root, typed=bool(m.typed)))
    for split in ("train", "val", "test"):
        masks = [getattr(pd, f"{split}_mask") for pd in parts]
        if any(mk is None for mk in masks):
            problems.append(f"{root}: the graph has no {split}_mask; training needs train, val and test masks "
                            "(val picks the best epoch and stops training, test is what is reported)")
            continue
        setattr(out, split, int(sum(np.count_nonzero(mk) for mk in masks)))
        if getattr(out, split) == 0:
            problems.append(f"{root}: {split}_mask selects no vertex (got 0 of {m.num_nodes})")
    if has_labels and out.train:
        out.labelled_train = int(sum(np.count_nonzero(np.asarray(pd.labels)[np.asarray(pd.train_mask)] >= 0)
                                     for pd in parts))
        if out.labelled_train == 0:
            problems.append(f"{root}: none of the {out.train} train vertices has a label (all are -1)")
    return problems


@dataclass
class JobInputs:
    """What ``argosy train`` is given besides the config: ``data`` (a graph file) or ``store``,
    side files by node-array name (``features``, ``labels``, ``train_mask``, ...), and the
    partitioner options that change the node data (``random_features``, ``split``)."""

    data: str | None = None
    store: str | None = None
    side: dict = field(default_factory=dict)
    random_features: int | None = None
    split: str | None = None
    task: str = "node"
    edge_split: bool = False
    """An edge split is asked for (``--edge-split`` or ``--val-edges``/``--test-edges``)."""


def _data_problems(inp: JobInputs, learned: bool = False) -> tuple[list[str], int | None, int | None]:
    """Problems of a graph file and its side files (headers only, labels read); ``(problems,
    feature width, class count)``, the widths None where unknown.  ``learned``: the job learns node
    embeddings, so a graph without features is fine."""
    from argosy.shared.graphio import SPLITS, open_graph
    from argosy.shared.graphio.npy import NpyArray
    from argosy.shared.splits import parse_split
    problems: list[str] = []
    gen = None
    ogb_split = inp.split
    if inp.split is not None:
        try:
            gen = parse_split(inp.split)
        except ConfigError as e:
            problems.append(str(e))
        if gen is not None or ":" in inp.split:
            ogb_split = None
    data = Path(inp.data)
    if not data.exists():
        return problems + [f"{data}: no such file"], None, None
    try:
        src = open_graph(data, split=ogb_split)
    except ArgosyError as e:
        return problems + [str(e)], None, None
    cols = dict(src._column_specs)
    for name, path in inp.side.items():
        if not path:
            continue
        if name in cols:
            problems.append(f"{data} already holds {name}; drop --{name.replace('_', '-')} {path}")
            continue
        if not Path(path).is_file():
            problems.append(f"{path}: no such file (given for {name})")
            cols[name] = None                      # reported: not "missing" a second time
            continue
        try:
            cols[name] = NpyArray(path) if str(path).endswith(".npy") else ("file", Path(path))
        except ArgosyError as e:
            problems.append(f"{e} (given for {name})")
            cols[name] = None
    dim = classes = None
    if "features" in cols:
        f = cols["features"]
        if isinstance(f, NpyArray):
            dim = f.row_shape[0] if len(f.shape) == 2 else None
            if len(f.shape) != 2:
                problems.append(f"{f.where}: features must be a 2-D array [n, F] (got shape {f.shape})")
        if inp.random_features:
            problems.append(f"{data}: the graph has features; --random-features would replace them (drop it)")
    elif inp.random_features:
        dim = int(inp.random_features)
    elif not learned:
        problems.append(_no_features(data))
    if "labels" in cols:
        lab = cols["labels"]
        if lab is None:
            pass
        elif isinstance(lab, NpyArray):
            try:
                if lab.dtype.kind not in "iu":
                    problems.append(f"{lab.where}: labels must be integers (got {lab.dtype})")
                else:                          # in blocks: a 100M-vertex label file stays out of memory
                    classes = max((int(blk.max(initial=-1)) for _, blk in lab.iter_blocks(1 << 22)), default=-1) + 1
                    if classes < 1:
                        problems.append(f"{lab.where}: every label is -1 (unlabelled); nothing to train on")
            except ArgosyError as e:
                problems.append(str(e))
    elif inp.task == "node":
        problems.append(_no_labels(data))
    if inp.task == "link":                     # labels and masks are not needed; the edge split is
        if not inp.edge_split:
            problems.append(f"{data}: --task link needs an edge split: --edge-split 0.85,0.05,0.10 (fractions of "
                            "the edges held out for validation and test) or --val-edges V.npy --test-edges T.npy")
        return problems, dim, classes
    missing = [s for s in SPLITS if s not in cols]
    if gen is not None and len(missing) < len(SPLITS):
        problems.append(f"--split {inp.split} makes train/val/test masks, but the graph already has "
                        f"{', '.join(s for s in SPLITS if s not in missing)}; drop one of them")
    elif missing and gen is None and not any(p.startswith("--split") for p in problems):
        problems.append(f"{data}: no {', '.join(missing)}: give masks (--train-mask/--val-mask/--test-mask "
                        "M.npy) or make a split: --split random:0.6,0.2,0.2 (fractions) or --split "
                        "per-class:20,500,1000 (Planetoid: 20 train vertices per class, 500 val, 1000 test)")
    return problems, dim, classes


def probe_model(cfg, in_dim: int, num_classes: int, nodes: int = 6) -> list[str]:
    """Build the job's model and run it once on a tiny ring graph on the CPU (eval mode).

    Returns the problems: a factory that cannot be imported or called with Argosy's arguments, a
    forward pass that raises, an output that is not ``(nodes, num_classes)``.
    """
    import torch
    from argosy.shared.models import Blocks, build_model
    from argosy.shared.usermodel import with_cwd_on_path
    t, L = cfg.trainer, len(cfg.sampler.fanouts)
    what = f"--model {t.model}"
    try:
        with with_cwd_on_path():
            model = build_model(t.model, in_dim, t.hidden, num_classes, L, t.dropout, heads=t.heads,
                                aggregator=t.aggregator, num_relations=2 if t.model in ("rgcn", "rgat") else 0,
                                num_bases=t.num_bases)
    except ValueError as e:                   # build_model's own sentences name the model and the call
        return [str(e)]
    except Exception as e:  # noqa: BLE001 -- any failure of the user's factory is reported, not raised
        call = (f"FACTORY(in_channels={in_dim}, hidden_channels={t.hidden}, num_layers={L}, "
                f"out_channels={num_classes})")
        return [f"{what}: building the model failed: {type(e).__name__}: {e}"
                + (f" (Argosy calls {call}, plus dropout= when the factory takes it)" if ":" in t.model else "")]
    nbr = np.arange(nodes)
    indices = np.stack([(nbr - 1) % nodes, (nbr + 1) % nodes], 1).reshape(-1)
    indptr = np.arange(0, 2 * nodes + 1, 2)
    blocks = Blocks.full_graph(indptr, indices, L, edge_type=np.arange(indices.size) % 2 if t.model in ("rgcn", "rgat") else None)
    gen = torch.Generator().manual_seed(0)
    model.eval()
    try:
        with torch.no_grad():
            out = model(torch.rand(nodes, in_dim, generator=gen), blocks)
    except Exception as e:  # noqa: BLE001
        return [f"{what}: a forward pass on a {nodes}-vertex test graph ({in_dim} features, {L} hops) failed: "
                f"{type(e).__name__}: {e}"]
    if not isinstance(out, torch.Tensor):
        return [f"{what}: forward returned {type(out).__name__}, expected a tensor of logits [n, {num_classes}]"]
    if tuple(out.shape) != (nodes, num_classes):
        return [f"{what}: the model's output has shape {tuple(out.shape)} on {nodes} vertices, expected "
                f"({nodes}, {num_classes}): one logit per class (the graph has {num_classes} classes; "
                f"out_channels={num_classes} is passed to the factory)"]
    return []


_PROBE_CHILD = ("import json, sys\n"
                "from argosy.shared.config import JobConfig\n"
                "from argosy.shared.preflight import probe_model\n"
                "a = json.loads(sys.stdin.read())\n"
                "print(json.dumps(probe_model(JobConfig.from_json(a['cfg']), a['dim'], a['classes'])))\n")


def probe_model_isolated(cfg, in_dim: int, num_classes: int) -> list[str]:
    """:func:`probe_model` in a child process when torch is not loaded here: the launcher then never
    imports torch, ~120 MB it would otherwise hold for the whole job (it counts against a memory
    budget).  Same problems, same sentences (the child runs in this working directory)."""
    if "torch" in sys.modules:
        return probe_model(cfg, in_dim, num_classes)
    what = f"--model {cfg.trainer.model}"
    try:
        r = subprocess.run([sys.executable, "-c", _PROBE_CHILD], capture_output=True, text=True, timeout=600,
                           input=json.dumps({"cfg": cfg.to_json(), "dim": int(in_dim), "classes": int(num_classes)}))
    except subprocess.TimeoutExpired:
        return [f"{what}: building it and running it once on a 6-vertex test graph took over 600 s"]
    lines = r.stdout.strip().splitlines()
    try:
        problems = json.loads(lines[-1]) if r.returncode == 0 and lines else None
    except ValueError:
        problems = None
    if not isinstance(problems, list):
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
        return [f"{what}: checking the model failed (exit {r.returncode}): {tail[0]}"]
    return [str(p) for p in problems]


def _device_problems(cfg) -> list[str]:
    if cfg.trainer.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            return ["--device cuda: no CUDA device is available on this machine (torch "
                    f"{torch.__version__}, cuda {torch.version.cuda}); use --device auto or cpu"]
    return []


def check_job(cfg: JobConfig, inputs: JobInputs, remote: bool = False) -> Preflight:
    """Check the whole job before partitioning or starting anything; raise one
    :class:`TrainInputError` listing every problem found (data, split, model, device).

    ``remote``: the services run elsewhere (``argosy submit``): their image may hold a model module
    or a GPU this machine lacks, so the device is not checked and a module that cannot be imported
    here is a warning; a model that imports is still built and run."""
    problems: list[str] = []
    out = Preflight()
    dim = classes = None
    if inputs.store is not None:
        try:
            store = PartitionStore(inputs.store)
            typed_user_model = bool(store.manifest.num_relations) and ":" in str(cfg.trainer.model)
            problems += _store_problems(store, out, cfg.trainer.task, cfg.trainer.edge_weights,
                                        _learned(cfg, bool(store.manifest.num_relations))) + _fanout_problems(cfg, store)
            dim, classes = store.manifest.feature_dim or None, store.manifest.num_classes or None
            if typed_user_model:        # a heterogeneous module is built on the store's types by the trainer
                dim = None              # (EdgeIndexModel runs it on a toy typed graph, one clear line if it fails)
        except ArgosyError as e:
            problems.append(str(e))
    elif inputs.data is not None and looks_typed(inputs.data):
        from argosy.shared.graphio.typed_open import typed_has_labels
        if cfg.trainer.task == "node" and not typed_has_labels(inputs.data):   # before hours of partitioning
            problems.append(_no_labels(inputs.data, typed=True))
        # anything else the typed readers check when the partitioner reads it
    elif inputs.data is not None:
        p, dim, classes = _data_problems(inputs, _learned(cfg))
        problems += p
    if not remote:
        problems += _device_problems(cfg)
    if cfg.trainer.task == "link":
        classes = cfg.trainer.hidden            # a link model outputs embeddings, hidden wide
    if dim and classes and remote and importlib.util.find_spec("torch") is None:
        # `argosy submit` from the partitioner image (no torch): the trainer checks the model when it starts
        out.warnings.append("torch is not installed here: the model is checked by the trainer when it starts")
        logger.info("torch is not installed here: the model is checked by the trainer when it starts")
    elif dim and classes:
        for p in probe_model_isolated(cfg, dim, classes):
            if remote and "cannot import" in p:
                out.warnings.append(p)
                logger.warning("%s (checked on the services' side when they start)", p)
            else:
                problems.append(p)
    if problems:
        raise TrainInputError(_join(problems))
    return out
