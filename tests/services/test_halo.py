"""Part ownership and the halo exchange: assignment, restricted stores, identical batches on 1 or N
holders (in-process and over real ZeroMQ + Redis), errors, caches and byte accounting."""

import numpy as np
import pytest
import zmq

from argosy.shared.coord import Coordinator
from argosy.shared.errors import RequestFailedError, StoreFormatError
from argosy.shared.halo import HaloClient, HaloServer
from argosy.shared.halo_cache import AdjacencyCache, FeatureCache
from argosy.shared.ownership import Membership, assign_parts
from argosy.shared.traffic import WireCounter, wire_summary
from argosy.shared.protocol import AdjacencyRows, ErrorReply, HaloRequest
from argosy.shared.store import PartitionStore
from argosy.shared.store.stage import PartSource, stage_parts
from argosy.shared.wire import decode, encode
from argosy.services.loader.core import LoaderCore
from argosy.services.sampler.core import SamplerCore

FIELDS = ("nodes", "degrees", "edge_src", "edge_dst", "hop_nodes", "hop_edges", "edge_weight", "weighted_degrees")


def test_assign_parts_by_host_every_replica_holds_its_hosts_parts():
    one = assign_parts(8, [("h0", "s-0"), ("h0", "s-1")])
    assert one == {"s-0": list(range(8)), "s-1": list(range(8))}       # one host: nothing to fetch
    mixed = assign_parts(8, [("h0", "s-0"), ("h1", "s-1"), ("h0", "s-2")])
    assert mixed["s-0"] == mixed["s-2"] and sorted(mixed["s-0"] + mixed["s-1"]) == list(range(8))
    four = assign_parts(8, [(f"h{i}", f"s-{i}") for i in range(4)])
    assert sorted(sum(four.values(), [])) == list(range(8)) and all(len(v) == 2 for v in four.values())
    # same hosts, other tier: the same parts per host (a host's sampler and loader hold the same parts)
    loaders = assign_parts(8, [(f"h{i}", f"l-{i}") for i in range(4)])
    assert [four[f"s-{i}"] for i in range(4)] == [loaders[f"l-{i}"] for i in range(4)]
    # a host leaving moves only its own parts (rendezvous hashing) when the balance cap allows it
    three = assign_parts(9, [(f"h{i}", f"s-{i}") for i in range(3)])
    two = assign_parts(9, [(f"h{i}", f"s-{i}") for i in range(3) if i != 1])
    moved = sum(p not in two[s] for s in ("s-0", "s-2") for p in three[s])
    assert moved <= 1 and sorted(sum(two.values(), [])) == list(range(9))


def test_restricted_store_refuses_other_parts(small_store, tmp_path):
    _, path = small_store
    st = PartitionStore(path, parts=[1, 3])
    st.part(1)
    with pytest.raises(StoreFormatError, match="part 0 is not held by this process"):
        st.part(0)
    stage_parts(path, tmp_path / "local", [2])
    assert sorted(p.name for p in (tmp_path / "local").iterdir() if p.is_dir()) == ["part-00002"]
    src = PartSource(path, tmp_path / "local")
    s = src.open([2, 3])
    assert s.root == tmp_path / "local" and (tmp_path / "local" / "part-00003").is_dir()
    np.testing.assert_array_equal(s.part(3).indices, PartitionStore(path).part(3).indices)
    with pytest.raises(StoreFormatError):
        s.part(0)


def test_staged_parts_of_another_store_are_never_read(tmp_path):
    """Issue 34: a sampler's /local volume outlived a store rebuilt from another graph, and the old
    graph's staged parts would have been read as the new one's."""
    from argosy.shared.store import write_store
    from tests.graphs import random_graph
    stores = []
    for i, n in enumerate((300, 500)):
        g = random_graph(n, 6 * n, seed=i, features=8, classes=3)
        write_store(g, np.arange(n) % 4, tmp_path / f"store{i}")
        stores.append(tmp_path / f"store{i}")
    local = tmp_path / "local"
    stage_parts(stores[0], local, [0, 1])
    assert PartSource(stores[0], local).open([0, 1]).part(0).nodes.size == 75
    s = PartSource(stores[1], local).open([1])               # same directory, another store
    np.testing.assert_array_equal(s.part(1).indices, PartitionStore(stores[1]).part(1).indices)
    assert s.part(1).nodes.size == 125 and not (local / "part-00000").exists()
    stage_parts(stores[1], local, [2])                       # the same store again: kept, only the new part copied
    assert (local / "part-00001").is_dir() and (local / "part-00002").is_dir()


def _local_fetch(owners):
    """An in-process halo: route each id to the core holding its part (what HaloClient does over ZeroMQ)."""
    def fetch(what, ids, epoch):
        parts = owners[0].store.assignment[ids]
        res = []
        for c in owners:
            sel = np.flatnonzero(c.held[parts])
            sel = sel[~np.isin(sel, np.concatenate([r[0] for r in res]) if res else [])]
            if sel.size:
                res.append((sel, c.serve(HaloRequest(what=what, ids=ids[sel]))))
        return HaloClient._assemble(what, ids.shape[0], res)
    return fetch


@pytest.fixture
def weighted_store(tmp_path):
    """The ``small_store`` graph with edge weights."""
    from argosy.shared.store import write_store
    from tests.graphs import random_graph
    g = random_graph(500, 3000, seed=1, features=16, classes=4, weighted=True)
    write_store(g, np.random.default_rng(0).integers(0, 4, g.num_nodes), tmp_path / "wstore")
    return g, tmp_path / "wstore"


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("cache_bytes", [0, 1 << 20])
def test_batches_identical_on_one_or_four_holders(small_store, weighted_store, cache_bytes, weighted):
    """The same batches (weights included) whether rows are held, fetched or served from the cache."""
    _, path = weighted_store if weighted else small_store
    whole = SamplerCore(PartitionStore(path), seed=3)
    owners = []
    fetch = _local_fetch(owners)
    for p in range(4):
        owners.append(SamplerCore(PartitionStore(path, parts=[p]), seed=3, held_parts=[p], fetch=fetch,
                                  cache_bytes=cache_bytes))
    for t in range(6):
        seeds = np.random.default_rng(t).choice(500, 40, replace=False)
        a = whole.sample(seeds, (5, 4, 3), 100 + t, home_part=t % 4)
        b = owners[t % 4].sample(seeds, (5, 4, 3), 100 + t, home_part=t % 4)
        for f in FIELDS:
            np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)
        assert a.remote_neighbors == b.remote_neighbors
        assert a.weighted == weighted and a.edge_weight.shape[0] == (a.edge_src.shape[0] if weighted else 0)
    stats = sum(o.stats["halo_cache_hits"] for o in owners)
    assert (stats > 0) == bool(cache_bytes)                           # rows (and weights) from the cache


def test_loader_rows_identical_with_halo(small_store):
    g, path = small_store
    whole = LoaderCore(PartitionStore(path))
    owners = []
    fetch = _local_fetch(owners)
    for parts in ([0, 1], [2, 3]):
        owners.append(LoaderCore(PartitionStore(path, parts=parts), held_parts=parts, fetch=fetch, cache_bytes=4096))
    nodes = np.random.default_rng(0).permutation(500)[:200]
    for _ in range(2):                             # second round: served partly from the cache
        np.testing.assert_array_equal(owners[0].gather_rows(nodes), whole.gather_rows(nodes))
        np.testing.assert_array_equal(owners[1].labels_of(nodes), whole.labels_of(nodes))
    np.testing.assert_array_equal(owners[0].gather_rows(nodes), g.features[nodes].astype(whole.dtype))
    assert owners[0].stats["halo_cache_hits"] > 0 and owners[0].cache.nbytes <= 4096


_HOLD = """
import sys, numpy as np
from argosy.shared.store import PartitionStore
from argosy.services.loader.core import LoaderCore
from argosy.services.sampler.core import SamplerCore
path, parts = sys.argv[1], [0, 1, 2, 3]
lc = LoaderCore(PartitionStore(path, parts=parts), held_parts=parts)
sc = SamplerCore(PartitionStore(path, parts=parts), held_parts=parts)
lc.gather_rows(np.arange(500)); sc.sample(np.arange(0, 500, 7), (-1,))     # touch every page of the parts
print("ready", flush=True); sys.stdin.read()
"""


def _file_maps(pid: int, root) -> dict[str, dict[str, int]]:
    """The mappings of files under ``root`` in /proc/<pid>/smaps: path -> {inode, Rss, Pss, Anonymous} (kB).
    ``Anonymous``: copy-on-write pages, i.e. a private copy (``Private_Dirty`` is no test of that: a
    freshly written file's page-cache pages count as dirty until written back)."""
    out, cur = {}, None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and not head[0].endswith(":"):     # a mapping's header line
                # (an anonymous mapping's header has no path: it ends the file's block too)
                cur = head[5] if len(head) >= 6 and head[5].startswith(str(root)) else None
                if cur is not None:
                    out.setdefault(cur, {"inode": int(head[4]), "Rss": 0, "Pss": 0, "Anonymous": 0})
            elif cur is not None and head and head[0].rstrip(":") in ("Rss", "Pss", "Anonymous"):
                out[cur][head[0].rstrip(":")] += int(head[1])
    return out


def test_replicas_on_one_host_share_one_mapping_of_their_parts(small_store):
    """Two replicas holding the same parts map the same store files (one copy in the page cache):
    each one's smaps lists the parts' .npy files with the same inode, no private copy, and a
    proportional share (Pss) below what it touched (Rss), because the pages are shared."""
    import subprocess
    import sys
    _, path = small_store
    procs = [subprocess.Popen([sys.executable, "-c", _HOLD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True) for _ in range(2)]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready"
        maps = [_file_maps(p.pid, path) for p in procs]
        want = {str(path / f"part-{q:05d}" / f"{n}.npy") for q in range(4) for n in ("features", "indptr", "indices")}
        for m in maps:
            assert want <= set(m), sorted(want - set(m))
        for f in want:
            a, b = maps[0][f], maps[1][f]
            assert a["inode"] == b["inode"] and a["Anonymous"] == b["Anonymous"] == 0
            assert a["Rss"] > 0 and a["Pss"] < a["Rss"] and b["Pss"] < b["Rss"], (f, a, b)
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(30)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.uint8])
def test_gather_feature_rows_writes_each_row_in_place(dtype):
    from argosy.services.loader.core import gather_feature_rows
    rng = np.random.default_rng(2)
    feats = {p: (rng.random((50 + p, 7)) * 100).astype(dtype) for p in (0, 2, 5)}
    for p in feats:
        feats[p].flags.writeable = False                  # parts are read-only maps
    parts = rng.choice([0, 2, 5], 300).astype(np.int64)
    rows = np.array([rng.integers(0, 50 + p) for p in parts], np.int64)
    dst = rng.permutation(400)[:300].astype(np.int64)
    out = np.full((400, 7), 3, dtype)
    gather_feature_rows(feats, parts, rows, dst, out)
    want = np.full((400, 7), 3, dtype)
    want[dst] = np.stack([feats[p][r] for p, r in zip(parts.tolist(), rows.tolist())])
    np.testing.assert_array_equal(out, want)
    gather_feature_rows(feats, np.full(4, 2, np.int64), np.arange(4), np.arange(4), out)   # one part only
    np.testing.assert_array_equal(out[:4], feats[2][:4])


def test_sampler_without_halo_client_names_the_part(small_store):
    _, path = small_store
    c = SamplerCore(PartitionStore(path, parts=[0]), held_parts=[0])
    seeds = np.flatnonzero(np.asarray(c.store.assignment) == 1)[:3]
    with pytest.raises(RequestFailedError, match="belongs to part 1"):
        c.sample(seeds, (2,))


@pytest.mark.parametrize("weighted", [False, True])
def test_caches_never_exceed_their_budget(weighted):
    """Budgets hold (a weighted entry costs its id + 4 bytes) through evictions and compactions,
    and a hit returns the row, and the weights, put for that vertex."""
    rng = np.random.default_rng(0)
    ac = AdjacencyCache(1000, budget=40 * 8, dtype=np.int64, weighted=weighted)
    fc = FeatureCache(1000, dim=3, dtype=np.float32, budget=10 * 12 + 11)         # room for 10 rows
    for _ in range(200):
        ids = rng.choice(1000, 30, replace=False) if rng.random() < 0.5 else rng.choice(60, 30, replace=False)
        hit, ptr, ind, w, _ = ac.get(ids)
        lens = rng.integers(0, 9, ids.shape[0])
        rows = [np.arange(ptr_lo, ptr_lo + ln) + 1000 * i for i, (ptr_lo, ln) in enumerate(zip(ids, lens))]
        indptr, indices = _csr_of([rows[i] for i in np.flatnonzero(~hit)])
        ac.put(ids[~hit], indptr, indices, (indices % 1000 * 0.5).astype(np.float32) if weighted else None)
        assert ac.nbytes <= ac.budget and ac.used <= ac.buf.shape[0]
        assert ac.used * (12 if weighted else 8) == ac.nbytes
        h, r = fc.get(ids)
        np.testing.assert_array_equal(r[:, 0], ids[h])               # a hit returns that vertex's row
        fc.put(ids[~h], np.repeat(ids[~h, None], 3, axis=1).astype(np.float32))
        assert fc.nbytes <= fc.budget and fc.buf.nbytes <= fc.budget
    # every cached adjacency row is the row put for that vertex
    vs = np.flatnonzero(ac.policy.slot1)
    hit, ptr, ind, w, _ = ac.get(vs)
    assert hit.all() and ac.nbytes > 0
    for i, v in enumerate(vs):
        seg = ind[ptr[i]:ptr[i + 1]]
        assert seg.size == 0 or (seg[0] % 1000 == v and np.all(np.diff(seg) == 1))
    if weighted:
        np.testing.assert_array_equal(w, (ind % 1000 * 0.5).astype(np.float32))
    else:
        assert w.shape == (0,)
    assert AdjacencyCache(10, 0, np.int64).put(np.array([1]), np.array([0, 2]), np.array([3, 4])) is None
    with pytest.raises(ValueError, match=r"needs one weight per entry, float32\[2\] \(got None\)"):
        AdjacencyCache(10, 64, np.int64, weighted=True).put(np.array([1]), np.array([0, 2]), np.array([3, 4]))


def _csr_of(rows):
    lens = np.array([r.shape[0] for r in rows], np.int64)
    return np.concatenate([[0], np.cumsum(lens)]).astype(np.int64), (np.concatenate(rows).astype(np.int64)
                                                                   if rows else np.empty(0, np.int64))


def test_cache_admits_any_fetched_row_and_second_epoch_hits_all():
    """Capacity >= working set: after one pass every request hits, whatever the rows' distance to the
    held parts (the old hot set admitted only rows adjacent to them)."""
    working = np.random.default_rng(1).choice(5000, 700, replace=False)
    fc = FeatureCache(5000, dim=4, dtype=np.float32, budget=700 * 16)
    ac = AdjacencyCache(5000, budget=700 * 3 * 8, dtype=np.int64)
    batches = np.array_split(working, 9)
    for epoch in range(2):
        fh = ah = 0
        for ids in batches:
            h, _ = fc.get(ids)
            fc.put(ids[~h], np.ones((int((~h).sum()), 4), np.float32))
            a, _, _, _, _ = ac.get(ids)
            ac.put(ids[~a], *_csr_of([np.full(3, v) for v in ids[~a]]))
            fh, ah = fh + h.sum(), ah + a.sum()
        assert (fh, ah) == ((0, 0) if epoch == 0 else (700, 700))


def test_full_cache_keeps_its_rows_under_a_scan_and_takes_hotter_ones():
    fc = FeatureCache(1000, dim=1, dtype=np.float64, budget=100 * 8)
    cyc = np.arange(300)                                   # a cyclic pass over 3x the capacity
    hits = []
    for _ in range(4):
        n = 0
        for ids in np.array_split(cyc, 10):
            h, _ = fc.get(ids)
            fc.put(ids[~h], ids[~h, None].astype(np.float64))
            n += h.sum()
        hits.append(n)
    assert hits[0] == 0 and min(hits[1:]) >= 90           # LRU would hit nothing; the cached third stays
    hot = np.arange(500, 520)
    for _ in range(6):                                     # rows requested more often than the cached ones
        h, _ = fc.get(hot)
        fc.put(hot[~h], hot[~h, None].astype(np.float64))
    assert fc.get(hot)[0].all()


# ---- over ZeroMQ with a real Redis registry ------------------------------------------------------
class _Node:
    def __init__(self, url, job, sid, host, path, parts, zctx, counter_timeout=5.0):
        self.coord = Coordinator(url, job)
        self.wire = WireCounter()
        self.members = Membership(self.coord, "sampler", 4, sid, host)
        store = PartitionStore(path, parts=parts)
        self.client = HaloClient(zctx, self.members, store.assignment, self.wire, timeout=counter_timeout)
        self.core = SamplerCore(store, seed=5, held_parts=parts, fetch=self.client.fetch)
        self.server = HaloServer(zctx, self.core.serve, self.wire)
        self.coord.register("sampler", sid, {"held": parts, "halo": self.server.endpoint, "host_label": host}, 0.5, 5)

    def close(self):
        self.server.close()
        self.client.close()
        self.coord.deregister("sampler", self.members.self_id)
        self.coord.close()


def test_halo_over_zeromq_same_batches_and_bytes_counted(small_store, redis_url, monkeypatch):
    _, path = small_store
    job = "halo-zmq"
    Coordinator(redis_url, job).delete_job()
    zctx = zmq.Context()
    monkeypatch.setenv("ARGOSY_HOST", "h0")
    a = _Node(redis_url, job, "sampler-a", "h0", path, [0, 1], zctx)
    monkeypatch.setenv("ARGOSY_HOST", "h1")
    b = _Node(redis_url, job, "sampler-b", "h1", path, [2, 3], zctx)
    try:
        a.members.refresh()
        whole = SamplerCore(PartitionStore(path), seed=5)
        seeds = np.flatnonzero(np.asarray(whole.store.assignment) == 0)[:30]
        x = whole.sample(seeds, (4, 4), 9, home_part=0, epoch=2)
        y = a.core.sample(seeds, (4, 4), 9, home_part=0, epoch=2)
        for f in FIELDS:
            np.testing.assert_array_equal(getattr(x, f), getattr(y, f), err_msg=f)
        ca, cb = a.wire.drain(), b.wire.drain()
        assert ca["halo_requests"] == 2            # one per hop (one owner), never one per vertex
        assert ca["wire_bytes_sent"] > 0 and cb["wire_bytes_sent"] > 0      # h0 <-> h1 crosses hosts
        assert ca["wire_bytes_e2"] == ca["wire_bytes_sent"] and cb["wire_bytes_e2"] == cb["wire_bytes_sent"]
        assert ca["wire_bytes_received"] == cb["wire_bytes_sent"]
        s = wire_summary({**{k: ca[k] + cb.get(k, 0) for k in ca}})
        assert s["wire_bytes"] == ca["wire_bytes_sent"] + cb["wire_bytes_sent"] and s["wire_bytes_per_epoch"][2] == s["wire_bytes"]
    finally:
        a.close()
        b.close()
        zctx.term()


def test_halo_errors(small_store, redis_url):
    _, path = small_store
    job = "halo-err"
    Coordinator(redis_url, job).delete_job()
    zctx = zmq.Context()
    a = _Node(redis_url, job, "sampler-a", "h0", path, [0, 1], zctx, counter_timeout=1.5)
    b = _Node(redis_url, job, "sampler-b", "h0", path, [2], zctx)
    try:
        # malformed request straight to the server: an ErrorReply, and the server keeps serving
        d = zctx.socket(zmq.DEALER)
        d.setsockopt(zmq.LINGER, 0)
        d.connect(b.server.endpoint)
        d.send_multipart(encode(HaloRequest(request_id=1, what="adjacency", ids=np.array([1], np.int32))))
        assert d.poll(5000)
        r = decode(d.recv_multipart())
        assert isinstance(r, ErrorReply) and r.code == "bad_request" and "int64" in r.message
        d.send_multipart([b"garbage"])
        assert d.poll(5000) and isinstance(decode(d.recv_multipart()), ErrorReply)
        own2 = np.flatnonzero(np.asarray(a.core.store.assignment) == 2)[:3]
        d.send_multipart(encode(HaloRequest(request_id=2, what="degree", ids=own2)))
        assert d.poll(5000) and isinstance(decode(d.recv_multipart()), AdjacencyRows)
        # a peer that keeps sending bad requests is cut off; another connection is still served
        sent = 0
        while not b.server.rx.cut_off and sent < 2 * b.server.cut_off_after:
            d.send_multipart([b"garbage"])
            assert d.poll(5000)
            d.recv_multipart()
            sent += 1
        assert sum(b.server.rx.strikes.values()) == b.server.cut_off_after     # the int32 ids counted too
        d.send_multipart(encode(HaloRequest(request_id=3, what="degree", ids=own2)))
        assert not d.poll(1000)
        assert b.server.rx.totals["peers_cut_off"] == 1 and b.server.rx.totals["cut_off_messages"] == 1
        e = zctx.socket(zmq.DEALER)
        e.connect(b.server.endpoint)
        e.send_multipart(encode(HaloRequest(request_id=4, what="degree", ids=own2)))
        assert e.poll(5000) and isinstance(decode(e.recv_multipart()), AdjacencyRows)
        e.close(0)
        d.close(0)
        # part 3 has no holder: the client says which part, after its timeout
        a.members.refresh()
        three = np.flatnonzero(np.asarray(a.core.store.assignment) == 3)[:2]
        with pytest.raises(RequestFailedError, match=r"parts \[3\]"):
            a.client.fetch("adjacency", three, 0)
    finally:
        a.close()
        b.close()
        zctx.term()
