"""A drop-in `nn.Linear` whose fp32 CPU matmuls run on oneDNN instead of the default BLAS.

Why: torch's CPU wheels send fp32 `addmm`/`mm` to MKL, and MKL on AMD processors takes its
AVX2 code path; oneDNN, which torch ships too, picks its kernels by instruction set and uses
AVX-512. On the 2-core AMD EPYC (AVX-512) this project is measured on, oneDNN runs the linear
layers' forward and input-gradient products about 2x faster than MKL and the weight-gradient
product 1.1-1.7x (benchmarks/README.md; results/vit_cpu.md, gpt_cpu.md). Same maths: IEEE
fp32 products, only the summation order differs, as between any two BLAS libraries. On Intel
CPUs, where MKL uses AVX-512 itself, expect little difference.

The parameters, their names and shapes are nn.Linear's, so state dicts and weight conversion
are unchanged. Training takes `_OneDNNLinear` (oneDNN forward and backward); forward passes
without autograd (inference, evaluation, generation) call oneDNN's forward directly. Against
nn.Linear's MKL the outputs differ by summation order only: ~1e-6 relative on GPT-2-width
hidden states, which the interop tests allow (tests/interop: 1e-5 of the tensor's scale).
Set `INFERENCE_ON_ONEDNN = False` to keep gradient-free passes on `F.linear`, bitwise nn.Linear.
Anything other than plain fp32 on the CPU (bf16, autocast, CUDA, float64 for gradcheck,
empty tensors) takes `F.linear`, and so do torch.compile, jit and fx tracing, torch.func
transforms and dispatch modes (FakeTensor, FLOP counting). `torch.ao.quantization.quantize_dynamic`
(deprecated in torch) converts only exact `nn.Linear` layers, so it leaves these alone. The oneDNN
backward is once-differentiable: a second derivative through it (create_graph=True) raises.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _onednn_linear_op():
    if torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        return torch.ops.mkldnn._linear_pointwise.default  # looked up once: torch.ops lookups are slow
    return None


_LINEAR_OP = _onednn_linear_op()
_ONEDNN = _LINEAR_OP is not None
INFERENCE_ON_ONEDNN = True  # False: forward passes without autograd use F.linear (MKL), bitwise nn.Linear


def _mm(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x (M, K) @ weight (N, K)^T + bias, on oneDNN; strided operands are read in place."""
    return _LINEAR_OP(x, weight, bias, "none", [], "")


class _OneDNNLinear(torch.autograd.Function):
    """y = x W^T + b; backward: dx = dy W, dW = dy^T x, db = sum of dy over rows."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        x2 = x.reshape(-1, x.shape[-1])
        ctx.save_for_backward(x2, weight)
        ctx.x_shape, ctx.has_bias = x.shape, bias is not None
        return _mm(x2, weight, bias).view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        x2, weight = ctx.saved_tensors
        g2 = grad.reshape(-1, grad.shape[-1]).contiguous()  # e.g. the expanded gradient of a sum()
        dx = _mm(g2, weight.t()).view(ctx.x_shape) if ctx.needs_input_grad[0] else None
        dw = None
        if ctx.needs_input_grad[1]:
            # oneDNN copies a transposed first operand to rows; transposing the narrower of dy
            # (M, N) and x (M, K) moves min(N, K) * M values, not several times that.
            if g2.shape[1] <= x2.shape[1]:
                dw = _mm(g2.t(), x2.t())
            else:
                dw = _mm(x2.t(), g2.t()).t().contiguous()
        db = g2.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return dx, dw, db


# Looked up once: these checks run on every linear call, and a one-token generation step makes
# ~50 such calls, where a microsecond each is a measurable share of the step.
_is_compiling = torch.compiler.is_compiling
_jit_tracing_state = torch._C._get_tracing_state
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)
_autocast_on = torch.is_autocast_enabled
_dispatch_modes = torch._C._len_torch_dispatch_stack


def _plain_fp32_cpu(x: Tensor, weight: Tensor) -> bool:
    """Plain fp32 CPU tensors outside any tracer, transform or dispatch mode. torch.compile,
    jit/fx tracing (symbolic, and make_fx's, which runs under a dispatch mode), torch.func
    transforms (grad, vmap: per-sample gradients), FakeTensor and FLOP-counting modes must see
    F.linear: a custom op or autograd.Function would break them or be baked into them. fx's
    symbolic tracing passes a Proxy, which the exact type test turns away before anything
    branches on it; so do tensor subclasses (e.g. DTensor), which keep their F.linear handling."""
    return (_ONEDNN and type(x) is Tensor and type(weight) in (Tensor, nn.Parameter)
            and x.dtype is torch.float32 and weight.dtype is torch.float32
            and x.device.type == "cpu" and weight.device.type == "cpu" and x.numel() > 0 and weight.numel() > 0
            and not (_is_compiling() or _jit_tracing_state() is not None or _functorch_active()
                     or _dispatch_modes() or _autocast_on("cpu")))


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """`F.linear`, on oneDNN for plain fp32 CPU tensors: training, and inference unless
    INFERENCE_ON_ONEDNN is off (see the module's docstring)."""
    if not _plain_fp32_cpu(x, weight):
        return F.linear(x, weight, bias)
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad
                                    or (bias is not None and bias.requires_grad)):
        return _OneDNNLinear.apply(x, weight, bias)
    if not INFERENCE_ON_ONEDNN:
        return F.linear(x, weight, bias)
    return _mm(x.reshape(-1, x.shape[-1]), weight, bias).view(*x.shape[:-1], weight.shape[0])


class Linear(nn.Linear):
    """nn.Linear computed by `linear` (oneDNN on fp32 CPU); same parameters and state dict."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)
