"""Attention's maths spelled out, softmax(Q K^T / sqrt(D_h)) V with its masks (Vaswani et al. 2017;
Turner 2023): what nn/attention.py runs where weights are asked for or where the speed plan chose
"explicit", and what the plan times against SDPA."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["allowed_mask", "attention_explicit", "causal_mask"]


def attention_explicit(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False,
                       mask: Tensor | None = None, dropout: float = 0.0,
                       training: bool = False) -> tuple[Tensor, Tensor]:
    """The maths spelled out: returns (output (B,H,Nq,D_h), weights (B,H,Nq,Nk))."""
    # Batched matmuls want each head's (N, D_h) block contiguous. A layer's q, k and v are views
    # into its packed projection, and on those the two products ran slower than on the copies made
    # here, which cost a fraction of that (measured: docs/results.md, 'Measurements behind the
    # code's choices'). A KV cache's blocks already are (the copy would be the whole prefix), and so
    # is one query's.
    q, k, v = (t if _blocks_contiguous(t) else t.contiguous() for t in (q, k, v))
    scores = (q * (1.0 / math.sqrt(q.shape[-1]))) @ k.transpose(-2, -1)
    allowed = allowed_mask(mask, causal, q.shape[-2], k.shape[-2], q.device)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    # Softmax in at least float32 so that half-precision inputs do not lose the small weights.
    low = scores.dtype in (torch.float16, torch.bfloat16)
    weights = scores.softmax(dim=-1, dtype=torch.float32).to(q.dtype) if low else scores.softmax(dim=-1)
    if allowed is not None:  # a fully masked row would be NaN; it attends to nothing instead
        weights = weights.nan_to_num(0.0)
    dropped = F.dropout(weights, dropout, training) if dropout > 0 else weights
    return dropped @ v, weights


def _blocks_contiguous(t: Tensor) -> bool:
    """Each (N, D_h) block of a (..., N, D_h) tensor is contiguous in memory."""
    return t.shape[-2] <= 1 or (t.stride(-1) == 1 and t.stride(-2) == t.shape[-1])


def causal_mask(nq: int, nk: int, device: torch.device) -> Tensor:
    """Bottom-right aligned: with a cache the nq queries are the last nq of nk positions."""
    return torch.ones(nq, nk, dtype=torch.bool, device=device).tril(diagonal=nk - nq)


def allowed_mask(mask: Tensor | None, causal: bool, nq: int, nk: int, device: torch.device) -> Tensor | None:
    """The keys each query may attend to (True: may), a padding `mask` and causality merged; None where
    every query sees every key. One query after a cache is the last position: causality hides nothing."""
    if not causal or nq == 1:
        return mask
    cm = causal_mask(nq, nk, device)
    return cm if mask is None else mask & cm
