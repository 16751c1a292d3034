"""Pure training logic: model, optimizer, one step per FeatureBatch (no sockets, no Redis).

The same object runs inside the trainer service, in the in-process baseline of
``bench/pipeline.py`` and in unit tests, so "disaggregated vs in-process" compares equal work.
"""
from __future__ import annotations

import logging
import time
import warnings
from contextlib import nullcontext

import numpy as np
import torch
import torch.nn.functional as F

from argosy.shared.config import KG_DECAY_AFTER, LinkConfig, TrainerConfig
from argosy.shared import envs
from argosy.shared.envs import torch_threads
from argosy.shared.errors import ConfigError
from argosy.shared.hot_rows import AUTO_FRACTION, HotRows, cache_rows
from argosy.shared.store.features import FeatureLayout, sent_rows
from argosy.shared.protocol import FeatureBatch
from argosy.shared.models import Blocks, EmbeddedInput, RGCNConv, build_model, make_optimizer
from argosy.shared.kg import TripleFilter
from argosy.services.trainer.staging import STAGED, DeviceBatch, Staging
from argosy.shared.scorers import KGModel, LinkModel, NodeEmbedding, make_scorer

__all__ = ["TrainerCore", "pick_device", "set_threads", "resolved", "cache_budget"]

logger = logging.getLogger(__name__)

warnings.filterwarnings("ignore", message="The given NumPy array is not writable")


def set_threads(n: int) -> None:
    """``n`` compute threads for torch's intra-op pool and for the numba aggregation kernels."""
    torch.set_num_threads(n)
    import numba
    numba.set_num_threads(max(1, min(n, numba.config.NUMBA_NUM_THREADS)))


def pick_device(name: str, workers: int = 1) -> torch.device:
    """The torch device for ``--device`` (``auto``/``cuda``/``cpu``), for every training mode.

    ``auto`` is CUDA when there are at least ``workers`` GPUs (SAR puts one rank on each; the
    mini-batch trainer and the single-process full-graph modes need one), else the CPU.  The CUDA
    index is ``LOCAL_RANK`` modulo the GPU count (0 unless a torchrun-style launcher sets it).
    """
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if name == "cuda" and have < workers:
        got = "no CUDA device is available" if have == 0 else f"only {have} are available"
        raise ConfigError(f"--device cuda needs {workers} CUDA device(s); {got}")
    if name == "cuda" or (name == "auto" and have >= workers):
        return torch.device("cuda", envs.get(envs.LOCAL_RANK) % have)
    if name == "auto" and have:
        logger.info("device auto: %d GPU(s) for %d SAR workers (NCCL needs one each), running on the CPU",
                    have, workers)
    return torch.device("cpu")


def pick_precision(name: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of a training step for ``--precision`` on ``device`` (None: float32).

    ``auto`` is bfloat16 on a CPU with native bfloat16 products (AVX512-BF16 or AMX tiles), where a
    product runs ~3x faster than in float32 (``bench/layers.py``'s ``argosy-bf16`` column) and the
    products are most of a CPU step; float32 elsewhere: a CPU without them would emulate bfloat16
    (slower), and on CUDA the step is rarely what the pipeline waits for.  (A torch without these
    CPU probes, older than the pinned one, counts as a CPU without them.)
    """
    if name == "fp32":
        return None
    if name == "bf16":
        return torch.bfloat16
    probes = (getattr(torch.cpu, "_is_avx512_bf16_supported", None), getattr(torch.cpu, "_is_amx_tile_supported", None))
    if device.type == "cpu" and any(f is not None and f() for f in probes):
        return torch.bfloat16
    return None


def resolved(r: dict) -> dict:
    """A step's result with device scalars read back (``loss`` float, ``correct`` int): one sync."""
    out = dict(r)
    if isinstance(out.get("loss"), torch.Tensor):
        out["loss"] = float(out["loss"])
    if isinstance(out.get("correct"), torch.Tensor):
        out["correct"] = int(out["correct"])
    return out


def cache_budget(setting: int, device: torch.device, feature_bytes: int) -> int:
    """Bytes of the feature cache for ``trainer.gpu_cache`` (-1 = auto) on ``device``.

    Auto: on CUDA the whole feature matrix when it fits in :data:`AUTO_FRACTION` of the device
    memory free after the model was built, else that fraction; on the CPU off (docs/gpu-pipeline.md).
    """
    if setting >= 0:
        return setting
    if device.type != "cuda":
        return 0
    free, _ = torch.cuda.mem_get_info(device)
    return int(min(feature_bytes, AUTO_FRACTION * free))


FEATURELESS_MAX_BYTES = 1 << 30
"""Largest one-hot-equivalent R-GCN input table (see :meth:`TrainerCore.featureless_rgcn`)."""
FEATURELESS_INIT_STD = 0.05
"""Initial spread of that table's entries (a Glorot matrix of a few thousand rows has ~0.03)."""


class TrainerCore:
    """Owns the model and optimizer; turns FeatureBatches into steps and eval counts.

    Args:
        cfg: trainer section of the job config.
        in_dim: input feature width (0: a store without features).  num_classes: output width.
        num_layers: = number of hops.
        num_nodes: the graph's vertices (the rows of a link model's learned node embeddings).
        shard_embeddings: several trainers: a link job's learned node embeddings are split between
            them (the model gets them from :meth:`attach_embeddings`,
            :mod:`services.trainer.embedding_shards`), a node job's table is dense and replicated
            (DDP all-reduces it); else the model holds the whole table, stepped by ``SparseAdam``
            (a step touches the batch's rows).
        num_relations: relations of a typed store (R-GCN's relation matrices).
        typed: a typed store's ``manifest.typed`` (a PyG heterogeneous ``MODULE:FACTORY`` model gets
            its node types and relations as ``metadata``, and each batch its nodes' types).
        kg_relations, kg_known: a knowledge-graph link job: its triples' relations and every known
            true triple (train, valid, test; int64[M, 3]) for the filtered ranking (:class:`KGModel`).
        feature_layout: the store's :class:`~shared.store.features.FeatureLayout` (which vertices have
            feature rows: a featureless node type's travel as none and are zero here); None: all have.
    """

    def __init__(self, cfg: TrainerConfig, in_dim: int, num_classes: int, num_layers: int, seed: int = 0,
                 device: torch.device | None = None, link: LinkConfig | None = None, num_nodes: int = 0,
                 shard_embeddings: bool = False, num_relations: int = 0, kg_relations: int = 0,
                 kg_known: np.ndarray | None = None, typed: dict | None = None,
                 feature_layout: FeatureLayout | None = None):
        torch.manual_seed(seed)
        set_threads(torch_threads())
        self.feature_layout = feature_layout
        # Subnormal floats (Adam's moments of long-zero gradients decay into them) cost x86 ~100x per
        # operation: an Adam step of a 3-layer SAGE-256 measured 32 ms instead of 0.7 (docs/compute.md).
        # Flushing them to zero changes values below 1.2e-38 only.
        torch.set_flush_denormal(True)
        self.cfg = cfg
        self.link = link if cfg.task == "link" else None
        self.device = device or pick_device(cfg.device)
        self.out_dim = cfg.hidden if self.link is not None else num_classes
        """Output width: the classes, or a link model's embedding width (``hidden``)."""
        self.embedding_dim = link.embedding_dim(in_dim) if link is not None else 0
        featureless = self.featureless_rgcn(cfg, in_dim, num_relations, num_nodes, link)
        if featureless:                 # one-hot inputs, as the R-GCN paper: per-vertex rows of every basis
            self.embedding_dim = RGCNConv.featureless_width(cfg.hidden, num_relations, cfg.num_bases)
        """Width of the learned per-vertex inputs (0 = none; :class:`~argosy.shared.scorers.NodeEmbedding`):
        on by default on a featureless store, for node classification too (an RDF graph's entities)."""
        if self.embedding_dim and num_nodes < 1:
            raise ConfigError(f"node embeddings need the graph's vertex count (got num_nodes={num_nodes})")
        self.in_dim = in_dim + self.embedding_dim
        """The encoder's input width: the features, then the learned embedding."""
        if self.in_dim == 0:
            raise ConfigError("the store has no node features and node embeddings are off (--node-embeddings 0): "
                              "the model has no input; pass --node-embeddings DIM or give features")
        self.kg_filter: TripleFilter | None = None
        """A knowledge-graph job's known triples (filtered ranking); None: not a KG job."""
        self.type_offsets: np.ndarray | None = None
        if self.link is not None and kg_relations:
            self._init_kg(kg_relations, kg_known, num_nodes)
            return
        self.model = build_model(cfg.model, self.in_dim, cfg.hidden, self.out_dim, num_layers, cfg.dropout,
                                 heads=cfg.heads, aggregator=cfg.aggregator, num_relations=num_relations,
                                 num_bases=cfg.num_bases, featureless=featureless,
                                 metadata=(typed["node_types"], typed["relations"]) if typed else None)
        self.type_offsets = (np.asarray(typed["type_offsets"], np.int64)
                             if typed and getattr(self.model, "metadata", None) is not None else None)
        """Per-type global id ranges, when the model is heterogeneous (its batches carry node types)."""
        if self.link is None and self.embedding_dim:
            # several trainers: a dense table that DDP all-reduces; one: sparse rows stepped by SparseAdam
            emb = NodeEmbedding(num_nodes, self.embedding_dim, sparse=not shard_embeddings)
            if featureless:             # rows of weight matrices: small, as a Glorot-initialised matrix's
                torch.nn.init.normal_(emb.table.weight, std=FEATURELESS_INIT_STD)
            self.model = EmbeddedInput(self.model, emb)
        if self.link is not None:
            emb = NodeEmbedding(num_nodes, self.embedding_dim) if self.embedding_dim and not shard_embeddings else None
            self.model = LinkModel(self.model, make_scorer(self.link.scorer, cfg.hidden), emb)
        self.model = self.model.to(self.device)
        self.autocast = pick_precision(cfg.precision, self.device)
        """The training forward's autocast dtype (None: float32); evaluation is float32."""
        self.precision = "bf16" if self.autocast is not None else "fp32"
        self.module: torch.nn.Module = self.model          # replaced by a DDP wrapper when distributed
        self.sparse_opt: torch.optim.SparseAdam | None = None
        """The learned node embeddings' optimizer when their gradients are sparse."""
        if self.link is None and self.embedding_dim:
            self.opt = make_optimizer(self.model.model, cfg)
            emb = list(self.model.embedding.parameters())
            if shard_embeddings:
                self.opt.add_param_group({"params": emb, "weight_decay": 0.0})
            else:
                self.sparse_opt = torch.optim.SparseAdam(emb, lr=cfg.lr)
        elif self.link is None:
            self.opt = make_optimizer(self.model, cfg)
        else:
            self.opt = make_optimizer(self.model.encoder, cfg)
            extra = list(self.model.scorer.parameters())
            if extra:
                self.opt.add_param_group({"params": extra, "weight_decay": 0.0})
            if self.model.embedding is not None:
                self.sparse_opt = torch.optim.SparseAdam(list(self.model.embedding.parameters()), lr=cfg.lr)
        self._pending = 0
        """Labelled seeds whose gradient is accumulated and not yet stepped on (see :meth:`train_step`)."""
        self.hot: HotRows | None = None
        """The feature cache's rows (which vertices), None = no cache; ``cache`` holds their features."""
        self.cache: torch.Tensor | None = None
        """float[C, F] in the store's dtype on the device: the cached rows in slot order."""

    def _init_kg(self, kg_relations: int, kg_known, num_nodes: int) -> None:
        """A knowledge graph: :class:`KGModel` (entity table + relation scorer) stepped by Adagrad, the
        recipe of Lacroix et al. 2018 that reaches CoDEx-S's published ComplEx figure."""
        lk = self.link
        self.embedding_dim = lk.kg_dim             # the batch's global ids are staged for the lookups
        self.model = KGModel(num_nodes, kg_relations, lk.kg_scorer, lk.kg_dim, lk.kg_init_std).to(self.device)
        self.kg_filter = TripleFilter(np.zeros((0, 3), np.int64) if kg_known is None else kg_known, num_nodes,
                                      kg_relations).to(self.device)
        self.module = self.model
        self.opt = torch.optim.Adagrad(self.model.parameters(), lr=lk.kg_lr)
        self.sparse_opt = None
        self.autocast, self.precision = None, "fp32"
        self._pending = 0
        self.hot = self.cache = None

    def plateau_decay(self, epochs_without_gain: int) -> float | None:
        """A knowledge graph's lr schedule: ``kg_lr_decay`` times the lr after every
        :data:`KG_DECAY_AFTER` epochs without a patience-resetting validation gain; returns the new lr (None: unchanged).
        Every rank calls it with the same reduced count, so their optimizers stay alike."""
        f = self.link.kg_lr_decay
        if f >= 1 or not epochs_without_gain or epochs_without_gain % KG_DECAY_AFTER:
            return None
        for g in self.opt.param_groups:
            g["lr"] *= f
        return self.opt.param_groups[0]["lr"]

    @staticmethod
    def featureless_rgcn(cfg: TrainerConfig, in_dim: int, num_relations: int, num_nodes: int,
                         link: LinkConfig | None) -> bool:
        """Whether an R-GCN node job on a featureless store learns the paper's one-hot input layer
        (per vertex, its rows of every basis matrix and of the self-loop matrix, ``(B + 1) * hidden``
        values) rather than a ``--node-embeddings`` row fed to an ordinary first layer: when no width
        is asked for and the table fits :data:`FEATURELESS_MAX_BYTES` (AIFB: 8,285 x 496 floats, 16 MB)."""
        if cfg.model != "rgcn" or cfg.task != "node" or in_dim or not num_relations or link is None:
            return False
        if link.node_embeddings is not None:
            return False
        width = RGCNConv.featureless_width(cfg.hidden, num_relations, cfg.num_bases)
        if num_nodes * width * 4 > FEATURELESS_MAX_BYTES:
            logger.warning("R-GCN: the one-hot input layer would take %.0f MB (%d x %d); learning %d-d input "
                           "embeddings instead (--node-embeddings DIM to choose)", num_nodes * width * 4 / 1e6,
                           num_nodes, width, link.embedding_dim(0))
            return False
        return True

    def fill_cache(self, store, budget: int) -> HotRows | None:
        """Keep the ``budget`` bytes' worth of hottest feature rows of ``store`` on the device
        (:class:`~shared.hot_rows.HotRows`); 0 rows = no cache.  Returns the cached set."""
        rows = cache_rows(store, budget)
        if rows == 0:
            self.hot, self.cache = None, None
            return None
        hot = HotRows.build(store, rows)
        self.cache = torch.from_numpy(hot.gather(store)).to(self.device)
        self.hot = hot
        logger.info("feature cache: %d rows (%.1f MB, digest %s) on %s", rows, rows * hot.row_bytes / 1e6,
                    hot.digest, self.device)
        return hot

    def stage(self, fb: FeatureBatch, staging: Staging | None = None) -> DeviceBatch | None:
        """Put a batch's tensors on the device (views on the CPU; see :class:`Staging` on CUDA).

        Returns None when ``staging`` found a non-finite feature (the batch must be dropped).
        """
        dev = self.device
        side = staging is not None and dev.type == "cuda"
        arrays = [getattr(fb, n) for n in STAGED]
        cached = bool(fb.feature_cache)            # validated: names this core's cache (check_feature_batch)
        sent = sent_rows(self.feature_layout, fb.nodes, self.hot if cached else None)
        if cached:
            arrays.append(self.hot.slot[fb.nodes])    # slots int32[N], -1: not cached
        if sent is not None:
            arrays.append(sent)                       # positions of the rows the wire carries, int64[M]
        elif not fb.ring and fb.features.shape[0] != fb.nodes.shape[0]:
            raise ValueError(f"a batch of {fb.nodes.shape[0]} nodes carries {fb.features.shape[0]} feature rows: "
                             "a store with featureless node types needs TrainerCore(feature_layout=store.features)")
        if self.embedding_dim:
            arrays.append(np.asarray(fb.nodes, np.int64))   # global ids: the learned inputs' rows
        if self.type_offsets is not None:                   # a heterogeneous model: each node's type
            arrays.append(np.searchsorted(self.type_offsets, np.asarray(fb.nodes, np.int64), "right") - 1)
        if side:
            moved = staging.copy(arrays)
        else:
            moved = [torch.from_numpy(np.asarray(a)).to(dev, non_blocking=True) for a in arrays]
        ntype = moved.pop() if self.type_offsets is not None else None
        ids = moved.pop() if self.embedding_dim else None
        feats, src, dst, deg, y, ptr, pairs, ew, wdeg, et = moved[:10]
        with torch.cuda.stream(staging.stream) if side else nullcontext():
            if side and not staging.finish(feats):     # the received rows (the cache's were checked at fill)
                return None
            if sent is not None:       # cached rows from the device, zero rows of featureless types, the received scattered in
                rest = moved[10:]
                slots, pos = (rest[0], rest[1]) if cached else (None, rest[0])
                if cached:
                    xs = self.cache.index_select(0, slots.clamp(min=0))
                    if self.feature_layout is not None and not self.feature_layout.all_featured:
                        xs.mul_((slots >= 0).unsqueeze(1).to(xs.dtype))
                else:
                    xs = feats.new_zeros((fb.nodes.shape[0], feats.shape[1]))
                if pos.shape[0]:
                    xs.index_copy_(0, pos, feats)
                feats = xs
            x = feats.float()
            if self.cfg.normalize_features:
                x = x / x.sum(1, keepdim=True).clamp(min=1e-12)
            hop_nodes = fb.hop_nodes.tolist()          # the sampler's CSR offsets, one slice per hop (if sent)
            ptrs = ptr.split([n + 1 for n in hop_nodes[:-1]]) if ptr.shape[0] else None
            blocks = Blocks(hop_nodes=hop_nodes, hop_edges=fb.hop_edges.tolist(),
                            edge_src=src.long(), edge_dst=dst.long(), degrees=deg.float(), dst_ptr=ptrs,
                            edge_weight=ew if wdeg.shape[0] else None, weighted_degrees=wdeg if wdeg.shape[0] else None,
                            edge_type=et.long() if et.shape[0] else None, node_type=ntype)
            b = DeviceBatch(x=x, blocks=blocks, y=y, count=int(np.count_nonzero(np.asarray(fb.labels) >= 0)))
            if self.link is None and ids is not None:
                b.ids = ids                            # a node model's learned inputs (EmbeddedInput)
            if self.link is not None:
                b.pairs, b.count, b.ids = pairs.long(), int(fb.link_pairs.shape[0]), ids
                if fb.phase == "train" and self.link.loss == "margin" and self.kg_filter is None:
                    b.positives = self._positives(fb.link_pairs)
            if side:
                b.ready = torch.cuda.Event()
                b.ready.record(staging.stream)
                b.owned = [feats, x, y, blocks.edge_src, blocks.edge_dst, blocks.degrees] + \
                    ([b.pairs] if b.pairs is not None else []) + ([ids] if ids is not None else [])
        return b

    def _positives(self, lp: np.ndarray) -> int:
        """``p`` when the pairs ``lp`` int32[P, 3] have the sampler's training layout (``p`` positives,
        then ``K`` negatives each), else 0 (the margin loss then ranks every positive against every
        negative of the batch, as for val/test batches)."""
        n, k = lp.shape[0], self.link.negatives
        p = n // (1 + k)
        if n % (1 + k) or not (lp[:p, 2] == 1).all() or (lp[p:, 2] != 0).any():
            return 0
        return p

    def to_device(self, fb: FeatureBatch) -> tuple[torch.Tensor, Blocks, torch.Tensor]:
        """``(x, blocks, y)`` on the device, copied on the current stream (no staging)."""
        b = self._device_batch(fb)
        return b.x, b.blocks, b.y

    def _device_batch(self, fb: "FeatureBatch | DeviceBatch") -> DeviceBatch:
        b = fb if isinstance(fb, DeviceBatch) else self.stage(fb)
        b.wait()
        return b

    def train_step(self, fb: FeatureBatch | DeviceBatch, step: bool = True, sync: bool = True) -> dict:
        """Forward and backward on one batch; returns loss and accuracy counts.

        ``fb`` is a received batch or one already staged on the device (:meth:`stage`).

        With ``step`` the optimizer steps on the gradient of the labelled seeds of every batch since
        the last step (their mean loss).  The trainer passes ``step=False`` to gather several small
        batches into one step of about ``batch_size`` seeds: the plan cuts each part's seeds into
        batches, so a graph with few labelled vertices (120 on Citeseer over 4 parts) would otherwise
        take steps of ~30 seeds from one community at a time, which learns visibly worse than one
        step on all of them.

        The step never waits for the device before its kernels are queued (the labelled count
        comes from the host's labels).  With ``sync=False`` ``loss`` and ``correct`` stay device
        scalars, so the caller can read them after queueing the next step (:func:`resolved`).
        """
        b = self._device_batch(fb)
        t0 = time.perf_counter()
        x, blocks, y = b.x, b.blocks, b.y
        self.module.train()
        count = b.count
        alone = step and self._pending == 0      # the usual case: a mean loss, no accumulation
        if not alone and self._pending == 0:
            self._zero_grad()                    # the first batch of a gathered step
        for _ in range(max(1, self.cfg.work_factor)):
            if alone:
                self._zero_grad()
            try:
                with torch.autocast(self.device.type, self.autocast or torch.float32, enabled=self.autocast is not None):
                    logits, loss, correct = self._forward(self.module, b)
            except (RuntimeError, TypeError) as e:   # e.g. a user model that hands a bf16 tensor to numpy
                if self.autocast is None or "BFloat16" not in str(e):
                    raise
                raise ConfigError(f"the model failed under bf16 mixed precision ({e}); train it with --precision "
                                  "fp32") from e
            if alone and count:
                loss = loss / count
            loss.backward()
            if alone:
                self._step()
        if not alone:
            self._pending += count * max(1, self.cfg.work_factor)
            if step:
                self.finish_step()
            loss = loss.detach() / max(count, 1)
        r = {"loss": loss.detach(), "correct": correct, "count": count}
        if sync:
            r = resolved(r)
        r["compute_seconds"] = time.perf_counter() - t0
        return r

    def finish_step(self) -> None:
        """Step on the gradient gathered by ``train_step(..., step=False)`` calls, if any."""
        if self._pending == 0:
            return
        for p in self.model.parameters():
            if p.grad is not None:
                p.grad /= self._pending
        self._step()
        self._zero_grad()
        self._pending = 0

    def _zero_grad(self) -> None:
        self.opt.zero_grad(set_to_none=True)
        if self.sparse_opt is not None:
            self.sparse_opt.zero_grad(set_to_none=True)

    def _step(self) -> None:
        self.opt.step()
        if self.sparse_opt is not None:
            self.sparse_opt.step()

    def _forward(self, module: torch.nn.Module, b: DeviceBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(outputs, summed loss, correct)`` of one batch: logits of the seeds and cross-entropy
        over the labelled ones, or one logit per pair and the link loss (binary cross-entropy, or
        :meth:`_margin_loss`; a pair counts as correct when its logit's sign matches its label)."""
        if self.kg_filter is not None:             # triples (head, tail, relation) of local seeds
            tr = torch.stack([b.ids[b.pairs[:, 0]], b.pairs[:, 2], b.ids[b.pairs[:, 1]]], 1)
            zero = torch.zeros((), device=tr.device)
            if not module.training:
                return self.model.ranks(tr, self.kg_filter), zero, zero
            return None, module(tr, self.link.kg_n3, self.link.kg_label_smoothing) * tr.shape[0], zero
        if b.pairs is not None:
            logits = module(b.x, b.blocks, b.pairs, b.ids) if b.ids is not None else module(b.x, b.blocks, b.pairs)
            logits = logits.float()
            target = b.pairs[:, 2].float()
            if self.link.loss == "margin":
                loss = self._margin_loss(logits, target, b.positives)
            else:
                loss = F.binary_cross_entropy_with_logits(logits, target, reduction="sum")
            return logits, loss, ((logits > 0) == (target > 0.5)).sum()
        logits = (module(b.x, b.blocks, b.ids) if b.ids is not None else module(b.x, b.blocks)).float()  # float32 loss
        if b.count == 0:
            loss = logits.sum() * 0.0
        else:                   # -1 = unlabelled: ignored, so no boolean mask (which would sync)
            loss = F.cross_entropy(logits, b.y, ignore_index=-1, reduction="sum")
        return logits, loss, ((logits.argmax(1) == b.y) & (b.y >= 0)).sum()

    def _margin_loss(self, logits: torch.Tensor, target: torch.Tensor, positives: int) -> torch.Tensor:
        """The ranking hinge ``max(0, margin - s(pos) + s(neg))``, averaged over (positive, negative)
        pairs and scaled by the batch's pairs (the caller divides by them, as for a summed loss).

        A training batch ranks each positive against its own K negatives (``positives`` > 0, the
        sampler's layout); a val/test batch (held-out pairs, no such layout) every positive against
        every negative of the batch.  Shapes: logits, target float[P] -> scalar.
        """
        m = self.link.margin
        if positives:
            pos, neg = logits[:positives], logits[positives:].view(positives, -1)
        else:
            pos, neg = logits[target > 0.5], logits[target < 0.5]
            if pos.numel() == 0 or neg.numel() == 0:
                return logits.sum() * 0.0
            neg = neg.unsqueeze(0)
        return F.relu(m - pos.unsqueeze(1) + neg).mean() * logits.shape[0]

    @torch.no_grad()
    def eval_step(self, fb: FeatureBatch | DeviceBatch) -> dict:
        """Loss and correct count; a link batch also returns its pairs' ``scores`` and ``labels`` (numpy)."""
        b = self._device_batch(fb)
        self.module.eval()
        logits, loss, correct = self._forward(self.model, b)
        out = {"correct": int(correct), "count": b.count, "loss_sum": float(loss) if b.count else 0.0}
        if self.kg_filter is not None:             # filtered ranks as tail, then as head
            out["scores"], out["labels"] = logits.cpu().numpy(), None
        elif b.pairs is not None:
            out["scores"] = logits.float().cpu().numpy()
            out["labels"] = b.pairs[:, 2].cpu().numpy().astype(np.int8)
        return out

    def attach_embeddings(self, embedding: torch.nn.Module) -> None:
        """Give a link model built with ``shard_embeddings`` its learned inputs (before DDP wraps it):
        a :class:`~services.trainer.embedding_shards.ShardedNodeEmbedding`, which steps its own rows."""
        if self.link is None or not self.embedding_dim or self.model.embedding is not None:
            raise ConfigError("attach_embeddings: the model has no sharded node embeddings to attach")
        self.model.embedding = embedding

    def user_model(self) -> torch.nn.Module:
        """The model as its author wrote it (a ``MODULE:FACTORY`` model without Argosy's adapter)."""
        return getattr(self.model, "inner", self.model)

    def state(self) -> dict:
        out = {"model": self.model.state_dict(), "opt": self.opt.state_dict(), "torch_rng": torch.get_rng_state()}
        if self.sparse_opt is not None:
            out["sparse_opt"] = self.sparse_opt.state_dict()
        return out

    def load_state(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        if self.sparse_opt is not None:
            self.sparse_opt.load_state_dict(state["sparse_opt"])
        torch.set_rng_state(state["torch_rng"])
