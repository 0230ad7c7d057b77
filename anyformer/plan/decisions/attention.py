"""Attention's kernel: SDPA, softmax(QK^T)V in plain matmuls, or anyformer's own (plan/native.py)."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from .. import native
from .. import planner as _planner
from ..choices import Decision, register
from .common import (_CALL_FLOPS, _FINE_LEN, _MAX_BATCH, _MAX_LEN, _bucket, _dtype, _length_bucket,
                     _may_build, _positive, _randn, _with_grads)

ATTENTION = register(Decision("attention", ("fused", "explicit", "native"),
                              "CPU attention: SDPA, softmax(QK^T)V in plain matmuls, or (fp32, a layer's packed "
                              "projection) anyformer's own kernel, compiled here (plan/native.py)"))

# Where q, k and v come from. "packed": views into a self-attention layer's packed projection,
# handed over untouched, all positions querying, no mask, no dropout on the attention matrix, no
# weights asked for (the case the native kernel takes whole); "views": views into a projection in
# any other case (rotary positions, fewer queries than keys, a mask, attention dropout,
# cross-attention, weights asked for, a tracer); "cache": keys and values from a KV cache.
ATTENTION_LAYOUTS = ("packed", "views", "cache")


def attention_kernel(batch: int, heads: int, q_len: int, k_len: int, head_dim: int, dtype: torch.dtype,
                     causal: bool, training: bool, *, masked: bool = False, layout: str = "packed") -> str:
    """"fused" (F.scaled_dot_product_attention), "explicit" (softmax(Q K^T / sqrt(D_h)) V in plain
    matmuls) or "native" (`native.attention_packed`: layout "packed", q_len == k_len <= _MAX_LEN, no
    mask, fp32 or bf16 (computed in fp32), D_h in native.HEAD_DIMS, where the kernel builds here)
    for CPU attention over (B, H, q_len, D_h) queries and k_len keys. `causal` is bottom-right
    aligned (a KV cache's last queries); `masked`: a key-padding mask is passed too. `layout`: where
    q, k and v come from (ATTENTION_LAYOUTS), which changes the answer (`_attention_runs` times them
    so). Forcing attention=native forces it where it applies and leaves SDPA elsewhere. Lengths are
    keyed by `_length_bucket` and, up to `_FINE_LEN` tokens, timed as asked."""
    lengths = ((_length_bucket(q_len, q_len), _length_bucket(k_len, q_len))
               if type(q_len) is int and type(k_len) is int and q_len > 0 and k_len > 0 else None)
    # Whether the native kernel could take this case, from the exact sizes (buckets mix cases it
    # takes with cases it does not: 50 queries over 52 keys share a key with 50 over 50). It holds
    # two (N, N) matrices per thread in its backward: not past _MAX_LEN tokens.
    whole = (layout == "packed" and q_len == k_len and not masked and native.takes_packed(dtype, head_dim)
             and type(k_len) is int and k_len <= _MAX_LEN)
    memo = ("attention", _bucket(batch, _MAX_BATCH), heads, lengths, head_dim, dtype, causal, training, masked,
            layout, whole)
    p = _planner._PLANNER
    if lengths is not None and (choice := p.lookup(memo)) is not None:
        return choice
    _positive("attention_kernel", batch=batch, heads=heads, q_len=q_len, k_len=k_len, head_dim=head_dim)
    name = _dtype("attention_kernel", dtype)
    if layout not in ATTENTION_LAYOUTS:
        raise ValueError(f"attention_kernel: layout must be one of {ATTENTION_LAYOUTS}, got {layout!r}")
    b, (q, k) = _bucket(batch, _MAX_BATCH), lengths  # validated above: ints >= 1
    # Timed at the lengths asked where they are keyed finely (the bucket only rounds them for the key).
    tq, tk = (q_len, k_len) if q_len > 1 and k_len <= _FINE_LEN else (q, k)
    per_head = 4.0 * tq * tk * head_dim * (3.5 if training else 1.0)
    rep_b, rep_h = b, heads  # fewer batch items first, then fewer heads: their cost is per item
    while rep_b > 1 and rep_b * rep_h * per_head > _CALL_FLOPS:
        rep_b //= 2
    while rep_h > 1 and rep_b * rep_h * per_head > _CALL_FLOPS:
        rep_h = (rep_h + 1) // 2
    fields = {"batch": b, "heads": heads, "q": q, "k": k, "head_dim": head_dim, "dtype": name,
              "causal": bool(causal), "training": bool(training), "masked": bool(masked), "layout": layout,
              "whole": whole}
    low = dtype in (torch.float16, torch.bfloat16)
    timed = {"batch": rep_b, "heads": rep_h, "q": tq, "k": tk}
    reduced = {n: v for n, v in timed.items() if v != fields[n]} or None
    # The native kernel is offered only for the case it takes whole, and only where it builds (the
    # build, about a second, happens once per machine; a record then needs only the file loaded),
    # and not built at all where another choice is forced.
    with_native = whole and _may_build(p, "attention") and native.library() is not None
    avail = ATTENTION.choices if with_native else ("fused", "explicit")
    return p.decide("attention", fields,
                    lambda: _attention_runs(rep_b, rep_h, tq, tk, head_dim, dtype, causal, training, masked, layout,
                                            with_native),
                    memo_key=memo, available=avail, partial=("native",), tolerance=5e-2 if low else 1e-4,
                    measured_with=reduced)


def _attention_runs(b: int, h: int, nq: int, nk: int, d: int, dtype: torch.dtype, causal: bool,
                    training: bool, masked: bool, layout: str, with_native: bool = False) -> dict[str, Callable]:
    g = torch.Generator().manual_seed(0)
    # In the layout a layer hands over (nn/attention.py's `_heads`): q, k and v as (B, H, N, D_h)
    # views into one packed (B, N, 3, H, D_h) projection, its gradients flowing back into that
    # (the first nq positions query where fewer query than attend); or, after a KV cache, the query
    # such a view and the keys and values the first positions of the cache's buffers. The layout
    # changes the answer: plain matmuls over packed views ran slower than over contiguous operands
    # (measured: docs/results.md, 'Measurements behind the code's choices').
    # Each candidate ends where the layer's attention does, with the heads concatenated
    # (B, nq, H*D_h): a copy after SDPA or the explicit path, none after native.
    if layout in ("packed", "views"):
        packed = _randn(g, b, max(nq, nk), 3, h, d, dtype=dtype)
        leaves: tuple[torch.Tensor, ...] = (packed,)

        def qkv() -> list[torch.Tensor]:
            q, k, v = (t.transpose(1, 2) for t in packed.unbind(2))
            return [q[:, :, :nq], k[:, :, :nk], v[:, :, :nk]]
    else:
        q0 = _randn(g, b, nq, h, d, dtype=dtype)
        k0, v0 = (_randn(g, b, h, 2 * nk, d, dtype=dtype) for _ in range(2))  # a cache with room to grow
        leaves = (q0, k0, v0)

        def qkv() -> list[torch.Tensor]:
            return [q0.transpose(1, 2), k0.narrow(2, 0, nk), v0.narrow(2, 0, nk)]
    dy = _randn(g, b, nq, h * d, dtype=dtype)
    # The maths is nn's; the plan only times it (imported here, when measuring: nn sits above the plan).
    from ...nn.functional import allowed_mask, attention_explicit
    pad = None
    if masked and nk > 1:  # pad the last eighth of the keys; every query keeps key 0
        pad = torch.ones(b, 1, 1, nk, dtype=torch.bool)
        pad[..., nk - max(1, nk // 8):] = False
    allowed = allowed_mask(pad, causal, nq, nk, torch.device("cpu"))  # as nn's attention merges them

    def heads_last(o: torch.Tensor) -> torch.Tensor:
        return o.transpose(1, 2).reshape(b, nq, h * d)

    if causal and not masked and nq == nk:
        def fused():
            return heads_last(F.scaled_dot_product_attention(*qkv(), is_causal=True))
    else:
        def fused():
            return heads_last(F.scaled_dot_product_attention(*qkv(), attn_mask=allowed))

    def explicit():
        return heads_last(attention_explicit(*qkv(), mask=allowed)[0])

    runs = {"fused": fused, "explicit": explicit}
    if with_native:
        runs["native"] = lambda: native.attention_packed(packed, causal)
    if not training:
        return runs
    for t in leaves:
        t.requires_grad_()
    return {n: _with_grads(f, leaves, dy) for n, f in runs.items()}
