"""The training flags of ``argosy demo|train|up|submit`` and their mapping to :class:`JobConfig`.

One place: a new flag is added in :func:`add_train_args` and read in :func:`job_config` (or, for
the full-graph modes, in :func:`argosy.services.driver.fullgraph_config`).  Pure: this module
starts nothing, so the driver imports it and not the reverse.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from argosy.shared.config import (KG_SCORER_NAMES, LINK_LOSSES, LINK_METRICS, LINK_SCORERS, MODEL_DEFAULTS, NEG_SAMPLERS,
                                  NODE_EMBEDDINGS_AUTO_DIM, PRECISIONS, SAGE_AGGREGATORS, TASKS,
                                  CoordConfig, FullGraphConfig, JobConfig, LinkConfig, LoaderConfig, SamplerConfig,
                                  TrainerConfig, parse_size)
from argosy.shared.errors import ArgosyError, ConfigError
from argosy.shared.store.manifest import MANIFEST_NAME

__all__ = ["add_train_args", "add_mode_args", "job_config", "finish_args", "expand_job_file", "flag_table",
           "refuse_partition_flags",
           "TRAIN_EPILOG"]


def _default(cls, name: str):
    """A config field's default: flags and the Python API read defaults from the dataclasses only."""
    f = cls.__dataclass_fields__[name]
    return f.default_factory() if callable(f.default_factory) else f.default


def _per_model(name: str) -> str:
    return ", ".join(f"{m} {d[name]}" for m, d in MODEL_DEFAULTS.items())


TRAIN_EPILOG = (
    "Defaults converge without flags: training runs up to --epochs epochs and stops once neither validation "
    "accuracy nor validation loss has improved for --patience epochs; the weights of the best validation epoch are kept (best.pt in the "
    "run dir) and the reported test accuracy is theirs. Model defaults follow the published settings "
    "(GCN: Kipf & Welling; GAT: 8 heads of 8, Velickovic et al.; SAGE: PyG's example), so Cora, Citeseer and "
    "Pubmed reach published accuracy as they are; large graphs stay bounded by --epochs. Features are "
    "row-normalised when they are all non-negative (bag-of-words), and a warning says so. "
    "--config JOB.yaml reads the same flags from a YAML mapping (keys are flag names); flags given on the "
    "command line override it.")


def add_train_args(p: argparse.ArgumentParser, epochs: int | None = None) -> None:
    S, T = SamplerConfig, TrainerConfig
    p.add_argument("--config", metavar="JOB.yaml", help="read these flags from a YAML job file; flags given here override it")
    p.add_argument("--data", help="graph to partition and train on: .npz CSR (PyG x/y names accepted), .npy (m, 2) edge list, text/CSV edge list (.gz too), or an OGB node-property directory (see docs/input-formats.md)")
    p.add_argument("--store", help="an existing partitioned store (skips partitioning)")
    p.add_argument("--parts", type=int, default=4, help="partitions when --data is given (default 4)")
    p.add_argument("--partition-method", default="grem", help="partitioner when --data is given (default grem)")
    p.add_argument("--max-edge-balance", type=float, default=None, metavar="X",
                   help="when --data is given: also cap each part's edges at X times the mean (e.g. 1.1; "
                        "see argosy partition --help). Off by default; the partitioner warns when one part "
                        "holds more than 2x the mean")
    p.add_argument("--task", default=_default(T, "task"), choices=TASKS,
                   help="node: node classification (default); link: link prediction, scoring vertex pairs "
                        "(needs an edge split: --edge-split or --val-edges/--test-edges; docs/link-prediction.md)")
    p.add_argument("--model", default=_default(T, "model"), metavar="sage|gcn|gat|rgcn|rgat|MODULE:FACTORY",
                   help="GNN (default sage; rgcn on a typed graph; gcn with --task link); MODULE:FACTORY is called as FACTORY(in_channels=, "
                        "hidden_channels=, num_layers=, out_channels=) and run as forward(x, edge_index) on each "
                        "batch's sampled subgraph, e.g. torch_geometric.nn.models:GraphSAGE")
    p.add_argument("--epochs", type=int, default=_default(T, "epochs") if epochs is None else epochs,
                   help=f"most epochs (default {_default(T, 'epochs')}); training stops earlier, see --patience")
    p.add_argument("--patience", type=int, default=_default(T, "patience"),
                   help="stop after this many epochs with neither a better validation accuracy (a link job: "
                        "--link-metric) nor a lower validation loss (default 20, 50 with --task link; 0 = run all --epochs)")
    p.add_argument("--hidden", type=int, default=None, help=f"hidden width, per head for gat (default {_per_model('hidden')})")
    p.add_argument("--num-bases", type=int, default=_default(T, "num_bases"),
                   help=f"rgcn, rgat: basis matrices shared by the relations (default {_default(T, 'num_bases')}; "
                        "0 = one full matrix per relation)")
    p.add_argument("--heads", type=int, default=_default(T, "heads"), help=f"gat: attention heads (default {_default(T, 'heads')})")
    p.add_argument("--no-edge-weights", action="store_true",
                   help="ignore the store's edge weights (by default GCN and SAGE use them when the store has them)")
    p.add_argument("--aggregator", choices=SAGE_AGGREGATORS, default=_default(T, "aggregator"),
                   help=f"sage: neighbour aggregator (default {_default(T, 'aggregator')}): mean = GraphSAGE-mean with a self "
                        "weight (PyG's SAGEConv); gcn = mean over the neighbourhood including the vertex, one weight "
                        "(DGL's 'gcn'), often stronger on small citation graphs")
    p.add_argument("--dropout", type=float, default=None, help=f"dropout on every layer's input, the features included (default {_per_model('dropout')}); "
                        "a MODULE:FACTORY model gets it as dropout= when its factory takes one (between its layers) and Argosy "
                        "drops its input features")
    p.add_argument("--lr", type=float, default=None, help=f"Adam learning rate (default {_per_model('lr')})")
    p.add_argument("--weight-decay", type=float, default=_default(T, "weight_decay"),
                   help="default 5e-4, 0 with --task link (first layer only for gcn, as Kipf & Welling)")
    p.add_argument("--fanouts", default=",".join(map(str, _default(S, "fanouts"))),
                   help=f"neighbours per hop, seeds' hop first (-1 = all); one hop per layer "
                        f"(default {','.join(map(str, _default(S, 'fanouts')))}); on a typed store per relation, "
                        "with named relations' own: \"25,10 cites=15,5 rev_writes=0,0\" (docs/heterogeneous.md)")
    p.add_argument("--eval-fanouts", default=None, help="fanouts for val/test (default all neighbours)")
    p.add_argument("--batch-size", type=int, default=_default(S, "batch_size"),
                   help=f"seeds per optimizer step (default {_default(S, 'batch_size')}): each part's training seeds "
                        "are cut into batches of at most this size, and a single trainer gathers smaller ones "
                        "into one step")
    p.add_argument("--eval-max-nodes", type=int, default=_default(S, "eval_max_nodes"),
                   help=f"val/test vertices evaluated per epoch, a fixed subset (default {_default(S, 'eval_max_nodes')})")
    p.add_argument("--samplers", type=int, default=_default(JobConfig, "num_samplers"))
    p.add_argument("--loaders", type=int, default=_default(JobConfig, "num_loaders"))
    p.add_argument("--trainers", type=int, default=_default(JobConfig, "num_trainers"))
    p.add_argument("--device", default=_default(T, "device"), choices=("auto", "cpu", "cuda"))
    p.add_argument("--precision", default=_default(T, "precision"), choices=PRECISIONS,
                   help="the training step's arithmetic: bf16 = mixed precision (products in bfloat16, weights and "
                        "sums in float32); auto (default): bf16 on a CPU with native bfloat16 (AVX512-BF16/AMX), "
                        "else fp32; evaluation is always float32")
    p.add_argument("--normalize-features", action=argparse.BooleanOptionalAction, default=None,
                   help="row-normalise features to sum 1 (default: on when every feature is non-negative, e.g. "
                        "bag-of-words; a warning says which was chosen)")
    p.add_argument("--random-features", type=int, default=None, metavar="DIM",
                   help="give a graph WITHOUT features DIM random ones (systems benchmarks; without this flag a "
                        "graph with no features is an error)")
    node = p.add_argument_group("node data for --data (passed to the partitioner; see docs/input-formats.md)")
    for flag, meta, text in (("--features", "F.npy", "feature matrix, one row per vertex"),
                             ("--labels", "L.npy", "class per vertex (-1 = unlabelled)"),
                             ("--train-mask", "M.npy", "train split (bool mask or id list)"),
                             ("--val-mask", "M.npy", "validation split"), ("--test-mask", "M.npy", "test split"),
                             ("--split", "SPLIT", "random:TRAIN,VAL,TEST (fractions of the labelled vertices, e.g. "
                              "random:0.6,0.2,0.2) or per-class:N,VAL,TEST (Planetoid: per-class:20,500,1000), "
                              "drawn with --seed and recorded in the store's manifest; or NAME: an OGB "
                              "directory's split/NAME"),
                             ("--edge-weights", "W.npy|column", "edge weights: one per input edge row, or 'column' for a "
                              "text edge list's third column (weights the file holds are kept without it)")):
        node.add_argument(flag, default=None, metavar=meta, help=text)
    node.add_argument("--directed", action="store_true", help="keep the input's arcs as given (default: symmetrise)")
    L = LinkConfig
    link = p.add_argument_group("link prediction (--task link)")
    link.add_argument("--edge-split", default=None, metavar="TR,VA,TE",
                      help="with --data: hold out VA and TE fractions of the edges as validation/test edges, removed "
                           "from the graph (e.g. 0.85,0.05,0.10; seeded by --seed, recorded in the store's manifest)")
    link.add_argument("--link-relation", default=None, metavar="RELATION|SRC:RELATION:DST",
                      help="with --data on a typed graph: the relation whose edges are split and predicted "
                           "(recommendation, e.g. user:buys:item; docs/heterogeneous.md)")
    link.add_argument("--val-edges", default=None, metavar="V.npy", help="with --data: validation edges, (m, 2) vertex pairs")
    link.add_argument("--test-edges", default=None, metavar="T.npy", help="with --data: test edges, (m, 2) vertex pairs")
    link.add_argument("--negatives", type=int, default=_default(L, "negatives"),
                      help=f"negatives per positive training edge (default {_default(L, 'negatives')})")
    link.add_argument("--neg-sampler", default=_default(L, "neg_sampler"), choices=NEG_SAMPLERS,
                      help=f"how negatives are drawn (default {_default(L, 'neg_sampler')}): uniform destinations, by "
                           "degree^0.75, or other positives' destinations in the batch")
    link.add_argument("--scorer", default=_default(L, "scorer"), choices=LINK_SCORERS,
                      help=f"pair scorer on the two embeddings (default {_default(L, 'scorer')}): dot product, an MLP "
                           "on their element-wise product, or DistMult (a learnable diagonal relation vector)")
    link.add_argument("--link-loss", default=_default(L, "loss"), choices=LINK_LOSSES,
                      help=f"training loss (default {_default(L, 'loss')}): the ranking hinge max(0, margin - s(pos) + "
                           "s(neg)) of each positive against each of its negatives, or binary cross-entropy")
    link.add_argument("--margin", type=float, default=_default(L, "margin"),
                      help=f"margin of --link-loss margin (default {_default(L, 'margin')})")
    link.add_argument("--node-embeddings", type=int, default=None, metavar="DIM",
                      help=f"learn a DIM-wide input row per vertex, after its features (0 = off; default "
                           f"{NODE_EMBEDDINGS_AUTO_DIM} on a graph without features, off on one with features); each "
                           "trainer holds num_nodes x DIM x 4 bytes, and twice that for Adam's moments")
    link.add_argument("--link-metric", default=_default(L, "metric"), choices=LINK_METRICS,
                      help=f"validation metric that picks the best epoch and stops training (default "
                           f"{_default(L, 'metric')}); hits = Hits@--hits-k")
    link.add_argument("--hits-k", type=int, default=_default(L, "hits_k"), help="K of Hits@K (OGB convention)")
    link.add_argument("--kg-scorer", default=_default(L, "kg_scorer"), choices=KG_SCORER_NAMES,
                      help=f"a knowledge graph's triple scorer (default {_default(L, 'kg_scorer')}), reciprocal "
                           "relations, 1vsAll loss (docs/heterogeneous.md)")
    link.add_argument("--kg-dim", type=int, default=_default(L, "kg_dim"),
                      help=f"a knowledge graph's entity width in reals (default {_default(L, 'kg_dim')}; ComplEx and "
                           "RotatE: half real, half imaginary); the table and its optimizer state take entities x "
                           "this x 8 bytes on every trainer")
    p.add_argument("--work-factor", type=int, default=_default(T, "work_factor"), help=argparse.SUPPRESS)
    p.add_argument("--simulate-gpu-step", type=_seconds, nargs="?", const=0.005, default=_default(T, "simulate_gpu_step"),
                   metavar="TIME", help="SIMULATION, never the default: trainers receive, decode and acknowledge every "
                   "batch but wait TIME (e.g. 5ms) instead of forward/backward, standing in for a GPU whose step time "
                   "was measured elsewhere; accuracies are then meaningless. Without a value: 5ms, a round assumed "
                   "figure, not a measurement (pass your GPU's measured step time)")
    p.add_argument("--hosts", type=int, default=0, metavar="N",
                   help="run on N simulated hosts (network namespaces on this machine, root needed): one sampler and "
                        "loader per host holding only its parts, trainers and Redis in their own namespaces")
    p.add_argument("--link-rate", default="1gbit", help="--hosts: rate of each host's link (tc tbf; default 1gbit; none = unshaped)")
    p.add_argument("--link-delay", default=None, help="--hosts: one-way delay added to each host link, e.g. 0.2ms (needs netem)")
    p.add_argument("--trainer-link-rate", default=None, help="--hosts: rate of the trainers' link (default unshaped)")
    p.add_argument("--gpu-cache", default="auto", metavar="BYTES",
                   help="feature rows each trainer keeps on its device, highest degree first (e.g. 2G, 0 = off); "
                        "loaders leave them out of its batches. auto (default): on CUDA the whole feature matrix if "
                        "it fits in half the free device memory, else that half; off on the CPU")
    p.add_argument("--halo-cache", default="64M", help="bytes of hot remote rows each sampler and loader caches (default 64M)")
    p.add_argument("--memory-budget", default=None, metavar="BYTES",
                   help="memory the job may use on each host (e.g. 12G; default: the memory cgroup limit it runs "
                        "under, else none). Parts larger than half of it are served from disk through a hot-row "
                        "cache (docs/out-of-core.md)")
    p.add_argument("--seed", type=int, default=_default(JobConfig, "seed"))
    p.add_argument("--redis", default=None, help="Redis URL (default $ARGOSY_REDIS_URL, else an embedded server)")
    p.add_argument("--job", default=None, help="job id (default: generated)")
    p.add_argument("--run-dir", default=None, help="where logs, checkpoint and report go (default runs/JOB)")
    p.add_argument("--claim-timeout", type=float, default=_default(CoordConfig, "claim_timeout"),
                   help="seconds a claimed work item may stay unacknowledged before a sampler re-claims it "
                        "(its sampler or loader is presumed dead; default %(default)g). Samplers wait longer when the "
                        "trainers report that healthy batches take longer from claim to apply (2.5x their recent "
                        "90th percentile), and twice as long after each re-delivery of an item (at most 8x)")
    p.add_argument("--peer-timeout", type=float, default=_default(CoordConfig, "peer_timeout"),
                   help="seconds a trainer waits for input before failing")
    p.add_argument("--json", action="store_true", help="print one JSON line with the results at the end")


def add_mode_args(p: argparse.ArgumentParser) -> None:
    """``train``-only flags: resume and the full-graph modes."""
    p.add_argument("--resume", action="store_true", help="continue the run in --run-dir from its last checkpoint")
    p.add_argument("--mode", default="minibatch", choices=("minibatch", "fullgraph", "sar", "memory"),
                   help="minibatch: sampled pipeline (default); fullgraph: whole-graph training with activations "
                        "offloaded to disk (GriNNder-style); sar: --trainers workers, one part each (SAR); "
                        "memory: plain in-memory full-graph training (the baseline fullgraph is measured against)")
    F = FullGraphConfig
    p.add_argument("--cache-bytes", default=_default(F, "cache_bytes"), help="fullgraph: host cache for offloaded blocks, e.g. 512M; auto (default): "
                        "sized from the graph, the model and the memory budget (docs/fullgraph.md)")
    p.add_argument("--spill-dir", default=_default(F, "spill_dir"), help="fullgraph: where blocks spill (an NVMe path in production)")
    p.add_argument("--eviction", default=_default(F, "eviction"), choices=("belady", "lru"), help="fullgraph: cache eviction policy")
    p.add_argument("--prefetch", action=argparse.BooleanOptionalAction, default=_default(F, "prefetch"),
                   help="fullgraph: read planned blocks ahead of use")


def finish_args(args: argparse.Namespace) -> argparse.Namespace:
    """Defaults that depend on other flags (per-model ones come from :data:`MODEL_DEFAULTS`)."""
    data = getattr(args, "data", None)
    if data and not getattr(args, "store", None) and (Path(data) / MANIFEST_NAME).is_file():
        print(f"argosy: {data} is a partitioned store: training it as --store {data} (no partitioning)",
              file=sys.stderr)
        args.store, args.data = data, None      # a store given as --data: what else could it mean
    if hasattr(args, "hidden"):
        if getattr(args, "task", None) in ("node", "link") and kg_input(args):
            args.task = "link"          # a knowledge graph's triples: link prediction is what it has
            if getattr(args, "patience", None) is None:
                args.patience = KG_PATIENCE
        if args.model is None and typed_input(args) and not kg_input(args):
            args.model = "rgcn"         # a typed graph's default (node or one relation's links): its relations
        t = TrainerConfig(model=args.model, hidden=args.hidden, dropout=args.dropout, lr=args.lr,
                          weight_decay=getattr(args, "weight_decay", None), task=getattr(args, "task", "node"),
                          patience=getattr(args, "patience", None))
        args.model, args.hidden, args.dropout, args.lr, args.weight_decay = t.model, t.hidden, t.dropout, t.lr, t.weight_decay
        args.patience = t.patience
    return args


def _gpu_cache(text) -> int:
    """``--gpu-cache``: ``auto`` (-1) or a size (:func:`parse_size`)."""
    if text is None or str(text).strip().lower() == "auto":
        return -1
    return parse_size(text)


def flag_table() -> dict[str, argparse.Action]:
    """Every training flag's argparse action by its ``dest`` (read by ``--config`` files and the Python API)."""
    p = argparse.ArgumentParser(add_help=False)
    add_train_args(p)
    add_mode_args(p)
    return {a.dest: a for a in p._actions if a.option_strings}


def expand_job_file(argv: list[str]) -> list[str]:
    """Replace ``--config JOB.yaml`` by the flags the file sets, placed before the command line's own
    flags so those override it.  Keys are flag names (``batch-size`` or ``batch_size``); lists
    become comma lists (``fanouts: [25, 10]``); ``true``/``false`` switch boolean flags."""
    if "--config" not in argv and not any(a.startswith("--config=") for a in argv):
        return argv
    argv = list(argv)
    i = next(i for i, a in enumerate(argv) if a == "--config" or a.startswith("--config="))
    if argv[i] == "--config":
        if i + 1 >= len(argv):
            raise ConfigError("--config needs a YAML file")
        path = argv[i + 1]
        del argv[i:i + 2]
    else:
        path = argv[i].split("=", 1)[1]
        del argv[i]
    import yaml
    try:
        with open(path) as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"--config {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"--config {path}: not valid YAML ({e})") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ConfigError(f"--config {path}: expected a mapping of flag names to values (got {type(doc).__name__})")
    table = flag_table()
    flags: list[str] = []
    for key, value in doc.items():
        dest = str(key).replace("-", "_")
        act = table.get(dest)
        if act is None or dest == "config":
            raise ConfigError(f"--config {path}: unknown key {key!r} (known: {', '.join(sorted(k for k in table if k != 'config'))})")
        opt = act.option_strings[0]
        if isinstance(act, argparse.BooleanOptionalAction):
            flags.append(opt if value else f"--no-{opt[2:]}")
        elif act.nargs == 0:                           # store_true
            if not isinstance(value, bool):
                raise ConfigError(f"--config {path}: {key} must be true or false (got {value!r})")
            if value:
                flags.append(opt)
        elif value is not None:
            text = ",".join(str(v) for v in value) if isinstance(value, (list, tuple)) else str(value)
            flags.append(f"{opt}={text}")
    # after the sub-command's name, before its own flags: the command line wins
    cut = 1 if argv and not argv[0].startswith("-") else 0
    return argv[:cut] + flags + argv[cut:]


def _seconds(text: str) -> float:
    """``5ms``, ``250us``, ``0.01s`` or plain seconds -> seconds."""
    s = str(text).strip().lower()
    for suffix, mult in (("us", 1e-6), ("ms", 1e-3), ("s", 1.0)):
        if s.endswith(suffix):
            s, m = s[:-len(suffix)], mult
            break
    else:
        m = 1.0
    try:
        v = float(s) * m
    except ValueError:
        raise ConfigError(f"cannot parse a duration from {text!r} (expected e.g. 5ms)") from None
    if v < 0:
        raise ConfigError(f"duration must be >= 0 (got {text!r})")
    return v


def typed_input(args: argparse.Namespace) -> bool:
    """The job's input is a typed graph: ``--data`` in a typed layout, or a typed ``--store``."""
    from argosy.shared.graphio.typed import looks_typed
    if getattr(args, "store", None):
        return store_is_typed(args.store)
    return bool(getattr(args, "data", None)) and looks_typed(args.data)


KG_PATIENCE = 10
"""A knowledge graph's default patience: CoDEx-S's best validation MRR comes at epoch 18-36 and
moves < 0.002 after (a link job's 50 would add 40 epochs of ~10 s)."""


def kg_input(args: argparse.Namespace) -> bool:
    """The job's input is a knowledge graph (train/valid/test triples), as ``--data`` or a ``--store``."""
    from argosy.shared.graphio.typed_open import typed_format
    from argosy.shared.store import Manifest
    if getattr(args, "store", None):
        try:
            return bool(Manifest.load(args.store).typed.get("triples"))
        except Exception:               # noqa: BLE001 - a missing store is reported elsewhere
            return False
    return bool(getattr(args, "data", None)) and typed_format(args.data) == "kg"


def store_is_typed(store) -> bool:
    """Whether the store at ``store`` holds a typed graph (False when it cannot be read here)."""
    from argosy.shared.store import Manifest
    try:
        return bool(Manifest.load(store).num_relations)
    except Exception:                   # noqa: BLE001 - a missing store is reported elsewhere
        return False


def job_config(args: argparse.Namespace, store: Path, job: str, run_dir: Path) -> JobConfig:
    from argosy.shared.fanouts import parse_fanouts
    fan, per_relation = parse_fanouts(args.fanouts)
    eval_fan = tuple([-1] * len(fan)) if args.eval_fanouts is None else parse_fanouts(args.eval_fanouts, "--eval-fanouts")[0]
    return JobConfig(
        job=job, store=str(Path(store).resolve()), run_dir=str(Path(run_dir).resolve()), seed=args.seed,
        num_samplers=args.samplers, num_loaders=args.loaders, num_trainers=args.trainers,
        memory_budget=parse_size(getattr(args, "memory_budget", None) or "0"),
        sampler=SamplerConfig(fanouts=fan, eval_fanouts=eval_fan, relation_fanouts=per_relation, batch_size=args.batch_size,
                              eval_max_nodes=args.eval_max_nodes,
                              halo_cache_bytes=parse_size(getattr(args, "halo_cache", None) or "64M")),
        loader=LoaderConfig(halo_cache_bytes=parse_size(getattr(args, "halo_cache", None) or "64M")),
        trainer=TrainerConfig(model=args.model, num_bases=getattr(args, "num_bases", 30), hidden=args.hidden, dropout=args.dropout, lr=args.lr,
                              weight_decay=args.weight_decay, epochs=args.epochs, device=args.device,
                              work_factor=args.work_factor, normalize_features=args.normalize_features,
                              patience=args.patience, heads=args.heads, aggregator=args.aggregator,
                              edge_weights=not getattr(args, "no_edge_weights", False),
                              simulate_gpu_step=getattr(args, "simulate_gpu_step", 0.0),
                              gpu_cache=_gpu_cache(getattr(args, "gpu_cache", "auto")),
                              precision=getattr(args, "precision", "auto"),
                              task=getattr(args, "task", "node")),
        link=LinkConfig(negatives=getattr(args, "negatives", 1), neg_sampler=getattr(args, "neg_sampler", "uniform"),
                        scorer=getattr(args, "scorer", "dot"), metric=getattr(args, "link_metric", "auc"),
                        loss=getattr(args, "link_loss", _default(LinkConfig, "loss")),
                        margin=getattr(args, "margin", _default(LinkConfig, "margin")),
                        node_embeddings=getattr(args, "node_embeddings", None),
                        hits_k=getattr(args, "hits_k", 50),
                        kg_scorer=getattr(args, "kg_scorer", _default(LinkConfig, "kg_scorer")),
                        kg_dim=getattr(args, "kg_dim", _default(LinkConfig, "kg_dim"))),
        coord=CoordConfig(claim_timeout=args.claim_timeout, peer_timeout=args.peer_timeout))


def refuse_partition_flags(args: argparse.Namespace, store) -> None:
    """With an existing store nothing is partitioned: a partitioning flag would be silently ignored."""
    for flag in ("random_features", "max_edge_balance", "edge_split", "val_edges", "test_edges"):
        if getattr(args, flag, None) is not None:
            name = "--" + flag.replace("_", "-")
            raise ArgosyError(f"{name} applies when partitioning --data; the store {store} is already "
                              f"written (re-partition with {name})")


def node_data_flags(args: argparse.Namespace) -> list[str]:
    """The partitioner flags for ``--data``: node data, the symmetrisation choice, the edge limit."""
    out: list[str] = []
    for name in ("features", "labels", "train_mask", "val_mask", "test_mask", "split", "edge_split", "val_edges",
                 "test_edges", "edge_weights", "link_relation"):
        if getattr(args, name, None):
            out += ["--" + name.replace("_", "-"), str(getattr(args, name))]
    if getattr(args, "directed", False):
        out.append("--directed")
    if getattr(args, "random_features", None):
        out += ["--random-features", str(args.random_features)]
    if getattr(args, "max_edge_balance", None) is not None:
        out += ["--max-edge-balance", str(args.max_edge_balance)]
    return out
