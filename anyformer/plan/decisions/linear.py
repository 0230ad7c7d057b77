"""The linear layers' kernel: F.linear (BLAS), oneDNN, (training) oneDNN with the weight gradient on
BLAS, or (a few rows without gradients: a generation step) anyformer's own one-pass kernel."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from .. import choices, native
from .. import planner as _planner
from ..choices import Decision, register
from ..kernels import onednn_linear, onednn_linear_op
from .common import (_CALL_FLOPS, _COLD_BYTES, _COLD_MAX_COPIES, _COLD_MAX_ROWS, _MAX_ROWS,
                     _TRAIN_CALL_FLOPS, _bucket, _dtype, _floor_pow2, _may_build, _positive, _randn, _with_grads)

LINEAR = register(Decision("linear", ("stock", "onednn", "mixed", "native"),
                           "fp32/bf16 CPU linear layers: F.linear (BLAS), oneDNN's _linear_pointwise, (training) "
                           "oneDNN for the forward and input gradient with the weight gradient on BLAS, or (fp32, "
                           "a few rows without gradients) anyformer's own one pass over the weight (plan/native.py)"))
TRAINING_KERNELS = ("stock", "onednn", "mixed")

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
    onednn = onednn_linear_op() is not None and dtype in (torch.float32, torch.bfloat16)
    # "mixed" differs from "onednn" in the backward alone: a choice for training only, which for a
    # pass without gradients (forced as ANYFORMER_PLAN=linear=mixed) means oneDNN.
    avail = ("stock",) if not onednn else TRAINING_KERNELS if training else ("stock", "onednn")
    if onednn and not training and choices.forced_choice(p.forced()[0], LINEAR.name) == "mixed":
        return p._remember(memo, "onednn")
    # The one-pass kernel: for the few rows of a generation step, fp32, where it builds here.
    own = (not training and dtype == torch.float32 and batch_rows <= native.ROWS_MAX
           and _may_build(p, LINEAR.name) and native.library() is not None)
    if own:
        avail = (*avail, "native")
    return p.decide("linear", fields, lambda: _linear_runs(rep, in_features, out_features, dtype, training, cold, own),
                    memo_key=memo, available=avail, partial=("native",),
                    tolerance=1e-4 if dtype == torch.float32 else 2e-2,
                    measured_with={"rows": rep} if rep != rows else None)


def _linear_runs(rows: int, k: int, n: int, dtype: torch.dtype, training: bool,
                 cold: bool = False, own: bool = False) -> dict[str, Callable]:
    g = torch.Generator().manual_seed(0)
    x, w = _randn(g, rows, k, dtype=dtype), _randn(g, n, k, dtype=dtype, scale=k ** -0.5)
    b, dy = _randn(g, n, dtype=dtype), _randn(g, rows, n, dtype=dtype)
    if cold:  # copies of w (the first is w itself, so outputs still compare) read in turn
        copies = max(1, min(_COLD_MAX_COPIES, -(-_COLD_BYTES // (w.numel() * w.element_size()))))
        ws = [w] + [w.clone() for _ in range(copies - 1)]
        turn = {"stock": 0, "onednn": 0, "native": 0}

        def cycling(name: str, fn: Callable) -> Callable:
            def run():
                turn[name] = (turn[name] + 1) % len(ws)
                return fn(x, ws[turn[name]], b)
            return run
        runs = {"stock": cycling("stock", F.linear), "onednn": cycling("onednn", onednn_linear)}
        if own:
            runs["native"] = cycling("native", native.linear_rows)
        return runs
    if not training:
        runs = {"stock": lambda: F.linear(x, w, b), "onednn": lambda: onednn_linear(x, w, b)}
        if own:
            runs["native"] = lambda: native.linear_rows(x, w, b)
        return runs
    leaves = (x.requires_grad_(), w.requires_grad_(), b.requires_grad_())
    return {"stock": _with_grads(lambda: F.linear(x, w, b), leaves, dy),
            "onednn": _with_grads(lambda: onednn_linear(x, w, b), leaves, dy),
            "mixed": _with_grads(lambda: onednn_linear(x, w, b, blas_dw=True), leaves, dy)}
