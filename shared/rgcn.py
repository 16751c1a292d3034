"""The relational layers, kept apart from :mod:`shared.models`'s homogeneous ones: the layers that
read each edge's relation (a typed store's ``edge_type``).  :class:`~argosy.shared.models.GNN`
stacks them as ``model="rgcn"`` (R-GCN, Schlichtkrull et al. 2018) and ``model="rgat"``
(relational graph attention, Busbridge et al. 2019).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["RGCNConv", "RGATConv", "RELATIONAL"]

RELATIONAL = ("rgcn", "rgat")
"""Built-in models whose layers take each edge's relation (they need a typed store)."""


class RGCNConv(nn.Module):
    """R-GCN layer (Schlichtkrull et al. 2018) with basis decomposition.

    ``h_v' = W_0 h_v + b + sum_r (1 / |N_r(v)|) sum_{u in N_r(v)} W_r h_u`` with
    ``W_r = sum_b a_rb V_b`` (``num_bases`` B < R; B = 0 or >= R: one full matrix per relation).
    ``N_r(v)`` are v's sampled in-neighbours along relation ``r`` (all of them with fanout -1, the
    paper's layer exactly).  Computed aggregate-first: the per-(destination, relation) means as one
    ``index_add`` over the edges, then one contraction with the relation matrices, so no per-edge
    projected message is materialised.

    Shapes: x (num_src, F_in); src, dst int[E]; et int[E] relation ids -> (num_dst, F_out).
    """

    def __init__(self, in_dim: int, out_dim: int, num_relations: int, num_bases: int = 0, featureless: bool = False):
        super().__init__()
        if num_relations < 1:
            raise ValueError(f"R-GCN needs a typed store (num_relations >= 1, got {num_relations})")
        R = int(num_relations)
        B = self.bases_used(R, num_bases)
        self.num_relations, self.num_bases, self.out_dim, self.featureless = R, B, int(out_dim), bool(featureless)
        self.comp = nn.Parameter(torch.empty(R, B)) if B < R else None
        if self.comp is not None:
            nn.init.xavier_uniform_(self.comp)
        if featureless:     # the inputs ARE the basis rows: x = [V_1[u] .. V_B[u], W_0[u]] (learned per vertex)
            if in_dim != self.featureless_width(out_dim, R, num_bases):
                raise ValueError(f"a featureless R-GCN layer takes {self.featureless_width(out_dim, R, num_bases)} "
                                 f"input columns (got {in_dim})")
            self.basis, self.root = None, None
            self.bias = nn.Parameter(torch.zeros(out_dim))
        else:
            self.basis = nn.Parameter(torch.empty(B, in_dim, out_dim))
            nn.init.xavier_uniform_(self.basis.view(B * in_dim, out_dim), gain=nn.init.calculate_gain("relu"))
            self.root = nn.Linear(in_dim, out_dim)

    @staticmethod
    def bases_used(num_relations: int, num_bases: int) -> int:
        """Basis matrices actually kept: ``num_bases`` when it decomposes, else one per relation."""
        return int(num_bases) if 0 < num_bases < num_relations else int(num_relations)

    @classmethod
    def featureless_width(cls, out_dim: int, num_relations: int, num_bases: int) -> int:
        """Learned input columns per vertex of a featureless first layer: ``(B + 1) * out_dim`` (its
        rows of every basis matrix and of the self-loop matrix, as with one-hot inputs)."""
        return (cls.bases_used(num_relations, num_bases) + 1) * int(out_dim)

    def weights(self) -> Tensor:
        """float[R, F_in, F_out]: every relation's matrix (not for a featureless layer)."""
        if self.comp is None:
            return self.basis
        return torch.einsum("rb,bio->rio", self.comp, self.basis)

    def forward(self, x: Tensor, src: Tensor, dst: Tensor, num_dst: int, degrees: Tensor,
                ptr: Tensor | None = None, ew: Tensor | None = None, wdeg: Tensor | None = None,
                et: Tensor | None = None) -> Tensor:
        if et is None:
            raise ValueError("R-GCN needs each edge's relation: train it on a typed store")
        R = self.num_relations
        if self.featureless:
            return self._featureless(x, src.long(), dst.long(), num_dst, et.long())
        key = dst.long() * R + et.long()
        agg = torch.zeros(num_dst * R, x.shape[1], dtype=x.dtype, device=x.device).index_add_(0, key, x[src.long()])
        cnt = torch.bincount(key, minlength=num_dst * R).to(x.dtype).clamp_(min=1)
        agg = (agg / cnt[:, None]).view(num_dst, R, x.shape[1])
        out = torch.einsum("vri,rio->vo", agg, self.weights().to(x.dtype))
        return self.root(x[:num_dst]) + out

    def _featureless(self, x: Tensor, src: Tensor, dst: Tensor, num_dst: int, et: Tensor) -> Tensor:
        """One-hot inputs without the one-hot matrix: each edge's message is its source's learned row
        of ``W_r = sum_b a_rb V_b`` (a gather of B rows of ``out_dim``), divided by ``|N_r(v)|``."""
        B, O, R = self.num_bases, self.out_dim, self.num_relations
        rows = x[:, :B * O].reshape(x.shape[0], B, O)
        if self.comp is None:                      # a full matrix per relation: its row, gathered
            msg = rows[src, et]
        else:
            msg = torch.einsum("ebo,eb->eo", rows[src], self.comp[et].to(x.dtype))
        key = dst * R + et
        cnt = torch.bincount(key, minlength=num_dst * R).to(x.dtype).clamp_(min=1)
        out = torch.zeros(num_dst, O, dtype=x.dtype, device=x.device).index_add_(0, dst, msg / cnt[key][:, None])
        return out + x[:num_dst, B * O:] + self.bias

    def __repr__(self) -> str:
        return (f"RGCNConv({'featureless' if self.featureless else self.root.in_features}, {self.out_dim}, "
                f"relations={self.num_relations}, bases={self.num_bases})")


class RGATConv(nn.Module):
    """Relational graph attention (Busbridge et al. 2019, "across-relation" WIRGAT; PyG's
    ``RGATConv`` with ``attention_mode="additive-self-attention"``).

    ``h_v' = W_0 h_v + b + sum_{(u, r) in N(v)} a_vur W_r h_u`` with per-relation projections
    ``W_r = sum_b c_rb V_b`` (basis decomposition, as :class:`RGCNConv`) and attention
    ``a_vur = softmax over all of v's sampled in-edges of LeakyReLU(q_r . W_r h_v + k_r . W_r h_u)``,
    per head; heads are concatenated (hidden layers) or averaged (the output layer).  Each relation
    present in a block is projected once, over its own edges (one matmul per relation), so no
    ``(E, F_in, F_out)`` tensor exists.

    Shapes: x (num_src, F_in); src, dst int[E]; et int[E] -> (num_dst, heads * F_out) if concat
    else (num_dst, F_out).
    """

    def __init__(self, in_dim: int, out_dim: int, num_relations: int, num_bases: int = 0, heads: int = 1,
                 concat: bool = True, attn_dropout: float = 0.0):
        super().__init__()
        if num_relations < 1:
            raise ValueError(f"RGAT needs a typed store (num_relations >= 1, got {num_relations})")
        R, H, C = int(num_relations), int(heads), int(out_dim)
        B = RGCNConv.bases_used(R, num_bases)
        self.num_relations, self.num_bases, self.heads, self.out_dim = R, B, H, C
        self.concat, self.attn_dropout = bool(concat), float(attn_dropout)
        self.comp = nn.Parameter(torch.empty(R, B)) if B < R else None
        if self.comp is not None:
            nn.init.xavier_uniform_(self.comp)
        self.basis = nn.Parameter(torch.empty(B, in_dim, H * C))
        nn.init.xavier_uniform_(self.basis.view(B * in_dim, H * C), gain=nn.init.calculate_gain("relu"))
        self.att_dst = nn.Parameter(torch.empty(R, H, C))
        self.att_src = nn.Parameter(torch.empty(R, H, C))
        nn.init.xavier_uniform_(self.att_dst)
        nn.init.xavier_uniform_(self.att_src)
        self.root = nn.Linear(in_dim, H * C)

    weights = RGCNConv.weights
    """float[R, F_in, heads * F_out]: every relation's projection (the same basis decomposition)."""

    def forward(self, x: Tensor, src: Tensor, dst: Tensor, num_dst: int, degrees: Tensor,
                ptr: Tensor | None = None, ew: Tensor | None = None, wdeg: Tensor | None = None,
                et: Tensor | None = None) -> Tensor:
        if et is None:
            raise ValueError("RGAT needs each edge's relation: train it on a typed store")
        H, C = self.heads, self.out_dim
        src, dst, et = src.long(), dst.long(), et.long()
        W = self.weights().to(x.dtype)
        E = src.shape[0]
        order = torch.argsort(et, stable=True)
        counts = torch.bincount(et, minlength=self.num_relations).tolist()
        src_o, dst_o = src[order], dst[order]
        pieces_src, pieces_dst, at = [], [], 0
        for r, c in enumerate(counts):            # one projection per relation present, over its edges
            if c:
                pieces_src.append(x[src_o[at:at + c]] @ W[r])
                pieces_dst.append(x[dst_o[at:at + c]] @ W[r])
                at += c
        if not pieces_src:                        # no edges: the self term alone
            out = self.root(x[:num_dst]).view(num_dst, H, C)
            return out.reshape(num_dst, H * C) if self.concat else out.mean(1)
        msg, proj_dst = torch.cat(pieces_src).view(E, H, C), torch.cat(pieces_dst).view(E, H, C)
        et, dst = et[order], dst_o                # edges in relation order from here on
        s = F.leaky_relu((proj_dst * self.att_dst[et].to(msg.dtype)).sum(-1).float()
                         + (msg * self.att_src[et].to(msg.dtype)).sum(-1).float(), 0.2)          # (E, H)
        idx = dst[:, None].expand(-1, H)
        smax = torch.full((num_dst, H), float("-inf"), dtype=s.dtype, device=s.device)
        smax = smax.scatter_reduce(0, idx, s, reduce="amax", include_self=True)
        e = torch.exp(s - smax[dst])
        den = torch.zeros(num_dst, H, dtype=s.dtype, device=s.device).index_add_(0, dst, e)
        alpha = e / den[dst]
        if self.training and self.attn_dropout > 0:
            alpha = F.dropout(alpha, self.attn_dropout)
        out = torch.zeros(num_dst, H, C, dtype=torch.float32, device=x.device).index_add_(
            0, dst, alpha[..., None] * msg.float())
        out = out + self.root(x[:num_dst]).view(num_dst, H, C).float()
        return out.reshape(num_dst, H * C) if self.concat else out.mean(1)

    def __repr__(self) -> str:
        return (f"RGATConv({self.root.in_features}, {self.out_dim}, relations={self.num_relations}, "
                f"bases={self.num_bases}, heads={self.heads}, concat={self.concat})")
