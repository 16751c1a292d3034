"""Offloaded full-graph training: layer by layer, part by part, activations in the store.

Why this module exists: it is GriNNder's schedule on top of our
:class:`~argosy.services.offload.store.OffloadStore`. Forward runs each layer over
all parts, gathering a part's expanded input (own rows + boundary rows of
other parts) from the store and writing back only the compact output block.
Backward runs layers in reverse and, instead of keeping the expanded inputs
from the forward pass (HongTu's snapshot), *regathers* them from the compact
blocks, recomputes the layer, backpropagates, and scatter-adds the expanded
input gradient into the owners' gradient blocks in the store. The loss is a
per-part sum divided by the global training count, so gradients do not
depend on the partition count.

Block kinds: ``act`` (layer l input after ReLU+dropout, one epoch), ``grad``
(gradient w.r.t. ``act``), ``eval`` (inference activations). Each has *halo*
twins (``acth``, ``gradh``, ``evalh``), one per (owner ``q``, reader ``p``)
pair, keyed by part id ``q * P + p``: the rows of ``q`` that ``p`` reads
(``boundary[p][q]``), written by the owner after computing its block; for
``gradh``, the reader's gradient for those rows, which the owner adds into its
own gradient when it needs it.  A gather reads the own block plus whole pair
blocks, so every byte read is a byte used: each pass moves about ``alpha * n * D``
bytes whatever the partition's shape (an earlier design kept one export block per
owner, read whole by every reader and read-modified-written by every gradient
contribution: 37 GB of disk traffic per epoch on a 1.2M-vertex DCSBM graph cut
into 16 parts).  Layer 0 keeps only pair blocks (``feath``: the features' rows, written once): a
part's own feature rows are read from the source (the store's ``features.npy``, :mod:`.source`)
when a gather needs them, and in training the epoch's dropout mask is applied to the gathered rows
(own and halo) in place, so the features are never held whole nor copied into the store every
epoch.  When layer 0 aggregates its input before projecting it (GCN and SAGE with as many hidden units as
input features or more), the forward pass also stores each part's aggregated input (``agg``: ``n_p``
rows of the input width) and keeps layer 1's own ``act`` blocks until the backward pass, which takes
layer 0's parameter gradients from the two instead of regathering layer 0's expanded input,
aggregating and projecting it a second time (:meth:`OffloadTrainer._layer0_backward`).
A featureless R-GCN's layer-0 input is a learned table (each vertex's rows of the one-hot layer,
:func:`.model.input_table`), not features: a gather reads a part's expanded rows from it, and the
backward pass runs layer 0 like the others and adds the masked input gradient into the table's.
Dropout masks are drawn once per (epoch, layer, part) and kept as bits
(:mod:`.dropout`): 1/32 of the float mask, applied by one fused pass wherever the schedule needs
it again.  The access order of both passes is handed to the store in advance
(:meth:`OffloadTrainer.train_schedule`) so it can run Belady eviction and exact prefetch.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch

from argosy.services.trainer.fullgraph.layer_ops import full_graph_param_grads

from .graph import GraphData, PartPlan
from .source import GraphSource, part_tensors
from .kernels import Aggregation
from .dropout import apply_dropout, dropout_bits, relu_dropout, relu_dropout_grad
from .model import ModelSpec, gnn, input_table, layer_forward, masked_loss_sum
from argosy.shared.malloc import trim_heap
from argosy.services.offload.policy import Access, Schedule
from argosy.services.offload.store import OffloadStore

__all__ = ["OffloadTrainer"]

logger = logging.getLogger(__name__)


class OffloadTrainer:
    """Full-graph trainer whose activations and gradients live in an :class:`OffloadStore`.

    Args:
        spec: model architecture.
        plan: partition plan built with ``spec.aggr``.
        graph: a graph with ``features``, ``labels`` and masks, or a part source
            (:class:`~.source.StoreSource`: rows read from the store per part).
        store: the block store (in-process, or a remote client with the same API).
        model: the shared :class:`~argosy.shared.models.GNN` whose parameters get the gradients (or a
            featureless R-GCN's ``EmbeddedInput``, whose table is layer 0's input).
        seed: dropout seed.
        device: where layers are computed; blocks stay on the host.

    Shapes:
        ``feat``/``act``/``grad``/``eval`` blocks of part ``p`` at layer ``l`` are
        ``float32[n_p, dims[l]]``.
    """

    def __init__(self, spec: ModelSpec, plan: PartPlan, graph: GraphData, store: OffloadStore,
                 model: torch.nn.Module, seed: int = 0, device: torch.device | str = "cpu") -> None:
        self.source = graph if hasattr(graph, "features_into") else GraphSource(graph, plan)
        self.spec, self.plan, self.store, self.model = spec, plan, store, model
        self.seed = seed
        self.device = torch.device(device)
        self.P = plan.num_parts
        self.sizes = plan.part_sizes()
        self.labels, self.masks, self.n_train = part_tensors(self.source, self.device)
        # readers of each part, and the rows of q that p reads as tensors
        self.readers: list[list[int]] = [[] for _ in range(self.P)]
        for p in range(self.P):
            for q in plan.deps[p]:
                self.readers[q].append(p)
        self._rows = [{q: torch.from_numpy(plan.boundary[p][q]) for q in plan.deps[p]} for p in range(self.P)]
        self.table = input_table(model)
        """Layer 0's learned input rows (global ids), or None: the store's features."""
        self._ids = [] if self.table is None else [torch.from_numpy(np.concatenate(
            [plan.own[p]] + [plan.own[q][plan.boundary[p][q]] for q in plan.deps[p]])) for p in range(self.P)]
        """Global ids of each part's expanded rows (a learned input's gather)."""
        for q in range(self.P if self.table is None else 0):  # layer 0's pair blocks; own rows are read per gather
            if self.readers[q]:
                x = self._features(q)
                for p in self.readers[q]:
                    store.put("feath", 0, self._pair(q, p), x.index_select(0, self._rows[p][q]))
        self._bits: dict[tuple[int, int], np.ndarray | None] = {}  # this epoch's masks, (layer, part)
        self._bits_epoch = -1
        self.wait_seconds = 0.0
        """Time the calling thread spent waiting for the store: gathers, reads, write-behind back-pressure
        and the end-of-step sync (the I/O the schedule did not hide behind compute)."""
        self._ahead = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fullgraph-ahead")
        self._keep_agg, self._reads_self = self._probe_layer0()
        self._train_sched = Schedule(self.train_schedule())
        self._eval_sched = Schedule(self.eval_schedule())
        store.flush()

    def _probe_layer0(self) -> tuple[bool, bool]:
        """``(keep_agg, reads_self)``: whether the schedule keeps layer 0's aggregated input (the layer
        aggregates its input before anything else, and a later layer runs first in the backward
        pass), and whether layer 0 also reads its destination rows (SAGE-mean's ``lin_self``).  Not
        R-GCN's: its aggregate is ``R`` times as wide as its input, and a learned input needs its gradient."""
        if self.spec.kind == "rgcn" or self.table is not None:
            return False, False
        d, seen = self.spec.dims[0], []
        src = torch.zeros((2, d), device=self.device)
        dst = torch.zeros((1, d), device=self.device, requires_grad=True)

        def agg(x: torch.Tensor) -> torch.Tensor:
            seen.append(x is src)
            return torch.zeros((1, x.shape[1]), device=x.device)

        z = layer_forward(self.model, 0, agg, src, dst)
        reads_self = torch.autograd.grad(z.sum(), dst, allow_unused=True)[0] is not None
        return self.spec.num_layers > 1 and seen == [True], reads_self

    def _pair(self, q: int, p: int) -> int:
        """Part id of the halo block of owner ``q``'s rows that reader ``p`` reads."""
        return q * self.P + p

    def _sources(self, kind: str, l: int, p: int) -> list[tuple[str, int, None]]:
        """Blocks a gather of part ``p``'s layer-``l`` input reads (layer 0: the feature halos only; none
        when layer 0's input is learned)."""
        if l == 0 and self.table is not None:
            return []
        halo = [("feath" if l == 0 else kind + "h", self._pair(q, p), None) for q in self.plan.deps[p]]
        return halo if l == 0 else [(kind, p, None)] + halo

    def _features(self, p: int, out: torch.Tensor | None = None) -> torch.Tensor:
        """Part ``p``'s own feature rows, read from the source. Shapes: ``float32[n_p, dims[0]]``."""
        if out is None:
            out = torch.empty((self.sizes[p], self.spec.dims[0]), dtype=torch.float32)
        self.source.features_into(p, out.numpy())
        return out

    def _put_with_halo(self, kind: str, l: int, q: int, x: torch.Tensor, own: bool = True) -> None:
        """Write part ``q``'s block (``own``) and the pair blocks its readers will gather."""
        x = x.detach().cpu()
        if own:
            self.store.put_async(kind, l, q, x)
        for p in self.readers[q]:
            self.store.put_async(kind + "h", l, self._pair(q, p), x.index_select(0, self._rows[p][q]))

    # ------------------------------------------------------------------ schedules
    def _in_kind(self, l: int, training: bool) -> str:
        if not training:
            return "feat" if l == 0 else "eval"
        return "feat" if (l == 0 and self.spec.dropout <= 0) else "act"

    def _gather_reads(self, kind: str, l: int, p: int) -> list[Access]:
        return [(k, l, q, "r") for k, q, _ in self._sources(kind, l, p)]

    def _writes(self, kind: str, l: int, q: int, own: bool = True) -> list[Access]:
        return [(kind, l, q, "w")] * own + [(kind + "h", l, self._pair(q, p), "w") for p in self.readers[q]]

    def _pass(self, kind: str, l: int, rest) -> list[Access]:
        """One layer's accesses over all parts as :meth:`_inputs` issues them: part ``p + 1``'s gather
        before part ``p``'s other accesses ``rest(p)``."""
        s = self._gather_reads(kind, l, 0) if self.P else []
        for p in range(self.P):
            if p + 1 < self.P:
                s += self._gather_reads(kind, l, p + 1)
            s += rest(p)
        return s

    def train_schedule(self) -> list[Access]:
        """Planned block accesses of one training step, in execution order."""
        L, s = self.spec.num_layers, []
        for l in range(L - 1):
            s += self._pass(self._in_kind(l, True), l, lambda p: [("agg", 0, p, "w")] * (l == 0 and self._keep_agg)
                            + self._writes("act", l + 1, p))

        def backward(l: int, p: int) -> list[Access]:
            r: list[Access] = []
            if l < L - 1:
                r.append(("grad", l + 1, p, "r"))
                r += [("gradh", l + 1, self._pair(p, q), "r") for q in self.readers[p]]
            if l > 0:
                r.append(("grad", l, p, "w"))
                r += [("gradh", l, self._pair(q, p), "w") for q in self.plan.deps[p]]
            return r

        for l in reversed(range(L)):
            if l == 0 and self._keep_agg:
                s += [a for p in range(self.P) for a in [("agg", 0, p, "r"), ("act", 1, p, "r")] + backward(0, p)]
            else:
                s += self._pass(self._in_kind(l, True), l, lambda p: backward(l, p))
        return s

    def eval_schedule(self) -> list[Access]:
        """Planned block accesses of one inference pass."""
        L, s = self.spec.num_layers, []
        for l in range(L):
            s += self._pass(self._in_kind(l, False), l, lambda p: self._writes("eval", l + 1, p) if l < L - 1 else [])
        return s

    # ------------------------------------------------------------------ compute
    def _layer(self, l: int, p: int, g: torch.Tensor, keep: list | None = None) -> torch.Tensor:
        """Layer ``l``'s pre-activation output on part ``p`` from its expanded input ``g``; with
        ``keep``, the aggregate of ``g`` itself is appended to it."""
        agg = Aggregation(self.plan.matrix[p], self.plan.matrix_t[p], self.plan.relations, keep, g)
        return layer_forward(self.model, l, agg, g, g[: self.sizes[p]])

    def _layer0_backward(self, epoch: int) -> None:
        """Layer 0's backward pass from the kept aggregates: each part's ``agg`` block is the projection's
        input and its ``act`` block of layer 1 (the ReLU-dropout output, kept since the forward pass)
        gives the projection's output gradient, so neither the expanded input, the aggregation nor the
        projection itself is computed again (:func:`~argosy.services.trainer.fullgraph.layer_ops.full_graph_param_grads`)."""
        st, layer = self.store, gnn(self.model).layers[0]
        for p in range(self.P):
            h = self._get("agg", 0, p).to(self.device)
            y = self._get("act", 1, p).to(self.device)
            own = self._own_input(p, epoch) if self._reads_self else h
            prob = self.spec.dropout if self._mask(epoch, 1, p) is not None else 0.0
            full_graph_param_grads(layer, relu_dropout_grad(y, self._grad_of(1, p), prob), h, own)
            st.release("agg", 0, p)
            st.release("act", 1, p)
            del h, y, own

    def _own_input(self, p: int, epoch: int) -> torch.Tensor:
        """Part ``p``'s own layer-0 input rows in training (features times the epoch's mask)."""
        x = self._features(p)
        if self._in_kind(0, True) == "act":
            apply_dropout(x, self._mask(epoch, 0, p), self.spec.dropout)
        return x.to(self.device)

    def _mask(self, epoch: int, l: int, p: int) -> np.ndarray | None:
        """Part ``p``'s dropout mask of layer-``l`` inputs this epoch, as bits (drawn once, kept for the step)."""
        if epoch != self._bits_epoch:
            self._bits.clear()
            self._bits_epoch = epoch
        if (l, p) not in self._bits:
            self._bits[(l, p)] = dropout_bits((self.sizes[p], self.spec.dims[l]), self.spec.dropout, self.seed,
                                              epoch, l, p)
        return self._bits[(l, p)]

    def _inputs(self, kind: str, l: int, epoch: int = 0):
        """``(p, part p's expanded layer-l input)`` for every part, each gather started while the
        caller still computes the previous part (the store's I/O thread reads the blocks straight
        into the buffer; layer 0's own rows and masks are this trainer's helper thread's work)."""
        nxt = self._gather(kind, l, 0, epoch) if self.P else None
        for p in range(self.P):
            cur = nxt
            if p + 1 < self.P:
                nxt = self._gather(kind, l, p + 1, epoch)
            t0 = time.perf_counter()
            x = cur.result()
            self.wait_seconds += time.perf_counter() - t0
            yield p, x.to(self.device)
            del x
            del cur

    def _gather(self, kind: str, l: int, p: int, epoch: int = 0) -> Future:
        """Start gathering part ``p``'s expanded layer-``l`` input: own rows, then its dependencies'
        boundary rows, into one tensor.

        Layer 0's own rows come from the source, its boundary rows from the feature halo blocks,
        then (``act``) times the epoch's dropout masks of their owners."""
        if l > 0:
            return self.store.gather_async(kind, l, self._sources(kind, l, p))
        n_p = self.sizes[p]
        out = torch.empty((self.plan.expanded_size(p), self.spec.dims[0]), dtype=torch.float32)
        masks = [self._mask(epoch, 0, q) for q in [p] + self.plan.deps[p]] if kind == "act" else []
        if self.table is not None:
            return self._ahead.submit(self._learned_input, out, p, masks)
        src = self._sources(kind, 0, p)
        halo = self.store.gather_async(kind, 0, src, out=out[n_p:]) if src else None
        return self._ahead.submit(self._layer0_input, out, halo, p, masks)

    def _layer0_input(self, out: torch.Tensor, halo: Future | None, p: int, masks: list) -> torch.Tensor:
        self._features(p, out[:self.sizes[p]])
        if halo is not None:
            halo.result()
        return self._masked(out, p, masks)

    def _learned_input(self, out: torch.Tensor, p: int, masks: list) -> torch.Tensor:
        """Part ``p``'s expanded rows of the learned input table, times the epoch's masks."""
        out.copy_(self.table.detach().index_select(0, self._ids[p].to(self.table.device)).cpu())
        return self._masked(out, p, masks)

    def _masked(self, out: torch.Tensor, p: int, masks: list) -> torch.Tensor:
        """``out`` (part ``p``'s expanded layer-0 rows, or their gradient) times the owners' masks, in place."""
        n_p = self.sizes[p]
        if masks:
            prob = self.spec.dropout
            apply_dropout(out[:n_p], masks[0], prob)
            off = n_p
            for q, bits in zip(self.plan.deps[p], masks[1:]):
                rows = self.plan.boundary[p][q]
                apply_dropout(out[off:off + len(rows)], bits, prob, rows)
                off += len(rows)
        return out

    def idle_seconds(self) -> float:
        """Seconds this trainer has waited for the store so far: :attr:`wait_seconds` plus the
        write-behind back-pressure the store counts (``write_wait_seconds``)."""
        return self.wait_seconds + float(self.store.stats().get("write_wait_seconds", 0.0))

    def _get(self, kind: str, l: int, p: int) -> torch.Tensor:
        t0 = time.perf_counter()
        x = self.store.get(kind, l, p)
        self.wait_seconds += time.perf_counter() - t0
        return x

    def _sync(self) -> None:
        t0 = time.perf_counter()
        self.store.sync()
        self.wait_seconds += time.perf_counter() - t0

    def _grad_of(self, l: int, p: int) -> torch.Tensor:
        """Full gradient block of part ``p``'s layer-``l`` input: own + halo contributions."""
        st = self.store
        g = self._get("grad", l, p)
        if self.readers[p]:
            g = g.clone()
            for r in self.readers[p]:
                g.index_add_(0, self._rows[r][p], self._get("gradh", l, self._pair(p, r)))
                st.release("gradh", l, self._pair(p, r))
        st.release("grad", l, p)
        return g.to(self.device)

    def _table_grad(self, p: int, grad: torch.Tensor, epoch: int) -> None:
        """Add part ``p``'s layer-0 input gradient (``[expanded rows, dims[0]]``) into the learned table's
        gradient: the rows are the table's times the masks, so their gradient is the masked one."""
        t = self.table
        masks = [self._mask(epoch, 0, q) for q in [p] + self.plan.deps[p]] if self._in_kind(0, True) == "act" else []
        grad = self._masked(grad.cpu().contiguous(), p, masks).to(t.device)
        if t.grad is None:
            t.grad = torch.zeros_like(t)
        t.grad.index_add_(0, self._ids[p].to(t.device), grad)

    def _release(self, kind: str, l: int) -> None:
        self.store.release_layer(kind, l)
        self.store.release_layer(kind + "h", l)
        trim_heap()  # hand the released blocks' pages back to the OS

    def step(self, epoch: int) -> float:
        """One full-graph forward + backward; accumulates ``.grad`` of the parameters.

        Returns:
            the training loss (mean cross-entropy over training vertices).
        """
        st, spec, L, P = self.store, self.spec, self.spec.num_layers, self.P
        st.plan(self._train_sched)
        st.begin_epoch()
        with torch.no_grad():
            for l in range(L - 1):
                for p, x in self._inputs(self._in_kind(l, True), l, epoch):
                    keep = [] if l == 0 and self._keep_agg else None
                    z = self._layer(l, p, x, keep)
                    del x
                    if keep:
                        st.put_async("agg", 0, p, keep.pop().detach().cpu())
                    self._put_with_halo("act", l + 1, p, relu_dropout(z, self._mask(epoch, l + 1, p), spec.dropout))
                trim_heap()
        total = 0.0
        for l in reversed(range(L)):
            if l == 0 and self._keep_agg:
                self._layer0_backward(epoch)
                continue
            learned = l == 0 and self.table is not None
            for p, g in self._inputs(self._in_kind(l, True), l, epoch):
                if l > 0 or learned:
                    g.requires_grad_(True)
                z = self._layer(l, p, g)
                if l == L - 1:
                    loss = masked_loss_sum(z, self.labels[p], self.masks["train_mask"][p]) / max(1, self.n_train)
                    loss.backward()
                    total += float(loss.detach())
                else:
                    a = relu_dropout(z, self._mask(epoch, l + 1, p), spec.dropout)
                    a.backward(self._grad_of(l + 1, p))
                if learned:
                    self._table_grad(p, g.grad.detach(), epoch)
                if l > 0:
                    gg = g.grad.detach().cpu()
                    n_p = self.sizes[p]
                    st.put_async("grad", l, p, gg[:n_p])
                    off = n_p
                    for q in self.plan.deps[p]:
                        k = len(self._rows[p][q])
                        st.put_async("gradh", l, self._pair(q, p), gg[off:off + k])
                        off += k
                del g, z
            if l == 1 and self._keep_agg:  # layer 0's backward pass reads the own blocks, then releases them
                self.store.release_layer("acth", 1)
                trim_heap()
            elif l > 0:
                self._release("act", l)
        self._sync()
        self._bits.clear()
        return total

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Inference pass without dropout; returns ``{train,val,test}_accuracy``, counts and ``val_loss``."""
        st, L, P = self.store, self.spec.num_layers, self.P
        st.plan(self._eval_sched)
        st.begin_epoch()
        correct = {k: 0 for k in self.masks}
        count = {k: 0 for k in self.masks}
        val_loss = 0.0
        for l in range(L):
            for p, x in self._inputs(self._in_kind(l, False), l):
                z = self._layer(l, p, x)
                del x
                if l < L - 1:
                    self._put_with_halo("eval", l + 1, p, torch.relu(z))
                else:
                    pred = z.argmax(1)
                    val_loss += float(masked_loss_sum(z, self.labels[p], self.masks["val_mask"][p]))
                    for k, ms in self.masks.items():
                        sel = ms[p] & (self.labels[p] >= 0)
                        correct[k] += int((pred[sel] == self.labels[p][sel]).sum())
                        count[k] += int(sel.sum())
            if l > 0:
                self._release("eval", l)
        self._sync()
        out = {k.replace("_mask", "_accuracy"): correct[k] / max(1, count[k]) for k in self.masks}
        out["val_loss"] = val_loss / max(1, count["val_mask"])
        out.update({k.replace("_mask", "_correct"): correct[k] for k in self.masks})
        out.update({k.replace("_mask", "_count"): count[k] for k in self.masks})
        return out
