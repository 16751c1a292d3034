"""Robustness probe: nine graph shapes outside the sweep's families, GREM against METIS.

Why: figures from our own families did not hold on graphs we did not have.  This writes nine
more shapes as ``.npy`` edge lists (numpy, seeded) and runs ``argosy partition`` and METIS on
each at the given k values, one process per cell (``bench/partition.py``'s runners).  Session 12
found the V-cycle memory bug, the Chung-Lu and skewed-SBM cut misses and the k = 256 size-limit
stall with it (docs/partitioning.md, "A wider probe").

Usage::

    python bench/probe_shapes.py gen 200000 2000000 /tmp/probe/g2m            # write the shapes
    python bench/probe_shapes.py run /tmp/probe/g2m 4,16,64 grem-cli,metis all OUT.jsonl
"""
import sys
from pathlib import Path

import numpy as np


def save(path, e):
    np.save(path, np.ascontiguousarray(e, np.int32))


def shuffle_ids(e, n, rng):
    p = rng.permutation(n).astype(np.int32)
    return p[e]


def smallworld(n, m, rng, p=0.1):
    h = max(1, m // n)
    s = np.repeat(np.arange(n), h)
    d = (s + np.tile(np.arange(1, h + 1), n)) % n
    r = rng.random(s.size) < p
    d[r] = rng.integers(0, n, r.sum())
    return shuffle_ids(np.stack([s, d], 1), n, rng)


def grid2d(n, m, rng):
    a = int(np.sqrt(n))
    n = a * a
    i = np.arange(n).reshape(a, a)
    e = np.concatenate([np.stack([i[:, :-1].ravel(), i[:, 1:].ravel()], 1),
                        np.stack([i[:-1, :].ravel(), i[1:, :].ravel()], 1)])
    return shuffle_ids(e, n, rng)


def cliques(n, m, rng, size=8):
    nc = m // (size * (size - 1) // 2)
    n = nc * size
    iu = np.array([(a, b) for a in range(size) for b in range(a + 1, size)])
    base = (np.arange(nc) * size)[:, None, None]
    e = (base + iu[None]).reshape(-1, 2)
    return shuffle_ids(e, n, rng)


def bipartite(n, m, rng):
    nu = 3 * n // 4
    ni = n - nu
    wi = (np.arange(1, ni + 1, dtype=np.float64)) ** -0.8
    c = np.cumsum(wi)
    c /= c[-1]
    s = rng.integers(0, nu, m)
    d = nu + np.searchsorted(c, rng.random(m))
    return shuffle_ids(np.stack([s, d], 1), n, rng)


def hub(n, m, rng):
    star = np.stack([np.zeros(n - 1, np.int64), np.arange(1, n)], 1)
    r = rng.integers(0, n, (m - (n - 1), 2))
    return shuffle_ids(np.concatenate([star, r]), n, rng)


def multiplanted(n, m, rng, blocks=16, mix=0.2):
    base = m // 3
    sz = n // blocks
    s = rng.integers(0, n, base)
    d = (s // sz) * sz + rng.integers(0, sz, base)
    r = rng.random(base) < mix
    d[r] = rng.integers(0, n, r.sum())
    d = np.minimum(d, n - 1)
    e = np.concatenate([np.stack([s, d], 1)] * 3)
    loops = rng.integers(0, n, m // 10)
    e = np.concatenate([e, np.stack([loops, loops], 1)])
    return e   # ids NOT shuffled: contiguous blocks (ordered file)


def tree(n, m, rng):
    c = np.arange(1, n)
    p = (rng.random(n - 1) * c).astype(np.int64)
    return shuffle_ids(np.stack([p, c], 1), n, rng)


FAM = dict(smallworld=smallworld, grid2d=grid2d, cliques=cliques, bipartite=bipartite,
           hub=hub, multiplanted=multiplanted, tree=tree)


def gen_main(argv):
    """Write the shapes; Chung-Lu and the skewed SBM come from ``shared/synthetic.py`` (the
    recorded probe drew them with an earlier numpy copy of the same models, seed 7)."""
    from argosy.shared import synthetic as syn

    n, m, out = int(argv[0]), int(argv[1]), Path(argv[2])
    shared = {"chunglu": lambda p: syn.write_chunglu_edge_list(p, n, m, 2.1, 7),
              "zipfsbm": lambda p: syn.write_skewed_sbm_edge_list(p, n, m, 64, 1.2, 0.05, 7)}
    fams = argv[3].split(",") if len(argv) > 3 else list(FAM) + list(shared)
    out.mkdir(parents=True, exist_ok=True)
    for f in fams:
        p = out / f"{f}_n{n}_m{m}.npy"
        if p.exists():
            continue
        if f in shared:
            shared[f](p)
            continue
        rng = np.random.default_rng(7)
        e = FAM[f](n, m, rng)
        save(p, e)
        print(f, e.shape, int(e.max()) + 1, flush=True)


def run_main(argv):
    import json
    import os
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import partition as bp
    d, ks = Path(argv[0]), [int(x) for x in argv[1].split(",")]
    tools = argv[2].split(",") if len(argv) > 2 else ["grem-cli", "metis"]
    fams = argv[3].split(",") if len(argv) > 3 and argv[3] not in ("", "all") else None
    out = Path(argv[4] if len(argv) > 4 else d / "probe.jsonl")
    for p in sorted(d.glob("*.npy")):
        fam = p.name.split("_")[0]
        if fams and fam not in fams:
            continue
        for k in ks:
            for t in tools:
                if t == "grem-cli":
                    r = bp.run_cli(str(p), k, d / "store", 3600)
                else:
                    r = bp.run_one(str(p), fam, t, k, chunk_edges=1 << 21, timeout=3600)
                rec = dict(fam=fam, k=k, tool=t, s=r.get("seconds", r.get("wall_total")),
                           mib=r.get("peak_rss_mib"), cut=r.get("edge_cut_fraction"),
                           bal=r.get("balance"), err=r.get("error"), load=os.getloadavg()[0])
                print(json.dumps(rec), flush=True)
                with open(out, "a") as f:
                    f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    {"gen": gen_main, "run": run_main}[sys.argv[1]](sys.argv[2:])
