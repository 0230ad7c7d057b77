"""Attention maths for pictures: heads fused, attention rollout, class-token maps, upsampling.

Attention rollout (Abnar & Zuidema, 2020): fuse each layer's heads into one (N, N) matrix A_l,
add the identity for the residual stream and renormalise the rows, then multiply through the
layers, first layer first: R = Â_L ... Â_2 Â_1. Row i of R says how much of output token i is
drawn from each input token; every row sums to one.
"""
from __future__ import annotations

from typing import Iterable, Literal, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

HeadFusion = Literal["mean", "max", "min"]
HEAD_FUSIONS = ("mean", "max", "min")


def fuse_heads(weights: Tensor, head_fusion: HeadFusion = "mean") -> Tensor:
    """(B, H, Nq, Nk) attention weights -> (B, Nq, Nk), fused over heads, in float32."""
    if head_fusion not in HEAD_FUSIONS:
        raise ValueError(f"unknown head_fusion {head_fusion!r}; expected one of {HEAD_FUSIONS}")
    if weights.dim() != 4:
        raise ValueError(f"attention weights must have shape (B, heads, N, N), got {tuple(weights.shape)}")
    w = weights.float()
    return {"mean": lambda: w.mean(dim=1), "max": lambda: w.amax(dim=1), "min": lambda: w.amin(dim=1)}[head_fusion]()


def rollout_step(acc: Tensor | None, weights: Tensor, residual: bool, head_fusion: HeadFusion) -> Tensor:
    """One layer of rollout: acc <- normalise(fuse(W) + I) @ acc."""
    a = fuse_heads(weights, head_fusion)
    n = a.shape[-1]
    if a.shape[-2] != n:
        raise ValueError(f"rollout needs square self-attention weights, got (..., {a.shape[-2]}, {n})")
    if residual:
        a = a + torch.eye(n, dtype=a.dtype, device=a.device)
    # A row that attends to nothing (fully masked, no residual) stays zero instead of NaN.
    a = a / a.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(a.dtype).tiny)
    if acc is None:
        return a
    if acc.shape != a.shape:
        raise ValueError(f"layers' attention shapes differ: {tuple(acc.shape)} then {tuple(a.shape)}")
    return a @ acc


def attention_rollout(attn: Iterable[Tensor], residual: bool = True, head_fusion: HeadFusion = "mean") -> Tensor:
    """Attention rollout over layers given first to last: (B, H, N, N) each -> (B, N, N) float32.

    `attn` may be a list (as `vit(x, return_attention=True)` returns) or any iterable, e.g. a
    generator that yields one layer at a time: each layer is folded into the product as it comes,
    so with a generator only one layer's weights need exist at once. Rows sum to one (unless a
    row attends to nothing and `residual=False`).
    """
    acc = None
    for w in attn:
        acc = rollout_step(acc, w, residual, head_fusion)
    if acc is None:
        raise ValueError("attention_rollout needs the weights of at least one layer")
    return acc


def query_row(weights: Tensor, num_prefix: int, grid: tuple[int, int], query: int | None) -> Tensor:
    """(..., N, N) -> (..., gh, gw): row `query`'s weights on the patch tokens; None: the mean patch row."""
    gh, gw = int(grid[0]), int(grid[1])
    n = weights.shape[-1]
    if n != num_prefix + gh * gw:
        raise ValueError(f"attention over {n} tokens does not fit {num_prefix} prefix tokens + a {gh}x{gw} "
                         f"patch grid ({num_prefix + gh * gw} tokens)")
    if query is None:
        row = weights[..., num_prefix:, num_prefix:].mean(dim=-2)
    else:
        if not 0 <= query < n:
            raise ValueError(f"query token {query} is outside the {n} tokens")
        row = weights[..., query, num_prefix:]
    return row.reshape(*row.shape[:-1], gh, gw)


def cls_attention_maps(attn: Sequence[Tensor] | Tensor, num_prefix: int, grid: tuple[int, int], *,
                       query: int | None = 0) -> Tensor:
    """The class token's attention to the patch tokens: (B, H, N, N) per layer -> (L, B, H, gh, gw).

    Tokens are [class, registers..., patches in row-major grid order] as ViT builds them;
    `num_prefix` (`vit.prefix.num_prefix`) counts the class and register tokens. `query` is the
    row read (0, the class token); `None` averages the patch tokens' rows (for models pooled by
    the mean, with no class token). A single (B, H, N, N) tensor counts as one layer.
    """
    layers = [attn] if isinstance(attn, Tensor) else list(attn)
    for i, w in enumerate(layers):
        if w.dim() != 4:
            raise ValueError(f"layer {i}: attention weights must be (B, heads, N, N), got {tuple(w.shape)}")
    return torch.stack([query_row(w.float(), num_prefix, grid, query) for w in layers])


def rollout_map(rollout: Tensor, num_prefix: int, grid: tuple[int, int], *, query: int | None = 0) -> Tensor:
    """(B, N, N) rollout -> (B, gh, gw): how much the class token's output draws from each patch."""
    if rollout.dim() != 3:
        raise ValueError(f"rollout must have shape (B, N, N), got {tuple(rollout.shape)}")
    return query_row(rollout, num_prefix, grid, query)


def upsample_map(maps: Tensor | np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """(B, gh, gw) -> (B, H, W) bilinear, each map rescaled to [0, 1] (for overlays)."""
    m = torch.as_tensor(np.asarray(maps) if isinstance(maps, np.ndarray) else maps).float()
    if m.dim() != 3:
        raise ValueError(f"maps must have shape (B, gh, gw), got {tuple(m.shape)}")
    up = F.interpolate(m[:, None].cpu(), size=tuple(int(s) for s in size), mode="bilinear",
                       align_corners=False)[:, 0]
    lo = up.amin(dim=(-2, -1), keepdim=True)
    hi = up.amax(dim=(-2, -1), keepdim=True)
    return ((up - lo) / (hi - lo).clamp_min(1e-12)).numpy()
