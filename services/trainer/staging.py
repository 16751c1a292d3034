"""A batch on the compute device, and how it gets there: :class:`DeviceBatch` and :class:`Staging`.

Why this module exists: on CUDA the host-to-device copy of a batch runs ahead of its step, on the
ingest thread (one pinned buffer, one side stream, the finiteness check done by the GPU), so the
trainer's compute stream never waits for a copy; :class:`~.core.TrainerCore` consumes the result.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from argosy.shared.models import Blocks

__all__ = ["DeviceBatch", "Staging", "STAGED"]


@dataclass
class DeviceBatch:
    """A :class:`FeatureBatch`'s tensors on the compute device, made ahead of its step.

    On CUDA they were copied on a side stream (:class:`Staging`): the step waits for ``ready``
    on its own stream (no host sync) and ``owned`` are marked as used there.  On the CPU they
    are views of the received frames.

    Shapes:
        x: float32[N, F] (cast from the wire dtype on the device, row-normalised if configured);
        y: int64[B] seed labels (-1 = unlabelled).
    """

    x: torch.Tensor
    blocks: Blocks
    y: torch.Tensor
    count: int = 0
    """Labelled seeds (labels >= 0), counted on the host; pairs of a link batch."""
    pairs: torch.Tensor | None = None
    """int32[P, 3] ``(src, dst, label)`` of a link batch (local seed indices), else None."""
    positives: int = 0
    """A link TRAINING batch's positives ``p`` (rows ``0..p``; negative ``j`` of positive ``i`` at
    ``p + i * K + j``, :func:`services.sampler.link.sample_link_item`); 0 for other batches."""
    ids: torch.Tensor | None = None
    """int64[N] global vertex ids (a model with learned node embeddings looks its inputs up by them)."""
    ready: "torch.cuda.Event | None" = None
    owned: list = field(default_factory=list)
    """Tensors allocated on the side stream (``record_stream`` on the compute stream before use)."""

    def wait(self) -> None:
        """Make the current stream wait for the copy (CUDA; no host sync), once."""
        if self.ready is not None:
            cur = torch.cuda.current_stream(self.x.device)
            cur.wait_event(self.ready)
            for t in self.owned:
                t.record_stream(cur)
            self.ready, self.owned = None, []


STAGED = ("features", "edge_src", "edge_dst", "degrees", "labels", "dst_ptr", "link_pairs", "edge_weight",
           "weighted_degrees", "edge_type")
"""The arrays of a FeatureBatch a step reads, in the order they are packed for one copy."""


class Staging:
    """Pinned host buffer, side CUDA stream and device finiteness check of one ingest thread.

    :meth:`copy` packs a batch's arrays into one page-locked buffer (a parallel memcpy out of the
    received frames), issues one asynchronous host-to-device copy on the side stream, and, on
    that stream, casts the features and checks that they are finite (the per-byte check of
    :func:`~shared.validate.check_feature_values`, done by the GPU).  The calling thread waits
    for that stream only (a blocking event), so the pinned buffer is free again and the check's
    answer known before the batch is queued, while the compute stream keeps running.
    """

    ALIGN = 256

    def __init__(self, device: torch.device):
        if device.type != "cuda":
            raise ValueError(f"Staging needs a CUDA device (got {device})")
        self.device = device
        self.stream = torch.cuda.Stream(device)
        self.done = torch.cuda.Event(blocking=True)
        self.flag = torch.zeros((), dtype=torch.bool, pin_memory=True)
        self.host = torch.empty(0, dtype=torch.uint8, pin_memory=True)

    def _layout(self, arrays: list[np.ndarray]) -> tuple[list[int], int]:
        offs, n = [], 0
        for a in arrays:
            offs.append(n)
            n += -(-a.nbytes // self.ALIGN) * self.ALIGN
        return offs, n

    def copy(self, arrays: list[np.ndarray]) -> list[torch.Tensor]:
        """Device tensors of ``arrays`` (same dtypes and shapes), copied on :attr:`stream`."""
        offs, total = self._layout(arrays)
        if self.host.numel() < total:                    # grows to the largest batch seen (x1.25 headroom)
            self.host = torch.empty(int(total * 1.25), dtype=torch.uint8, pin_memory=True)
        for a, o in zip(arrays, offs):
            if a.nbytes:
                self.host[o:o + a.nbytes].copy_(torch.from_numpy(np.ascontiguousarray(a).reshape(-1).view(np.uint8)))
        with torch.cuda.stream(self.stream):
            dev = torch.empty(total, dtype=torch.uint8, device=self.device)
            dev.copy_(self.host[:total], non_blocking=True)
        out = []
        for a, o in zip(arrays, offs):
            t = dev[o:o + a.nbytes].view(torch.from_numpy(a[:0].reshape(-1)).dtype) if a.nbytes else \
                torch.empty(0, dtype=torch.from_numpy(a[:0].reshape(-1)).dtype, device=self.device)
            out.append(t.view(a.shape))
        return out

    def finish(self, x: torch.Tensor | None) -> bool:
        """Check ``x`` is finite on the side stream, record :attr:`done`, wait for it; True if finite."""
        with torch.cuda.stream(self.stream):
            if x is not None and x.numel():
                self.flag.copy_(torch.isfinite(x).all(), non_blocking=True)
            else:
                self.flag.fill_(True)
            self.done.record(self.stream)
        self.done.synchronize()
        return bool(self.flag)
