"""Encode and decode wire messages: one msgpack header frame + one raw frame per array.

Frame 0 is ``msgpack([version, kind, {scalar fields}, [[name, dtype, shape], ...]])``; each
array follows as its own frame, sent zero-copy (``copy=False``) so a 100 MB feature block is never
copied by Python.  There is no pickle path.  Decoding trusts nothing: a wrong version, an unknown
kind, missing or extra fields, a dtype outside the allow-list, a frame whose length does not match
its declared shape, or a message above the size limits raises :class:`ProtocolError` with a
sentence naming what was expected and what arrived.

Example:
    >>> import numpy as np
    >>> from shared.protocol import SampledBatch
    >>> frames = encode(SampledBatch(batch_id=7, nodes=np.arange(3)))
    >>> decode([bytes(f) for f in frames]).batch_id
    7
"""
from __future__ import annotations

import math
from dataclasses import fields

import msgpack
import numpy as np

from argosy.shared.errors import ProtocolError
from argosy.shared.protocol import MESSAGE_TYPES, PROTOCOL_VERSION, Message

__all__ = ["encode", "decode", "Limits", "DEFAULT_LIMITS", "ALLOWED_DTYPES"]

ALLOWED_DTYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                            "float16", "float32", "float64", "bool"})


class Limits:
    """Size limits a decoder enforces (configurable per socket)."""

    def __init__(self, max_header_bytes: int = 64 * 1024, max_frame_bytes: int = 1 << 30,
                 max_message_bytes: int = 2 << 30, max_frames: int = 64, max_ndim: int = 4):
        self.max_header_bytes = max_header_bytes
        self.max_frame_bytes = max_frame_bytes
        self.max_message_bytes = max_message_bytes
        self.max_frames = max_frames
        self.max_ndim = max_ndim


DEFAULT_LIMITS = Limits()


def encode(msg: Message) -> list:
    """Return the frames of ``msg``: ``[header bytes, array buffers...]`` (arrays not copied)."""
    scalars = {}
    specs, bufs = [], []
    for f in fields(msg):
        val = getattr(msg, f.name)
        if f.name in msg.ARRAYS:
            arr = np.ascontiguousarray(val)
            if arr.dtype.name not in ALLOWED_DTYPES:
                raise ProtocolError(f"{type(msg).__name__}.{f.name}: dtype {arr.dtype} cannot be sent")
            specs.append([f.name, arr.dtype.name, list(arr.shape)])
            bufs.append(memoryview(arr).cast("B") if arr.size else b"")
        else:
            scalars[f.name] = val
    header = msgpack.packb([PROTOCOL_VERSION, int(msg.KIND), scalars, specs], use_bin_type=True)
    return [header, *bufs]


def _frame_bytes(frame) -> memoryview:
    if hasattr(frame, "buffer"):           # zmq.Frame received with copy=False
        return frame.buffer
    return memoryview(frame)


def decode(frames: list, limits: Limits = DEFAULT_LIMITS) -> Message:
    """Turn received frames back into a typed message (arrays are views on the frames)."""
    if not frames:
        raise ProtocolError("empty message (expected a header frame)")
    if len(frames) > limits.max_frames:
        raise ProtocolError(f"message has {len(frames)} frames (limit {limits.max_frames})")
    views = [_frame_bytes(f) for f in frames]
    total = sum(v.nbytes for v in views)
    if total > limits.max_message_bytes:
        raise ProtocolError(f"message of {total} bytes exceeds the limit of {limits.max_message_bytes}")
    head = views[0]
    if head.nbytes > limits.max_header_bytes:
        raise ProtocolError(f"header of {head.nbytes} bytes exceeds the limit of {limits.max_header_bytes}")
    try:
        header = msgpack.unpackb(head, raw=False, strict_map_key=True, max_bin_len=limits.max_header_bytes,
                                 max_str_len=limits.max_header_bytes, max_array_len=1024, max_map_len=256)
    except Exception as e:  # msgpack raises many types for garbage
        raise ProtocolError(f"header is not valid msgpack ({type(e).__name__}: {e})") from None
    if not isinstance(header, list) or len(header) != 4:
        raise ProtocolError(f"header must be [version, kind, scalars, arrays] (got {type(header).__name__})")
    version, kind, scalars, specs = header
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version mismatch: peer speaks {version!r}, this process speaks "
                            f"{PROTOCOL_VERSION}; run the same Argosy version everywhere")
    cls = MESSAGE_TYPES.get(kind) if isinstance(kind, int) else None
    if cls is None:
        raise ProtocolError(f"unknown message kind {kind!r} (known: {sorted(MESSAGE_TYPES)})")
    if not isinstance(scalars, dict) or not isinstance(specs, list):
        raise ProtocolError(f"{cls.__name__}: malformed header body")
    expected = set(cls.scalar_fields())
    if set(scalars) != expected:
        raise ProtocolError(f"{cls.__name__}: header fields {sorted(scalars)} do not match expected {sorted(expected)}")
    if len(specs) != len(cls.ARRAYS) or len(frames) != 1 + len(specs):
        raise ProtocolError(f"{cls.__name__}: expected {len(cls.ARRAYS)} array frames, header declares "
                            f"{len(specs)} and {len(frames) - 1} arrived")
    kwargs = dict(scalars)
    for f in fields(cls):
        if f.name in expected:
            want = type(f.default) if not callable(f.default_factory) else None
            if want in (int, float, str) and not isinstance(kwargs[f.name], (int, float) if want is float else want):
                raise ProtocolError(f"{cls.__name__}.{f.name}: expected {want.__name__} (got {type(kwargs[f.name]).__name__})")
    for (spec, name, view) in zip(specs, cls.ARRAYS, views[1:]):
        if (not isinstance(spec, list) or len(spec) != 3 or spec[0] != name or spec[1] not in ALLOWED_DTYPES
                or not isinstance(spec[2], list) or len(spec[2]) > limits.max_ndim
                or not all(isinstance(d, int) and 0 <= d < 2**40 for d in spec[2])):
            raise ProtocolError(f"{cls.__name__}: bad array spec {spec!r} (expected [{name!r}, dtype, shape])")
        dtype = np.dtype(spec[1])
        # Python ints: a declared shape like [2**31, 2**31, 2**31, 4] must not wrap to 0 bytes
        # (numpy's int64 product would) and then pass the frame-length check with an empty frame.
        # Zero dims count as 1 in the bound: numpy refuses ``np.empty([0, 2**39, 2**39])`` too.
        nbytes = math.prod(spec[2]) * dtype.itemsize
        if math.prod(max(d, 1) for d in spec[2]) * dtype.itemsize > limits.max_frame_bytes:
            raise ProtocolError(f"{cls.__name__}.{name}: declared shape {spec[2]} of {spec[1]} exceeds the limit "
                                f"of {limits.max_frame_bytes} bytes per frame")
        if view.nbytes > limits.max_frame_bytes:
            raise ProtocolError(f"{cls.__name__}.{name}: frame of {view.nbytes} bytes exceeds the limit of {limits.max_frame_bytes}")
        if nbytes != view.nbytes:
            raise ProtocolError(f"{cls.__name__}.{name}: shape {spec[2]} of {spec[1]} needs {nbytes} bytes, frame has {view.nbytes}")
        kwargs[name] = np.frombuffer(view, dtype=dtype).reshape(spec[2]) if nbytes else np.empty(spec[2], dtype)
    return cls(**kwargs)
