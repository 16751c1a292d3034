"""``python -m argosy.services.partitioner INPUT --parts K --method grem --out STORE``: partition a graph
file and write the store (this is what ``argosy partition`` runs, and the Kubernetes Job)."""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import zipfile

import numpy as np

from argosy.shared.config import parse_size
from argosy.shared.errors import ArgosyError, GraphFormatError

logger = logging.getLogger("argosy.partitioner")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="argosy partition", description=__doc__)
    p.add_argument("input", help="graph file: .npz CSR, .npy (m,2) edge list, or text edge list")
    p.add_argument("--parts", "-k", type=int, required=True, help="number of partitions K")
    p.add_argument("--method", default="grem", help="grem | fennel | ldg | random | hash | metis (default grem)")
    p.add_argument("--order", default="file", choices=("file", "random", "degree"), help="stream order")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eps", type=float, default=0.03, help="allowed imbalance: max part <= (1+eps) n/K")
    p.add_argument("--memory-budget", default=None, help="refuse to run above this peak memory (e.g. 4G)")
    p.add_argument("--dry-run", action="store_true", help="print the estimated peak memory and time, then exit")
    p.add_argument("--out", help="store directory to write")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store at --out")
    p.add_argument("--num-nodes", type=int, default=None, help="vertex count for edge lists (default max id + 1)")
    p.add_argument("--feature-dtype", default="float32", choices=("float32", "float16"))
    p.add_argument("--synthetic-features", type=int, default=0, metavar="DIM",
                   help="give a graph without features DIM random features (for systems benchmarks)")
    p.add_argument("--tmpdir", default=None,
                   help="scratch directory for regrouping edge lists (~8 bytes per directed entry; "
                        "default: the system temp dir)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON line")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s partitioner %(levelname)s: %(message)s")
    try:
        return run(args)
    except (ArgosyError, ValueError, ImportError, OSError, MemoryError, EOFError, KeyError, zipfile.BadZipFile) as e:
        msg = str(e) if isinstance(e, (ArgosyError, ValueError)) else f"{type(e).__name__}: {e}"
        if args.input not in msg:
            msg = f"{args.input}: {msg}"
        print(f"argosy partition: error: {msg}", file=sys.stderr)
        return 2


def _both_directions(stream):
    """The stream's entries without per-chunk sorting (the store writer sorts and deduplicates
    each part itself), with the reverse entries added where the raw chunks lack them."""
    for u, v in stream.iter_raw():
        if stream.raw_symmetrize:
            yield np.concatenate([u, v]), np.concatenate([v, u])
        else:
            yield u, v


def run(args) -> int:
    from argosy.services.partitioner.core import estimate_cost, partition_stream
    from argosy.services.partitioner.stream import open_edge_stream
    from argosy.shared.graphio import load_graph
    from argosy.shared.store import write_store_from_edges

    if args.parts < 1:
        raise ValueError(f"--parts must be >= 1 (got {args.parts})")
    budget = parse_size(args.memory_budget)
    stream = open_edge_stream(args.input, num_nodes=args.num_nodes)
    n, entries = stream.num_nodes, stream.stream_entries
    peak, secs = estimate_cost(n, entries, args.parts, args.method)
    if args.dry_run:
        ok = budget is None or peak <= budget
        line = {"n": n, "stream_entries": entries, "parts": args.parts, "method": args.method,
                "estimated_peak_bytes": peak, "estimated_seconds": secs, "memory_budget": budget, "fits": ok}
        print(json.dumps(line) if args.json else
              f"{args.method} on n={n:,} entries={entries:,} K={args.parts}: estimated peak "
              f"{peak / 2**20:,.0f} MiB, ~{secs:,.1f} s" + ("" if budget is None else
              f" (budget {budget / 2**20:,.0f} MiB: {'fits' if ok else 'DOES NOT FIT'})"))
        return 0 if ok else 3
    if not args.out:
        raise ValueError("--out STORE is required (or use --dry-run)")
    t0 = time.perf_counter()
    res = partition_stream(stream, args.parts, method=args.method, order=args.order, seed=args.seed,
                           eps=args.eps, memory_budget=budget, tmpdir=args.tmpdir)
    logger.info("%s: cut %.4f balance %.3f in %.2f s", args.method, res.edge_cut_fraction, res.balance, res.seconds)
    node_data, name = {}, str(args.input).rsplit("/", 1)[-1].split(".")[0]
    if str(args.input).endswith(".npz"):
        g = load_graph(args.input)
        node_data = {k: getattr(g, k) for k in ("features", "labels", "train_mask", "val_mask", "test_mask")
                     if getattr(g, k) is not None}
    if "features" not in node_data and args.synthetic_features:
        rng = np.random.default_rng(args.seed)
        node_data["features"] = rng.standard_normal((n, args.synthetic_features), dtype=np.float32)
    info = {"method": res.method, "order": res.order, "seed": args.seed, "eps": args.eps,
            "seconds": res.seconds, "input": str(args.input)}
    manifest = write_store_from_edges(_both_directions(stream), n, res.assignment, args.out, num_parts=args.parts,
                                      node_data=node_data, partition_info=info, feature_dtype=args.feature_dtype,
                                      overwrite=args.overwrite, name=name)
    out = {"store": args.out, "n": manifest.num_nodes, "m": manifest.num_edges, "parts": args.parts,
           "method": res.method, "order": res.order, "edge_cut_fraction": manifest.partition["edge_cut_fraction"],
           "balance": manifest.partition["balance"], "partition_seconds": res.seconds,
           "total_seconds": time.perf_counter() - t0}
    print(json.dumps(out) if args.json else
          f"wrote {args.out}: n={out['n']:,} m={out['m']:,} K={args.parts} method={res.method} order={res.order} "
          f"edge cut {100 * out['edge_cut_fraction']:.2f}% balance {out['balance']:.3f} "
          f"({res.seconds:.2f} s partitioning, {out['total_seconds']:.2f} s total)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
