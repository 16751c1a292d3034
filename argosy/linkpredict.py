"""Scores out of a link-prediction run: ``argosy predict RUN --edges pairs.npy`` and ``--embeddings``.

The run's ``best.pt`` holds the encoder and scorer (:class:`~argosy.shared.scorers.LinkModel`)
and the job spec.  Every vertex's embedding is computed with full neighbourhoods on the run's
store (the training graph: held-out edges are not in it, as in training's evaluation) by the same
code as node predictions (:mod:`argosy.inference`: layer by layer for built-in models, exact
``L``-hop neighbourhoods for ``MODULE:FACTORY`` models); a pair's score is the scorer on its two
embeddings: a ranking score (higher = more likely an edge); with ``--link-loss bce`` a logit,
whose ``sigmoid`` is the edge probability.  Without ``--edges`` the store's
held-out test pairs are scored, and their AUC/AP are reported next to the ones training reported.
A model with learned node embeddings (``--node-embeddings``) takes its inputs from its own table
(``best.pt`` holds it), after the store's features when it has any.

A knowledge-graph run (a typed store with ``triples``; :class:`~argosy.shared.scorers.KGModel`)
has no encoder: its entities' embeddings are its learned table.  Predicting it scores the store's
test triples ``(head, relation, tail)`` and ranks them by the filtered protocol training used
(``test_mrr``, ``test_hits1/3/10`` next to the run's own); ``--embeddings`` writes the entity table
and the relation table; ``--edges`` (pairs without relations) is refused.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch

from argosy.fullnbr import khop, layerwise
from argosy.shared.config import JobConfig
from argosy.shared.errors import ArgosyError
from argosy.shared.linkmetrics import link_metrics
from argosy.shared.linkpred import load_pairs, part_pairs
from argosy.shared.models import GNN, build_model
from argosy.shared.rundir import load_best
from argosy.shared.scorers import KGModel, LinkModel, NodeEmbedding, make_scorer
from argosy.shared.store import PartitionStore
from argosy.shared.usermodel import import_path

__all__ = ["is_link_run", "load_link_model", "predict_links"]

_PAIR_CHUNK = 1 << 18


def is_link_run(run_dir: str | Path) -> bool:
    _, ck = load_best(run_dir)
    return JobConfig.from_json(ck["spec"]).trainer.task == "link"


def is_kg_state(state: dict) -> bool:
    """A knowledge-graph run's weights (:class:`KGModel`: an entity table and a relation scorer, no encoder)."""
    return "scorer.rel" in state and "embedding.table.weight" in state and not any(k.startswith("encoder.") for k in state)


def load_kg_model(path: Path, ck: dict, cfg: JobConfig, device: str | torch.device = "cpu",
                  store: str | Path | None = None) -> KGModel:
    """A knowledge-graph run's :class:`KGModel` in eval mode, its relations those of its store
    (the table's own when the store is gone): entity count and width from the checkpoint's table."""
    from argosy.shared.linkpred import kg_relations
    table, rel = ck["model"]["embedding.table.weight"], ck["model"]["scorer.rel"]
    root = Path(store or ck["store"])
    R = kg_relations(PartitionStore(root)) if (root / "manifest.json").exists() else int(rel.shape[0]) // 2
    model = KGModel(int(table.shape[0]), R, cfg.link.kg_scorer, int(table.shape[1]), cfg.link.kg_init_std)
    try:
        model.load_state_dict(ck["model"])
    except RuntimeError as e:
        raise ArgosyError(f"{path}: the checkpoint does not fit a {cfg.link.kg_scorer} model of {R} relations "
                          f"({' '.join(str(e).split())[:300]})") from None
    return model.to(device).eval()


def load_link_model(run_dir: str | Path, device: str | torch.device = "cpu",
                    store: str | Path | None = None) -> tuple[LinkModel | KGModel, dict, JobConfig]:
    """The run's best :class:`LinkModel` (a knowledge-graph run: its :class:`KGModel`) in eval mode,
    its ``best.pt`` contents and its config."""
    path, ck = load_best(run_dir, device)
    cfg = JobConfig.from_json(ck["spec"])
    t = cfg.trainer
    if is_kg_state(ck["model"]):
        return load_kg_model(path, ck, cfg, device, store), {**ck, "checkpoint": str(path)}, cfg
    table = ck["model"].get("embedding.table.weight")      # learned node embeddings (--node-embeddings)
    emb = NodeEmbedding(*table.shape) if table is not None else None
    width = int(ck["in_dim"]) + (table.shape[1] if table is not None else 0)   # features, then the learned rows
    rel = {}
    if t.model in ("rgcn", "rgat"):        # a relational encoder: the relations of its typed store
        from argosy.inference import _num_relations
        rel = dict(num_relations=_num_relations(ck["model"], store or ck["store"]), num_bases=t.num_bases)
    with import_path(path.parent):
        enc = build_model(t.model, width, t.hidden, int(ck["num_classes"]), int(ck["num_layers"]),
                          t.dropout, heads=t.heads, aggregator=t.aggregator, **rel)
    model = LinkModel(enc, make_scorer(cfg.link.scorer, t.hidden), emb)
    try:
        model.load_state_dict(ck["model"])
    except RuntimeError as e:                # shapes or names that the rebuilt model does not have
        raise ArgosyError(f"{path}: the checkpoint does not fit the model its spec describes "
                          f"({' '.join(str(e).split())[:400]})") from None
    return model.to(device).eval(), {**ck, "checkpoint": str(path)}, cfg


def test_pairs(store: PartitionStore) -> tuple[np.ndarray, np.ndarray]:
    """Every held-out test pair of a link store and its label.  -> (int64[m, 2], uint8[m])."""
    got = [part_pairs(store, p, "test") for p in range(store.num_parts)]
    return np.concatenate([np.asarray(a) for a, _ in got]), np.concatenate([np.asarray(b) for _, b in got])


@torch.no_grad()
def predict_links(run_dir: str | Path, out: str | Path, edges: str | Path | None = None,
                  store: str | Path | None = None, embeddings: bool = False) -> dict:
    """Write ``scores`` (float32[m] logits) and ``edges`` (int64[m, 2]) for the pairs of ``edges`` (an
    ``(m, 2)`` ``.npy``; default: the store's test pairs, with ``labels``), and ``embeddings``
    (float32[n, hidden]) when asked, to ``out`` (.npz).  Returns a summary; for the test pairs it
    holds ``test_auc``/``test_ap`` and the run's own ``run_test_auc``/``run_test_ap``.  A
    knowledge-graph run: see :func:`predict_kg`."""
    model, ck, cfg = load_link_model(run_dir, store=store)
    st = PartitionStore(store or ck["store"])
    if isinstance(model, KGModel):
        return predict_kg(model, ck, st, out, edges, embeddings)
    if st.manifest.feature_dim != int(ck["in_dim"]):
        raise ArgosyError(f"{st.root}: features have width {st.manifest.feature_dim}, the model expects {ck['in_dim']}")
    learned = None
    if model.embedding is not None:
        learned = model.embedding.table.weight.detach().cpu().numpy()
        if learned.shape[0] != st.manifest.num_nodes:
            raise ArgosyError(f"{st.root}: {st.manifest.num_nodes} vertices, the model learned embeddings for "
                              f"{learned.shape[0]} (predict on the store it was trained on)")
    out = Path(out)
    if out.suffix != ".npz":
        raise ArgosyError(f"--out {out}: scores are written as .npz")
    n = st.manifest.num_nodes
    labels = None
    if edges is None:
        pairs, labels = test_pairs(st)
    else:
        pairs = load_pairs(str(edges), n, "--edges")
    normalize = bool(cfg.trainer.normalize_features)
    with tempfile.TemporaryDirectory(prefix="argosy-predict-", dir=out.parent if out.parent.exists() else None) as tmp:
        if isinstance(model.encoder, GNN):
            z, _ = layerwise(model.encoder, st, normalize, Path(tmp), False, learned=learned)
        else:
            z, _ = khop(model.encoder, st, normalize, int(ck["num_layers"]), False, learned=learned)
        z = torch.from_numpy(np.asarray(z, np.float32))
        scores = np.empty(pairs.shape[0], np.float32)
        for a in range(0, pairs.shape[0], _PAIR_CHUNK):
            p = torch.from_numpy(pairs[a:a + _PAIR_CHUNK])
            scores[a:a + _PAIR_CHUNK] = model.score(z, p).numpy()
        arrays = {"scores": scores, "edges": pairs}
        if labels is not None:
            arrays["labels"] = labels
        if embeddings:
            arrays["embeddings"] = z.numpy()
        part = out.with_name(out.name + ".part.npz")
        np.savez(part, **arrays)
        part.replace(out)
    summary = {"out": str(out), "task": "link", "pairs": int(pairs.shape[0]), "n": n,
               "checkpoint": ck["checkpoint"], "best_epoch": int(ck["epoch"])}
    if labels is not None:
        met = link_metrics(scores, labels, cfg.link.hits_k)
        summary.update({f"test_{k}": v for k, v in met.items()})
        summary.update({f"run_{k}": v for k, v in (ck.get("metrics") or {}).items() if k.startswith("test_")})
    return summary


@torch.no_grad()
def predict_kg(model: KGModel, ck: dict, st: PartitionStore, out: str | Path, edges=None,
               embeddings: bool = False) -> dict:
    """A knowledge-graph run: write ``scores`` float32[m] of the store's test triples, ``triples``
    int64[m, 3] ``(head, relation, tail)`` and ``edges`` int64[m, 2] ``(head, tail)``, and with
    ``embeddings`` the entity table ``embeddings`` float32[N, d] and the relation table ``relations``
    (float32[2R, .]: each relation, then its reciprocal).  The summary holds the filtered ranking's
    ``test_mrr``/``test_hits1/3/10`` (training's protocol, :meth:`KGModel.ranks`) and the run's own."""
    from argosy.shared.kg import TripleFilter, kg_metrics
    from argosy.shared.linkpred import kg_relations
    if edges is not None:
        raise ArgosyError("--edges: a knowledge-graph run scores (head, relation, tail) triples, not pairs; "
                          "predict without --edges scores the store's test triples (--embeddings: the tables)")
    R = kg_relations(st)
    n = st.manifest.num_nodes
    table = model.embedding.table.weight
    if not R or table.shape[0] != n or model.scorer.num_relations != R:
        raise ArgosyError(f"{st.root}: {n} entities and {R} triple relations; the model has "
                          f"{table.shape[0]} and {model.scorer.num_relations} (predict on the store it was trained on)")
    out = Path(out)
    if out.suffix != ".npz":
        raise ArgosyError(f"--out {out}: scores are written as .npz")

    def triples(split: str) -> np.ndarray:
        got = [st.read_part(p, (f"kg_{split}",), advice=None)[f"kg_{split}"] for p in range(st.num_parts)]
        return np.concatenate([np.asarray(a, np.int64).reshape(-1, 3) for a in got if a is not None] +
                              [np.zeros((0, 3), np.int64)])

    test = triples("test")
    known = TripleFilter(np.concatenate([triples(s) for s in ("train", "valid", "test")]), n, R)
    tr = torch.from_numpy(test)
    scores = np.empty(test.shape[0], np.float32)
    for a in range(0, test.shape[0], _PAIR_CHUNK):
        h, r, t = tr[a:a + _PAIR_CHUNK].unbind(1)
        scores[a:a + _PAIR_CHUNK] = model.scorer.score(table[h], r, table[t]).float().numpy()
    arrays = {"scores": scores, "triples": test, "edges": np.ascontiguousarray(test[:, [0, 2]])}
    if embeddings:
        arrays["embeddings"] = table.detach().float().numpy()
        arrays["relations"] = model.scorer.rel.detach().float().numpy()
    part = out.with_name(out.name + ".part.npz")
    np.savez(part, **arrays)
    part.replace(out)
    summary = {"out": str(out), "task": "link", "kg": True, "pairs": int(test.shape[0]), "n": n,
               "checkpoint": ck["checkpoint"], "best_epoch": int(ck["epoch"])}
    if test.shape[0]:
        met = kg_metrics(model.ranks(tr, known))
        summary.update({f"test_{k.replace('@', '')}": v for k, v in met.items()})
    summary.update({f"run_{k}": v for k, v in (ck.get("metrics") or {}).items()
                    if k.startswith("test_") and v is not None and k != "test_hits"})
    return summary
