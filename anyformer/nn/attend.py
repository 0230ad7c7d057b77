"""Attention functions: softmax(Q K^T / sqrt(D_h)) V over heads, each a different way to compute it.

A `MultiHeadAttention` layer calls one of these, `attend(q, k, v, mask, causal, dropout)` on
(B, H, N, D_h) queries and (B, H, M, D_h) keys and values, `mask` a bool mask broadcast to
(B, H, N, M) (True: may attend), `causal` aligned bottom-right (the last N of M positions query), and
gets (B, H, N, D_h) back. Which one a layer calls is its `attend` attribute: `sdpa` by default,
`explicit` with `impl="explicit"`; the speed plan (`anyformer.plan.prepare`) may set another before a
model runs, as timm's `fused_attn` flag and nanochat's kernel switch choose once, outside the maths.
"""
from __future__ import annotations

from typing import Callable, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from .functional import allowed_mask, attention_explicit

__all__ = ["Attend", "ATTENTION_FUNCTIONS", "by_sums", "explicit", "sdpa"]


class Attend(Protocol):
    def __call__(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool,
                 dropout: float) -> Tensor: ...


def sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, dropout: float) -> Tensor:
    """`F.scaled_dot_product_attention`, its causal mask aligned bottom-right (a KV cache's last queries)."""
    nq, nk = q.shape[2], k.shape[2]
    if causal and mask is None and nq == nk:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed_mask(mask, causal, nq, nk, q.device),
                                          dropout_p=dropout)


def explicit(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, dropout: float) -> Tensor:
    """The attention matrix written out (`functional.attention_explicit`), dropout on it where asked."""
    return attention_explicit(q, k, v, causal=causal, mask=mask, dropout=dropout, training=dropout > 0)[0]


def by_sums(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, dropout: float) -> Tensor:
    """The same as products and sums over D_h and M, the softmax and its weighted sum in float32 at
    least: for one query over a static cache, which inductor fuses into two passes over the cache with
    the rest of a compiled generation step, where SDPA stays an opaque call. N queries cost an
    (N, M, D_h) product per head: this is for N = 1. No dropout (a generation step has none)."""
    mask = allowed_mask(mask, causal, q.shape[2], k.shape[2], q.device)
    scores = (k[:, :, None] * q[:, :, :, None]).sum(-1) * q.shape[-1] ** -0.5  # (B, H, N, M)
    at_least_fp32 = torch.promote_types(scores.dtype, torch.float32)  # half precision loses small weights
    if mask is not None:
        scores = scores.to(at_least_fp32).masked_fill(~mask, float("-inf"))
    weights = scores.to(at_least_fp32).softmax(-1)
    return (weights[..., None] * v[:, :, None]).sum(-2).to(q.dtype)


ATTENTION_FUNCTIONS: dict[str, Callable[..., Tensor]] = {"fused": sdpa, "explicit": explicit, "sums": by_sums}
