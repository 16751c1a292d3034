"""Load a trained model back, and predict every vertex with full neighbourhoods (:mod:`argosy.fullnbr`).

``best.pt`` (written by the trainer at each new best validation accuracy) holds the weights, the
job spec and the model's shape, so :func:`load_model` rebuilds the model without the user
repeating any flag (a typed run's R-GCN: the relations of its store, a featureless first layer or
learned input rows as the checkpoint holds them).  :func:`predict` runs built-in models (GCN, SAGE,
GAT, R-GCN) **layer by layer**: layer ``i`` is computed for every vertex, part by part, in chunks of
destination vertices whose full neighbour lists (and, on a typed store, their relations) come from
the store, and its output is written to a memory-mapped file that layer ``i + 1`` reads.  Memory
is one chunk plus the page cache, whatever the graph size.  A ``MODULE:FACTORY`` model has no
layer structure Argosy can split, so it runs on chunks of seeds with their full ``L``-hop
neighbourhoods and the in-edges of the outermost hop (exact, equal to
training's evaluation, but the neighbourhoods can be large).
"""
from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import numpy as np
import torch

from argosy.shared.config import JobConfig
from argosy.shared.errors import ArgosyError
from argosy.shared.rundir import load_best
from argosy.shared.models import GNN, EmbeddedInput, RGCNConv, build_model
from argosy.shared.rgcn import RELATIONAL
from argosy.shared.scorers import NodeEmbedding
from argosy.shared.store import PartitionStore
from argosy.shared.usermodel import import_path

from argosy.fullnbr import khop, layerwise

__all__ = ["load_checkpoint", "load_model", "predict_store"]

def _num_relations(state: dict, store: str | Path | None) -> int:
    """An R-GCN's relations: the typed store's (``manifest.num_relations``, what training built the
    model with), checked against the checkpoint's relation tensors; the tensors alone when the store
    is gone (a run directory copied elsewhere)."""
    from_state = set()
    for k, v in state.items():               # comp: float[R, B]; basis without comp: float[R, in, out]
        m = re.fullmatch(r"((?:model\.|encoder\.)?layers\.\d+\.)(comp|basis)", k)
        if m and (m.group(2) == "comp" or m.group(1) + "comp" not in state):
            from_state.add(int(v.shape[0]))
    R = None
    if store is not None and (Path(store) / "manifest.json").exists():
        R = int(PartitionStore(store).manifest.num_relations)
        if R < 1:
            raise ArgosyError(f"{store}: an R-GCN run needs a typed store (this one has no relations)")
        if from_state and from_state != {R}:
            raise ArgosyError(f"{store}: {R} relations, the checkpoint's R-GCN has {sorted(from_state)}")
    elif len(from_state) == 1:
        R = from_state.pop()
    if R is None:
        raise ArgosyError(f"cannot tell the R-GCN's relations: its store {store} is not readable (pass --store)")
    return R


def load_checkpoint(run_dir: str | Path, device: str | torch.device = "cpu",
                    store: str | Path | None = None) -> tuple[torch.nn.Module, dict]:
    """The best-validation model of a run (wrapped for Argosy's blocks) and the checkpoint's metadata.

    The model is rebuilt as the trainer built it (:class:`~services.trainer.core.TrainerCore`):
    R-GCN with the relations of the run's typed store (``store``, default the checkpoint's), its
    first layer featureless when the checkpoint's has no input matrices, and a learned input row per
    vertex (:class:`~argosy.shared.models.EmbeddedInput`) when the checkpoint holds that table, its
    width read from the table.  ``weights_only=True``: a checkpoint is data, never code.
    """
    path, ck = load_best(run_dir, device)
    cfg = JobConfig.from_json(ck["spec"])
    t = cfg.trainer
    state = ck["model"]
    table = state.get("embedding.table.weight")          # learned input rows (EmbeddedInput)
    emb_dim = 0 if table is None else int(table.shape[1])
    in_dim = int(ck["in_dim"])
    rel = {}
    if t.model in RELATIONAL:
        R = _num_relations(state, store or ck["store"])
        prefix = "model." if table is not None else ""
        featureless = table is not None and f"{prefix}layers.0.basis" not in state
        if featureless:
            want = RGCNConv.featureless_width(t.hidden, R, t.num_bases)
            if in_dim or emb_dim != want:
                raise ArgosyError(f"{path}: a featureless R-GCN takes {want} learned columns per vertex "
                                  f"(checkpoint: {emb_dim} learned after {in_dim} features)")
        rel = dict(num_relations=R, num_bases=t.num_bases, featureless=featureless)
    elif ":" in t.model:                    # a PyG heterogeneous model gets the typed store's metadata
        where = store or ck["store"]
        typed = PartitionStore(where).manifest.typed if (Path(where) / "manifest.json").exists() else {}
        if typed:
            rel = dict(metadata=(typed["node_types"], typed["relations"]))
    with import_path(path.parent):          # a MODULE:FACTORY module imports as it did in training
        model = build_model(t.model, in_dim + emb_dim, t.hidden, int(ck["num_classes"]), int(ck["num_layers"]),
                            t.dropout, heads=t.heads, aggregator=t.aggregator, **rel)
    if table is not None:
        model = EmbeddedInput(model, NodeEmbedding(int(table.shape[0]), emb_dim, sparse=False))
    try:
        getattr(model, "inner", model).load_state_dict(state)
    except RuntimeError as e:                # shapes or names that the rebuilt model does not have
        raise ArgosyError(f"{path}: the checkpoint does not fit the model its spec describes "
                          f"({' '.join(str(e).split())[:400]})") from None
    model.to(device).eval()
    info = {k: ck[k] for k in ("epoch", "val_accuracy", "test_accuracy", "in_dim", "num_classes", "num_layers",
                               "store")}
    info.update(config=json.loads(ck["spec"]), checkpoint=str(path), normalize_features=bool(t.normalize_features),
                edge_weights=bool(t.edge_weights), node_embedding_dim=emb_dim,
                **{k: v for k, v in rel.items() if k != "metadata"})
    return model, info


def load_model(run_dir: str | Path, device: str | torch.device = "cpu") -> torch.nn.Module:
    """The best-validation model of a run, as its author wrote it, in eval mode; ``model.argosy_info``
    says how it was trained (best epoch, accuracies, job config, ``normalize_features``).

    Built-in models are :class:`~argosy.shared.models.GNN` (``forward(x, blocks)``; R-GCN reads
    ``blocks.edge_type``); a ``MODULE:FACTORY`` model is the factory's own module (e.g. PyG's
    ``forward(x, edge_index)``).  A model trained with learned input rows (a featureless store, or
    ``--node-embeddings``) is an :class:`~argosy.shared.models.EmbeddedInput`, ``forward(x, blocks,
    ids)``: the model as ``.model``, the rows as ``.embedding``.  A knowledge-graph run's model is its
    :class:`~argosy.shared.scorers.KGModel` (entity table ``.embedding``, relation scorer ``.scorer``).
    """
    from argosy.linkpredict import is_link_run, load_link_model
    if is_link_run(run_dir):                 # a LinkModel: .embed(x, blocks), .score(z, pairs)
        model, ck, cfg = load_link_model(run_dir, device)
        model.argosy_info = {"epoch": ck["epoch"], "metrics": ck.get("metrics"), "config": json.loads(ck["spec"]),
                             "checkpoint": ck["checkpoint"], "normalize_features": bool(cfg.trainer.normalize_features)}
        return model
    model, info = load_checkpoint(run_dir, device)
    model = getattr(model, "inner", model)
    model.argosy_info = info            # epoch, accuracies, config, normalize_features: how it was trained
    return model


def predict_store(run_dir: str | Path, out: str | Path, store: str | Path | None = None, embeddings: bool = False,
                  device: str = "cpu") -> dict:
    """Write ``pred`` (int64[n]) and ``logits`` (float32[n, C]) for every vertex to ``out`` (.npz),
    and ``embeddings`` (float32[n, hidden]: the last hidden layer; for a ``MODULE:FACTORY`` model
    the input of its last layer, see :func:`argosy.shared.usermodel.embedding_module`) when asked.
    A typed store's rows also get ``node_type`` (int16[n]), ``node_types`` (the names) and
    ``type_offsets`` (type ``t`` owns rows ``[off[t], off[t + 1])``), so one type's rows are a slice.
    Returns a summary with the test accuracy of the predictions."""
    model, info = load_checkpoint(run_dir, device, store=store)
    st = PartitionStore(store or info["store"])
    if st.manifest.feature_dim != info["in_dim"]:
        raise ArgosyError(f"{st.root}: features have width {st.manifest.feature_dim}, the model expects {info['in_dim']}")
    learned = None
    if isinstance(model, EmbeddedInput):     # learned input rows by global id, after the features (if any)
        learned = model.embedding.table.weight.detach().cpu().numpy()
        if learned.shape[0] != st.manifest.num_nodes:
            raise ArgosyError(f"{st.root}: {st.manifest.num_nodes} vertices, the model learned input rows for "
                              f"{learned.shape[0]} (predict on the store it was trained on)")
        model = model.model
    if info.get("num_relations") and st.manifest.num_relations != info["num_relations"]:
        raise ArgosyError(f"{st.root}: {st.manifest.num_relations} relations, the model has {info['num_relations']}")
    out = Path(out)
    if out.suffix != ".npz":
        raise ArgosyError(f"--out {out}: predictions are written as .npz")
    emb = None
    with tempfile.TemporaryDirectory(prefix="argosy-predict-", dir=out.parent if out.parent.exists() else None) as tmp:
        if isinstance(model, GNN):
            logits, emb = layerwise(model, st, info["normalize_features"], Path(tmp), embeddings,
                                     weighted=bool(info["edge_weights"] and st.manifest.edge_weights),
                                     learned=learned)
        else:
            logits, emb = khop(model, st, info["normalize_features"], info["num_layers"], embeddings,
                               learned=learned)
        logits = np.asarray(logits, np.float32)
        pred = logits.argmax(1).astype(np.int64)
        arrays = {"pred": pred, "logits": logits}
        if emb is not None:
            arrays["embeddings"] = np.asarray(emb, np.float32)
        typed = st.manifest.typed
        if typed.get("node_types"):          # a typed store: each row's type, to pick a type's rows
            offs = np.asarray(typed["type_offsets"], np.int64)
            arrays["node_type"] = (np.searchsorted(offs, np.arange(pred.shape[0]), "right") - 1).astype(np.int16)
            arrays["node_types"] = np.asarray(typed["node_types"])
            arrays["type_offsets"] = offs
        part = out.with_name(out.name + ".part.npz")
        np.savez(part, **arrays)
        part.replace(out)
    summary = {"out": str(out), "n": int(pred.shape[0]), "classes": int(logits.shape[1]),
               "checkpoint": info["checkpoint"], "best_epoch": int(info["epoch"]),
               "run_test_accuracy": float(info["test_accuracy"])}
    test = st.split_nodes("test")
    if test.size:
        y = np.full(test.shape[0], -1, np.int64)
        assign, local = np.asarray(st.assignment), np.asarray(st.local_index)
        for p in np.unique(assign[test]):
            sel = assign[test] == p
            y[sel] = np.asarray(st.part(int(p)).labels)[local[test[sel]]]
        ok = y >= 0
        summary["test_accuracy"] = float((pred[test][ok] == y[ok]).mean()) if ok.any() else None
    return summary
