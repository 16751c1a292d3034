"""Wire attack against a live job: every hostile message class, to every loader/trainer port, in a loop.

Runs the same job twice on one store: undisturbed, then under attack.  The attacker knows the
store (it can read the files) and finds the ports in the registry (as a port scan would); it
sends each class below to every loader PULL port, every loader halo port and every trainer
port, reconnecting every ``--reconnect`` seconds (a new connection is a new peer to cut off),
for ``--seconds`` or until the job ends.  Pass: the attacked job exits 0 with every planned
seed trained exactly once, duplicates 0, and the same accuracy as the undisturbed run.

Example:
    python bench/wire_attack.py --data ../shared/datasets/cora.npz --epochs 100 --seconds 60
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgpack
import numpy as np
import zmq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from argosy.shared import keys  # noqa: E402
from argosy.shared.envs import datasets_dir  # noqa: E402
from argosy.shared.coord import Coordinator  # noqa: E402
from argosy.shared.protocol import PROTOCOL_VERSION  # noqa: E402
from argosy.shared.redis_server import EmbeddedRedis  # noqa: E402
from argosy.shared.store import PartitionStore  # noqa: E402
from argosy.shared.validate import job_plan  # noqa: E402
from argosy.shared.wire import encode  # noqa: E402


def _frames(msg) -> list[bytes]:
    return [bytes(f) for f in encode(msg)]


def _replace(b, **kw):
    return type(b)(**{**b.__dict__, **kw})


def hostile_set(store: PartitionStore, cfg, job: str, huge_nodes: int) -> dict[str, dict[str, list[bytes]]]:
    """``{class: {"loader": frames, "trainer": frames}}`` built from a real batch of this job."""
    from argosy.services.loader.core import LoaderCore
    from argosy.services.sampler.core import SamplerCore
    plan = job_plan(cfg, store, 0, "train")
    it, other = plan[0], next(x for x in plan if x.part != plan[0].part or x.offset != plan[0].offset)
    core = SamplerCore(store)
    sb = core.sample_item(it, cfg.sampler.fanouts)
    sb.job, sb.work_stream, sb.work_id, sb.sampler_id = job, keys.work_stream(job, it.part), "1-0", "mallory"
    fb = LoaderCore(store).load(sb)
    n = store.manifest.num_nodes
    out: dict[str, dict[str, list[bytes]]] = {}

    def both(name, **kw):
        out[name] = {"loader": _frames(_replace(sb, **kw)), "trainer": _frames(_replace(fb, **kw))}

    for role, base in (("loader", sb), ("trainer", fb)):
        fr = _frames(base)
        h = msgpack.unpackb(fr[0], raw=False)
        h[3][0][2] = [2**32, 2**32, 2**32, 4]
        out.setdefault("overflowing_shape", {})[role] = [msgpack.packb(h), b"", *fr[2:]]
        h = msgpack.unpackb(fr[0], raw=False)
        h[0] = PROTOCOL_VERSION + 7
        out.setdefault("wrong_version", {})[role] = [msgpack.packb(h), *fr[1:]]
        out.setdefault("garbage", {})[role] = [os.urandom(200), os.urandom(64)]
    m = huge_nodes
    big = dict(nodes=np.arange(m, dtype=np.int64) % n, degrees=np.zeros(m, np.int32), hop_nodes=np.array([8, 9, m]),
               edge_src=np.empty(0, np.int32), edge_dst=np.empty(0, np.int32), hop_edges=np.zeros(3, np.int64))
    out["huge_well_formed"] = {"loader": _frames(_replace(sb, **big)),
                               "trainer": _frames(_replace(fb, **big, features=np.zeros((m, 1), np.float32)))}
    for name, v in (("id_1e12", 10**12), ("id_minus5", -5)):
        nodes = sb.nodes.copy()
        nodes[-1] = v
        both(name, nodes=nodes)
    both("work_stream_is_state_key", work_stream=keys.state(job))
    nodes = sb.nodes.copy()
    nodes[1] = nodes[0]
    both("duplicate_seeds", nodes=nodes)
    both("foreign_batch_id", batch_id=10**6)
    nodes = sb.nodes.copy()                     # a real batch id and part with other seeds (poison)
    s = int(sb.hop_nodes[0])
    nodes[0], nodes[s] = nodes[s], nodes[0]
    both("forged_seeds", nodes=nodes)
    both("other_batch_slot", batch_id=other.batch_id)
    y = fb.labels.copy()
    y[0] = 10**6
    out["labels_out_of_classes"] = {"loader": _frames(sb), "trainer": _frames(_replace(fb, labels=y))}
    out["labels_out_of_classes"]["loader"] = out["id_minus5"]["loader"]       # loaders carry no labels
    for name, ring in (("ring_missing", "ring-1-00000000000000ff"), ("ring_path", "../s")):   # rows "in" a ring
        out[name] = {"loader": out["id_minus5"]["loader"],
                     "trainer": _frames(_replace(fb, features=fb.features[:0], ring=ring, ring_slot=0, ring_seq=1,
                                                 ring_bytes=fb.features.nbytes))}
    return out


def run_job(args, store: str, job: str, env: dict, run_dir: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "argosy.services.launch", "train", "--store", store, "--epochs", str(args.epochs),
           "--patience", "0", "--job", job, "--run-dir", str(run_dir), "--json", "--seed", "0",
           "--loaders", str(args.loaders), "--trainers", str(args.trainers), *args.extra]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen, timeout: float) -> tuple[int, dict, str]:
    out, err = proc.communicate(timeout=timeout)
    lines = [ln for ln in out.strip().splitlines() if ln.startswith("{")]
    return proc.returncode, (json.loads(lines[-1]) if lines else {}), err[-2000:]


def attack(coord: Coordinator, proc: subprocess.Popen, msgs, big_once, seconds: float, reconnect: float,
           curve: tuple | None = None) -> dict:
    """``curve``: ``(server public key, [(name, public, secret), ...])``, one attacker socket per key and port."""
    ctx = zmq.Context(io_threads=2)
    sent: dict[str, int] = {k: 0 for k in msgs}
    sent["huge_300MB_once"] = 0
    connections, blocked = 0, 0
    targets: list[tuple[str, str, int]] = []          # (role for message choice, endpoint, socket type)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        loaders, trainers = coord.services("loader"), coord.services("trainer")
        if loaders and len(trainers) >= 1 and all("endpoint" in s for s in loaders + trainers):
            targets = ([("loader", s["endpoint"], zmq.PUSH) for s in loaders]
                       + [("loader", s["halo"], zmq.DEALER) for s in loaders if s.get("halo")]
                       + [("trainer", s["endpoint"], zmq.PUSH) for s in trainers]
                       + [("trainer", s["local_endpoint"], zmq.PUSH) for s in trainers if s.get("local_endpoint")])
            break
        time.sleep(0.2)
    t0 = time.monotonic()
    socks: list = []
    first = True
    while proc.poll() is None and time.monotonic() - t0 < seconds:
        for s, *_ in socks:
            s.close(0)
        socks = []
        for role, ep, kind in targets:
            for i, key in enumerate(curve[1] if curve else [None]):
                s = ctx.socket(kind)
                s.setsockopt(zmq.SNDHWM, 64)
                s.setsockopt(zmq.LINGER, 0)
                if key is not None:
                    s.curve_serverkey, s.curve_publickey, s.curve_secretkey = curve[0], key[1], key[2]
                s.connect(ep)
                socks.append((s, role, ep, i))
                connections += 1
        if first:                                   # one 300 MB well-formed batch per port (first key only:
            time.sleep(0.3)                         # a refused connection never takes it)
            for s, role, _, i in socks:
                if i:
                    continue
                try:
                    s.send_multipart(big_once[role], copy=False, flags=zmq.NOBLOCK)
                    sent["huge_300MB_once"] += 1
                except zmq.Again:
                    blocked += 1
            first = False
        t_conn = time.monotonic()
        while proc.poll() is None and time.monotonic() - t_conn < reconnect and time.monotonic() - t0 < seconds:
            for name, per_role in msgs.items():
                for s, role, *_ in socks:
                    try:
                        s.send_multipart(per_role[role], flags=zmq.NOBLOCK)
                        sent[name] += 1
                    except zmq.Again:
                        blocked += 1
            for s, *_ in socks:                     # drain halo replies so the servers never block
                if s.socket_type == zmq.DEALER:
                    while s.poll(0):
                        s.recv_multipart()
            time.sleep(0.01)
    elapsed = time.monotonic() - t0
    for s, *_ in socks:
        s.close(0)
    ctx.term()
    return {"sent": sent, "sent_total": sum(sent.values()), "blocked_sends": blocked, "connections": connections,
            "ports": len(targets), "attack_seconds": elapsed}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(datasets_dir() / "cora.npz"))
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--loaders", type=int, default=2)
    p.add_argument("--trainers", type=int, default=2)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--reconnect", type=float, default=None,
                   help="seconds between the attacker's reconnects (default 3, with --curve 10: handshakes cost more)")
    p.add_argument("--huge-mb", type=int, default=300)
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "wire_attack.md"))
    p.add_argument("--curve", action="store_true", help="both jobs with CURVE + allow-list; the attacker holds an "
                   "authorised key (mallory) and an unlisted one (intruder)")
    p.add_argument("extra", nargs="*", help="more `argosy train` flags (after --)")
    args = p.parse_args()
    args.extra = args.extra or ["--batch-size", "32"]
    args.reconnect = args.reconnect or (10.0 if args.curve else 3.0)
    work = Path(tempfile.mkdtemp(prefix="argosy-wire-attack-"))
    store = work / "store"
    subprocess.run([sys.executable, "-m", "argosy.services.launch", "partition", args.data, "--parts", "4",
                    "--out", str(store)], cwd=ROOT, check=True, capture_output=True)
    res: dict = {"load_before": os.getloadavg()}
    curve = None
    extra_env = {}
    if args.curve:
        import zmq.auth
        from argosy.shared.transport import create_keys
        kd = work / "keys"
        create_keys(str(kd), clients=("client", "mallory"))
        zmq.auth.create_certificates(kd, "intruder")                  # valid key pair, not on the allow-list
        server_pub, _ = zmq.auth.load_certificate(kd / "server.key")
        curve = (server_pub, [(n, *zmq.auth.load_certificate(kd / f"{n}.key_secret")) for n in ("mallory", "intruder")])
        extra_env = {"ARGOSY_CURVE_KEYS": str(kd)}
    with EmbeddedRedis() as redis:
        env = {**os.environ, "ARGOSY_REDIS_URL": redis.url, **extra_env}          # never on a command line
        t = time.monotonic()
        rc, base, err = _result(run_job(args, str(store), "undisturbed", env, work / "run-base"), 1800)
        res["undisturbed"] = {"rc": rc, "seconds": time.monotonic() - t, **base}
        if rc != 0:
            print(err, file=sys.stderr)
        proc = run_job(args, str(store), "attacked", env, work / "run-attack")
        coord = Coordinator(redis.url, "attacked")
        cfg = coord.get_spec(wait=120)
        pstore = PartitionStore(store)
        msgs = hostile_set(pstore, cfg, "attacked", huge_nodes=5_000)
        big = hostile_set(pstore, cfg, "attacked", huge_nodes=args.huge_mb * (1 << 20) // 8)["huge_well_formed"]
        t = time.monotonic()
        res["attack"] = attack(coord, proc, msgs, big, args.seconds, args.reconnect, curve)
        del big
        rc, att, err = _result(proc, 1800)
        res["attacked"] = {"rc": rc, "seconds": time.monotonic() - t, **att}
        if rc != 0:
            print(err, file=sys.stderr)
        logs = "".join(f.read_text(errors="replace") for f in (work / "run-attack" / "logs").glob("*.log"))
        res["zap_refused"] = {"not_authorised_logged": logs.count("client key not authorised"),
                              "cut_off_key_logged": logs.count("client key cut off")}
        res["cut_off_log_lines"] = logs.count("cut off ")
        met = coord.metrics()
        res["metrics"] = {k: met.get(k, 0.0) for k in ("bad_messages", "cut_off_messages", "peers_cut_off",
                                                        "connections_refused")}
    res["load_after"] = os.getloadavg()
    print(json.dumps(res, default=str))
    write_md(res, args, Path(args.out))
    return 0 if ok(res) else 1


def ok(res) -> bool:
    a, b = res["attacked"], res["undisturbed"]
    return (a["rc"] == 0 and a.get("seeds_trained") == a.get("seeds_planned") and a.get("duplicates") == 0
            and a.get("test_accuracy") == b.get("test_accuracy"))


def write_md(res, args, out: Path) -> None:
    a, b, at, m = res["attacked"], res["undisturbed"], res["attack"], res["metrics"]
    rows = "\n".join(f"| {k} | {v:,} |" for k, v in at["sent"].items())
    keys_ = ("rc", "seconds", "seeds_planned", "seeds_trained", "duplicates", "duplicate_arrivals", "test_accuracy",
             "val_accuracy", "best_epoch")
    curve_text = ("" if not args.curve else
                  f"\nCURVE on (`argosy keys`, allow-list): the attacker alternates an authorised but malicious key "
                  f"(`mallory`) and a valid key pair that is not on the allow-list (`intruder`); connections refused "
                  f"by the ZAP handler (connections_refused): {res['metrics'].get('connections_refused', 0):.0f}; log lines "
                  f"{res.get('zap_refused')}.\n")
    cmp = "\n".join(f"| {k} | {b.get(k)} | {a.get(k)} |" for k in keys_)
    out.write_text(f"""# Wire attack against a live job

`python bench/wire_attack.py --data {Path(args.data).name} --epochs {args.epochs} --loaders {args.loaders} \
--trainers {args.trainers} --seconds {args.seconds:.0f}{' --curve' if args.curve else ''}` ({Path(args.data).stem}, 4 parts,
sage, {' '.join(args.extra)}, the CLI's default samplers; load average {res['load_before'][0]:.1f} before, {res['load_after'][0]:.1f} after, on the shared 2-core VM).

Verdict: **{'PASS' if ok(res) else 'FAIL'}**: the attacked job {'finished' if a['rc'] == 0 else 'FAILED'} with
{a.get('seeds_trained')} of {a.get('seeds_planned')} seeds trained, {a.get('duplicates')} duplicates, test accuracy
{a.get('test_accuracy')} vs {b.get('test_accuracy')} undisturbed.

## Attack

{at['ports']} ports (every loader PULL and halo port, every trainer port), {at['attack_seconds']:.0f} s,
{at['connections']} attacker connections (reconnecting every {args.reconnect:.0f} s, each a new peer),
{at['sent_total']:,} messages queued ({at['blocked_sends']:,} sends refused by a full pipe; queued messages
still in the attacker's pipes at each reconnect are discarded, so fewer arrive than are queued).
{curve_text}

| class | messages sent |
|---|---|
{rows}

Job counters: bad_messages {m['bad_messages']:.0f} (dropped after decoding or validation),
cut_off_messages {m['cut_off_messages']:.0f} (discarded unread from cut-off peers),
peers_cut_off {m['peers_cut_off']:.0f} (connections; without CURVE a peer is a connection, with
CURVE it is a client key, which then cannot reconnect).  Halo ports answer every bad request
with an ErrorReply (their own checks) and are not counted in these counters.

## Undisturbed vs attacked

| | undisturbed | attacked |
|---|---|---|
{cmp}
""")


if __name__ == "__main__":
    sys.exit(main())
