"""Dropout masks as bits: drawn once per (epoch, layer, part), applied by fused kernels.

Why this module exists: the offloaded schedule applies each part's dropout mask up to three times
an epoch (layer 0's for the halo blocks, the forward gather and the backward regather; a hidden
layer's in the forward pass and the backward recomputation).  Redrawing a ``float32`` mask each
time and multiplying by it cost ~70 ms per 75k x 128 block on this machine (a third of an offloaded
epoch on a 1.2M-vertex graph): a 19 MB random draw, a fresh 38 MB mask and a fresh 38 MB product.
Here the keep pattern of :func:`~.model.dropout_mask` (the same PCG64 stream, the same threshold)
is drawn once and kept packed, 1 bit per entry (``n * D / 8`` bytes: 2.4 MB per 75k x 128 block),
and one pass writes ``x * scale`` or ``0``; ReLU and dropout fuse into one autograd op whose
backward needs only its own output (``out > 0`` exactly where ReLU passed and the mask kept).
The arithmetic is that of ``relu(z) * dropout_mask(...)``, so results equal the float-mask path.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from argosy.shared.models import keep_threshold

__all__ = ["dropout_bits", "apply_dropout", "ReluDropout", "relu_dropout", "relu_dropout_grad"]


@numba.njit(parallel=True, cache=True, nogil=True)
def _pack_keep(u, thr, out):  # pragma: no cover - compiled
    n, d = u.shape
    for i in numba.prange(n):
        for b in range(out.shape[1]):
            v = 0
            for k in range(8):
                j = b * 8 + k
                if j < d and u[i, j] >= thr:
                    v |= 1 << k
            out[i, b] = v


@numba.njit(parallel=True, cache=True, nogil=True)
def _masked(x, bits, rows, scale, relu, out):  # pragma: no cover - compiled
    n, d = x.shape
    for i in numba.prange(n):
        r = np.int64(i)
        if rows.shape[0]:
            r = np.int64(rows[i])
        for j in range(d):
            v = x[i, j]
            if (bits[r, j >> 3] >> (j & 7)) & 1 and (v > 0 or not relu):
                out[i, j] = v * scale
            else:
                out[i, j] = 0.0


@numba.njit(parallel=True, cache=True, nogil=True)
def _passed_grad(y, g, scale, out):  # pragma: no cover - compiled
    n, d = y.shape
    for i in numba.prange(n):
        for j in range(d):
            out[i, j] = g[i, j] * scale if y[i, j] > 0 else 0.0


def dropout_bits(shape: tuple[int, int], prob: float, seed: int, epoch: int, layer: int,
                 part: int) -> np.ndarray | None:
    """The keep pattern of :func:`~.model.dropout_mask` with the same arguments, packed along rows.

    Returns None when ``prob == 0``.  Shapes: returns ``uint8[shape[0], ceil(shape[1] / 8)]``; bit
    ``j % 8`` (little-endian) of byte ``j // 8`` of row ``i`` is set when entry ``(i, j)`` is kept.
    """
    if prob <= 0:
        return None
    n = int(shape[0]) * int(shape[1])
    rng = np.random.default_rng([seed, epoch, layer, part])
    u = rng.bit_generator.random_raw((n + 3) // 4).view(np.uint16)[:n].reshape(shape)
    out = np.empty((int(shape[0]), (int(shape[1]) + 7) // 8), np.uint8)
    _pack_keep(u, np.uint16(keep_threshold(prob)), out)
    return out


def _scale(prob: float) -> np.float32:
    return np.float32(1.0 / (1.0 - prob))


def apply_dropout(x: torch.Tensor, bits: np.ndarray, prob: float, rows: np.ndarray | None = None,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """``x * mask`` without a float mask (no autograd): ``out`` (default: ``x``, in place).

    Shapes: x ``float32[k, D]`` on the CPU; bits ``uint8[n, ceil(D / 8)]``; rows ``int64[k]``, the
    mask rows of x's rows (None: row ``i`` of x is mask row ``i``, ``k == n``).
    """
    if x.dtype != torch.float32 or x.device.type != "cpu":
        raise ValueError(f"apply_dropout: expected a float32 CPU tensor, got {x.dtype} on {x.device}")
    if rows is None and bits.shape[0] != x.shape[0]:
        raise ValueError(f"apply_dropout: {x.shape[0]} rows but a mask of {bits.shape[0]} rows")
    out = x if out is None else out
    if x.numel():
        _masked(x.detach().numpy(), bits, np.zeros(0, np.int64) if rows is None else np.asarray(rows, np.int64),
                _scale(prob), False, out.detach().numpy())
    return out


class ReluDropout(torch.autograd.Function):
    """``relu(z) * mask`` in one pass; backward ``g * scale`` where the output is positive, else 0.

    Shapes: z ``float32[n, D]`` (CPU, contiguous); bits ``uint8[n, ceil(D / 8)]``; returns ``[n, D]``.
    """

    @staticmethod
    def forward(ctx, z: torch.Tensor, bits: np.ndarray, prob: float) -> torch.Tensor:  # type: ignore[override]
        zc = z.detach().contiguous()
        out = torch.empty_like(zc)
        _masked(zc.numpy(), bits, np.zeros(0, np.int64), _scale(prob), True, out.numpy())
        ctx.prob = prob
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        (y,) = ctx.saved_tensors
        return relu_dropout_grad(y, g, ctx.prob), None, None


def relu_dropout_grad(y: torch.Tensor, g: torch.Tensor, prob: float) -> torch.Tensor:
    """The gradient of :func:`relu_dropout`'s input from its output ``y`` and the output's gradient
    ``g``: ``g / (1 - prob)`` where ``y > 0``, else 0 (``prob`` 0: no mask, plain ReLU's). Shapes: ``[n, D]``."""
    if y.device.type != "cpu":
        return torch.where(y > 0, g * float(_scale(prob)), torch.zeros((), device=y.device, dtype=g.dtype))
    gz = torch.empty_like(y)
    _passed_grad(y.contiguous().numpy(), g.contiguous().numpy(), _scale(prob), gz.numpy())
    return gz


def relu_dropout(z: torch.Tensor, bits: np.ndarray | None, prob: float) -> torch.Tensor:
    """The next layer's input rows: ReLU, then dropout with a kept mask (plain ReLU without one)."""
    if bits is None or z.device.type != "cpu":
        if bits is not None:  # off the CPU: unpack to a float mask (no fused kernel there)
            keep = np.unpackbits(bits, axis=1, count=z.shape[1], bitorder="little")
            return torch.relu(z) * torch.from_numpy(keep * _scale(prob)).to(z.device)
        return torch.relu(z)
    return ReluDropout.apply(z, bits, prob)
