"""The job configuration: one dataclass per section, documented field by field.

The whole :class:`JobConfig` is written to Redis as the job spec, and every process reads it
from there, so all roles of a job agree on it.  :meth:`JobConfig.fingerprint` hashes the fields
that change results; it is stored in reports and checked when a trainer resumes.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Literal

from argosy.shared.errors import ConfigError

__all__ = ["MODEL_DEFAULTS", "SamplerConfig", "LoaderConfig", "TrainerConfig", "CoordConfig", "JobConfig", "FullGraphConfig",
           "LinkConfig", "TASKS", "parse_size", "LINK_LOSSES", "NODE_EMBEDDINGS_AUTO_DIM"]

TASKS = ("node", "link")
"""``node``: node classification (labels of seed vertices); ``link``: link prediction (scores of vertex pairs)."""


def parse_size(text: str | int | None) -> int | None:
    """Parse ``"512M"``, ``"4GiB"``, ``"1.5G"`` or a plain byte count."""
    if text is None or isinstance(text, int):
        return text
    s = str(text).strip().upper().replace("IB", "").replace("B", "")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    try:
        if s and s[-1] in mult:
            return int(float(s[:-1]) * mult[s[-1]])
        return int(float(s))
    except ValueError:
        raise ConfigError(f"cannot parse size {text!r} (expected e.g. 512M, 4G, 1048576)") from None


@dataclass
class SamplerConfig:
    fanouts: tuple[int, ...] = (25, 10)
    """Neighbours sampled per hop, the seeds' own hop first (PyG ``num_neighbors`` order); one hop
    per model layer.  GraphSAGE's published setting: nearly every neighbour on citation graphs,
    bounded batches on power-law graphs."""
    eval_fanouts: tuple[int, ...] = (-1, -1)
    """Fanouts for val/test batches; -1 = all neighbours (exact inference on small graphs)."""
    relation_fanouts: dict = field(default_factory=dict)
    """Training fanouts of named relations of a typed store (``{"cites": (15, 5)}``; 0 drops a
    relation from a hop); every other relation gets ``fanouts``, per relation (:mod:`shared.fanouts`)."""
    batch_size: int = 512
    """Seeds per training batch (a citation graph's 20 labels per class fit in one batch: full-batch
    training, as published)."""
    eval_batch_size: int = 1024
    eval_max_nodes: int = 20_000
    """At most this many val and test vertices are evaluated per epoch (a fixed random subset)."""
    send_hwm: int = 8
    """ZeroMQ high-water mark of outgoing batches: a full pipe blocks the sampler (back-pressure)."""
    halo_cache_bytes: int = 64 << 20
    """Bytes of remote adjacency rows a sampler keeps (hottest halo vertices first; 0 = no cache)."""
    halo_timeout: float = 10.0
    """Seconds a halo request may wait for the owner's reply before it is retried elsewhere or fails."""

    def __post_init__(self):
        self.fanouts = tuple(int(f) for f in self.fanouts)
        self.eval_fanouts = tuple(int(f) for f in self.eval_fanouts)
        if not self.fanouts or any(f == 0 or f < -1 for f in self.fanouts):
            raise ConfigError(f"fanouts must be positive ints or -1 (got {self.fanouts})")
        if len(self.eval_fanouts) != len(self.fanouts):
            raise ConfigError(f"eval_fanouts {self.eval_fanouts} must have as many hops as fanouts {self.fanouts}")
        self.relation_fanouts = {str(k): tuple(int(f) for f in v) for k, v in dict(self.relation_fanouts).items()}
        for name, hops in self.relation_fanouts.items():
            if len(hops) != len(self.fanouts) or any(f < -1 for f in hops):
                raise ConfigError(f"relation {name!r}: fanouts {hops} must be one int >= -1 per hop of {self.fanouts}")
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1 (got {self.batch_size})")


@dataclass
class LoaderConfig:
    send_hwm: int = 4
    """High-water mark towards each trainer."""
    recv_hwm: int = 8
    halo_cache_bytes: int = 64 << 20
    """Bytes of remote feature rows a loader keeps (hottest halo vertices first; 0 = no cache)."""
    shm_ring_slots: int = 4
    """Batches a loader may have in flight through its shared-memory ring to a trainer on its host
    (:mod:`shared.shm_ring`: the rows are written to shared memory, only the header crosses the
    socket); 0 = features always cross the socket."""

    def __post_init__(self):
        if not 0 <= int(self.shm_ring_slots) <= 64:
            raise ValueError(f"loader.shm_ring_slots must be in [0, 64] (got {self.shm_ring_slots})")


SAGE_AGGREGATORS = ("mean", "gcn")
"""SAGE's neighbour aggregators (:class:`~argosy.shared.models.SAGEConv`)."""
PRECISIONS = ("auto", "fp32", "bf16")
"""``trainer.precision`` (``--precision``): see :attr:`TrainerConfig.precision`."""

MODEL_DEFAULTS: dict[str, dict] = {
    "gcn": {"hidden": 16, "dropout": 0.5, "lr": 0.01},
    "sage": {"hidden": 64, "dropout": 0.5, "lr": 0.005},
    "gat": {"hidden": 8, "dropout": 0.6, "lr": 0.005},
    "rgcn": {"hidden": 16, "dropout": 0.0, "lr": 0.01},
    "rgat": {"hidden": 16, "dropout": 0.2, "lr": 0.01},
    "custom": {"hidden": 64, "dropout": 0.5, "lr": 0.01},
}
"""Per-model defaults of the fields left at None in :class:`TrainerConfig`: the published settings
(Kipf & Welling for GCN, Velickovic et al. for GAT with 8 heads of 8, PyG's GraphSAGE example,
Schlichtkrull et al.'s entity classification for R-GCN: 16 hidden, no dropout, Adam 0.01);
``custom`` is a ``MODULE:FACTORY`` model."""

LINK_DEFAULTS: dict = {"model": "gcn", "hidden": 32, "dropout": 0.0, "lr": 0.01, "weight_decay": 0.0, "patience": 50}
"""Defaults of ``task="link"`` for the fields left at None (before :data:`MODEL_DEFAULTS`): GAE's
settings (Kipf & Welling 2016: a GCN encoder, Adam 0.01, no dropout, no weight decay; it trains
200 epochs), and a patience of 50 epochs: validation AUC on 5 % of the edges is noisy and still
climbs after 20 flat epochs (docs/link-prediction.md)."""


@dataclass
class TrainerConfig:
    model: str | None = None
    """``sage``, ``gcn``, ``gat``, ``rgcn`` or ``rgat`` (relational, for a typed store) or ``MODULE:FACTORY`` (a
    PyG-style model, see :mod:`shared.models`); None = ``sage`` for node classification, ``gcn`` for
    link prediction (:data:`LINK_DEFAULTS`); the launcher picks ``rgcn`` for a typed input."""
    num_bases: int = 30
    """R-GCN's basis decomposition: each relation's matrix is a mix of this many shared ones
    (0, or >= the relations: one full matrix per relation)."""
    task: str = "node"
    """``node`` (classify vertices) or ``link`` (score vertex pairs; the model's output, ``hidden``
    wide, is each vertex's embedding, see :class:`LinkConfig`)."""
    hidden: int | None = None
    """Hidden width (per attention head for GAT); None = the model's default in :data:`MODEL_DEFAULTS`."""
    heads: int = 8
    """GAT attention heads of the hidden layers (the output layer has one)."""
    aggregator: str = "mean"
    """SAGE's neighbour aggregator: ``mean`` (GraphSAGE-mean, with a separate self weight; PyG's
    default) or ``gcn`` (mean over the neighbourhood including the vertex, one weight; DGL's example)."""
    dropout: float | None = None
    """Dropout on every layer's input (and on GAT's attention); None = the model's default."""
    lr: float | None = None
    """Adam learning rate; None = the model's default."""
    weight_decay: float | None = None
    """Adam weight decay; None = 5e-4 (node classification) or 0 (link prediction)."""
    epochs: int = 200
    """Most epochs to run; training usually stops earlier, see ``patience``. Bounds large graphs."""
    patience: int | None = None
    """Stop after this many epochs with neither a better validation accuracy nor a lower validation
    loss (:class:`~argosy.shared.models.EarlyStopping`; 0 = always run ``epochs``); None = 20, or 50
    for link prediction (:data:`LINK_DEFAULTS`).
    The best-validation weights are kept (``best.pt``) and the reported accuracy is theirs."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    recv_hwm: int = 8
    prefetch: int = 2
    """Batches the ingest thread receives, validates and copies to the device ahead of the step
    (the bound of its queue; on CUDA each holds one batch in device memory)."""
    gpu_cache: int = -1
    """Bytes of feature rows the trainer keeps on its device, hottest (highest degree) first; loaders
    leave those rows out of its batches (``--gpu-cache``).  -1 = auto: on CUDA the whole feature
    matrix if it fits in half the device memory free beside the model, else that half; on the CPU
    off.  0 = off.  Does not change results (the rows are the store's either way)."""
    checkpoint_every: int = 1
    """Epochs between checkpoints (0 = only at the end); a restarted trainer resumes from the last one."""
    reorder_window: int = 32
    """Batches that may wait for an earlier one so updates follow the plan order (reproducible runs)."""
    reorder_bytes: int = 512 << 20
    """...and at most this many bytes of host memory (message and staged features; a 16th of the
    job's memory budget when one is in force, if less): past it the earliest waiting batch is applied, so big batches (a 3-hop
    15,10,5 batch of 1024 seeds on a power-law graph is ~165 MB) cannot pile up 32 deep."""
    edge_weights: bool = True
    """Use the store's edge weights when it has them (GCN: weighted normalisation, SAGE: weighted
    mean; GAT ignores them); False (``--no-edge-weights``) trains as if the store had none."""
    normalize_features: bool | None = None
    """Row-normalise input features to sum 1 (Kipf & Welling's preprocessing for bag-of-words
    features). None = decided before training: on when every stored feature is non-negative."""
    work_factor: int = 1
    """Repeat each batch's forward/backward this many times (benchmarks: make the trainer heavier)."""
    precision: str = "auto"
    """Arithmetic of the training step: ``fp32``; ``bf16`` (mixed precision, ``torch.autocast``: the
    layers' products in bfloat16, weights, optimizer, aggregations and loss in float32); ``auto`` =
    ``bf16`` on a CPU with native bfloat16 (AVX512-BF16 or AMX: its products run ~3x faster, and
    the product is most of a CPU step, docs/compute.md) and ``fp32`` elsewhere (CUDA included).
    Evaluation and ``argosy predict`` always compute in float32."""
    simulate_gpu_step: float = 0.0
    """SIMULATION when > 0: seconds each batch waits instead of forward/backward (a stand-in for a
    GPU step time measured elsewhere); batches are still received, decoded and acknowledged.
    Accuracies of a simulated run are meaningless.  0 = real training (the default)."""

    def __post_init__(self):
        if self.task not in TASKS:
            raise ConfigError(f"task must be one of {', '.join(TASKS)} (got {self.task!r})")
        node = {"model": "sage", "weight_decay": 5e-4, "patience": 20}
        for name, value in (LINK_DEFAULTS if self.task == "link" else node).items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        if self.model not in ("sage", "gcn", "gat", "rgcn", "rgat") and ":" not in str(self.model):
            raise ConfigError(f"model must be sage, gcn, gat, rgcn, rgat or MODULE:FACTORY (got {self.model!r})")
        if self.num_bases < 0:
            raise ConfigError(f"num_bases must be >= 0 (got {self.num_bases})")
        for name, value in MODEL_DEFAULTS["custom" if ":" in self.model else self.model].items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        if self.aggregator not in SAGE_AGGREGATORS:
            raise ConfigError(f"aggregator must be one of {', '.join(SAGE_AGGREGATORS)} (got {self.aggregator!r})")
        if self.aggregator != "mean" and self.model != "sage":
            raise ConfigError(f"aggregator {self.aggregator!r} applies to --model sage only (got --model {self.model})")
        if self.epochs < 1:
            raise ConfigError(f"epochs must be >= 1 (got {self.epochs})")
        if self.patience < 0:
            raise ConfigError(f"patience must be >= 0 (got {self.patience})")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"dropout must be in [0, 1) (got {self.dropout})")
        if self.hidden < 1 or self.heads < 1:
            raise ConfigError(f"hidden and heads must be >= 1 (got {self.hidden}, {self.heads})")
        if self.prefetch < 1:
            raise ConfigError(f"prefetch must be >= 1 (got {self.prefetch})")
        if self.gpu_cache < -1:
            raise ConfigError(f"gpu_cache must be bytes >= 0, or -1 for auto (got {self.gpu_cache})")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)} (got {self.precision!r})")

    def edge_weights_used(self, store_weighted: bool | None) -> bool | str:
        """Whether a job with this config trains with edge weights, as its log, report, JSON line
        and ``argosy status`` say it: True (the store has weights and the model uses them), False
        (the store has none) or a string saying why not (``"off (--no-edge-weights)"``, a model
        that ignores them).  ``store_weighted`` None: the store could not be read here."""
        if store_weighted is False:
            return False
        if not self.edge_weights:
            return "off (--no-edge-weights)"
        if self.model == "gat":
            return "ignored (GAT: attention learns its own)"
        if ":" in str(self.model):
            return "ignored (a MODULE:FACTORY model gets edge_index only)"
        return True if store_weighted else "on if the store has them (store not readable here)"


LINK_SCORERS = ("dot", "mlp", "distmult")
LINK_LOSSES = ("bce", "margin")
KG_SCORER_NAMES = ("complex", "distmult", "rotate")
KG_DECAY_AFTER = 3
"""Epochs in a row without a gain of KG_MIN_GAIN in validation MRR after which a knowledge graph's lr decays
(``LinkConfig.kg_lr_decay``): the recipe's evaluation every 3 epochs, as the pipeline evaluates each."""
KG_MIN_GAIN = 1e-3
"""Validation MRR a knowledge graph's new best must add to reset the patience count
(:class:`~argosy.shared.models.EarlyStopping` ``min_gain``): after its lr decays, CoDEx-S's MRR rose by
1e-4 an epoch for 30 more epochs (0.4782 -> 0.4783 over epochs 39-42)."""
NODE_EMBEDDINGS_AUTO_DIM = 64
"""Width of the learned vertex inputs a link job on a featureless store gets by default."""
NEG_SAMPLERS = ("uniform", "degree", "in_batch")
LINK_METRICS = ("auc", "ap", "hits", "mrr")


def selection_metric(task: str, link_metric: str, kg: bool) -> str:
    """The validation metric that picks the best epoch (and that the progress bar shows):
    ``accuracy``, a link job's ``--link-metric``, or filtered ``mrr`` on a knowledge graph."""
    if task != "link":
        return "accuracy"
    return "mrr" if kg else link_metric


@dataclass
class LinkConfig:
    """Link prediction (``--task link``): negatives, scorer and the metric that picks the best epoch.

    A work item is a range of one part's training edges (``SamplerConfig.batch_size`` positives);
    the sampler adds ``negatives`` negatives per positive and samples blocks around all their
    endpoints with the batch's positives removed from them.
    """

    negatives: int = 1
    """Negatives per positive training edge (K)."""
    neg_sampler: str = "uniform"
    """``uniform`` destinations, ``degree`` (by degree^0.75) or ``in_batch`` (other positives' destinations)."""
    scorer: str = "dot"
    """``dot``: the dot product of the two embeddings; ``mlp``: an MLP on their element-wise product;
    ``distmult``: ``sum(z_u * r * z_v)`` with a learnable diagonal relation ``r`` (one relation)."""
    loss: str = "margin"
    """``margin``: the ranking hinge ``max(0, margin - s(pos) + s(neg))`` over each positive and each
    of its ``negatives`` (the default: above BCE on Cora, Citeseer and ca-astroph, docs/link-prediction.md);
    ``bce``: binary cross-entropy on every pair."""
    margin: float = 1.0
    """Margin of ``loss="margin"``."""
    node_embeddings: int | None = None
    """Width of a learnable input row per vertex (``torch.nn.Embedding``, looked up by global id and
    concatenated after the store's features).  None = :data:`NODE_EMBEDDINGS_AUTO_DIM` on a store
    without features, off on one with features; 0 = off.  Each trainer holds the whole table:
    ``num_nodes * dim * 4`` bytes, plus twice that for Adam's moments (docs/link-prediction.md)."""
    metric: str = "auc"
    """Validation metric of early stopping and of the best epoch: ``auc``, ``ap``, ``hits`` (Hits@``hits_k``) or ``mrr``."""
    hits_k: int = 50
    """K of Hits@K (OGB's convention: positives above the K-th best negative)."""
    kg_scorer: str = "complex"
    """A knowledge graph's triple scorer (a store with train/valid/test triples): ``complex``,
    ``distmult`` or ``rotate`` (:mod:`shared.kg`), with reciprocal relations; its entities are learned
    embeddings, each triple scored against every entity (1vsAll), ranked by filtered MRR."""
    kg_dim: int = 1024
    """Width of a knowledge graph's entity embeddings, in reals (ComplEx: half real, half imaginary).
    CoDEx-S, in-process recipe, seed 2: test MRR 0.4676 at 1024, 0.4622 at 512 (valid 0.4821 / 0.4781)."""
    kg_lr: float = 0.1
    """Adagrad learning rate of a knowledge-graph model (Lacroix et al. 2018's recipe)."""
    kg_n3: float = 0.01
    """Weight of the N3 penalty on each batch's head, relation and tail embeddings (Lacroix et al.)."""
    kg_label_smoothing: float = 0.1
    """Label smoothing of the 1vsAll cross-entropy (CoDEx-S: test MRR 0.467 with 0.1, 0.458 without)."""
    kg_init_std: float = 1e-3
    """Entity and relation rows start N(0, kg_init_std)."""
    kg_lr_decay: float = 0.3
    """After every ``KG_DECAY_AFTER`` (3) epochs in a row without a KG_MIN_GAIN gain in validation MRR the lr is
    multiplied by this (a plateau schedule, as ``bench/kg_recipe.py``); 1 = a constant lr."""

    def __post_init__(self):
        for name, value, allowed in (("scorer", self.scorer, LINK_SCORERS), ("neg_sampler", self.neg_sampler, NEG_SAMPLERS),
                                     ("metric", self.metric, LINK_METRICS)):
            if value not in allowed:
                raise ConfigError(f"link {name} must be one of {', '.join(allowed)} (got {value!r})")
        if self.negatives < 1 or self.hits_k < 1:
            raise ConfigError(f"negatives and hits_k must be >= 1 (got {self.negatives}, {self.hits_k})")
        if self.loss not in LINK_LOSSES:
            raise ConfigError(f"link loss must be one of {', '.join(LINK_LOSSES)} (got {self.loss!r})")
        if not self.margin > 0:
            raise ConfigError(f"margin must be > 0 (got {self.margin})")
        if self.node_embeddings is not None and self.node_embeddings < 0:
            raise ConfigError(f"node_embeddings must be a width >= 0, 0 = off (got {self.node_embeddings})")
        if self.kg_scorer not in KG_SCORER_NAMES:
            raise ConfigError(f"kg_scorer must be one of {', '.join(KG_SCORER_NAMES)} (got {self.kg_scorer!r})")
        if (self.kg_dim < 2 or self.kg_dim % 2 or not self.kg_lr > 0 or self.kg_n3 < 0 or not self.kg_init_std > 0
                or not 0 <= self.kg_label_smoothing < 1 or not 0 < self.kg_lr_decay <= 1):
            raise ConfigError(f"kg_dim must be even >= 2, kg_lr and kg_init_std > 0, kg_n3 >= 0, kg_label_smoothing "
                              f"in [0, 1), kg_lr_decay in (0, 1] (got {self.kg_dim}, {self.kg_lr}, {self.kg_init_std}, "
                              f"{self.kg_n3}, {self.kg_label_smoothing}, {self.kg_lr_decay})")

    def embedding_dim(self, feature_dim: int) -> int:
        """Width of the learned vertex inputs on a store whose features are ``feature_dim`` wide (0 = none)."""
        if self.node_embeddings is None:
            return NODE_EMBEDDINGS_AUTO_DIM if feature_dim == 0 else 0
        return int(self.node_embeddings)


@dataclass
class CoordConfig:
    heartbeat_seconds: float = 1.0
    heartbeat_ttl: float = 5.0
    """A service whose heartbeat is older than this is considered dead."""
    claim_timeout: float = 20.0
    """Work items claimed but not acknowledged for this long are re-claimed by a live sampler."""
    peer_timeout: float = 120.0
    """A trainer that receives no batch for this long fails with a clear error instead of hanging."""


@dataclass
class FullGraphConfig:
    """Full-graph modes (``argosy train --mode fullgraph|sar``): every step sees the whole graph.

    The model, its widths, the optimizer settings, ``epochs`` (the most to run) and ``patience``
    come from :class:`TrainerConfig`, as for mini-batch runs; the layer count is the number of hops
    in ``SamplerConfig.fanouts`` (every neighbour is used); SAR runs ``JobConfig.num_trainers`` workers.
    """

    mode: Literal["fullgraph", "sar", "memory"] = "fullgraph"
    """``fullgraph``: one process, activations in the offload store; ``sar``: one worker per group of
    parts; ``memory``: plain in-memory full-batch training (the baseline)."""
    cache_bytes: int | str = "auto"
    """Host cache of the offload store (``fullgraph``); blocks beyond it spill to ``spill_dir``.
    ``auto``: sized from the graph, the model and the memory budget
    (:func:`argosy.services.trainer.fullgraph.budget.auto_cache_bytes`)."""
    disk_bytes: int | str | None = None
    """Spill budget (None = unlimited)."""
    spill_dir: str | None = None
    """Where blocks spill (an NVMe path in production; default a temporary directory)."""
    eviction: Literal["belady", "lru"] = "belady"
    prefetch: bool = True
    """Read planned blocks ahead of use (Belady only)."""
    store_addr: str | None = None
    """Use an offload store served by ``python -m argosy.services.offload`` at this endpoint."""

    def __post_init__(self):
        if str(self.cache_bytes).strip().lower() == "auto":
            self.cache_bytes = "auto"
        else:
            self.cache_bytes = parse_size(self.cache_bytes)
        self.disk_bytes = parse_size(self.disk_bytes)
        if self.mode not in ("fullgraph", "sar", "memory"):
            raise ConfigError(f"full-graph mode must be fullgraph, sar or memory (got {self.mode!r})")
        if self.eviction not in ("belady", "lru"):
            raise ConfigError(f"eviction must be belady or lru (got {self.eviction!r})")
        if self.cache_bytes != "auto" and self.cache_bytes < 0:
            raise ConfigError(f"cache_bytes must be auto or >= 0 (got {self.cache_bytes})")


@dataclass
class WireConfig:
    max_message_bytes: int = 1 << 30
    """Largest message a loader or trainer accepts (libzmq drops a larger frame's connection before
    allocating it); a batch whose features would exceed it is refused as invalid."""
    cut_off_after: int = 16
    """A peer (CURVE key, or connection without CURVE) whose messages fail validation this many
    times is cut off: its later messages are discarded unread and its key cannot reconnect."""

    def __post_init__(self):
        if self.max_message_bytes < 1 << 16 or self.cut_off_after < 1:
            raise ConfigError(f"wire limits too small (max_message_bytes={self.max_message_bytes}, "
                              f"cut_off_after={self.cut_off_after})")


@dataclass
class JobConfig:
    job: str = "default"
    store: str = ""
    """Path of the partitioned store (shared by every service)."""
    run_dir: str = ""
    """Where trainers write checkpoints (the launcher writes the report there too)."""
    resume: bool = False
    """Trainers continue from ``run_dir/checkpoint.pt`` when it exists (set on restarts and by --resume)."""
    num_samplers: int = 1
    num_loaders: int = 1
    num_trainers: int = 1
    seed: int = 0
    memory_budget: int = 0
    """Bytes the job may use on each host; 0 = the memory cgroup limit its services run under, if any.
    Held parts larger than half of it are served from disk (:mod:`shared.store.residency`)."""
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    loader: LoaderConfig = field(default_factory=LoaderConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    coord: CoordConfig = field(default_factory=CoordConfig)
    wire: WireConfig = field(default_factory=WireConfig)
    link: LinkConfig = field(default_factory=LinkConfig)

    def __post_init__(self):
        for name in ("num_samplers", "num_loaders", "num_trainers"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1 (got {getattr(self, name)})")
        if self.memory_budget < 0:
            raise ConfigError(f"memory_budget must be >= 0 bytes (got {self.memory_budget})")

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> "JobConfig":
        d = json.loads(text)
        try:
            return cls(sampler=SamplerConfig(**d.pop("sampler")), loader=LoaderConfig(**d.pop("loader")),
                       trainer=TrainerConfig(**d.pop("trainer")), coord=CoordConfig(**d.pop("coord")), wire=WireConfig(**d.pop("wire", {})),
                       link=LinkConfig(**d.pop("link", {})), **d)
        except TypeError as e:
            raise ConfigError(f"job spec does not match this Argosy version ({e})") from None

    def fanouts_for(self, phase: str) -> tuple[int, ...]:
        """The hops sampled for a ``phase`` batch (``train``, ``val``, ``test``).

        A ``MODULE:FACTORY`` model normalises by degrees it counts in the subgraph it is given
        (PyG's ``GCNConv``): a vertex of the outermost hop, whose in-edges the subgraph lacks, would
        count degree 1, and the accuracy would depend on which seeds share a batch.  Its val/test
        batches therefore get one more full hop (only its edges are used: every vertex within
        ``L`` hops then has all its in-edges), so evaluation equals the model on the whole graph
        and ``argosy predict`` reproduces the reported accuracy.
        """
        if phase == "train":
            return self.sampler.fanouts
        return self.sampler.eval_fanouts + ((-1,) if ":" in self.trainer.model else ())

    def relation_fanouts_for(self, phase: str) -> dict:
        """Named relations' own fanouts for a ``phase`` batch: training's (val/test use ``eval_fanouts``
        for every relation)."""
        return self.sampler.relation_fanouts if phase == "train" else {}

    def fingerprint(self) -> str:
        """Hash of the fields that change training results (not replica counts or timeouts)."""
        d = asdict(self)
        for k in ("job", "run_dir", "resume", "num_samplers", "num_loaders", "coord"):
            d.pop(k)
        d.pop("wire")
        if self.trainer.task == "node":
            emb = d.pop("link")["node_embeddings"]   # the rest is unused: node jobs keep their fingerprints
            if emb is not None:                # learned inputs of a featureless node job
                d["trainer"]["node_embeddings"] = emb
            d["trainer"].pop("task")
        if d["trainer"]["model"] not in ("rgcn", "rgat") and d["trainer"]["num_bases"] == 30:
            d["trainer"].pop("num_bases")      # the relational models' only
        d["trainer"].pop("prefetch")           # how far ingest runs ahead does not change results
        d["trainer"].pop("gpu_cache")          # nor where the feature rows come from
        d["loader"].pop("shm_ring_slots")      # nor how they travel
        if d["trainer"]["edge_weights"]:       # the default: fingerprints of earlier jobs stay the same
            d["trainer"].pop("edge_weights")
        for k, v in (("loss", "bce"), ("margin", 1.0), ("node_embeddings", None), ("kg_scorer", "complex"),
                     ("kg_dim", 1024), ("kg_lr", 0.1), ("kg_n3", 0.01), ("kg_init_std", 1e-3),
                     ("kg_label_smoothing", 0.1), ("kg_lr_decay", 0.3)):
            if "link" in d and d["link"][k] == v:   # defaults: link fingerprints of earlier jobs stay the same
                d["link"].pop(k)
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]
