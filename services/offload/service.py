"""The offload store as a ZeroMQ service, and the client a remote trainer uses.

Why this module exists: the store is a library first (:class:`OffloadStore`), but a trainer may
run on a host without the disk or RAM to hold a graph's activations; then the store runs as its own
process (``python -m argosy.services.offload``) and the trainer talks to it with
:class:`RemoteStore`, which has the same methods as the in-process store.  Requests and replies are
the typed :class:`~argosy.shared.protocol.StoreRequest` / ``StoreReply`` structs of the one wire
module, on sockets from :func:`~argosy.shared.transport.make_socket` (so ``ARGOSY_CURVE_KEYS``
encrypts them).  The server answers every request, malformed ones with an error reply, and never
dies on bad input.
"""

from __future__ import annotations

import logging
import signal
import threading
from concurrent.futures import Future
from typing import Iterable, Sequence

import numpy as np
import torch
import zmq

from argosy.shared.errors import (BlockNotFoundError, CacheBudgetError, DiskBudgetError, OffloadError,
                                  PeerDeadError, ProtocolError)
from argosy.shared.protocol import STORE_OPS, STORE_STAT_FIELDS, StoreReply, StoreRequest
from argosy.shared.transport import make_socket
from argosy.shared.wire import decode, encode

from .policy import Schedule
from .store import OffloadStore

__all__ = ["StoreServer", "RemoteStore"]

logger = logging.getLogger(__name__)

_ERRORS: dict[str, type[Exception]] = {
    "bad_request": ProtocolError, "not_found": BlockNotFoundError, "cache_budget": CacheBudgetError,
    "disk_budget": DiskBudgetError, "store_error": OffloadError, "internal": OffloadError}
"""Error-reply code -> the exception the client raises (the same class the store raised)."""


def _code(e: Exception) -> str:
    for code in ("bad_request", "not_found", "cache_budget", "disk_budget"):
        if isinstance(e, _ERRORS[code]):
            return code
    return "store_error" if isinstance(e, OffloadError) else "bad_request"


def _table_keys(req: StoreRequest, width: int) -> list[tuple]:
    """Rows of ``req.table`` with the kind index replaced by its name."""
    kinds = req.kinds.split(",") if req.kinds else []
    t = np.asarray(req.table)
    if t.ndim != 2 or (t.size and t.shape[1] != width):
        raise ProtocolError(f"{req.op}: table must be int64[k, {width}] (got shape {list(t.shape)})")
    if t.size and (t[:, 0].min() < 0 or t[:, 0].max() >= len(kinds)):
        raise ProtocolError(f"{req.op}: kind index outside the {len(kinds)} kinds listed")
    return [(kinds[int(r[0])], *(int(v) for v in r[1:])) for r in t]


def _kinds_table(rows: Sequence[tuple]) -> tuple[str, np.ndarray]:
    """``[(kind, ints...)]`` -> (comma-separated kinds, int64 table with a kind index first)."""
    names: list[str] = []
    index: dict[str, int] = {}
    out = []
    for kind, *rest in rows:
        if kind not in index:
            index[kind] = len(names)
            names.append(kind)
        out.append([index[kind], *rest])
    width = 1 + (len(rows[0]) - 1 if rows else 2)
    return ",".join(names), np.asarray(out, np.int64).reshape(-1, width)


class StoreServer:
    """Serves one :class:`OffloadStore` on a ROUTER socket.

    Args:
        store: the store to serve.
        bind: ZeroMQ endpoint, e.g. ``tcp://127.0.0.1:5555``.
    """

    def __init__(self, store: OffloadStore, bind: str) -> None:
        self.store = store
        self.ctx = zmq.Context.instance()
        self.sock = make_socket(self.ctx, zmq.ROUTER, sndhwm=64, rcvhwm=64, curve="server")
        self.sock.bind(bind)
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.bad_messages = 0
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        """Serve until :meth:`stop` (or SIGTERM/SIGINT when run from the main thread)."""
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self._stop.set())
        logger.info("offload store serving on %s", self.endpoint)
        try:
            while not self._stop.is_set():
                if not self.sock.poll(100, zmq.POLLIN):
                    continue
                msg = self.sock.recv_multipart(copy=False)
                sep = next((i for i, f in enumerate(msg) if len(f.buffer) == 0), None)
                if sep is None:
                    logger.warning("dropping a message without an envelope delimiter")
                    continue
                self.sock.send_multipart([f.bytes for f in msg[:sep + 1]] + encode(self.handle(msg[sep + 1:])),
                                         copy=False)
        finally:
            self.sock.close(0)
            self.store.close()

    def handle(self, frames: Sequence) -> StoreReply:
        """Answer one request (never raises)."""
        req_id = 0
        try:
            req = decode(list(frames))
            if not isinstance(req, StoreRequest):
                raise ProtocolError(f"expected a StoreRequest (got {type(req).__name__})")
            req_id = req.request_id
            if req.op not in STORE_OPS:
                raise ProtocolError(f"unknown store op {req.op!r} (known: {sorted(STORE_OPS)})")
            reply = self._dispatch(req)
            reply.request_id = req_id
            return reply
        except (ProtocolError, OffloadError) as e:
            self.bad_messages += isinstance(e, ProtocolError)
            if isinstance(e, ProtocolError):
                logger.warning("bad store request: %s", e)
            return StoreReply(request_id=req_id, ok=False, code=_code(e), message=str(e))
        except (TypeError, ValueError, IndexError, RuntimeError) as e:
            return StoreReply(request_id=req_id, ok=False, code="bad_request", message=f"{type(e).__name__}: {e}")
        except Exception as e:  # noqa: BLE001 - a service must answer, not die
            logger.exception("internal error")
            return StoreReply(request_id=req_id, ok=False, code="internal", message=f"{type(e).__name__}: {e}")

    def _dispatch(self, r: StoreRequest) -> StoreReply:
        st, op = self.store, r.op
        key = (r.kind, r.layer, r.part)
        if op == "ping":
            return StoreReply()
        if op == "put":
            st.put(*key, torch.from_numpy(np.array(r.data)))
            return StoreReply()
        if op == "get":
            return StoreReply(data=st.get(*key).numpy())
        if op == "gather":
            rows = np.asarray(r.rows, np.int64)
            sources, off = [], 0
            for kind, part, count in _table_keys(r, 3):
                if count < 0:
                    sources.append((kind, part, None))
                    continue
                if off + count > len(rows):
                    raise ProtocolError(f"gather: sources list {off + count} rows, {len(rows)} arrived")
                sources.append((kind, part, rows[off:off + count]))
                off += count
            return StoreReply(data=st.gather(r.kind, r.layer, sources).numpy())
        if op == "scatter_add":
            rows = np.asarray(r.rows, np.int64) if r.has_rows else None
            st.scatter_add(*key, rows, torch.from_numpy(np.asarray(r.data)), None if r.num_rows < 0 else r.num_rows)
            return StoreReply()
        if op in ("prefetch", "pin", "unpin"):
            getattr(st, op)(_table_keys(r, 3))
            return StoreReply()
        if op == "release":
            st.release(*key)
            return StoreReply()
        if op == "release_layer":
            st.release_layer(r.kind, r.layer)
            return StoreReply()
        if op == "flush":
            return StoreReply(value=st.flush(r.kind or None, r.layer if r.kind else None))
        if op == "stats":
            d = st.stats(r.flag)
            return StoreReply(stats=np.array([d[k] for k in STORE_STAT_FIELDS], np.float64))
        if op == "plan":
            acc = [(k, l, p, "w" if o else "r") for k, l, p, o in _table_keys(r, 4)]
            st.plan(Schedule(acc, r.flag))
            return StoreReply()
        if op == "begin_epoch":
            st.begin_epoch()
            return StoreReply()
        st.sync()  # op == "sync"
        return StoreReply()


def _np(t) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        return t.detach().cpu().contiguous().numpy()
    return np.asarray(t)


def _done(value=None) -> Future:
    f: Future = Future()
    f.set_result(value)
    return f


class RemoteStore:
    """Client with the :class:`OffloadStore` API over ZeroMQ (synchronous requests).

    Args:
        addr: the server endpoint.
        timeout_ms: per-request timeout; a timeout raises :class:`PeerDeadError` and resets the socket.
    """

    def __init__(self, addr: str, timeout_ms: int = 60_000) -> None:
        self.addr, self.timeout_ms = addr, timeout_ms
        self.ctx = zmq.Context.instance()
        self._id = 0
        self._last_plan: object | None = None
        self._connect()

    def _connect(self) -> None:
        self.sock = make_socket(self.ctx, zmq.REQ, curve="client")
        self.sock.setsockopt(zmq.RCVTIMEO, self.timeout_ms)
        self.sock.setsockopt(zmq.SNDTIMEO, self.timeout_ms)
        self.sock.connect(self.addr)

    def _call(self, op: str, **fields) -> StoreReply:
        self._id += 1
        try:
            self.sock.send_multipart(encode(StoreRequest(request_id=self._id, op=op, **fields)), copy=False)
            frames = self.sock.recv_multipart(copy=False)
        except zmq.Again:
            self.sock.close(0)
            self._connect()
            raise PeerDeadError(f"offload store at {self.addr} did not answer {op!r} within "
                                f"{self.timeout_ms} ms") from None
        rep = decode(frames)
        if not isinstance(rep, StoreReply) or rep.request_id != self._id:
            raise ProtocolError(f"offload store at {self.addr} answered {op!r} with "
                                f"{type(rep).__name__} for request {getattr(rep, 'request_id', None)}")
        if not rep.ok:
            raise _ERRORS.get(rep.code, OffloadError)(f"offload store at {self.addr}: {rep.message}")
        return rep

    # --- the OffloadStore API -------------------------------------------------------
    def ping(self) -> bool:
        return self._call("ping").ok

    def put(self, kind: str, layer: int, part: int, tensor) -> None:
        self._call("put", kind=kind, layer=int(layer), part=int(part), data=_np(tensor))

    def get(self, kind: str, layer: int, part: int) -> torch.Tensor:
        return torch.from_numpy(np.array(self._call("get", kind=kind, layer=int(layer), part=int(part)).data))

    def gather(self, kind: str, layer: int, sources, out: torch.Tensor | None = None) -> torch.Tensor:
        src = [s if len(s) == 3 else (kind, *s) for s in sources]
        rows = [_np(r).astype(np.int64).reshape(-1) for _, _, r in src if r is not None]
        kinds, table = _kinds_table([(k, int(p), -1 if r is None else len(r)) for k, p, r in src])
        rep = self._call("gather", kind=kind, layer=int(layer), kinds=kinds, table=table,
                         rows=np.concatenate(rows) if rows else np.empty(0, np.int64))
        if out is not None:
            out.copy_(torch.from_numpy(np.asarray(rep.data)))
            return out
        return torch.from_numpy(np.array(rep.data))

    def scatter_add(self, kind: str, layer: int, part: int, rows, src, num_rows: int | None = None) -> None:
        self._call("scatter_add", kind=kind, layer=int(layer), part=int(part), data=_np(src),
                   has_rows=rows is not None,
                   rows=_np(rows).astype(np.int64) if rows is not None else np.empty(0, np.int64),
                   num_rows=-1 if num_rows is None else int(num_rows))

    def gather_async(self, kind, layer, sources, out=None) -> Future:
        return _done(self.gather(kind, layer, sources, out))

    def put_async(self, kind, layer, part, tensor) -> Future:
        return _done(self.put(kind, layer, part, tensor))

    def scatter_add_async(self, kind, layer, part, rows, src, num_rows=None) -> Future:
        return _done(self.scatter_add(kind, layer, part, rows, src, num_rows))

    def _keys_op(self, op: str, keys: Iterable) -> None:
        kinds, table = _kinds_table([(str(k), int(l), int(p)) for k, l, p in keys])
        self._call(op, kinds=kinds, table=table)

    def prefetch(self, keys: Iterable) -> list:
        self._keys_op("prefetch", keys)
        return []

    def pin(self, keys: Iterable) -> None:
        self._keys_op("pin", keys)

    def unpin(self, keys: Iterable) -> None:
        self._keys_op("unpin", keys)

    def release(self, kind: str, layer: int, part: int) -> None:
        self._call("release", kind=kind, layer=int(layer), part=int(part))

    def release_layer(self, kind: str, layer: int) -> None:
        self._call("release_layer", kind=kind, layer=int(layer))

    def flush(self, kind: str | None = None, layer: int | None = None) -> int:
        return int(self._call("flush", kind=kind or "", layer=int(layer or 0)).value)

    def stats(self, reset: bool = False) -> dict:
        vals = self._call("stats", flag=bool(reset)).stats
        d = {k: float(v) if k.endswith("_seconds") else int(v) for k, v in zip(STORE_STAT_FIELDS, vals)}
        tot = d["hit_bytes"] + d["miss_bytes"]
        d["hit_rate"] = d["hit_bytes"] / tot if tot else 1.0
        return d

    def plan(self, accesses, cyclic: bool = True) -> None:
        if accesses is self._last_plan:
            return  # the server already holds this plan; begin_epoch rewinds it
        self._last_plan = accesses
        acc = accesses.accesses if isinstance(accesses, Schedule) else list(accesses)
        kinds, table = _kinds_table([(k, int(l), int(p), int(op == "w")) for k, l, p, op in acc])
        self._call("plan", kinds=kinds, table=table, flag=bool(cyclic))

    def begin_epoch(self) -> None:
        self._call("begin_epoch")

    def sync(self) -> None:
        self._call("sync")

    def close(self) -> None:
        self.sock.close(0)

    def __enter__(self) -> "RemoteStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
