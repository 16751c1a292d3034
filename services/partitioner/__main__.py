"""``python -m argosy.services.partitioner INPUT --parts K --method grem --out STORE``: partition a graph
file and write the store (this is what ``argosy partition`` runs, and the Kubernetes Job).

Inputs: ``.npz`` (CSR or src/dst, with node data), ``.npy`` edge lists, text edge lists (``.gz``
too), OGB node-property directories.  Node data for edge-list graphs comes from side files
(``--features F.npy --labels L.npy --train-mask M.npy ...``), streamed into the store.  Every
input fault ends with exit status 2 and one line naming the file and the fault; nothing is left
at ``--out``.
"""
from __future__ import annotations

import argparse
import errno
import json
import logging
import sys
import time
import warnings

import numpy as np

from argosy.shared.config import parse_size
from argosy.shared.errors import ArgosyError, ConfigError, DiskFullError, GraphFormatError
from argosy.shared.splits import make_split, parse_split

logger = logging.getLogger("argosy.partitioner")

SIDE_FILES = (("features", "--features"), ("labels", "--labels"), ("train_mask", "--train-mask"),
              ("val_mask", "--val-mask"), ("test_mask", "--test-mask"))


SKEWED_EDGE_BALANCE = 2.0
"""Above this edge balance (fullest part's edges / mean) without ``--max-edge-balance``, warn."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="argosy partition", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", help="graph: .npz (CSR or src/dst), .npy (m,2) edge list, text edge list "
                                 "(.txt/.csv/.el/..., optionally .gz), or an OGB dataset directory")
    p.add_argument("--parts", "-k", type=int, required=True, help="number of partitions K")
    p.add_argument("--method", default="grem", help="grem | fennel | ldg | random | hash | metis (default grem)")
    p.add_argument("--order", default="file", choices=("file", "random", "degree"), help="stream order")
    p.add_argument("--effort", default="default", choices=("fast", "default", "best"),
                   help="GREM's effort: fast (streaming clustering, one coarse partition, two LP "
                        "refinement passes), default (one cycle refined with FM), best (every "
                        "streamed V-cycle; the slowest). docs/partitioning.md has each level's "
                        "cut and time against METIS and KaMinPar")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="threads for GREM's streamed passes and the store writer (default: every core "
                        "this process may use, or ARGOSY_THREADS); 1 makes a run reproducible bit "
                        "for bit")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eps", type=float, default=0.03, help="allowed imbalance: max part <= (1+eps) n/K")
    p.add_argument("--max-edge-balance", type=float, default=None, metavar="X",
                   help="also cap each part's edges at X times the mean (X >= 1, e.g. 1.1). GREM "
                        "then also partitions by edges (a vertex weighs 1 + its degree) and keeps "
                        "the lower cut of that and its vertex-balanced run, each finished by a "
                        "streamed phase that moves vertices until both limits hold (other methods: "
                        "the phase only). Off by default: only vertex counts are balanced, and on "
                        "power-law graphs the lowest cuts put several times the mean edge count in "
                        "one part (the summary line prints it; above 2x a warning names this flag)")
    p.add_argument("--memory-budget", default=None, help="refuse to run above this peak memory (e.g. 4G)")
    p.add_argument("--dry-run", action="store_true", help="print the estimated peak memory and time, then exit")
    p.add_argument("--out", help="store directory to write")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store at --out")
    p.add_argument("--num-nodes", type=int, default=None, help="vertex count for edge lists (default max id + 1)")
    p.add_argument("--directed", action="store_true",
                   help="store the arcs as given (edge lists and asymmetric CSRs are otherwise made "
                        "undirected: reverse entries added, with a warning for an asymmetric CSR)")
    p.add_argument("--split", default=None, metavar="NAME|random:TR,VA,TE|per-class:N,VA,TE",
                   help="NAME: an OGB directory's split/NAME; random:0.6,0.2,0.2: train/val/test fractions of "
                        "the labelled vertices; per-class:20,500,1000: 20 train vertices per class, 500 val, "
                        "1000 test (Planetoid). Generated splits use --seed and are recorded in the manifest")
    p.add_argument("--edge-split", default=None, metavar="TR,VA,TE",
                   help="link prediction: hold out VA and TE fractions of the undirected edges (e.g. "
                        "0.85,0.05,0.10; a seeded hash split with --seed, recorded in the manifest) as "
                        "validation/test edges, removed from the stored graph, with as many sampled "
                        "non-edges as negatives (docs/link-prediction.md)")
    p.add_argument("--no-target-balance", action="store_true",
                   help="typed input: keep the partition as cut (by default the target type's training "
                        "vertices are then spread evenly over the parts, at a small cut cost)")
    p.add_argument("--link-relation", default=None, metavar="RELATION|SRC:RELATION:DST",
                   help="typed input with --edge-split: the relation whose edges are split and predicted "
                        "(recommendation: user:buys:item); needed when the graph has several")
    p.add_argument("--val-edges", default=None, metavar="V.npy",
                   help="link prediction: validation edges as an (m, 2) .npy of vertex pairs (removed from the graph)")
    p.add_argument("--test-edges", default=None, metavar="T.npy",
                   help="link prediction: test edges as an (m, 2) .npy of vertex pairs (removed from the graph)")
    p.add_argument("--features", default=None, metavar="F.npy", help="node features [n, F] (float; .npy or CSV)")
    p.add_argument("--labels", default=None, metavar="L.npy", help="node labels [n] (int, -1 = unlabelled)")
    for flag in ("--train-mask", "--val-mask", "--test-mask"):
        p.add_argument(flag, default=None, metavar="M.npy",
                       help="split as bool[n] or an integer id list (.npy, or text one id per line)")
    p.add_argument("--edge-weights", default=None, metavar="W.npy|column",
                   help="edge weights: a float .npy with one weight per input edge row (per CSR entry), or "
                        "'column' for a text edge list's third column.  Weights the input holds itself "
                        "(.npz edge_weight/weight/data, a text header naming column 3 'weight') are kept "
                        "without this flag.  Duplicates are summed; a reverse edge added by symmetrisation "
                        "gets its edge's weight (docs/python-api.md, 'Edge weights')")
    p.add_argument("--no-edge-weights", action="store_true", help="drop the weights the input holds")
    p.add_argument("--feature-dtype", default="float32", choices=("float32", "float16"))
    p.add_argument("--random-features", type=int, default=0, metavar="DIM",
                   help="give a graph without features DIM random N(0,1) features (systems benchmarks only; "
                        "a model cannot learn from them)")
    p.add_argument("--synthetic-features", type=int, default=None, metavar="DIM", help=argparse.SUPPRESS)
    p.add_argument("--tmpdir", default=None,
                   help="scratch directory for regrouping edge lists (~8 bytes per directed entry), "
                        "for inflating a deflated .npz's indices once, and for GREM's cluster graph "
                        "when it is coarsened out of core (~16 bytes per entry of it; default: the "
                        "system temp dir)")
    p.add_argument("--no-reverse-relations", action="store_true",
                   help="typed graphs: store each relation in its given direction only (by default a reverse "
                        "relation rev_R is added for every relation R, so messages flow both ways)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON line")
    return p


# glibc's malloc raises its mmap threshold (to 32 MiB) and heap trim threshold (to 64 MiB) as large
# blocks are freed, so after the first passes tens of MiB of freed chunk buffers stay in the heap,
# counted in RSS, while new large arrays are mapped beside them: 338-357 MiB peak on a 2M-vertex
# mesh against 287-302 MiB with the thresholds fixed (mmap >= 16 MiB, trim at 128 KiB), for 0-4 %
# more time (chunk-sized buffers still come from the heap without page faults)
HEAP_MMAP_THRESHOLD = 16 << 20


def limit_heap_retention() -> bool:
    """Fix glibc's malloc thresholds so freed memory goes back to the OS (peak RSS is part of the
    partitioner's spec).  No-op off glibc or when the user set ``MALLOC_*_THRESHOLD_`` already."""
    import ctypes
    import os

    if any(k.startswith("MALLOC_") and k.endswith("THRESHOLD_") for k in os.environ):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc.mallopt(-3, HEAP_MMAP_THRESHOLD) == 1  # M_MMAP_THRESHOLD (fixes M_TRIM too)
    except (OSError, AttributeError):
        return False


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    limit_heap_retention()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s partitioner %(levelname)s: %(message)s")
    warnings.simplefilter("default")
    try:
        return run(args)
    except KeyboardInterrupt:
        print("argosy partition: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # every fault is reported in one line; the store writer cleaned up
        print(f"argosy partition: error: {_describe(e, args)}", file=sys.stderr)
        return 2


def _describe(e: BaseException, args) -> str:
    """One line naming the file and the fault (the output path for a full disk, never the input)."""
    if isinstance(e, DiskFullError):
        return str(e)
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"disk full at {e.filename or args.tmpdir or args.out}"
    if isinstance(e, FileNotFoundError):
        return f"{e.filename or args.input}: no such file"
    if isinstance(e, (ArgosyError, ValueError)):
        msg = str(e)
    elif isinstance(e, MemoryError):
        msg = f"out of memory ({e}); try --memory-budget, a smaller --parts count or a bigger machine"
    else:
        msg = f"{type(e).__name__}: {e}"
    named = [str(args.input)] + [str(getattr(args, f[2:].replace("-", "_"))) for _, f in SIDE_FILES
                                 if getattr(args, f[2:].replace("-", "_"), None)]
    if getattr(args, "edge_weights", None):
        named.append(str(args.edge_weights))
    if not any(x in msg for x in named):
        msg = f"{args.input}: {msg}"
    return msg


def _both_directions(stream):
    """The stream's entries without per-chunk sorting (the store writer sorts and deduplicates
    each part itself), with the reverse entries added where the raw chunks lack them."""
    for u, v in stream.iter_raw():
        if stream.symmetrize:
            yield np.concatenate([u, v]), np.concatenate([v, u])
        else:
            yield u, v


def weighted_entries(source, side, num_nodes: int):
    """The input's weighted edges as the store writer's ``(row, neighbour, weight, mirrored)``
    chunks: an edge ``u -> v`` is the entry ``(v, u)``, and, symmetrised, its mirror ``(u, v)``
    (weights are refused with ``--directed``, see :func:`use_weights`)."""
    from argosy.shared.graphio import iter_weighted_edges

    if source.num_nodes is None:
        source.num_nodes = num_nodes
    for u, v, w in iter_weighted_edges(source, side):
        m = np.zeros(2 * u.size, np.uint8)
        m[u.size:] = 1
        yield np.concatenate([v, u]), np.concatenate([u, v]), np.concatenate([w, w]), m


def use_weights(args, source) -> bool:
    """Whether the store gets edge weights (and the flags do not contradict each other)."""
    if args.no_edge_weights and args.edge_weights:
        raise ValueError(f"--edge-weights {args.edge_weights} and --no-edge-weights contradict each other")
    if args.no_edge_weights:
        return False
    if args.directed and (args.edge_weights or source.weights is not None):
        raise ValueError("edge weights are not supported with --directed yet (the store holds them for "
                         "undirected graphs); drop --directed, or --no-edge-weights to drop the weights")
    if args.edge_weights and source.weights is not None and args.edge_weights != "column":
        raise GraphFormatError(f"{args.input} already holds edge weights; drop --edge-weights {args.edge_weights} "
                               "(or pass --no-edge-weights to drop both)")
    side = args.edge_weights
    if side and side != "column":                 # a wrong length is refused before partitioning
        from argosy.shared.graphio import NpyArray
        rows = NpyArray(side).rows
        want = int(source.indptr[-1]) if source.kind == "csr" else getattr(source.edges, "num_edges", None)
        if want is not None and rows != want:
            raise GraphFormatError(f"{side}: expected one weight per input edge {'entry' if source.kind == 'csr' else 'row'} "
                                   f"of {args.input}, float[{want}] (got {rows})")
    return bool(side) or source.weights is not None


def node_columns(args, stream) -> dict:
    """The graph's node data (from the file itself and from side files), validated: labels and
    masks now (cheap), features block by block while the store is written."""
    from argosy.shared.graphio import check_node_columns, node_column_from_file

    n = stream.num_nodes
    cols = stream.source.node_columns(n, args.feature_dtype)
    for name, flag in SIDE_FILES:
        path = getattr(args, flag[2:].replace("-", "_"))
        if path is None:
            continue
        if name in cols:
            raise GraphFormatError(f"{args.input} already holds {name} ({cols[name].source}); drop {flag} {path}")
        cols[name] = node_column_from_file(name, path, n, args.feature_dtype)
    if args.synthetic_features is not None:
        warnings.warn("--synthetic-features is deprecated; use --random-features DIM", DeprecationWarning,
                      stacklevel=2)
        args.random_features = args.random_features or args.synthetic_features
    if args.random_features:
        from argosy.shared.graphio import ArrayColumn

        if args.random_features < 0:
            raise ValueError(f"--random-features must be >= 1 (got {args.random_features})")
        if "features" in cols:
            raise GraphFormatError(f"{cols['features'].source}: the graph has features; --random-features "
                                   "would replace them (drop it)")
        logger.warning("giving the graph %d random features per vertex (--random-features): a model cannot "
                       "learn from them", args.random_features)
        rng = np.random.default_rng(args.seed)
        cols["features"] = ArrayColumn("features", rng.standard_normal((n, args.random_features), dtype=np.float32),
                                       "--random-features", args.feature_dtype)
    spec = parse_split(args.split)
    if spec is not None:                       # --split random:... / per-class:...: masks from the labels
        from argosy.shared.graphio import ArrayColumn
        if "labels" not in cols:
            raise GraphFormatError(f"{args.input}: --split {args.split} needs labels (--labels L.npy)")
        have = [s for s in ("train_mask", "val_mask", "test_mask") if s in cols]
        if have:
            raise GraphFormatError(f"{args.input}: --split {args.split} makes the masks, but {', '.join(have)} "
                                   "is given too; drop one of them")
        masks, args.split_record = make_split(cols["labels"].read(), spec, args.seed)
        for name, mask in masks.items():
            cols[name] = ArrayColumn(name, mask, f"--split {args.split}")
        logger.info("split %s (seed %d): %s", args.split, args.seed, args.split_record)
    check_node_columns(cols, n)
    return cols


def run(args) -> int:
    from argosy.services.partitioner.core import estimate_cost, partition_stream
    from argosy.services.partitioner.file_streams import open_edge_stream

    if args.parts < 1:
        raise ValueError(f"--parts must be >= 1 (got {args.parts})")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be >= 1 (got {args.threads})")
    budget = parse_size(args.memory_budget)
    from argosy.shared.graphio.typed_open import open_typed
    tg = open_typed(args.input)
    if tg is not None:
        return run_typed(args, tg, budget)
    ogb_split = None if parse_split(args.split) is not None else args.split
    stream = open_edge_stream(args.input, num_nodes=args.num_nodes, split=ogb_split, tmpdir=args.tmpdir)
    n, entries = stream.num_nodes, stream.stream_entries
    if n == 0:
        raise GraphFormatError(f"{args.input}: the graph is empty (no edges, 0 vertices)")
    peak, secs = estimate_cost(n, entries, args.parts, args.method,
                               edge_limited=args.max_edge_balance is not None, effort=args.effort)
    if args.dry_run:
        return _dry_run(args, n, entries, budget, peak, secs)
    if not args.out:
        raise ValueError("--out STORE is required (or use --dry-run)")
    columns = node_columns(args, stream)          # labels/masks checked before the long part
    use_weights(args, stream.source)              # contradictory weight flags, before the long part
    t0 = time.perf_counter()
    res = partition_stream(stream, args.parts, method=args.method, order=args.order, seed=args.seed,
                           eps=args.eps, memory_budget=budget, tmpdir=args.tmpdir,
                           keep_regrouped=not args.directed, max_edge_balance=args.max_edge_balance,
                           effort=args.effort, threads=args.threads or None, evaluate=False)
    try:
        return _write(args, stream, res, columns, t0)
    finally:
        if res.regrouped is not None:
            res.regrouped.close()


def _dry_run(args, n: int, entries: int, budget, peak: int, secs: float) -> int:
    """``--dry-run``: the estimated peak memory and time, exit 0 (fits) or 3 (does not fit the budget)."""
    from argosy.services.partitioner.core import GREM_UNSTRUCTURED_TIME

    ok = budget is None or peak <= budget
    # the model is fitted on clustered graphs; graphs without local structure take more passes
    hi = secs * GREM_UNSTRUCTURED_TIME if args.method == "grem" else secs
    line = {"n": n, "stream_entries": entries, "parts": args.parts, "method": args.method,
            "effort": args.effort, "estimated_peak_bytes": peak, "estimated_seconds": secs,
            "estimated_seconds_max": hi, "memory_budget": budget, "fits": ok}
    span = f"~{secs:,.1f} s" + (f" (up to ~{hi:,.0f} s on graphs without local structure)" if hi > secs else "")
    print(json.dumps(line) if args.json else
          f"{args.method} on n={n:,} entries={entries:,} K={args.parts}: estimated peak "
          f"{peak / 2**20:,.0f} MiB, {span}" + ("" if budget is None else
          f" (budget {budget / 2**20:,.0f} MiB: {'fits' if ok else 'DOES NOT FIT'})"))
    return 0 if ok else 3


def run_typed(args, tg, budget) -> int:
    """A typed (heterogeneous) input: GREM (or ``--method``) cuts the graph without its types, and
    the store keeps them (:mod:`shared.store.typed`).  The typed readers hold the input in memory
    (its edges and node data); the partitioner streams the relations from those arrays and
    regroups them on disk, so partitioning adds GREM's O(n) state to them, not another O(m) copy."""
    from argosy.services.partitioner.core import estimate_cost, partition_stream
    from argosy.services.partitioner.stream import SegmentEdgeStream
    from argosy.shared.store.typed import write_kg_triples, write_typed_store

    t0 = time.perf_counter()
    stream = SegmentEdgeStream(tg.relation_segments(), tg.total_nodes)
    n, entries = stream.num_nodes, stream.stream_entries
    if n == 0:
        raise GraphFormatError(f"{args.input}: the graph is empty (no vertices)")
    peak, secs = estimate_cost(n, entries, args.parts, args.method, effort=args.effort)
    if args.dry_run:                  # the partitioner's estimate (the typed graph itself is already in memory)
        return _dry_run(args, n, entries, budget, peak, secs)
    if not args.out:
        raise ValueError("--out STORE is required (or use --dry-run)")
    split = relation_split(args, tg)                # a bad --link-relation fails before any work
    res = partition_stream(stream, args.parts, method=args.method, order=args.order, seed=args.seed, eps=args.eps,
                           memory_budget=budget, tmpdir=args.tmpdir, effort=args.effort,
                           threads=args.threads or None, keep_regrouped=True)
    try:
        balance = None
        if tg.target and tg.train_mask is not None and not args.no_target_balance:
            balance = target_balance(tg, res.regrouped or stream, res.assignment, args.parts)
    finally:
        if res.regrouped is not None:
            res.regrouped.close()
    info = {"method": res.method, "order": res.order, "seed": args.seed, "eps": args.eps, "seconds": res.seconds,
            "input": str(args.input), "input_format": "typed", "symmetrised": not args.no_reverse_relations}
    if balance is not None:
        info["target_balance"] = balance
    t_store = time.perf_counter()
    finish = write_kg_triples(tg) if tg.triples else None
    if split is not None:
        from argosy.shared.linkpred import write_link_arrays
        finish = lambda root, m: write_link_arrays(root, m, split)  # noqa: E731
    manifest = write_typed_store(tg, res.assignment, args.out, num_parts=args.parts,
                                 reverse=not args.no_reverse_relations, partition_info=info,
                                 feature_dtype=args.feature_dtype, overwrite=args.overwrite,
                                 finish=finish, split=split)
    types = {t: int(tg.num_nodes[t]) for t in tg.node_types}
    what = (f"typed graph ({', '.join(f'{t} {c:,}' for t, c in types.items())}; {manifest.num_relations} relations"
            f"{' incl. reverses' if not args.no_reverse_relations else ''}) ")
    return _report(args, manifest, res, t0, time.perf_counter() - t_store, not args.no_reverse_relations,
                   {"node_types": types, "relations": manifest.num_relations}, what)


def target_balance(tg, graph, assignment, k: int) -> dict:
    """Spread the target type's training vertices evenly over the parts (in place; see
    :mod:`services.partitioner.target_balance`; ``graph`` a grouped edge stream); logs and
    returns what it did."""
    from argosy.services.partitioner.target_balance import balance_marked
    marked = np.zeros(tg.total_nodes, np.bool_)
    marked[int(tg.type_offsets[tg.node_types.index(tg.target)]) + np.flatnonzero(tg.train_mask)] = True
    out = balance_marked(graph, assignment, marked, k)
    logger.info("target balance: %d training %s vertices, largest part's share %.2fx -> %.2fx the mean; "
                "%d vertices moved, %+d cut edges", out["marked"], tg.target, out["marked_max_over_mean_before"],
                out["marked_max_over_mean_after"], out["moved"], out["cut_edges_added"])
    return out


def relation_split(args, tg):
    """A typed input's link-prediction split: one relation's edges (``--link-relation``), or None."""
    from argosy.shared.linkpred import RelationEdgeSplit, parse_edge_split
    if args.val_edges or args.test_edges:
        raise ConfigError("--val-edges/--test-edges are not read for a typed input yet: use --edge-split "
                          "with --link-relation")
    if args.link_relation and not args.edge_split:
        raise ConfigError("--link-relation needs --edge-split TR,VA,TE (the fractions of its edges to hold out)")
    if not args.edge_split:
        return None
    if tg.triples:
        raise ConfigError(f"{args.input} is a knowledge graph: its train/valid/test triples are the split "
                          "(drop --edge-split)")
    names = [f"{s}:{r}:{d}" for s, r, d in tg.relations]
    if args.link_relation is None:
        if len(tg.relations) != 1:
            raise ConfigError(f"--edge-split on a typed graph splits one relation's edges: name it with "
                              f"--link-relation (one of {', '.join(names[:12])})")
        rid = 0
    else:
        hits = [i for i, (s, r, d) in enumerate(tg.relations) if args.link_relation in (r, names[i])]
        if len(hits) != 1:
            raise ConfigError(f"--link-relation {args.link_relation!r} names {'no' if not hits else 'several'} "
                              f"relation{'s' if hits else ''} of {args.input} ({', '.join(names[:12])}; "
                              "give src:relation:dst)")
        rid = hits[0]
    d = tg.relations[rid][2]
    off = tg.type_offsets
    t = tg.node_types.index(d)
    return RelationEdgeSplit(tg.total_nodes, args.seed, parse_edge_split(args.edge_split), rid, len(tg.relations),
                             (int(off[t]), int(off[t + 1])), list(tg.relations[rid]))


def edge_split(args, n: int):
    """The link-prediction split the flags ask for (:class:`~argosy.shared.linkpred.EdgeSplit`), or None."""
    from argosy.shared.linkpred import EdgeSplit, load_pairs, parse_edge_split

    fractions = parse_edge_split(getattr(args, "edge_split", None))
    files = {k: getattr(args, f"{k}_edges", None) for k in ("val", "test")}
    if fractions is None and not any(files.values()):
        return None
    if args.directed:
        raise GraphFormatError("--edge-split/--val-edges/--test-edges need an undirected graph (drop --directed)")
    if fractions is not None and any(files.values()):
        raise GraphFormatError("give either --edge-split or --val-edges/--test-edges, not both")
    pairs = {k: load_pairs(v, n, f"--{k}-edges") for k, v in files.items() if v}
    return EdgeSplit(n, args.seed, fractions, val_edges=pairs.get("val"), test_edges=pairs.get("test"))


def _threads(args) -> int:
    """``--threads``, or every core this process may use."""
    from argosy.services.partitioner.threads import default_threads
    return args.threads or default_threads()


def _write(args, stream, res, columns, t0) -> int:
    from argosy.shared.linkpred import write_link_arrays
    from argosy.shared.malloc import trim_heap
    from argosy.shared.store import write_store_from_edges

    n = stream.num_nodes
    split = edge_split(args, n)
    logger.info("%s: balance %.3f in %.2f s (the cut is counted while the store is written)", args.method,
                res.balance, res.seconds)
    info = {"method": res.method, "order": res.order, "seed": args.seed, "eps": args.eps,
            "seconds": res.seconds, "input": str(args.input), "input_format": stream.source.format,
            "symmetrised": not args.directed and stream.symmetrize,
            "random_features": int(args.random_features or 0),
            "regrouped": bool(res.details.get("regrouped", False))}
    if getattr(args, "split_record", None):
        info["split"] = args.split_record
    t_store = time.perf_counter()
    # the partitioner's freed state is spread over its threads' heaps: back to the OS before the store's
    # O(n) arrays (37 MB of the 2M-vertex geometric graph's store peak with two threads)
    trim_heap()
    weighted = use_weights(args, stream.source)
    if weighted:                    # the input re-read with its weights; the writer merges duplicates
        entries_in = weighted_entries(stream.source, args.edge_weights, n)
        info["edge_weights"] = str(args.edge_weights or "inline")
        logger.info("keeping edge weights (%s)", info["edge_weights"])
    elif res.regrouped is not None:   # the partitioner's sorted buckets: the writer spills and sorts nothing
        entries_in = res.regrouped.drain()
    else:
        entries_in = stream.iter_raw() if args.directed else _both_directions(stream)
    finish = None
    if split is not None:        # held-out edges never reach the stored graph
        entries_in = split.filter(entries_in)
        finish = lambda root, m: write_link_arrays(root, m, split)  # noqa: E731
    manifest = write_store_from_edges(entries_in, n, res.assignment, args.out, num_parts=args.parts,
                                      node_data=columns, partition_info=info, feature_dtype=args.feature_dtype,
                                      overwrite=args.overwrite, name=stream.source.name, directed=args.directed,
                                      weighted=weighted, finish=finish, threads=_threads(args),
                                      ordered=res.regrouped is not None and not weighted)
    if split is not None:
        logger.info("edge split %s: %d training edges", manifest.link["split"], sum(manifest.link["train_edges"]))
    store_seconds = time.perf_counter() - t_store
    eb = manifest.partition.get("edge_balance", 0.0)
    if args.parts > 1 and args.max_edge_balance is None and eb > SKEWED_EDGE_BALANCE:
        logger.warning("one part holds %.1fx the mean edge count: the host serving it samples and "
                       "gathers that much more than the others. --max-edge-balance 1.1 limits it, "
                       "at some cut (docs/partitioning.md, 'GREM under both limits')", eb)
    return _report(args, manifest, res, t0, store_seconds, not args.directed)


def _report(args, manifest, res, t0: float, store_seconds: float, undirected: bool, extra: dict | None = None,
            what: str = "") -> int:
    """The result: one JSON line (``--json``) or one sentence, for plain and typed inputs alike."""
    out = {"store": args.out, "n": manifest.num_nodes, "m": manifest.num_edges, "parts": args.parts,
           "method": res.method, "order": res.order, **(extra or {}),
           "edge_cut_fraction": manifest.partition["edge_cut_fraction"], "balance": manifest.partition["balance"],
           "edge_balance": manifest.partition.get("edge_balance", 0.0), "partition_seconds": res.seconds,
           "store_seconds": store_seconds, "total_seconds": time.perf_counter() - t0, "directed": not undirected}
    if res.method == "grem":
        from argosy.services.partitioner.core import phase_seconds
        out["effort"] = res.details.get("effort", "default")
        out["phases"] = phase_seconds(res.details, res.seconds)
    print(json.dumps(out) if args.json else
          f"wrote {args.out}: {what}n={out['n']:,} m={out['m']:,} K={args.parts} method={res.method} order={res.order} "
          f"edge cut {100 * out['edge_cut_fraction']:.2f}% balance {out['balance']:.3f} "
          f"(edges per part: max {out['edge_balance']:.2f}x mean) "
          f"({res.seconds:.2f} s partitioning, {store_seconds:.2f} s store, {out['total_seconds']:.2f} s total)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
