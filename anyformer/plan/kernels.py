"""oneDNN's linear kernel, which the plan times and nn/linear.py calls for the layers where the plan
chose "onednn", in one place, so that what is measured is what runs.

oneDNN's `_linear_pointwise` (shipped inside torch's CPU wheels) picks its kernels by instruction
set, where torch's default BLAS on some CPUs does not (MKL takes its AVX2 path on AMD). Same
maths as F.linear: IEEE products, only the summation order differs. It is private to torch, so it
runs only where the plan measured it faster and checked its output against F.linear.
"""
from __future__ import annotations

import functools

import torch
from torch import Tensor

from . import native


@functools.lru_cache(maxsize=None)
def onednn_linear_op():
    """torch.ops.mkldnn._linear_pointwise, or None where this build has no oneDNN (looked up once:
    torch.ops lookups are slow)."""
    if torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        return torch.ops.mkldnn._linear_pointwise.default
    return None


def onednn_mm(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x (M, K) @ weight (N, K)^T + bias on oneDNN; strided operands are read in place."""
    return onednn_linear_op()(x, weight, bias, "none", [], "")


class OneDNNLinear(torch.autograd.Function):
    """y = x W^T + b; backward: dx = dy W, dW = dy^T x, db = the sum of dy over rows.

    `blas_dw`: the weight gradient on torch.mm (BLAS) instead. Its first operand is a transpose,
    which BLAS reads in place and oneDNN copies; where that copy eats oneDNN's gain, the "mixed"
    plan keeps oneDNN for the forward and input-gradient products only."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None, blas_dw: bool = False) -> Tensor:
        x2 = x.reshape(-1, x.shape[-1])
        ctx.save_for_backward(x2, weight)
        ctx.x_shape, ctx.has_bias, ctx.blas_dw = x.shape, bias is not None, blas_dw
        return onednn_mm(x2, weight, bias).view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad: Tensor):
        x2, weight = ctx.saved_tensors
        g2 = grad.reshape(-1, grad.shape[-1]).contiguous()  # e.g. the expanded gradient of a sum()
        if torch.is_grad_enabled():
            # create_graph=True (a gradient penalty, a Hessian-vector product): the gradient's own
            # graph is asked for, and oneDNN's products have no derivative; the stock ones do.
            dx = (g2 @ weight).view(ctx.x_shape) if ctx.needs_input_grad[0] else None
            dw = g2.t() @ x2 if ctx.needs_input_grad[1] else None
            db = g2.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
            return dx, dw, db, None
        dx = onednn_mm(g2, weight.t()).view(ctx.x_shape) if ctx.needs_input_grad[0] else None
        dw = None
        if ctx.needs_input_grad[1] and ctx.blas_dw:
            dw = torch.mm(g2.t(), x2)
        elif ctx.needs_input_grad[1]:
            # oneDNN copies a transposed first operand to rows, with ATen's strided copy: transpose the
            # narrower of dy (M, N) and x (M, K), which moves min(N, K) * M values, ourselves, in tiles
            # (native.transposed_rows: a tenth of the seed ViT's training step went to that copy).
            dw = (onednn_mm(native.transposed_rows(g2), x2.t()) if g2.shape[1] <= x2.shape[1]
                  else onednn_mm(native.transposed_rows(x2), g2.t()).t().contiguous())
        db = g2.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return dx, dw, db, None


def onednn_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, blas_dw: bool = False) -> Tensor:
    """F.linear on oneDNN: through autograd when a gradient is needed (the weight gradient on BLAS
    with `blas_dw`), else the bare forward."""
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad
                                    or (bias is not None and bias.requires_grad)):
        return OneDNNLinear.apply(x, weight, bias, blas_dw)
    return onednn_mm(x.reshape(-1, x.shape[-1]), weight, bias).view(*x.shape[:-1], weight.shape[0])
