"""The speed choices the floors ask for, each decided by measuring on this machine.

Each helper takes the shapes it is asked about and returns a choice name; the candidates are built
inside, from random inputs drawn from a private generator (planning never moves the global RNG,
so a run is reproducible whether its plan came from the cache or was measured). Shapes are keyed
by buckets (powers of two for rows, batch and a KV cache's length; finer steps for the sequence
lengths of a forward over many queries, see `_length_bucket`) so that a growing KV cache or a
short last batch does not trigger a measurement per size; each timed call is kept to about a GFLOP
by timing fewer rows (or batch items) than asked for, recorded as `measured_with`. `linear_kernel` and
`attention_kernel` are CPU questions (the floors ask them only on the CPU).
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

import torch
import torch.nn.functional as F

from . import choices, native
from . import planner as _planner
from .choices import Decision, register
from .kernels import attention_explicit, causal_mask, onednn_linear, onednn_linear_op

LINEAR = register(Decision("linear", ("stock", "onednn", "mixed"),
                           "fp32/bf16 CPU linear layers: F.linear (BLAS), oneDNN's _linear_pointwise, or (training) "
                           "oneDNN for the forward and input gradient with the weight gradient on BLAS"))
ATTENTION = register(Decision("attention", ("fused", "explicit", "native"),
                              "CPU attention: SDPA, softmax(QK^T)V in plain matmuls, or (fp32, a layer's packed "
                              "projection) anyformer's own kernel, compiled here (plan/native.py)"))
GELU = register(Decision("gelu", ("stock", "native"),
                         "fp32 CPU GELU: F.gelu or anyformer's own kernel, compiled here (plan/native.py)"))
AMP = register(Decision("amp", ("none", "bf16"), "amp=auto on the CPU: fp32 or bf16 autocast", margin=0.2))
ADAMW = register(Decision("adamw", ("foreach", "fused"), "AdamW step: multi-tensor foreach or the fused kernel"))

_CALL_FLOPS = 1e9  # one timed call: ~5-20 ms at the 50-200 GFLOP/s of a small CPU
# A training linear's weight gradient, dy^T x, sums over its rows: timed on fewer rows, that product
# is another shape, and the answer changes. On a 2-core AMD EPYC (2026-11-24), oneDNN's forward and
# backward over 384 -> 1152 took 1.24x F.linear's time at 256 rows and 0.82x at 4096 (the whole char
# GPT step on oneDNN: 0.93x). So a training call may take this much before its rows are cut (~100 ms).
_TRAIN_CALL_FLOPS = 16e9
_MAX_ROWS, _MAX_LEN, _MAX_BATCH = 4096, 2048, 64
# Inference on at most this many rows reads each weight from memory (the weights of a model do not
# stay in cache between its layers): timed over copies of the weight that overflow the caches.
_COLD_MAX_ROWS, _COLD_BYTES, _COLD_MAX_COPIES = 16, 256 << 20, 64
_ADAMW_MAX_TENSORS, _ADAMW_MAX_NUMEL = 64, 1 << 20  # a 1M-element step: ~1-5 ms
_GELU_MAX_NUMEL = 1 << 22  # elementwise: its time per element holds once the tensor outgrows the caches


def _bucket(n: int, cap: int) -> int | None:
    """The next power of two >= n, at most cap. Also the in-process memo's key, asked on every call:
    a decode step's growing KV cache (one key more each token) then hits the memo instead of
    re-entering the planner. None for a non-int: the memo misses and the validation that follows
    names the problem."""
    try:
        return min(cap, 1 << max(0, int.bit_length(n - 1)))
    except TypeError:
        return None


# Sequence lengths of a forward over many queries (a ViT's 50 tokens, a prompt) are keyed finely and
# timed at the length asked: rounding 50 up to 64 changed the answer (on a 2-core AMD EPYC, SDPA's
# 32-query blocks fit 64 tokens and leave a ragged block at 50). The key is the next multiple of 8
# up to 128 tokens, of 32 up to _FINE_LEN (at most 28 keys where a prompt's length varies); longer
# ones, and a decode step's growing cache (one query), go by powers of two.
_FINE_LEN = 512


def _length_bucket(n: int, queries: int) -> int:
    """The key for a sequence length `n` attended by `queries` queries."""
    if queries > 1 and n <= _FINE_LEN:
        step = 8 if n <= 128 else 32
        return (n + step - 1) // step * step
    return _bucket(n, _MAX_LEN)


def _floor_pow2(x: float) -> int:
    return 1 << max(0, int(x).bit_length() - 1) if x >= 1 else 1


def _positive(where: str, **sizes: Any) -> None:
    for name, v in sizes.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{where}: {name} must be a positive int, got {v!r}")


def _dtype(where: str, dtype: Any) -> str:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"{where}: dtype must be a floating torch.dtype (e.g. torch.float32), got {dtype!r}")
    return str(dtype).removeprefix("torch.")


def _randn(g: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32, scale: float = 1.0,
           device: torch.device | str = "cpu") -> torch.Tensor:
    return (torch.randn(*shape, generator=g) * scale).to(device=device, dtype=dtype)


def _with_grads(fn: Callable[[], torch.Tensor], leaves: tuple[torch.Tensor, ...], dy: torch.Tensor) -> Callable:
    """A call that runs fn forward and backward (as a training step does) and returns the output
    and the gradients of `leaves`."""
    def run():
        with torch.enable_grad():
            y = fn()
            return (y.detach(), *torch.autograd.grad(y, leaves, dy))
    return run


# --- linear ------------------------------------------------------------------------------------
def linear_kernel(batch_rows: int, in_features: int, out_features: int, dtype: torch.dtype, training: bool) -> str:
    """"stock" (F.linear) or "onednn" (`kernels.onednn_linear`) for a CPU linear layer applied to
    batch_rows rows (every dim but the last, multiplied); `training`: forward and backward."""
    memo = ("linear", _bucket(batch_rows, _MAX_ROWS), in_features, out_features, dtype, training)
    p = _planner._PLANNER
    if (choice := p.lookup(memo)) is not None:
        return choice
    _positive("linear_kernel", batch_rows=batch_rows, in_features=in_features, out_features=out_features)
    name = _dtype("linear_kernel", dtype)
    rows = _bucket(batch_rows, _MAX_ROWS)
    per_row = 2 * in_features * out_features * (3 if training else 1)
    rep = min(rows, max(16, _floor_pow2((_TRAIN_CALL_FLOPS if training else _CALL_FLOPS) / per_row)))
    fields = {"rows": rows, "in": in_features, "out": out_features, "dtype": name, "training": bool(training)}
    # A few rows (a decode step) stream the weight from memory once per call: timed on a weight
    # found in cache, a product's speed says nothing about that, so such shapes are timed on
    # enough copies of the weight, taken in turn, to overflow the caches.
    cold = not training and rows <= _COLD_MAX_ROWS
    if cold:
        fields["weights"] = "cold"
    native = onednn_linear_op() is not None and dtype in (torch.float32, torch.bfloat16)
    # "mixed" differs from "onednn" in the backward alone: a choice for training only, which for a
    # pass without gradients (forced as ANYFORMER_PLAN=linear=mixed) means oneDNN.
    avail = ("stock",) if not native else LINEAR.choices if training else ("stock", "onednn")
    if native and not training and choices.forced_choice(p.forced()[0], LINEAR.name) == "mixed":
        return p._remember(memo, "onednn")
    return p.decide("linear", fields, lambda: _linear_runs(rep, in_features, out_features, dtype, training, cold),
                    memo_key=memo, available=avail,
                    tolerance=1e-4 if dtype == torch.float32 else 2e-2,
                    measured_with={"rows": rep} if rep != rows else None)


def _linear_runs(rows: int, k: int, n: int, dtype: torch.dtype, training: bool,
                 cold: bool = False) -> dict[str, Callable]:
    g = torch.Generator().manual_seed(0)
    x, w = _randn(g, rows, k, dtype=dtype), _randn(g, n, k, dtype=dtype, scale=k ** -0.5)
    b, dy = _randn(g, n, dtype=dtype), _randn(g, rows, n, dtype=dtype)
    if cold:  # copies of w (the first is w itself, so outputs still compare) read in turn
        copies = max(1, min(_COLD_MAX_COPIES, -(-_COLD_BYTES // (w.numel() * w.element_size()))))
        ws = [w] + [w.clone() for _ in range(copies - 1)]
        turn = {"stock": 0, "onednn": 0}

        def cycling(name: str, fn: Callable) -> Callable:
            def run():
                turn[name] = (turn[name] + 1) % len(ws)
                return fn(x, ws[turn[name]], b)
            return run
        return {"stock": cycling("stock", F.linear), "onednn": cycling("onednn", onednn_linear)}
    if not training:
        return {"stock": lambda: F.linear(x, w, b), "onednn": lambda: onednn_linear(x, w, b)}
    leaves = (x.requires_grad_(), w.requires_grad_(), b.requires_grad_())
    return {"stock": _with_grads(lambda: F.linear(x, w, b), leaves, dy),
            "onednn": _with_grads(lambda: onednn_linear(x, w, b), leaves, dy),
            "mixed": _with_grads(lambda: onednn_linear(x, w, b, blas_dw=True), leaves, dy)}


# --- attention ---------------------------------------------------------------------------------
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
    mask, fp32, D_h in native.HEAD_DIMS, where the kernel builds here) for CPU attention over (B, H, q_len, D_h)
    queries and k_len keys. `causal` is bottom-right aligned (a KV cache's last queries); `masked`: a
    key-padding mask is passed too. `layout`: where q, k and v come from (ATTENTION_LAYOUTS), which
    changes the answer (`_attention_runs` times them so). Forcing attention=native forces it where it
    applies and leaves SDPA elsewhere. Lengths are keyed by `_length_bucket` and, up to `_FINE_LEN`
    tokens, timed as asked."""
    lengths = ((_length_bucket(q_len, q_len), _length_bucket(k_len, q_len))
               if type(q_len) is int and type(k_len) is int and q_len > 0 and k_len > 0 else None)
    # Whether the native kernel could take this case, from the exact sizes (buckets mix cases it
    # takes with cases it does not: 50 queries over 52 keys share a key with 50 over 50). It holds
    # two (N, N) matrices per thread in its backward: not past _MAX_LEN tokens.
    whole = (layout == "packed" and q_len == k_len and not masked and native.supports(dtype, head_dim)
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
    # changes the answer: on a 2-core AMD EPYC, plain matmuls over packed views ran at half the
    # speed of contiguous operands. Each candidate ends where the layer's attention does, with the
    # heads concatenated (B, nq, H*D_h): a copy after SDPA or the explicit path, none after native.
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
    # As nn/attention.py runs it: one query after a cache sees every key, so it gets no mask.
    allowed = causal_mask(nq, nk, torch.device("cpu")) if causal and nq > 1 else None
    if masked and nk > 1:  # pad the last eighth of the keys; every query keeps key 0
        pad = torch.ones(b, 1, 1, nk, dtype=torch.bool)
        pad[..., nk - max(1, nk // 8):] = False
        allowed = pad if allowed is None else allowed & pad

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


def _may_build(p: _planner.Planner, decision: str) -> bool:
    """Whether the native kernels may be built for `decision`: not where another choice is forced
    (`ANYFORMER_PLAN=stock` compiles nothing)."""
    forced = choices.forced_choice(p.forced()[0], decision)
    return forced is None or forced == "native"


# --- GELU --------------------------------------------------------------------------------------
def gelu_kernel(numel: int, approximate: str, training: bool) -> str:
    """"stock" (F.gelu) or "native" (`native.gelu`) for an fp32 CPU GELU over `numel` elements
    (keyed by the next power of two, timed on at most _GELU_MAX_NUMEL); `training`: forward and
    backward. "native" is offered only where the kernel builds here."""
    memo = ("gelu", _bucket(numel, 1 << 40), approximate, training)
    p = _planner._PLANNER
    if (choice := p.lookup(memo)) is not None:
        return choice
    _positive("gelu_kernel", numel=numel)
    if approximate not in native.GELU_APPROXIMATIONS:
        raise ValueError(f"gelu_kernel: approximate must be one of {native.GELU_APPROXIMATIONS}, got {approximate!r}")
    n = _bucket(numel, 1 << 40)
    rep = min(n, _GELU_MAX_NUMEL)
    fields = {"numel": n, "approximate": approximate, "training": bool(training)}
    avail = GELU.choices if _may_build(p, "gelu") and native.library() is not None else ("stock",)
    return p.decide("gelu", fields, lambda: _gelu_runs(rep, approximate, training), memo_key=memo, available=avail,
                    partial=("native",), tolerance=1e-4, measured_with={"numel": rep} if rep != n else None)


def _gelu_runs(n: int, approximate: str, training: bool) -> dict[str, Callable]:
    g = torch.Generator().manual_seed(0)
    x, dy = _randn(g, n) * 3, _randn(g, n)
    runs = {"stock": lambda: F.gelu(x, approximate=approximate), "native": lambda: native.gelu(x, approximate)}
    if not training:
        return runs
    x.requires_grad_()
    return {name: _with_grads(f, (x,), dy) for name, f in runs.items()}


# --- amp ---------------------------------------------------------------------------------------
def amp_dtype(device: torch.device | str = "cpu", *, width: int = 256, hidden: int | None = None,
              rows: int = 4096, training: bool = True) -> str:
    """amp=auto: "bf16" (autocast) or "none" (fp32). On the CPU, a model-sized MLP step
    (rows x width -> hidden -> width, GELU, forward and backward) is timed both ways, fp32 on the
    linear kernel the plan picks for it; bf16 must win by the amp decision's margin (20%). On CUDA:
    bf16 where the GPU supports it (tensor cores compute it natively). Elsewhere: "none"."""
    device = torch.device(device)
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "none"
    if device.type != "cpu":
        return "none"
    hidden = hidden or 4 * width
    memo = ("amp", width, hidden, rows, training)
    p = _planner._PLANNER
    if (choice := p.lookup(memo)) is not None:
        return choice
    _positive("amp_dtype", width=width, hidden=hidden, rows=rows)
    bucket = _bucket(rows, _MAX_ROWS)
    rep = min(bucket, max(16, _floor_pow2(_CALL_FLOPS / (4 * width * hidden * (3 if training else 1)))))
    fields = {"device": "cpu", "width": width, "hidden": hidden, "rows": bucket, "training": bool(training)}
    # Asked before the measurement starts (a plan does not nest): fp32 runs as the model would.
    fp32_kernels = tuple(linear_kernel(rep, i, o, torch.float32, training) for i, o in ((width, hidden), (hidden, width)))
    return p.decide("amp", fields, lambda: _amp_runs(rep, width, hidden, training, fp32_kernels),
                    memo_key=memo, tolerance=5e-2, measured_with={"rows": rep} if rep != bucket else None)


def _amp_runs(rows: int, width: int, hidden: int, training: bool, kernels: tuple[str, str]) -> dict[str, Callable]:
    g = torch.Generator().manual_seed(0)
    x, dy = _randn(g, rows, width), _randn(g, rows, width)
    w1, b1 = _randn(g, hidden, width, scale=width ** -0.5), _randn(g, hidden, scale=0.1)
    w2, b2 = _randn(g, width, hidden, scale=hidden ** -0.5), _randn(g, width, scale=0.1)
    lin1, lin2 = (onednn_linear if kind == "onednn" else F.linear for kind in kernels)

    def fp32():
        return lin2(F.gelu(lin1(x, w1, b1)), w2, b2)

    def bf16():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)

    if not training:
        return {"none": fp32, "bf16": bf16}
    leaves = (x.requires_grad_(), w1.requires_grad_(), w2.requires_grad_())
    return {"none": _with_grads(fp32, leaves, dy), "bf16": _with_grads(bf16, leaves, dy)}


# --- AdamW -------------------------------------------------------------------------------------
def adamw_impl(params: Iterable[Any], *, device: torch.device | str | None = None) -> str:
    """"foreach" or "fused" for torch.optim.AdamW over `params` (tensors, or param groups: dicts
    with "params"), timed on a stand-in of the same device, dtypes, tensor count and size (at most
    64 tensors and 1M elements, so the plan stays cheap for large models). `device`: where the
    optimiser will run, if not where `params` are (e.g. a model built on the meta device)."""
    tensors = []
    for item in params:
        tensors.extend(item["params"] if isinstance(item, dict) else [item])
    if not tensors:
        return ADAMW.stock
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        raise ValueError(f"adamw_impl: expected tensors or param groups, got {type(tensors[0]).__name__}")
    device = torch.device(device) if device is not None else tensors[0].device
    dtypes = tuple(sorted({str(t.dtype).removeprefix("torch.") for t in tensors}))
    count, numel = len(tensors), sum(t.numel() for t in tensors)
    memo = ("adamw", device, dtypes, count, numel)
    p = _planner._PLANNER
    if (choice := p.lookup(memo)) is not None:
        return choice
    fields = {"device": device.type, "dtypes": "+".join(dtypes), "tensors": _bucket(count, 1024),
              "numel": _bucket(max(1, numel), 1 << 30)}
    n = min(count, _ADAMW_MAX_TENSORS)
    size = max(1, min(numel, _ADAMW_MAX_NUMEL) // n)
    dtype = getattr(torch, dtypes[0])
    reduced = {"tensors": n, "numel": n * size} if (n, n * size) != (count, numel) else None
    return p.decide("adamw", fields, lambda: _adamw_runs(n, size, dtype, device), memo_key=memo,
                    tolerance=1e-5, measured_with=reduced)


def _adamw_runs(n: int, size: int, dtype: torch.dtype, device: torch.device) -> dict[str, Callable]:
    g = torch.Generator().manual_seed(0)
    start = _randn(g, n, size, dtype=dtype, device=device).unbind(0)  # one draw: randn is slow per call
    grads = [0.1 * t.flip(0) for t in start]

    def candidate(**impl: bool) -> Callable:
        params = [torch.nn.Parameter(s.clone()) for s in start]
        for p, gr in zip(params, grads):
            p.grad = gr
        try:
            opt = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01, **impl)
        except Exception as e:  # noqa: BLE001 - e.g. no fused kernel for this device or dtype
            error = e

            def unavailable():
                raise error
            return unavailable

        def step():
            opt.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            return [p.detach() for p in params]
        return step

    return {"foreach": candidate(foreach=True), "fused": candidate(fused=True)}
