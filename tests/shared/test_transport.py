"""Transport: back-pressure through high-water marks, CURVE encryption + authentication."""
import stat
import time

import numpy as np
import pytest
import zmq

from argosy.shared.errors import ProtocolError
from argosy.shared.protocol import SampledBatch
from argosy.shared.transport import Receiver, ZapHandler, create_keys, make_socket, recv_msg, send_msg
from argosy.shared.wire import encode


def _pair(ctx, curve=False):
    pull = make_socket(ctx, zmq.PULL, rcvhwm=1, curve="server" if curve else None)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    push = make_socket(ctx, zmq.PUSH, sndhwm=1, curve="client" if curve else None)
    push.connect(f"tcp://127.0.0.1:{port}")
    return push, pull


def test_send_blocks_when_receiver_is_slow():
    """Back-pressure: with tiny HWMs a sender cannot queue more than a few messages."""
    ctx = zmq.Context()
    push, pull = _pair(ctx)
    time.sleep(0.2)
    big = SampledBatch(nodes=np.zeros(1 << 20, np.int64))        # 8 MB, larger than socket buffers
    sent = 0
    while send_msg(push, big, timeout=0.5):
        sent += 1
        if sent > 50:
            break
    assert sent < 10                                              # blocked, not buffering without bound
    assert recv_msg(pull, 1000) is not None
    push.close(0), pull.close(0), ctx.term()


def test_curve_encrypts_and_authenticates(tmp_path, monkeypatch):
    create_keys(str(tmp_path / "keys"))
    monkeypatch.setenv("ARGOSY_CURVE_KEYS", str(tmp_path / "keys"))
    ctx = zmq.Context()
    push, pull = _pair(ctx, curve=True)
    assert send_msg(push, SampledBatch(batch_id=5, nodes=np.arange(4)), timeout=5)
    msg = recv_msg(pull, 5000)
    assert msg is not None and msg.batch_id == 5
    # an intruder without the keys cannot deliver anything
    intruder = ctx.socket(zmq.PUSH)
    intruder.connect(pull.getsockopt_string(zmq.LAST_ENDPOINT))
    intruder.send(b"\x00evil")
    assert recv_msg(pull, 500) is None
    for s in (push, pull, intruder):
        s.close(0)
    ctx.term()


def test_missing_keys_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGOSY_CURVE_KEYS", str(tmp_path / "none"))
    with pytest.raises(ValueError, match="argosy keys"):
        make_socket(zmq.Context.instance(), zmq.PUSH, curve="client")


def _curve_client(ctx, keydir, name, endpoint):
    """A PUSH socket authenticating with the key pair ``keydir/name.key_secret``."""
    import zmq.auth
    pub, sec = zmq.auth.load_certificate(keydir / f"{name}.key_secret")
    server_pub, _ = zmq.auth.load_certificate(keydir / "server.key")
    s = ctx.socket(zmq.PUSH)
    s.linger = 0
    s.curve_publickey, s.curve_secretkey, s.curve_serverkey = pub, sec, server_pub
    s.connect(endpoint)
    return s


def test_curve_unlisted_key_delivers_nothing(tmp_path, monkeypatch):
    """Holding the server's public key plus a self-made key pair is not enough: the allow-list decides."""
    import zmq.auth
    keydir = tmp_path / "keys"
    create_keys(str(keydir))
    zmq.auth.create_certificates(keydir, "intruder")            # a valid key pair, not in authorized/
    monkeypatch.setenv("ARGOSY_CURVE_KEYS", str(keydir))
    ctx = zmq.Context()
    pull = make_socket(ctx, zmq.PULL, rcvhwm=4, curve="server")
    ep = f"tcp://127.0.0.1:{pull.bind_to_random_port('tcp://127.0.0.1')}"
    intruder = _curve_client(ctx, keydir, "intruder", ep)
    for i in range(5):
        send_msg(intruder, SampledBatch(batch_id=666), timeout=0.2)
    assert recv_msg(pull, 1000) is None
    friend = _curve_client(ctx, keydir, "client", ep)
    assert send_msg(friend, SampledBatch(batch_id=7), timeout=5)
    msg = recv_msg(pull, 5000)
    assert msg is not None and msg.batch_id == 7
    assert ZapHandler._by_context[id(ctx)].refused >= 1
    for s in (pull, intruder, friend):
        s.close(0)
    ctx.term()


def test_key_files_are_private(tmp_path):
    keydir = tmp_path / "keys"
    create_keys(str(keydir), clients=("client", "sampler"))
    assert stat.S_IMODE(keydir.stat().st_mode) == 0o700
    for name in ("server", "client", "sampler"):
        assert stat.S_IMODE((keydir / f"{name}.key_secret").stat().st_mode) == 0o600
    assert sorted(p.name for p in (keydir / "authorized").iterdir()) == ["client.key", "sampler.key"]


def _check_batch_id(msg):
    if msg.batch_id == 666:
        raise ProtocolError("batch 666 is poisoned")
    return msg


def test_receiver_cuts_off_a_connection_without_curve():
    """Without CURVE each connection has its own ZAP User-Id; the bad one is cut off, the good one is not."""
    ctx = zmq.Context()
    pull = make_socket(ctx, zmq.PULL, rcvhwm=64, curve="server")
    ep = f"tcp://127.0.0.1:{pull.bind_to_random_port('tcp://127.0.0.1')}"
    rx = Receiver(pull, _check_batch_id, cut_off_after=3)
    bad, good = (make_socket(ctx, zmq.PUSH, sndhwm=64) for _ in range(2))
    bad.connect(ep), good.connect(ep)
    time.sleep(0.3)
    for _ in range(10):
        bad.send_multipart([b"\x93garbage"])
    for _ in range(5):
        bad.send_multipart(encode(SampledBatch(batch_id=666)))
    for i in range(5):
        assert send_msg(good, SampledBatch(batch_id=i), timeout=5)
    got = []
    deadline = time.monotonic() + 10
    while len(got) < 5 and time.monotonic() < deadline:
        m = rx.recv(200)
        if m is not None:
            got.append(m.batch_id)
    while rx.recv(100) is not None or pull.poll(0):
        pass
    assert got == [0, 1, 2, 3, 4]
    assert rx.totals == {"bad_messages": 3, "cut_off_messages": 12, "peers_cut_off": 1, "connections_refused": 0}
    assert len(rx.cut_off) == 1 and next(iter(rx.cut_off)).startswith("conn:")
    for s in (pull, bad, good):
        s.close(0)
    ctx.term()


def test_receiver_cut_off_curve_key_cannot_reconnect(tmp_path, monkeypatch):
    keydir = tmp_path / "keys"
    create_keys(str(keydir), clients=("client", "mallory"))
    monkeypatch.setenv("ARGOSY_CURVE_KEYS", str(keydir))
    ctx = zmq.Context()
    pull = make_socket(ctx, zmq.PULL, rcvhwm=64, curve="server")
    ep = f"tcp://127.0.0.1:{pull.bind_to_random_port('tcp://127.0.0.1')}"
    rx = Receiver(pull, _check_batch_id, cut_off_after=2)
    mallory = _curve_client(ctx, keydir, "mallory", ep)
    for _ in range(2):
        assert send_msg(mallory, SampledBatch(batch_id=666), timeout=5)
    deadline = time.monotonic() + 10
    while not rx.cut_off and time.monotonic() < deadline:
        rx.recv(200)
    assert rx.cut_off == {"curve:" + (keydir / "mallory.key").read_text().split('public-key = "')[1].split('"')[0]}
    mallory.close(0)
    again = _curve_client(ctx, keydir, "mallory", ep)            # reconnecting with the same key: refused
    send_msg(again, SampledBatch(batch_id=1), timeout=0.5)
    assert rx.recv(1000) is None and rx.totals["cut_off_messages"] == 0
    rx.flush()
    assert rx.totals["connections_refused"] >= 1                # counted by the ZAP handler
    friend = _curve_client(ctx, keydir, "client", ep)
    assert send_msg(friend, SampledBatch(batch_id=2), timeout=5)
    m = None
    deadline = time.monotonic() + 5
    while m is None and time.monotonic() < deadline:
        m = rx.recv(200)
    assert m is not None and m.batch_id == 2
    for s in (pull, again, friend):
        s.close(0)
    ctx.term()


@pytest.mark.parametrize("bind, adv, want", [(None, None, "127.0.0.1"), (None, "localhost", "127.0.0.1"),
                                             ("0.0.0.0", None, "0.0.0.0"), ("127.0.0.2", "10.1.2.3", "127.0.0.2"),
                                             (None, "10.1.2.3", "10.1.2.3"), ("auto", "10.1.2.3", "10.1.2.3")])
def test_bind_host_is_one_interface(monkeypatch, bind, adv, want):
    """Loopback on one host; the advertised interface in containers; every interface only when asked."""
    from argosy.shared.transport import bind_host
    for k, v in (("ARGOSY_BIND_HOST", bind), ("ARGOSY_ADVERTISE_HOST", adv)):
        monkeypatch.delenv(k, raising=False)
        if v:
            monkeypatch.setenv(k, v)
    assert bind_host() == want


def test_rendezvous_store_listens_on_loopback_only(monkeypatch):
    from argosy.shared.transport import rendezvous_store
    monkeypatch.delenv("ARGOSY_BIND_HOST", raising=False)
    monkeypatch.delenv("ARGOSY_ADVERTISE_HOST", raising=False)
    store, url = rendezvous_store(1, 10)
    port = int(url.rsplit(":", 1)[1])
    listening = []                              # (ip hex, port) of LISTEN sockets, from /proc/net/tcp{,6}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            ip, p = local.split(":")
            if state == "0A" and int(p, 16) == port:
                listening.append(ip)
    assert listening == ["0100007F"]             # 127.0.0.1 only (torch's default would be 0.0.0.0 / ::)
    store.set("k", "v")
    assert store.get("k") == b"v"
