"""The Python API: the CLI's training job as a function call, with the CLI's defaults.

Example:
    >>> import argosy                                                         # doctest: +SKIP
    >>> res = argosy.train("cora.npz", model="gat", run_dir="runs/cora-gat")  # doctest: +SKIP
    >>> res["test_accuracy"], res["best_checkpoint"]                          # doctest: +SKIP
    >>> out = argosy.predict("runs/cora-gat")                                  # doctest: +SKIP
    >>> model = argosy.load_model("runs/cora-gat")                             # doctest: +SKIP

Options are the flags of ``argosy train`` with underscores (``batch_size=512``,
``fanouts=[25, 10]``, ``normalize_features=False``).  They are turned into that command line and
parsed by the same parser, so defaults, validation and the job file (``config="job.yaml"``, whose
values the keyword arguments override) are the CLI's own.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from argosy.shared.errors import ArgosyError, ConfigError
from argosy.shared.graphio.typed import TypedGraph

__all__ = ["train", "predict", "load_model", "train_argv", "graph_to_npz"]


def train_argv(data: str | None = None, *, config: str | None = None, **options) -> list[str]:
    """The ``argosy train`` command line for these arguments (what :func:`train` runs)."""
    from argosy.services.train_args import flag_table
    table = flag_table()
    argv = ["train"]
    if config is not None:
        argv += ["--config", str(config)]
    if data is not None:
        argv += ["--data", str(data)]
    for key, value in options.items():
        act = table.get(key)
        if act is None or key in ("config", "json"):
            raise ConfigError(f"argosy.train() got an unknown option {key!r} (known: "
                              f"{', '.join(sorted(k for k in table if k not in ('config', 'json')))})")
        opt = act.option_strings[0]
        if isinstance(act, argparse.BooleanOptionalAction):
            if value is not None:
                argv.append(opt if value else f"--no-{opt[2:]}")
        elif act.nargs == 0:
            if value:
                argv.append(opt)
        elif value is not None:
            argv.append(f"{opt}=" + (",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)))
    return argv


NODE_ARRAYS = ("features", "labels", "train_mask", "val_mask", "test_mask")
"""Options that take a file path (``--features F.npy``) or, in the Python API, the array itself."""


def _is_path(x) -> bool:
    return x is None or isinstance(x, (str, Path))


def graph_to_npz(data, path: Path, arrays: dict | None = None) -> Path:
    """Write an in-memory graph as an ``.npz`` edge list the partitioner reads.

    ``data``: a PyG ``Data`` (``edge_index``, and ``x``, ``y``, ``*_mask``, ``edge_weight`` when set), a
    scipy sparse adjacency matrix (row -> column; its values are edge weights unless all 1), or an
    integer array of edges, ``(m, 2)`` or ``(2, m)``.
    ``arrays``: node arrays by name (``features``, ``labels``, masks), numpy or torch.
    """
    def np_(a):
        return a.detach().cpu().numpy() if hasattr(a, "detach") else np.asarray(a)

    out: dict = {}
    if hasattr(data, "edge_index") and hasattr(data, "num_nodes"):            # torch_geometric.data.Data
        ei = np_(data.edge_index)
        out.update(src=ei[0], dst=ei[1], num_nodes=np.int64(data.num_nodes))
        if getattr(data, "edge_weight", None) is not None:                    # kept in the store (docs/python-api.md)
            out["edge_weight"] = np_(data.edge_weight).reshape(-1)
        for name, attr in (("features", "x"), ("labels", "y"), ("train_mask", "train_mask"),
                           ("val_mask", "val_mask"), ("test_mask", "test_mask")):
            v = getattr(data, attr, None)
            if v is not None:
                out[name] = np_(v)
    elif hasattr(data, "tocoo"):                                               # scipy.sparse
        if data.shape[0] != data.shape[1]:
            raise ConfigError(f"argosy.train(data=...): an adjacency matrix must be square (got shape {data.shape})")
        coo = data.tocoo()
        out.update(src=coo.row, dst=coo.col, num_nodes=np.int64(data.shape[0]))
        if coo.data.size and not np.all(coo.data == 1):                        # a weighted matrix: its values
            out["edge_weight"] = np.asarray(coo.data)
    else:
        e = np_(data)
        if e.ndim != 2 or 2 not in e.shape or e.dtype.kind not in "iu":
            raise ConfigError("argosy.train(data=...) takes a path, a PyG Data, a scipy sparse adjacency matrix or "
                              f"an integer edge array of shape (m, 2) or (2, m) (got {type(data).__name__} "
                              f"{getattr(e, 'dtype', '')}{list(getattr(e, 'shape', []))})")
        e = e if e.shape[0] == 2 and e.shape[1] != 2 else e.T
        out.update(src=e[0], dst=e[1])
    for name, v in (arrays or {}).items():
        if name in out:
            raise ConfigError(f"argosy.train(): {name} is given twice (in data and as {name}=)")
        out[name] = np_(v)
    if "labels" in out:
        out["labels"] = out["labels"].reshape(-1).astype(np.int64)
    for m in ("train_mask", "val_mask", "test_mask"):
        if m in out and out[m].dtype != bool and out[m].shape[0] == out.get("num_nodes", -1):
            out[m] = out[m].astype(bool)
    if "features" in out:
        out["features"] = out["features"].astype(np.float32, copy=False)
    np.savez(path, **out)
    return path


def _is_typed(data) -> bool:
    """A heterogeneous graph object: a TypedGraph, or a PyG ``HeteroData`` (has node and edge types)."""
    return isinstance(data, TypedGraph) or (hasattr(data, "node_types") and hasattr(data, "edge_types"))


def from_hetero_data(data):
    from argosy.shared.graphio.hetero_pyg import from_hetero_data as convert
    return convert(data)


def train(data=None, *, config: str | None = None, **options) -> dict:
    """Partition ``data`` (or use ``store=``), train with separate sampler/loader/trainer processes
    and return the result: the fields of ``argosy train --json`` (``test_accuracy`` and
    ``val_accuracy`` of the best validation epoch, ``best_epoch``, throughput, ...), plus
    ``best_checkpoint`` (the best weights) and ``run_dir``.  Raises :class:`ArgosyError` when the
    job fails.  Mini-batch mode only; the full-graph modes run from the CLI.

    ``data`` is a file path, or a graph in memory: a PyG ``Data`` or ``HeteroData`` (typed: node
    types, relations, features per type, labels and masks on the labelled type), a
    :class:`~argosy.shared.graphio.typed.TypedGraph`, a scipy sparse adjacency
    matrix, or an integer edge array ``(m, 2)``/``(2, m)`` (see :func:`graph_to_npz`); the node
    options ``features=``, ``labels=``, ``train_mask=``, ... then take arrays too.  An in-memory
    graph is written to a temporary ``.npz`` for the partitioner and removed afterwards."""
    from argosy.services.driver import run_local
    from argosy.services.launch import build_parser
    from argosy.services.train_args import expand_job_file, finish_args
    if options.get("mode", "minibatch") != "minibatch":
        raise ConfigError("argosy.train() runs the mini-batch pipeline; use `argosy train --mode "
                          f"{options['mode']}` for the full-graph modes")
    options.pop("mode", None)
    arrays = {k: options.pop(k) for k in NODE_ARRAYS if not _is_path(options.get(k))}
    with tempfile.TemporaryDirectory(prefix="argosy-input-") as tmp:
        if not _is_path(data) and _is_typed(data):          # PyG HeteroData or a TypedGraph: a typed directory
            from argosy.shared.graphio.typed_dir import save_typed_dir
            save_typed_dir(data if isinstance(data, TypedGraph) else from_hetero_data(data), Path(tmp) / "typed")
            data = Path(tmp) / "typed"
        elif not _is_path(data):
            data = graph_to_npz(data, Path(tmp) / "graph.npz", arrays)
        elif arrays:
            for name, v in arrays.items():                   # arrays beside a graph file: side files
                options[name] = Path(tmp) / f"{name}.npy"
                np.save(options[name], v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v))
        argv = expand_job_file(train_argv(data, config=config, **options)) + ["--json"]
        args = finish_args(build_parser().parse_args(argv))
        args.argv = argv
        result = run_local(args)
    if "error" in result:
        raise ArgosyError(f"training failed: {result['error']} (report: {result.get('report')})")
    result["run_dir"] = str(Path(result["report"]).parent)
    return result


def predict(run_dir: str | Path, out: str | Path | None = None, *, store: str | Path | None = None,
            embeddings: bool = False, edges: str | Path | np.ndarray | None = None) -> dict:
    """Predictions for every vertex from a run's best checkpoint, with full neighbourhoods.

    With ``out`` the arrays are written there (``.npz``) and a summary is returned; without, the
    summary also holds the arrays: ``pred`` int64[n], ``logits`` float32[n, C] and, with
    ``embeddings=True``, ``embeddings`` float32[n, hidden].

    A link-prediction run (``task="link"``) scores vertex pairs instead: ``edges`` (an ``(m, 2)``
    array or ``.npy``; default: the store's test pairs, with their AUC/AP in the summary) give
    ``scores`` float32[m] (logits) and ``edges`` int64[m, 2] (see :mod:`argosy.linkpredict`).
    """
    from argosy.inference import predict_store
    from argosy.linkpredict import is_link_run, predict_links
    with tempfile.TemporaryDirectory(prefix="argosy-predict-") as tmp:
        if isinstance(edges, np.ndarray):
            np.save(Path(tmp) / "edges.npy", edges)
            edges = Path(tmp) / "edges.npy"
        if is_link_run(run_dir):
            run = lambda dest: predict_links(run_dir, dest, edges=edges, store=store, embeddings=embeddings)  # noqa: E731
        elif edges is not None:
            raise ConfigError(f"edges=: {run_dir} is a node-classification run (train with task='link')")
        else:
            run = lambda dest: predict_store(run_dir, dest, store=store, embeddings=embeddings)  # noqa: E731
        if out is not None:
            return run(out)
        path = Path(tmp) / "pred.npz"
        res = run(path)
        with np.load(path) as z:
            res.update({k: z[k] for k in z.files})
        res.pop("out")
    return res


def load_model(run_dir: str | Path, device: str = "cpu"):
    """The best-validation model of a run, in eval mode (see :func:`argosy.inference.load_model`)."""
    from argosy.inference import load_model as _load
    return _load(run_dir, device)
