"""Load a trained model back, and predict every vertex with full neighbourhoods (:mod:`argosy.fullnbr`).

``best.pt`` (written by the trainer at each new best validation accuracy) holds the weights, the
job spec and the model's shape, so :func:`load_model` rebuilds the model without the user
repeating any flag.  :func:`predict` runs built-in models (GCN, SAGE, GAT) **layer by layer**:
layer ``i`` is computed for every vertex, part by part, in chunks of destination vertices whose
full neighbour lists come from the store, and its output is written to a memory-mapped file that
layer ``i + 1`` reads.  Memory is one chunk plus the page cache, whatever the graph size.  A
``MODULE:FACTORY`` model has no layer structure Argosy can split, so it runs on chunks of seeds
with their full ``L``-hop neighbourhoods and the in-edges of the outermost hop (exact, equal to
training's evaluation, but the neighbourhoods can be large).
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import torch

from argosy.shared.config import JobConfig
from argosy.shared.errors import ArgosyError
from argosy.shared.rundir import load_best
from argosy.shared.models import GNN, build_model
from argosy.shared.store import PartitionStore
from argosy.shared.usermodel import import_path

from argosy.fullnbr import khop, layerwise

__all__ = ["load_checkpoint", "load_model", "predict_store"]

def load_checkpoint(run_dir: str | Path, device: str | torch.device = "cpu") -> tuple[torch.nn.Module, dict]:
    """The best-validation model of a run (wrapped for Argosy's blocks) and the checkpoint's metadata.

    ``weights_only=True``: a checkpoint is data, never code.
    """
    path, ck = load_best(run_dir, device)
    cfg = JobConfig.from_json(ck["spec"])
    t = cfg.trainer
    with import_path(path.parent):          # a MODULE:FACTORY module imports as it did in training
        model = build_model(t.model, int(ck["in_dim"]), t.hidden, int(ck["num_classes"]), int(ck["num_layers"]),
                            t.dropout, heads=t.heads, aggregator=t.aggregator)
    getattr(model, "inner", model).load_state_dict(ck["model"])
    model.to(device).eval()
    info = {k: ck[k] for k in ("epoch", "val_accuracy", "test_accuracy", "in_dim", "num_classes", "num_layers",
                               "store")}
    info.update(config=json.loads(ck["spec"]), checkpoint=str(path), normalize_features=bool(t.normalize_features),
                edge_weights=bool(t.edge_weights))
    return model, info


def load_model(run_dir: str | Path, device: str | torch.device = "cpu") -> torch.nn.Module:
    """The best-validation model of a run, as its author wrote it, in eval mode; ``model.argosy_info``
    says how it was trained (best epoch, accuracies, job config, ``normalize_features``).

    Built-in models are :class:`~argosy.shared.models.GNN` (``forward(x, blocks)``); a
    ``MODULE:FACTORY`` model is the factory's own module (e.g. PyG's ``forward(x, edge_index)``).
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
    the input of its last layer, see :func:`argosy.shared.usermodel.embedding_module`) when asked.  Returns a summary with the test accuracy of the predictions."""
    model, info = load_checkpoint(run_dir, device)
    st = PartitionStore(store or info["store"])
    if st.manifest.feature_dim != info["in_dim"]:
        raise ArgosyError(f"{st.root}: features have width {st.manifest.feature_dim}, the model expects {info['in_dim']}")
    out = Path(out)
    if out.suffix != ".npz":
        raise ArgosyError(f"--out {out}: predictions are written as .npz")
    emb = None
    with tempfile.TemporaryDirectory(prefix="argosy-predict-", dir=out.parent if out.parent.exists() else None) as tmp:
        if isinstance(model, GNN):
            logits, emb = layerwise(model, st, info["normalize_features"], Path(tmp), embeddings,
                                     weighted=bool(info["edge_weights"] and st.manifest.edge_weights))
        else:
            logits, emb = khop(model, st, info["normalize_features"], info["num_layers"], embeddings)
        logits = np.asarray(logits, np.float32)
        pred = logits.argmax(1).astype(np.int64)
        arrays = {"pred": pred, "logits": logits}
        if emb is not None:
            arrays["embeddings"] = np.asarray(emb, np.float32)
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
