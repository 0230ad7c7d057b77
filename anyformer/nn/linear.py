"""`nn.Linear` with the kernel the speed plan measured fastest on this machine.

torch's CPU wheels send fp32 `addmm`/`mm` to their BLAS (MKL). oneDNN, which torch ships too,
picks its kernels by instruction set: on an AMD EPYC with AVX-512, where MKL takes its AVX2
path, it ran the products of small ViTs and GPTs up to 2x faster; on an Intel Xeon it was no
faster and cost 21% in one recipe. So nothing is assumed: for each shape (rows, in, out, dtype,
training) `anyformer.plan.linear_kernel` times F.linear against oneDNN once on this machine,
checks oneDNN's output against F.linear's, keeps F.linear unless oneDNN wins by a clear margin,
and caches the answer (see `anyformer doctor`). `ANYFORMER_PLAN=linear=stock` forces F.linear.

The parameters, their names and shapes are nn.Linear's, so state dicts and weight conversion
are unchanged, and `isinstance(layer, nn.Linear)` holds. Against F.linear, oneDNN's outputs
differ by summation order only (~1e-6 relative), which the interop tests allow.
Anything other than plain fp32 on the CPU (bf16, autocast, CUDA, float64 for gradcheck, empty
tensors) takes F.linear without asking the plan, and so do torch.compile, jit and fx tracing,
torch.func transforms and dispatch modes (FakeTensor, FLOP counting). The oneDNN backward is
once-differentiable: a second derivative through it (create_graph=True) raises.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..plan import linear_kernel, onednn_linear, onednn_linear_op

_ONEDNN = onednn_linear_op() is not None

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
    """`F.linear`, or the same product on oneDNN where the plan measured that faster for this shape."""
    if not _plain_fp32_cpu(x, weight):
        return F.linear(x, weight, bias)
    training = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad
                                            or (bias is not None and bias.requires_grad))
    kernel = linear_kernel(x.numel() // x.shape[-1], weight.shape[1], weight.shape[0], x.dtype, training)
    if kernel == "stock":
        return F.linear(x, weight, bias)
    return onednn_linear(x, weight, bias, blas_dw=kernel == "mixed")


class Linear(nn.Linear):
    """nn.Linear computed by `linear` (the plan's kernel); same parameters and state dict."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)
