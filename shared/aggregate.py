"""Message passing over a block's CSR: the aggregation kernels of the built-in layers.

A sampled block (see :mod:`shared.protocol`) lists its edges grouped by destination, so it is a
CSR matrix over destinations: ``ptr`` (``int[num_dst + 1]``, offsets into the hop's edges) and
``src`` (``int[E]``, source rows).  The layers of :mod:`shared.models` aggregate through it
without ever materialising one feature row per edge (``h[src]``), which on CPU cost ~8x the
time of the product itself (``bench/layers.py``).

Two differentiable operations cover GCN, SAGE (every aggregator) and GAT:

* :func:`segment_sum` -- ``out[v] = sum_{e in row v} w[e] * x[src[e]]``, unweighted or with one
  weight per edge and head (GAT's attention); its backward is a scatter of the output gradient
  into the sources, plus (weighted) the per-edge dot product of both (an SDDMM).
* :func:`edge_softmax` -- the softmax of per-edge scores over each destination's edges and one
  extra score per destination (GAT's self loop).

On CPU both run as numba kernels, parallel over destinations; the scatter of the backward runs
as the same gather over the block's transpose (a counting sort of ~1 ms per 300k edges), so no
two threads ever write one row.  Elsewhere (CUDA) they run as torch ops:
``torch.sparse.mm`` on a CSR tensor forward, ``index_add_`` backward.  ``BACKEND`` forces one
path (tests run both on CPU).
"""
from __future__ import annotations

import numba
import numpy as np
import torch
from torch import Tensor

__all__ = ["csr_ptr", "segment_sum", "edge_softmax", "BACKEND"]

_HALF = (torch.bfloat16, torch.float16)
BACKEND = "auto"
"""``auto`` (numba on CPU tensors, torch elsewhere), ``numba`` or ``torch``."""


def csr_ptr(src: Tensor, dst: Tensor, num_dst: int) -> tuple[Tensor, Tensor, Tensor]:
    """``(ptr, src, dst)`` of a block given as edge lists: edges re-ordered by destination (stable)
    when they are not already grouped, and the offsets of each destination's edges.

    Shapes: src, dst int[E] -> ptr int64[num_dst + 1], src int[E], dst int[E].
    """
    if dst.numel() and not bool((dst[1:] >= dst[:-1]).all()):
        order = torch.argsort(dst, stable=True)
        src, dst = src[order], dst[order]
    counts = torch.bincount(dst.long(), minlength=num_dst) if dst.numel() else torch.zeros(num_dst, dtype=torch.int64,
                                                                                            device=dst.device)
    if counts.shape[0] != num_dst:
        raise ValueError(f"edge_dst holds ids up to {counts.shape[0] - 1}, the block has {num_dst} destinations")
    ptr = torch.zeros(num_dst + 1, dtype=torch.int64, device=dst.device)
    torch.cumsum(counts, 0, out=ptr[1:])
    return ptr, src, dst


def _use_numba(t: Tensor) -> bool:
    if BACKEND == "auto":
        return t.device.type == "cpu"
    if BACKEND not in ("numba", "torch"):
        raise ValueError(f"aggregate.BACKEND must be auto, numba or torch (got {BACKEND!r})")
    return BACKEND == "numba"


def _np(t: Tensor) -> np.ndarray:
    return t.detach().contiguous().numpy()


def _check(ptr: Tensor, src: Tensor, num_dst: int, num_src: int) -> None:
    """A malformed block is an error here, never an out-of-bounds read in a compiled kernel."""
    if ptr.dim() != 1 or ptr.shape[0] != num_dst + 1:
        raise ValueError(f"ptr must have num_dst + 1 = {num_dst + 1} offsets (got shape {tuple(ptr.shape)})")
    E = src.shape[0]
    if int(ptr[0]) != 0 or int(ptr[-1]) != E or (num_dst and bool((ptr[1:] < ptr[:-1]).any())):
        raise ValueError(f"ptr must rise from 0 to the {E} edges (got {int(ptr[0])} .. {int(ptr[-1])})")
    if E and (int(src.min()) < 0 or int(src.max()) >= num_src):
        raise ValueError(f"src ids must lie in [0, {num_src}) (got [{int(src.min())}, {int(src.max())}])")


def _rows(ptr: Tensor, num_edges: int) -> Tensor:
    """Destination of every edge (torch path only)."""
    return torch.repeat_interleave(torch.arange(ptr.shape[0] - 1, device=ptr.device), ptr.diff(),
                                   output_size=num_edges)


# ----------------------------------------------------------------------------- numba kernels (CPU)
@numba.njit(parallel=True, cache=True)
def _sum_rows(ptr, src, x, out):  # pragma: no cover - compiled
    """out[v, :] = sum_e x[src[e], :]."""
    F = x.shape[1]
    for v in numba.prange(out.shape[0]):
        for e in range(ptr[v], ptr[v + 1]):
            u = src[e]
            for f in range(F):
                out[v, f] += x[u, f]


@numba.njit(parallel=True, cache=True)
def _wsum_rows(ptr, src, w, x, out):  # pragma: no cover - compiled
    """out[v, k, :] = sum_e w[e, k] * x[src[e], k, :]."""
    H, C = x.shape[1], x.shape[2]
    for v in numba.prange(out.shape[0]):
        for e in range(ptr[v], ptr[v + 1]):
            u = src[e]
            for k in range(H):
                a = w[e, k]
                for c in range(C):
                    out[v, k, c] += a * x[u, k, c]


@numba.njit(cache=True)
def _transpose(ptr, src, num_src):  # pragma: no cover - compiled
    """The block's CSR over sources: ``(tptr, tcol, perm)``, edge ``perm[i]`` is the i-th of the
    transpose (a counting sort, O(E + num_src): ~1 ms for 300k edges)."""
    tptr = np.zeros(num_src + 1, np.int64)
    for e in range(src.shape[0]):
        tptr[src[e] + 1] += 1
    for i in range(num_src):
        tptr[i + 1] += tptr[i]
    pos = tptr[:-1].copy()
    tcol = np.empty(src.shape[0], np.int64)
    perm = np.empty(src.shape[0], np.int64)
    for v in range(ptr.shape[0] - 1):
        for e in range(ptr[v], ptr[v + 1]):
            u = src[e]
            p = pos[u]
            tcol[p] = v
            perm[p] = e
            pos[u] = p + 1
    return tptr, tcol, perm


@numba.njit(parallel=True, cache=True)
def _sddmm(ptr, src, g, x, gw):  # pragma: no cover - compiled
    """gw[e, k] = <g[v, k, :], x[src[e], k, :]>."""
    H, C = x.shape[1], x.shape[2]
    for v in numba.prange(g.shape[0]):
        for e in range(ptr[v], ptr[v + 1]):
            u = src[e]
            for k in range(H):
                s = 0.0
                for c in range(C):
                    s += g[v, k, c] * x[u, k, c]
                gw[e, k] = s


@numba.njit(parallel=True, cache=True)
def _softmax_fwd(ptr, s, s_self, a, a_self):  # pragma: no cover - compiled
    H = s_self.shape[1]
    for v in numba.prange(s_self.shape[0]):
        for k in range(H):
            m = s_self[v, k]
            for e in range(ptr[v], ptr[v + 1]):
                m = max(m, s[e, k])
            z = np.exp(s_self[v, k] - m)
            a_self[v, k] = z
            for e in range(ptr[v], ptr[v + 1]):
                t = np.exp(s[e, k] - m)
                a[e, k] = t
                z += t
            a_self[v, k] /= z
            for e in range(ptr[v], ptr[v + 1]):
                a[e, k] /= z


@numba.njit(parallel=True, cache=True)
def _softmax_bwd(ptr, a, a_self, g, g_self, gs, gs_self):  # pragma: no cover - compiled
    H = a_self.shape[1]
    for v in numba.prange(a_self.shape[0]):
        for k in range(H):
            dot = a_self[v, k] * g_self[v, k]
            for e in range(ptr[v], ptr[v + 1]):
                dot += a[e, k] * g[e, k]
            gs_self[v, k] = a_self[v, k] * (g_self[v, k] - dot)
            for e in range(ptr[v], ptr[v + 1]):
                gs[e, k] = a[e, k] * (g[e, k] - dot)


# ----------------------------------------------------------------------------- autograd functions
class _SegmentSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, w: Tensor | None, ptr: Tensor, src: Tensor, num_dst: int) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(x, w, ptr, src)
        ctx.numba = _use_numba(x)
        if ctx.numba:
            out = torch.zeros((num_dst,) + tuple(x.shape[1:]), dtype=x.dtype)
            if src.numel() and out.numel():
                if w is None:
                    _sum_rows(_np(ptr), _np(src), _np(x).reshape(x.shape[0], -1), out.numpy().reshape(num_dst, -1))
                else:
                    _wsum_rows(_np(ptr), _np(src), _np(w), _np(x), out.numpy())
            return out
        return _torch_sum(x, w, ptr, src, num_dst)

    @staticmethod
    def backward(ctx, g: Tensor):  # type: ignore[override]
        x, w, ptr, src = ctx.saved_tensors
        gx = gw = None
        if ctx.numba:
            g = g.contiguous()
            if ctx.needs_input_grad[0]:
                # the scatter of the backward is the forward's gather over the transposed block
                gx = torch.zeros_like(x)
                if src.numel() and gx.numel():
                    tptr, tcol, perm = _transpose(_np(ptr), _np(src), x.shape[0])
                    if w is None:
                        _sum_rows(tptr, tcol, _np(g).reshape(g.shape[0], -1), gx.numpy().reshape(x.shape[0], -1))
                    else:
                        _wsum_rows(tptr, tcol, _np(w)[perm], _np(g), gx.numpy())
            if w is not None and ctx.needs_input_grad[1]:
                gw = torch.zeros_like(w)
                if src.numel():
                    _sddmm(_np(ptr), _np(src), _np(g), _np(x), gw.numpy())
            return gx, gw, None, None, None
        dst = _rows(ptr, src.shape[0])
        src = src.long()
        if ctx.needs_input_grad[0]:
            msg = g[dst] if w is None else g[dst] * w[..., None]
            gx = torch.zeros_like(x).index_add_(0, src, msg)
        if w is not None and ctx.needs_input_grad[1]:
            gw = (g[dst] * x[src]).sum(-1)
        return gx, gw, None, None, None


def _torch_sum(x: Tensor, w: Tensor | None, ptr: Tensor, src: Tensor, num_dst: int) -> Tensor:
    """``torch.sparse.mm`` on a CSR tensor (one per head when weighted)."""
    ptr, col = ptr.long(), src.long()
    size = (num_dst, x.shape[0])
    if w is None:
        a = torch.sparse_csr_tensor(ptr, col, torch.ones(col.shape[0], dtype=x.dtype, device=x.device), size=size, check_invariants=False)
        return torch.sparse.mm(a, x.reshape(x.shape[0], -1)).reshape((num_dst,) + tuple(x.shape[1:]))
    heads = [torch.sparse.mm(torch.sparse_csr_tensor(ptr, col, w[:, k].contiguous(), size=size, check_invariants=False), x[:, k])
             for k in range(x.shape[1])]
    return torch.stack(heads, 1)


def segment_sum(x: Tensor, ptr: Tensor, src: Tensor, num_dst: int, w: Tensor | None = None) -> Tensor:
    """``out[v] = sum_{ptr[v] <= e < ptr[v+1]} w[e] * x[src[e]]`` (``w`` = 1 when None), differentiable in
    ``x`` and ``w``.

    Shapes: x (num_src, F) or, weighted, (num_src, H, C); w (E, H); ptr int[num_dst + 1]; src int[E]
    -> (num_dst, F) or (num_dst, H, C).
    """
    _check(ptr, src, num_dst, x.shape[0])
    if w is not None and (x.dim() != 3 or w.shape != (src.shape[0], x.shape[1])):
        raise ValueError(f"weighted segment_sum needs x (num_src, H, C) and w (E, H) (got x {tuple(x.shape)}, "
                         f"w {tuple(w.shape)})")
    if x.dtype in _HALF:     # autocast's bf16 products: sum in float32 (numpy has no bfloat16; fewer roundings)
        x, w = x.float(), (None if w is None else w.float())
    return _SegmentSum.apply(x, w, ptr, src, num_dst)


class _EdgeSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, s: Tensor, s_self: Tensor, ptr: Tensor) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        ctx.numba = _use_numba(s)
        if ctx.numba:
            a, a_self = torch.empty_like(s), torch.empty_like(s_self)
            if s_self.numel():
                _softmax_fwd(_np(ptr), _np(s), _np(s_self), a.numpy(), a_self.numpy())
        else:
            dst = _rows(ptr, s.shape[0])
            idx = dst[:, None].expand(-1, s.shape[1])
            m = s_self.detach().scatter_reduce(0, idx, s.detach(), "amax", include_self=True)
            t, t_self = torch.exp(s - m[dst]), torch.exp(s_self - m)
            z = t_self.index_add(0, dst, t)
            a, a_self = t / z[dst], t_self / z
        ctx.save_for_backward(ptr, a, a_self)
        return a, a_self

    @staticmethod
    def backward(ctx, g: Tensor, g_self: Tensor):  # type: ignore[override]
        ptr, a, a_self = ctx.saved_tensors
        if ctx.numba:
            gs, gs_self = torch.empty_like(a), torch.empty_like(a_self)
            if a_self.numel():
                _softmax_bwd(_np(ptr), _np(a), _np(a_self), _np(g), _np(g_self), gs.numpy(), gs_self.numpy())
            return gs, gs_self, None
        dst = _rows(ptr, a.shape[0])
        dot = (a_self * g_self).index_add(0, dst, a * g)
        return a * (g - dot[dst]), a_self * (g_self - dot), None


def edge_softmax(s: Tensor, s_self: Tensor, ptr: Tensor) -> tuple[Tensor, Tensor]:
    """Softmax of each destination's scores: its edges' ``s[ptr[v]:ptr[v+1]]`` and its own ``s_self[v]``.

    Shapes: s (E, H); s_self (num_dst, H); ptr int[num_dst + 1] -> (E, H), (num_dst, H).
    """
    if ptr.shape[0] != s_self.shape[0] + 1 or s.shape[1:] != s_self.shape[1:] or int(ptr[-1]) != s.shape[0]:
        raise ValueError(f"edge_softmax: ptr has {ptr.shape[0]} offsets for {s_self.shape[0]} destinations, "
                         f"scores {tuple(s.shape)} and {tuple(s_self.shape)}")
    if s.dtype in _HALF:
        s, s_self = s.float(), s_self.float()
    return _EdgeSoftmax.apply(s, s_self, ptr)
