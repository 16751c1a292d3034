"""Contract tests of the wire format: round trips, frame counts, and every rejection path."""
import msgpack
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from argosy.shared.errors import ProtocolError
from argosy.shared.protocol import PROTOCOL_VERSION, ErrorReply, FeatureBatch, MsgKind, SampledBatch
from argosy.shared.wire import Limits, decode, encode


def _batch(dtype=np.float32):
    rng = np.random.default_rng(0)
    return FeatureBatch(job="j", epoch=3, phase="val", batch_id=42, work_stream="s", work_id="1-0", trainer_rank=1,
                        nodes=np.arange(10, dtype=np.int64), hop_nodes=np.array([2, 6, 10]),
                        degrees=rng.integers(0, 9, 10).astype(np.int32), edge_src=np.arange(12, dtype=np.int32) % 10,
                        edge_dst=np.arange(12, dtype=np.int32) % 6, hop_edges=np.array([0, 4, 12]),
                        features=rng.standard_normal((10, 5)).astype(dtype), labels=np.array([1, -1]))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_round_trip_feature_batch(dtype):
    b = _batch(dtype)
    frames = encode(b)
    assert len(frames) == 1 + len(FeatureBatch.ARRAYS)
    out = decode([bytes(f) for f in frames])
    assert isinstance(out, FeatureBatch)
    assert (out.epoch, out.phase, out.batch_id, out.trainer_rank) == (3, "val", 42, 1)
    for name in FeatureBatch.ARRAYS:
        np.testing.assert_array_equal(getattr(out, name), getattr(b, name))
        assert getattr(out, name).dtype == getattr(b, name).dtype


def test_round_trip_non_contiguous_and_empty():
    x = np.arange(40, dtype=np.int64).reshape(10, 4)[:, 1]          # strided view
    out = decode([bytes(f) for f in encode(SampledBatch(nodes=x, edge_src=np.empty(0, np.int32)))])
    np.testing.assert_array_equal(out.nodes, x)
    assert out.edge_src.shape == (0,)


def test_small_messages():
    for msg in (ErrorReply(), ErrorReply(request_id="r", code="E", message="bad")):
        frames = encode(msg)
        assert len(frames) == 1
        assert decode(frames) == msg


def _header(frames):
    return msgpack.unpackb(frames[0], raw=False)


def _with_header(frames, header):
    return [msgpack.packb(header, use_bin_type=True), *[bytes(f) for f in frames[1:]]]


def test_rejects_wrong_version():
    frames = encode(_batch())
    h = _header(frames)
    h[0] = PROTOCOL_VERSION + 1
    with pytest.raises(ProtocolError, match=f"protocol version mismatch: peer speaks {PROTOCOL_VERSION + 1}"):
        decode(_with_header(frames, h))


def test_rejects_unknown_kind():
    frames = encode(ErrorReply())
    h = _header(frames)
    h[1] = 99
    with pytest.raises(ProtocolError, match="unknown message kind 99"):
        decode(_with_header(frames, h))


def test_rejects_garbage_header():
    with pytest.raises(ProtocolError, match="not valid msgpack|must be"):
        decode([b"\xc1\xff\x00garbage"])
    with pytest.raises(ProtocolError, match="must be"):
        decode([msgpack.packb({"a": 1})])


def test_rejects_missing_frames_and_size_mismatch():
    frames = [bytes(f) for f in encode(_batch())]
    with pytest.raises(ProtocolError, match="array frames"):
        decode(frames[:-1])
    frames[-1] = frames[-1][:-8]
    with pytest.raises(ProtocolError, match="needs 16 bytes, frame has 8"):
        decode(frames)


def test_rejects_field_mismatch_and_bad_dtype():
    frames = encode(_batch())
    h = _header(frames)
    del h[2]["epoch"]
    with pytest.raises(ProtocolError, match="do not match expected"):
        decode(_with_header(frames, h))
    h = _header(frames)
    h[3][0][1] = "object"
    with pytest.raises(ProtocolError, match="bad array spec"):
        decode(_with_header(frames, h))
    h = _header(frames)
    h[2]["epoch"] = "three"
    with pytest.raises(ProtocolError, match="expected int"):
        decode(_with_header(frames, h))


def test_rejects_oversized():
    frames = [bytes(f) for f in encode(_batch())]
    with pytest.raises(ProtocolError, match="exceeds the limit"):
        decode(frames, Limits(max_message_bytes=100))
    with pytest.raises(ProtocolError, match="exceeds the limit"):
        decode(frames, Limits(max_frame_bytes=64))
    with pytest.raises(ProtocolError, match="frames"):
        decode([frames[0]] * 100)


def test_msgpack_bomb_is_bounded():
    bomb = msgpack.packb([PROTOCOL_VERSION, int(MsgKind.ERROR), {"x": "a" * 200_000}, []])
    with pytest.raises(ProtocolError):
        decode([bomb])


def test_encode_refuses_object_arrays():
    with pytest.raises(ProtocolError, match="cannot be sent"):
        encode(SampledBatch(nodes=np.array([object()])))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=256), min_size=0, max_size=10))
def test_fuzz_decoder_never_crashes(frames):
    """Arbitrary bytes either decode or raise ProtocolError: never another exception."""
    try:
        decode(frames)
    except ProtocolError:
        pass


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**31), st.sampled_from(["train", "val", "test"]), st.integers(0, 50))
def test_fuzz_mutated_valid_headers(epoch, phase, cut):
    frames = [bytes(f) for f in encode(SampledBatch(epoch=epoch, phase=phase, nodes=np.arange(5)))]
    out = decode(frames)
    assert out.epoch == epoch and out.phase == phase
    frames[0] = frames[0][:cut]
    try:
        decode(frames)
    except ProtocolError:
        pass
