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

Block kinds: ``feat`` (layer 0, persistent inputs), ``act`` (layer l input
after ReLU+dropout, one epoch), ``grad`` (gradient w.r.t. ``act``), ``eval``
(inference activations). Each has a *halo* twin (``feath``, ``acth``,
``gradh``, ``evalh``): the compact block of the rows of part ``p`` that other
parts read (its export set, ``(alpha - 1) * D`` bytes in all). Gathers read
the own block plus the small halo blocks of the dependencies instead of whole
remote blocks, and remote gradient contributions accumulate in the halo
gradient block, so each layer's big blocks are read about once per pass. The access order of both passes is handed to the
store in advance (:meth:`OffloadTrainer.train_schedule`) so it can run
Belady eviction and exact prefetch.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from argosy.shared.models import GNN

from .graph import GraphData, PartPlan
from .kernels import SpMM
from .model import ModelSpec, dropout_mask, layer_forward, masked_loss_sum, post_activation
from argosy.services.offload.memory import trim_heap
from argosy.services.offload.policy import Access, Schedule
from argosy.services.offload.store import OffloadStore

__all__ = ["OffloadTrainer"]

logger = logging.getLogger(__name__)


class OffloadTrainer:
    """Full-graph trainer whose activations and gradients live in an :class:`OffloadStore`.

    Args:
        spec: model architecture.
        plan: partition plan built with ``spec.aggr``.
        graph: provides ``features``, ``labels`` and masks (features are copied
            into the store as ``feat`` blocks and not kept here).
        store: the block store (in-process, or a remote client with the same API).
        model: the shared :class:`~argosy.shared.models.GNN` whose parameters get the gradients.
        seed: dropout seed.
        device: where layers are computed; blocks stay on the host.

    Shapes:
        ``feat``/``act``/``grad``/``eval`` blocks of part ``p`` at layer ``l`` are
        ``float32[n_p, dims[l]]``.
    """

    def __init__(self, spec: ModelSpec, plan: PartPlan, graph: GraphData, store: OffloadStore,
                 model: GNN, seed: int = 0, device: torch.device | str = "cpu") -> None:
        if graph.features is None or graph.labels is None:
            raise ValueError("offloaded training needs features and labels")
        self.spec, self.plan, self.store, self.model = spec, plan, store, model
        self.seed = seed
        self.device = torch.device(device)
        self.P = plan.num_parts
        self.sizes = plan.part_sizes()
        n = graph.num_nodes
        masks = {k: (getattr(graph, k) if getattr(graph, k) is not None else np.zeros(n, bool))
                 for k in ("train_mask", "val_mask", "test_mask")}
        self.labels = [torch.from_numpy(graph.labels[o]).to(self.device) for o in plan.own]
        self.masks = {k: [torch.from_numpy(m[o]).to(self.device) for o in plan.own] for k, m in masks.items()}
        self.n_train = int((masks["train_mask"] & (graph.labels >= 0)).sum())
        # export set of each part and, per dependency, positions inside the owner's export set
        exp_lists: list[list[np.ndarray]] = [[] for _ in range(self.P)]
        for p in range(self.P):
            for q in plan.deps[p]:
                exp_lists[q].append(plan.boundary[p][q])
        self.export = [np.unique(np.concatenate(e)) if e else np.zeros(0, np.int64) for e in exp_lists]
        self._export_t = [torch.from_numpy(e) for e in self.export]
        self.hidx = [{q: np.searchsorted(self.export[q], plan.boundary[p][q]) for q in plan.deps[p]}
                     for p in range(self.P)]
        for p in range(self.P):
            x = torch.from_numpy(np.ascontiguousarray(graph.features[plan.own[p]], dtype=np.float32))
            self._put_with_halo("feat", 0, p, x, sync=True)
        self._train_sched = Schedule(self.train_schedule())
        self._eval_sched = Schedule(self.eval_schedule())
        store.flush()

    def _sources(self, kind: str, p: int) -> list[tuple[str, int, np.ndarray | None]]:
        return [(kind, p, None)] + [(kind + "h", q, self.hidx[p][q]) for q in self.plan.deps[p]]

    def _put_with_halo(self, kind: str, l: int, p: int, x: torch.Tensor, sync: bool = False) -> None:
        put = self.store.put if sync else self.store.put_async
        x = x.detach().cpu()
        put(kind, l, p, x)
        if len(self.export[p]):
            put(kind + "h", l, p, x.index_select(0, self._export_t[p]))

    # ------------------------------------------------------------------ schedules
    def _in_kind(self, l: int, training: bool) -> str:
        if not training:
            return "feat" if l == 0 else "eval"
        return "feat" if (l == 0 and self.spec.dropout <= 0) else "act"

    def _gather_reads(self, kind: str, l: int, p: int) -> list[Access]:
        return [(k, l, q, "r") for k, q, _ in self._sources(kind, p)]

    def _writes(self, kind: str, l: int, p: int) -> list[Access]:
        return [(kind, l, p, "w")] + ([(kind + "h", l, p, "w")] if len(self.export[p]) else [])

    def train_schedule(self) -> list[Access]:
        """Planned block accesses of one training step, in execution order."""
        L, P, s = self.spec.num_layers, self.P, []
        if self.spec.dropout > 0:
            for p in range(P):
                s += [("feat", 0, p, "r")] + self._writes("act", 0, p)
        for l in range(L - 1):
            for p in range(P):
                s += self._gather_reads(self._in_kind(l, True), l, p) + self._writes("act", l + 1, p)
        for l in reversed(range(L)):
            seen: set[int] = set()
            for p in range(P):
                s += self._gather_reads(self._in_kind(l, True), l, p)
                if l < L - 1:
                    s.append(("grad", l + 1, p, "r"))
                    if len(self.export[p]):
                        s.append(("gradh", l + 1, p, "r"))
                if l > 0:
                    s.append(("grad", l, p, "w"))
                    for q in self.plan.deps[p]:
                        s.append(("gradh", l, q, "r" if q in seen else "w"))
                        seen.add(q)
        return s

    def eval_schedule(self) -> list[Access]:
        """Planned block accesses of one inference pass."""
        L, P, s = self.spec.num_layers, self.P, []
        for l in range(L):
            for p in range(P):
                s += self._gather_reads(self._in_kind(l, False), l, p)
                if l < L - 1:
                    s += self._writes("eval", l + 1, p)
        return s

    # ------------------------------------------------------------------ compute
    def _layer(self, l: int, p: int, g: torch.Tensor) -> torch.Tensor:
        m, mt = self.plan.matrix[p], self.plan.matrix_t[p]
        return layer_forward(self.model, l, lambda x: SpMM.apply(x, m, mt), g, g[: self.sizes[p]])

    def _mask(self, epoch: int, l: int, p: int) -> torch.Tensor | None:
        return dropout_mask((self.sizes[p], self.spec.dims[l]), self.spec.dropout, self.seed,
                            epoch, l, p, self.device)

    def _gather(self, kind: str, l: int, p: int) -> torch.Tensor:
        return self.store.gather(kind, l, self._sources(kind, p)).to(self.device)

    def _grad_of(self, l: int, p: int) -> torch.Tensor:
        """Full gradient block of part ``p``'s layer-``l`` input: own + halo contributions."""
        st = self.store
        g = st.get("grad", l, p)
        if len(self.export[p]):
            g = g.clone().index_add_(0, self._export_t[p], st.get("gradh", l, p))
            st.release("gradh", l, p)
        st.release("grad", l, p)
        return g.to(self.device)

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
        if spec.dropout > 0:
            for p in range(P):
                x = st.get("feat", 0, p)
                self._put_with_halo("act", 0, p, x * self._mask(epoch, 0, p).cpu())
        with torch.no_grad():
            for l in range(L - 1):
                kind = self._in_kind(l, True)
                for p in range(P):
                    z = self._layer(l, p, self._gather(kind, l, p))
                    self._put_with_halo("act", l + 1, p, post_activation(z, self._mask(epoch, l + 1, p)))
                trim_heap()
        total = 0.0
        for l in reversed(range(L)):
            kind = self._in_kind(l, True)
            for p in range(P):
                g = self._gather(kind, l, p)
                if l > 0:
                    g.requires_grad_(True)
                z = self._layer(l, p, g)
                if l == L - 1:
                    loss = masked_loss_sum(z, self.labels[p], self.masks["train_mask"][p]) / max(1, self.n_train)
                    loss.backward()
                    total += float(loss.detach())
                else:
                    a = post_activation(z, self._mask(epoch, l + 1, p))
                    a.backward(self._grad_of(l + 1, p))
                if l > 0:
                    gg = g.grad.detach().cpu()
                    n_p = self.sizes[p]
                    st.put_async("grad", l, p, gg[:n_p])
                    off = n_p
                    for q in self.plan.deps[p]:
                        k = len(self.hidx[p][q])
                        st.scatter_add_async("gradh", l, q, self.hidx[p][q], gg[off:off + k],
                                             num_rows=len(self.export[q]))
                        off += k
                del g, z
            if l > 0 or spec.dropout > 0:
                self._release("act", l)
        st.sync()
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
            kind = self._in_kind(l, False)
            for p in range(P):
                z = self._layer(l, p, self._gather(kind, l, p))
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
        st.sync()
        out = {k.replace("_mask", "_accuracy"): correct[k] / max(1, count[k]) for k in self.masks}
        out["val_loss"] = val_loss / max(1, count["val_mask"])
        out.update({k.replace("_mask", "_correct"): correct[k] for k in self.masks})
        out.update({k.replace("_mask", "_count"): count[k] for k in self.masks})
        return out
