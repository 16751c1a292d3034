"""The offload store as a ZeroMQ service, and the client a remote trainer uses.

Why this module exists: the store is a library first (:class:`OffloadStore`),
but a trainer may run on a host without the disk or RAM to hold a graph's
activations; then the store runs as its own process (``python -m
services.fullgraph serve``) and the trainer talks to it with
:class:`RemoteStore`, which has the same methods as the in-process store.
The server answers every request, including malformed ones (with an error
reply); it never unpickles and never dies on bad input.
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

from .policy import Schedule
from .store import BlockNotFoundError, CacheBudgetError, DiskBudgetError, OffloadError, OffloadStore
from .wire import ProtocolError, decode, decode_reply, encode, encode_error, encode_reply

__all__ = ["StoreServer", "RemoteStore", "RemoteStoreError"]

logger = logging.getLogger(__name__)


class RemoteStoreError(OffloadError):
    """The service answered with an error reply (``code`` says which kind)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"[{code}] {message}")
        self.code = code


def _key_fields(h: dict) -> tuple[str, int, int]:
    try:
        kind, layer, part = h["kind"], h["layer"], h["part"]
    except KeyError as e:
        raise ProtocolError(f"op {h.get('op')!r} needs field {e.args[0]!r}") from None
    if not isinstance(kind, str) or not isinstance(layer, int) or not isinstance(part, int):
        raise ProtocolError(f"kind/layer/part must be str/int/int (got {kind!r}, {layer!r}, {part!r})")
    return kind, layer, part


def _keys(h: dict) -> list[tuple[str, int, int]]:
    ks = h.get("keys")
    if not isinstance(ks, list) or not all(isinstance(k, list) and len(k) == 3 for k in ks):
        raise ProtocolError("'keys' must be a list of [kind, layer, part]")
    return [(str(k), int(l), int(p)) for k, l, p in ks]


class StoreServer:
    """Serves one :class:`OffloadStore` on a ROUTER socket.

    Args:
        store: the store to serve.
        bind: ZeroMQ endpoint, e.g. ``tcp://127.0.0.1:5555``.
    """

    def __init__(self, store: OffloadStore, bind: str) -> None:
        self.store = store
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(bind)
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        """Serve until :meth:`stop` (or SIGTERM/SIGINT when run from the main thread)."""
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self._stop.set())
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        logger.info("offload store serving on %s", self.endpoint)
        try:
            while not self._stop.is_set():
                if not poller.poll(100):
                    continue
                msg = self.sock.recv_multipart()
                try:
                    sep = msg.index(b"")
                except ValueError:
                    logger.warning("dropping message without envelope delimiter")
                    continue
                env, body = msg[:sep + 1], msg[sep + 1:]
                self.sock.send_multipart(env + self.handle(body), copy=False)
        finally:
            self.sock.close(0)
            self.store.close()

    def handle(self, frames: Sequence[bytes]) -> list:
        """Answer one request (never raises)."""
        req_id = 0
        try:
            head, arrays = decode(frames)
            req_id = int(head.get("id", 0))
            result, out = self._dispatch(head, arrays)
            return encode_reply(req_id, result, out)
        except ProtocolError as e:
            return encode_error(req_id, "bad_request", str(e))
        except BlockNotFoundError as e:
            return encode_error(req_id, "not_found", str(e))
        except (CacheBudgetError, DiskBudgetError) as e:
            return encode_error(req_id, "budget", str(e))
        except OffloadError as e:
            return encode_error(req_id, "store_error", str(e))
        except (TypeError, ValueError, IndexError, RuntimeError) as e:
            return encode_error(req_id, "bad_request", f"{type(e).__name__}: {e}")
        except Exception as e:  # noqa: BLE001 - a service must answer, not die
            logger.exception("internal error")
            return encode_error(req_id, "internal", f"{type(e).__name__}: {e}")

    def _dispatch(self, h: dict, arrays: list[np.ndarray]) -> tuple[dict, list[np.ndarray]]:
        st, op = self.store, h["op"]
        if op == "ping":
            return {"pong": True}, []
        if op == "put":
            if len(arrays) != 1:
                raise ProtocolError(f"put needs exactly 1 array (got {len(arrays)})")
            st.put(*_key_fields(h), torch.from_numpy(arrays[0]))
            return {}, []
        if op == "get":
            return {}, [st.get(*_key_fields(h)).numpy()]
        if op == "gather":
            kind, layer = h.get("kind"), h.get("layer")
            parts = h.get("parts")
            if not isinstance(kind, str) or not isinstance(layer, int) or not isinstance(parts, list):
                raise ProtocolError("gather needs kind:str, layer:int, parts:[int]")
            has_rows = h.get("has_rows", [False] * len(parts))
            if len(has_rows) != len(parts) or sum(bool(x) for x in has_rows) != len(arrays):
                raise ProtocolError("gather: has_rows must match parts and the number of row arrays")
            kinds = h.get("kinds") or [kind] * len(parts)
            if len(kinds) != len(parts) or not all(isinstance(k, str) for k in kinds):
                raise ProtocolError("gather: kinds must be a list of str matching parts")
            it = iter(arrays)
            sources = [(k, int(p), next(it).astype(np.int64) if r else None)
                       for k, p, r in zip(kinds, parts, has_rows)]
            return {}, [st.gather(kind, layer, sources).numpy()]
        if op == "scatter_add":
            kind, layer, part = _key_fields(h)
            if h.get("has_rows"):
                if len(arrays) != 2:
                    raise ProtocolError("scatter_add with rows needs 2 arrays (rows, src)")
                rows, src = arrays[0].astype(np.int64), arrays[1]
            else:
                if len(arrays) != 1:
                    raise ProtocolError("scatter_add without rows needs 1 array (src)")
                rows, src = None, arrays[0]
            st.scatter_add(kind, layer, part, rows, torch.from_numpy(src), h.get("num_rows"))
            return {}, []
        if op == "prefetch":
            st.prefetch(_keys(h))
            return {}, []
        if op == "pin":
            st.pin(_keys(h))
            return {}, []
        if op == "unpin":
            st.unpin(_keys(h))
            return {}, []
        if op == "release":
            st.release(*_key_fields(h))
            return {}, []
        if op == "release_layer":
            st.release_layer(str(h.get("kind")), int(h.get("layer", 0)))
            return {}, []
        if op == "flush":
            return {"bytes": st.flush(h.get("kind"), h.get("layer"))}, []
        if op == "stats":
            return st.stats(bool(h.get("reset", False))), []
        if op == "plan":
            sched = h.get("schedule")
            if not isinstance(sched, list) or not all(isinstance(a, list) and len(a) == 4 for a in sched):
                raise ProtocolError("plan needs schedule: [[kind, layer, part, 'r'|'w'], ...]")
            st.plan(Schedule([tuple(a) for a in sched], bool(h.get("cyclic", True))))
            return {}, []
        if op == "begin_epoch":
            st.begin_epoch()
            return {}, []
        if op == "sync":
            st.sync()
            return {}, []
        raise ProtocolError(f"unhandled op {op!r}")


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
        timeout_ms: per-request reply timeout; a timeout raises
            :class:`RemoteStoreError` with code ``timeout`` and resets the socket.
    """

    def __init__(self, addr: str, timeout_ms: int = 60_000) -> None:
        self.addr, self.timeout_ms = addr, timeout_ms
        self.ctx = zmq.Context.instance()
        self._id = 0
        self._last_plan: object | None = None
        self._connect()

    def _connect(self) -> None:
        self.sock = self.ctx.socket(zmq.REQ)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVTIMEO, self.timeout_ms)
        self.sock.connect(self.addr)

    def _call(self, op: str, arrays: Sequence[np.ndarray] = (), **fields) -> tuple[dict, list[np.ndarray]]:
        self._id += 1
        self.sock.send_multipart(encode(op, self._id, arrays, **fields), copy=False)
        try:
            frames = self.sock.recv_multipart()
        except zmq.Again:
            self.sock.close(0)
            self._connect()
            raise RemoteStoreError("timeout", f"no reply from {self.addr} within {self.timeout_ms} ms "
                                              f"to {op!r}") from None
        head, out = decode_reply(frames)
        if not head.get("ok"):
            raise RemoteStoreError(str(head.get("code")), str(head.get("message")))
        return head.get("result", {}), out

    # --- the OffloadStore API -------------------------------------------------------
    def ping(self) -> bool:
        return bool(self._call("ping")[0].get("pong"))

    def put(self, kind: str, layer: int, part: int, tensor) -> None:
        self._call("put", [_np(tensor)], kind=kind, layer=int(layer), part=int(part))

    def get(self, kind: str, layer: int, part: int) -> torch.Tensor:
        return torch.from_numpy(self._call("get", kind=kind, layer=int(layer), part=int(part))[1][0])

    def gather(self, kind: str, layer: int, sources) -> torch.Tensor:
        src = [s if len(s) == 3 else (kind, *s) for s in sources]
        rows = [_np(r).astype(np.int64) for _, _, r in src if r is not None]
        return torch.from_numpy(self._call(
            "gather", rows, kind=kind, layer=int(layer), kinds=[k for k, _, _ in src],
            parts=[int(p) for _, p, _ in src], has_rows=[r is not None for _, _, r in src])[1][0])

    def scatter_add(self, kind: str, layer: int, part: int, rows, src, num_rows: int | None = None) -> None:
        arrays = ([_np(rows).astype(np.int64)] if rows is not None else []) + [_np(src)]
        self._call("scatter_add", arrays, kind=kind, layer=int(layer), part=int(part),
                   has_rows=rows is not None, num_rows=None if num_rows is None else int(num_rows))

    def put_async(self, kind, layer, part, tensor) -> Future:
        return _done(self.put(kind, layer, part, tensor))

    def scatter_add_async(self, kind, layer, part, rows, src, num_rows=None) -> Future:
        return _done(self.scatter_add(kind, layer, part, rows, src, num_rows))

    def prefetch(self, keys: Iterable) -> list:
        self._call("prefetch", keys=[list(k) for k in keys])
        return []

    def pin(self, keys: Iterable) -> None:
        self._call("pin", keys=[list(k) for k in keys])

    def unpin(self, keys: Iterable) -> None:
        self._call("unpin", keys=[list(k) for k in keys])

    def release(self, kind: str, layer: int, part: int) -> None:
        self._call("release", kind=kind, layer=int(layer), part=int(part))

    def release_layer(self, kind: str, layer: int) -> None:
        self._call("release_layer", kind=kind, layer=int(layer))

    def flush(self, kind: str | None = None, layer: int | None = None) -> int:
        return int(self._call("flush", kind=kind, layer=layer)[0].get("bytes", 0))

    def stats(self, reset: bool = False) -> dict:
        return self._call("stats", reset=reset)[0]

    def plan(self, accesses, cyclic: bool = True) -> None:
        if accesses is self._last_plan:
            return  # the server already holds this plan; begin_epoch rewinds it
        self._last_plan = accesses
        acc = accesses.accesses if isinstance(accesses, Schedule) else list(accesses)
        self._call("plan", schedule=[[k, int(l), int(p), op] for k, l, p, op in acc], cyclic=cyclic)

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
