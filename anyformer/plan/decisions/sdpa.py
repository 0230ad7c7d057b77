"""SDPA's backend on a GPU: torch's own pick, or one backend named (flash, memory-efficient, cuDNN, math).

torch picks the first backend that accepts the inputs, in a fixed order, not the fastest one for
them: on Hopper cards cuDNN's attention kernel can beat the flash kernel torch ships (FlashAttention-2,
written for Ampere). So a CUDA attention layer's backend is measured like any other choice: each
backend under `torch.nn.attention.sdpa_kernel`, one that refuses the inputs is dropped with its
reason, the outputs (and gradients, in training) checked against torch's pick. On the CPU the
attention decision (`attention_kernel`) chooses among SDPA, plain matmuls and the native kernel;
this one asks nothing there, though its candidates run anywhere (the CPU has flash and math).
"""
from __future__ import annotations

import contextlib
from typing import Callable

import torch
import torch.nn.functional as F

from .. import planner as _planner
from ..choices import Decision, register
from .common import _CALL_FLOPS, _MAX_BATCH, _bucket, _dtype, _length_bucket, _positive, _randn, _with_grads

SDPA = register(Decision("sdpa", ("default", "flash", "efficient", "cudnn", "math"),
                         "CUDA attention: SDPA's own pick of backend, or flash, memory-efficient, cuDNN or math"))


def sdpa_context(backend: str) -> contextlib.AbstractContextManager:
    """The context that makes F.scaled_dot_product_attention use `backend` ("default": torch's pick).
    torch.compile traces it (fullgraph), so a compiled layer follows it too."""
    if backend == "default":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    names = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
             "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
    return sdpa_kernel([names[backend]])


def sdpa_backend(batch: int, heads: int, q_len: int, k_len: int, head_dim: int, dtype: torch.dtype,
                 causal: bool, training: bool, *, masked: bool = False, device: torch.device | str = "cuda") -> str:
    """The SDPA backend for attention over (B, H, q_len, D_h) queries and k_len keys on `device`:
    "default" (torch's pick) unless another measured faster by the margin. `masked`: a boolean
    mask is passed (CUDA's flash kernel refuses one). Not for attention dropout: each backend draws
    its own masks, so their outputs cannot be checked against each other (a layer with it keeps the
    default). Timed on fewer batch items where a call would be long (recorded as `measured_with`)."""
    device = torch.device(device)
    # Keyed (and remembered) by length buckets, as the attention decision is; the arguments are
    # checked only when the memo misses (this runs on every CUDA attention call).
    lengths = ((_length_bucket(q_len, q_len), _length_bucket(k_len, q_len))
               if type(q_len) is int and type(k_len) is int and q_len > 0 and k_len > 0 else None)
    memo = ("sdpa", device.type, _bucket(batch, _MAX_BATCH), heads, lengths, head_dim, dtype, causal, training, masked)
    p = _planner._PLANNER
    if lengths is not None and (choice := p.lookup(memo)) is not None:
        return choice
    _positive("sdpa_backend", batch=batch, heads=heads, q_len=q_len, k_len=k_len, head_dim=head_dim)
    name = _dtype("sdpa_backend", dtype)
    b, (q, k) = _bucket(batch, _MAX_BATCH), lengths
    per_item = 4.0 * heads * q * k * head_dim * (3.5 if training else 1.0)
    rep = b
    while rep > 1 and rep * per_item > _CALL_FLOPS * (50 if device.type == "cuda" else 1):
        rep //= 2
    fields = {"device": device.type, "batch": b, "heads": heads, "q": q, "k": k, "head_dim": head_dim,
              "dtype": name, "causal": bool(causal), "training": bool(training), "masked": bool(masked)}
    low = dtype in (torch.float16, torch.bfloat16)
    return p.decide("sdpa", fields, lambda: _sdpa_runs(rep, heads, q, k, head_dim, dtype, causal, training,
                                                       masked, device),
                    memo_key=memo, tolerance=5e-2 if low else 1e-3, measured_with={"batch": rep} if rep != b else None)


def _sdpa_runs(b: int, h: int, nq: int, nk: int, d: int, dtype: torch.dtype, causal: bool, training: bool,
               masked: bool, device: torch.device) -> dict[str, Callable]:
    g = torch.Generator().manual_seed(0)
    q, k, v = (_randn(g, b, h, n, d, dtype=dtype, device=device) for n in (nq, nk, nk))
    dy = _randn(g, b, h, nq, d, dtype=dtype, device=device)
    mask = None
    if masked:  # pad the last eighth of the keys (every query keeps key 0), causal on top where asked
        mask = torch.ones(b, 1, nq, nk, dtype=torch.bool, device=device)
        mask[..., nk - max(1, nk // 8):] = False
        if causal:
            mask &= torch.ones(nq, nk, dtype=torch.bool, device=device).tril(nk - nq)
    causal_flag = causal and not masked

    def call(backend: str) -> Callable[[], torch.Tensor]:
        def run() -> torch.Tensor:
            with sdpa_context(backend):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal_flag)
        return run

    def synced(run: Callable) -> Callable:
        def timed():
            out = run()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            return out
        return timed

    runs = {backend: call(backend) for backend in SDPA.choices}
    if training:
        leaves = tuple(t.requires_grad_() for t in (q, k, v))
        runs = {n: _with_grads(f, leaves, dy) for n, f in runs.items()}
    return {n: synced(f) for n, f in runs.items()}
