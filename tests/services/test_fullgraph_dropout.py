"""Dropout masks kept as bits (services/trainer/fullgraph/dropout.py) are the float masks' pattern."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from argosy.services.trainer.fullgraph.dropout import apply_dropout, dropout_bits, relu_dropout
from argosy.services.trainer.fullgraph.model import dropout_mask, post_activation


def unpacked(bits: np.ndarray, cols: int, prob: float) -> torch.Tensor:
    keep = np.unpackbits(bits, axis=1, count=cols, bitorder="little")
    return torch.from_numpy(keep.astype(np.float32) * np.float32(1.0 / (1.0 - prob)))


@pytest.mark.parametrize("shape,prob", [((37, 13), 0.5), ((5, 8), 0.25), ((64, 130), 0.9)])
def test_bits_are_the_float_mask(shape, prob):
    bits = dropout_bits(shape, prob, 3, 1, 2, 5)
    assert bits.shape == (shape[0], (shape[1] + 7) // 8) and bits.dtype == np.uint8
    ref = dropout_mask(shape, prob, 3, 1, 2, 5)
    assert torch.equal(unpacked(bits, shape[1], prob), ref)
    assert 0 < int((ref == 0).sum()) < ref.numel()  # some dropped, some kept
    assert not np.array_equal(bits, dropout_bits(shape, prob, 3, 2, 2, 5))  # another epoch, another mask
    assert dropout_bits(shape, 0.0, 3, 1, 2, 5) is None


def test_apply_dropout_in_place_and_on_selected_rows():
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.normal(size=(40, 20)).astype(np.float32))
    bits, mask = dropout_bits((40, 20), 0.5, 1, 0, 0, 0), dropout_mask((40, 20), 0.5, 1, 0, 0, 0)
    y = x.clone()
    assert apply_dropout(y, bits, 0.5) is y
    assert torch.equal(y, x * mask)
    rows = np.array([39, 0, 7, 7])
    sub = x[rows].clone()
    apply_dropout(sub, bits, 0.5, rows)
    assert torch.equal(sub, x[rows] * mask[rows])
    with pytest.raises(ValueError, match="rows"):
        apply_dropout(x[:3].clone(), bits, 0.5)


def test_fused_relu_dropout_matches_relu_times_mask_and_its_gradient():
    rng = np.random.default_rng(1)
    z0 = torch.from_numpy(rng.normal(size=(33, 17)).astype(np.float32))
    g = torch.from_numpy(rng.normal(size=(33, 17)).astype(np.float32))
    bits, mask = dropout_bits((33, 17), 0.4, 2, 3, 1, 0), dropout_mask((33, 17), 0.4, 2, 3, 1, 0)
    za, zb = z0.clone().requires_grad_(True), z0.clone().requires_grad_(True)
    a, b = relu_dropout(za, bits, 0.4), post_activation(zb, mask)
    assert torch.equal(a, b)
    a.backward(g)
    b.backward(g)
    assert torch.equal(za.grad, zb.grad)
    assert torch.equal(relu_dropout(z0, None, 0.4), torch.relu(z0))
