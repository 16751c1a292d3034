"""Wire format of the offload-store service: msgpack header frame + raw array frames.

Why this module exists: a trainer on another host talks to the store over
ZeroMQ, and both ends must agree on one typed, versioned, pickle-free
encoding that rejects malformed input with a sentence instead of crashing.
(The project-wide ``shared/wire.py`` will subsume this; until then the
offload service keeps its own, in exactly one place.)

Frame 0 is a msgpack map ``{"v": PROTOCOL_VERSION, "op": str, "id": int,
"arrays": [{"dtype": str, "shape": [int...]}, ...], ...op fields}``; frames
1..k are the raw C-order bytes of the arrays listed in ``arrays``. Replies
have the same shape with ``"ok": true`` and a ``"result"`` map, or
``"ok": false, "code": str, "message": str``.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import msgpack
import numpy as np

__all__ = ["PROTOCOL_VERSION", "OPS", "ProtocolError", "encode", "decode", "encode_reply",
           "encode_error", "decode_reply", "MAX_ARRAY_BYTES", "MAX_ARRAYS"]

logger = logging.getLogger(__name__)

PROTOCOL_VERSION = 1
MAX_ARRAYS = 256
MAX_ARRAY_BYTES = 8 << 30
_DTYPES = {"float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8", "bool"}
OPS = frozenset({"ping", "put", "get", "gather", "scatter_add", "prefetch", "pin", "unpin", "release",
                 "release_layer", "flush", "stats", "plan", "begin_epoch", "sync"})


class ProtocolError(ValueError):
    """A message that does not follow the wire format (answered with an error reply)."""


def _pack_arrays(arrays: Sequence[np.ndarray]) -> tuple[list[dict], list[memoryview]]:
    meta, frames = [], []
    for a in arrays:
        a = np.ascontiguousarray(a)
        if a.dtype.name not in _DTYPES:
            raise ProtocolError(f"dtype {a.dtype.name} cannot travel (allowed: {sorted(_DTYPES)})")
        meta.append({"dtype": a.dtype.name, "shape": list(a.shape)})
        frames.append(memoryview(a).cast("B") if a.size else memoryview(b""))
    return meta, frames


def encode(op: str, req_id: int, arrays: Sequence[np.ndarray] = (), **fields: Any) -> list:
    """Frames of one request."""
    meta, frames = _pack_arrays(arrays)
    head = {"v": PROTOCOL_VERSION, "op": op, "id": int(req_id), "arrays": meta, **fields}
    return [msgpack.packb(head, use_bin_type=True), *frames]


def encode_reply(req_id: int, result: dict | None = None, arrays: Sequence[np.ndarray] = ()) -> list:
    meta, frames = _pack_arrays(arrays)
    head = {"v": PROTOCOL_VERSION, "id": int(req_id), "ok": True, "result": result or {}, "arrays": meta}
    return [msgpack.packb(head, use_bin_type=True), *frames]


def encode_error(req_id: int, code: str, message: str) -> list:
    head = {"v": PROTOCOL_VERSION, "id": int(req_id), "ok": False, "code": code, "message": message,
            "arrays": []}
    return [msgpack.packb(head, use_bin_type=True)]


def _unpack_head(frame: bytes) -> dict:
    try:
        head = msgpack.unpackb(bytes(frame), raw=False, strict_map_key=True)
    except Exception as e:  # msgpack raises several types
        raise ProtocolError(f"header frame is not valid msgpack ({type(e).__name__}: {e})") from None
    if not isinstance(head, dict):
        raise ProtocolError(f"header must be a msgpack map (got {type(head).__name__})")
    v = head.get("v")
    if v != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version mismatch: server speaks {PROTOCOL_VERSION}, message has {v!r}")
    return head


def _unpack_arrays(head: dict, frames: Sequence[bytes]) -> list[np.ndarray]:
    meta = head.get("arrays", [])
    if not isinstance(meta, list) or len(meta) > MAX_ARRAYS:
        raise ProtocolError(f"'arrays' must be a list of at most {MAX_ARRAYS} entries")
    if len(meta) != len(frames):
        raise ProtocolError(f"header lists {len(meta)} arrays but {len(frames)} data frames arrived")
    out = []
    for i, (m, fr) in enumerate(zip(meta, frames)):
        if not isinstance(m, dict) or m.get("dtype") not in _DTYPES or not isinstance(m.get("shape"), list) \
                or not all(isinstance(s, int) and s >= 0 for s in m["shape"]):
            raise ProtocolError(f"array {i} metadata must be {{dtype in {sorted(_DTYPES)}, shape: [int>=0]}} "
                                f"(got {m!r})")
        dt = np.dtype(m["dtype"])
        want = int(np.prod(m["shape"], dtype=np.int64)) * dt.itemsize
        if want > MAX_ARRAY_BYTES:
            raise ProtocolError(f"array {i} of {want} bytes exceeds the {MAX_ARRAY_BYTES}-byte limit")
        if len(fr) != want:
            raise ProtocolError(f"array {i}: shape {m['shape']} {m['dtype']} needs {want} bytes, frame has {len(fr)}")
        out.append(np.frombuffer(fr, dtype=dt).reshape(m["shape"]).copy())
    return out


def decode(frames: Sequence[bytes]) -> tuple[dict, list[np.ndarray]]:
    """Parse a request; raises :class:`ProtocolError` on anything malformed."""
    if not frames:
        raise ProtocolError("empty message")
    head = _unpack_head(frames[0])
    op = head.get("op")
    if op not in OPS:
        raise ProtocolError(f"unknown op {op!r} (known: {sorted(OPS)})")
    if not isinstance(head.get("id", 0), int):
        raise ProtocolError("'id' must be an integer")
    return head, _unpack_arrays(head, frames[1:])


def decode_reply(frames: Sequence[bytes]) -> tuple[dict, list[np.ndarray]]:
    """Parse a reply (the client side)."""
    if not frames:
        raise ProtocolError("empty reply")
    head = _unpack_head(frames[0])
    return head, _unpack_arrays(head, frames[1:])
