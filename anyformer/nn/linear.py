"""The plan's kernel for the models' linear layers, switched on per model: models are built from
plain `nn.Linear`.

torch's CPU wheels send fp32 `addmm`/`mm` to their BLAS (MKL). oneDNN, which torch ships too,
picks its kernels by instruction set: on an AMD EPYC with AVX-512, where MKL takes its AVX2
path, it ran the products of small ViTs and GPTs up to 2x faster; on an Intel Xeon it was no
faster and cost 21% in one recipe. So nothing is assumed: for each shape (rows, in, out, dtype,
training) `anyformer.plan.linear_kernel` times F.linear against oneDNN once on this machine,
checks oneDNN's output against F.linear's, keeps F.linear unless oneDNN wins by a clear margin,
and caches the answer (see `anyformer doctor`). `ANYFORMER_PLAN=linear=stock` forces F.linear.
A training run also times its whole step with every layer on one kernel
(`anyformer.plan.linears_for_training`), and `set_training_kernel(model, kernel)` applies the
answer to the layers' calls that need gradients.

A model is built from plain `nn.Linear` (and `LMHead`), so that what it is does not depend on the
plan, and tools that match layers by type (`torch.ao.quantization.quantize_dynamic(model,
{nn.Linear})`, fx passes) see what they expect. `plan_kernels(model)` switches its layers, in
place, to `PlannedLinear` (`PlannedLMHead`): the same parameters, names and state dict, computed by
`linear`, the plan's kernel; `stock_kernels(model)` switches them back, and `planned_kernels(model)`
does it for a `with` block. anyformer's own loops switch their models: the trainer, `anyformer
eval`/`generate`/`serve`, `GPT.generate`, the benchmarks.

Against F.linear, oneDNN's outputs differ by summation order only (~1e-6 relative), which the
interop tests allow. Anything other than plain fp32 on the CPU (bf16, autocast, CUDA, float64 for
gradcheck, empty tensors) takes F.linear without asking the plan, and so do torch.compile, jit and
fx tracing, torch.func transforms and dispatch modes (FakeTensor, FLOP counting). One exception under
torch.compile: a few rows on the CPU without gradients (a generation step's) are written as a product
and a sum, which inductor fuses (`rowwise_linear`). The oneDNN
backward steps aside when a graph of the gradient is asked for (create_graph=True): it computes the
gradient with the stock products, which have derivatives of their own.
"""
from __future__ import annotations

import contextlib
from typing import Iterator, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..plan import linear_kernel, onednn_linear, onednn_linear_op
from ..plan.decisions import LINEAR

_ONEDNN = onednn_linear_op() is not None
M = TypeVar("M", bound=nn.Module)

# Looked up once: these checks run on every linear call, and a one-token generation step makes
# ~50 such calls, where a microsecond each is a measurable share of the step.
_is_compiling = torch.compiler.is_compiling
_jit_tracing_state = torch._C._get_tracing_state
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)
_autocast_on = torch.is_autocast_enabled
_dispatch_modes = torch._C._len_torch_dispatch_stack


def plain_eager(x: Tensor) -> bool:
    """A plain tensor (not a Proxy, FakeTensor or other subclass) outside torch.compile, jit
    tracing, torch.func transforms, dispatch modes and autocast: where anyformer's own kernels may
    run (a custom op would break those, or be baked into them)."""
    return type(x) is Tensor and not (_is_compiling() or _jit_tracing_state() is not None or _functorch_active()
                                      or _dispatch_modes() or _autocast_on("cpu"))


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


# The most rows `rowwise_linear` takes under torch.compile. The char GPT's compiled decode step
# (2-core AMD EPYC) ran 1.2-1.5x faster with it than with F.linear for 2-4 sequences, 1.25x slower for 8.
ROWWISE_MAX_ROWS = 4


def _few_rows_cpu_inference(x: Tensor) -> bool:
    """At most ROWWISE_MAX_ROWS rows on the CPU, no gradients: under torch.compile, a generation
    step's products (the compiled static decode step, models/gpt_decode.py)."""
    return (not torch.is_grad_enabled() and x.device.type == "cpu"
            and 0 < x.numel() <= ROWWISE_MAX_ROWS * x.shape[-1])


def rowwise_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x W^T + b for a few rows x (..., K), as a product and a sum over K. Inductor lowers such an
    F.linear on the CPU to a BLAS call, which read one row's weights at 10-24 GB/s here (MKL; 2-core
    AMD EPYC, the char GPT's and gpt2's shapes); this it lowers to a reduction fused into one pass
    over the weight (28-44 GB/s), with the norms, activations and residuals around it. IEEE
    products; only the summation order differs, as between MKL and oneDNN."""
    y = (x.unsqueeze(-2) * weight).sum(-1)
    return y if bias is None else y + bias


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, training_kernel: str | None = None) -> Tensor:
    """`F.linear`, or the same product on oneDNN where the plan measured that faster for this shape,
    or under torch.compile for a few rows on the CPU `rowwise_linear`. `training_kernel` ("stock",
    "onednn" or "mixed"): the kernel for calls that need gradients, instead of asking the plan (the
    model-wide choice of `anyformer.plan.linears_for_training`)."""
    if _is_compiling() and _few_rows_cpu_inference(x):  # _is_compiling first: eager calls (hot) stop there
        return rowwise_linear(x, weight, bias)
    if not _plain_fp32_cpu(x, weight):
        return F.linear(x, weight, bias)
    training = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad
                                            or (bias is not None and bias.requires_grad))
    if training and training_kernel is not None:
        kernel = training_kernel
    else:
        kernel = linear_kernel(x.numel() // x.shape[-1], weight.shape[1], weight.shape[0], x.dtype, training)
    if kernel == "stock":
        return F.linear(x, weight, bias)
    return onednn_linear(x, weight, bias, blas_dw=kernel == "mixed")


class PlannedLinear(nn.Linear):
    """nn.Linear computed by `linear` (the plan's kernel); same parameters and state dict. What
    `plan_kernels` turns a model's nn.Linear into. `training_kernel`: see `set_training_kernel`."""

    training_kernel: str | None = None

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias, self.training_kernel)


Linear = PlannedLinear  # the name anyformer.nn has exported since its first release

# Stock class -> its planned subclass (same parameters, forward on `linear`); heads.py adds LMHead's.
_PLANNED: dict[type, type] = {nn.Linear: PlannedLinear}


def register_planned(stock: type, planned: type) -> None:
    """`plan_kernels` turns modules of exactly type `stock` into `planned` (a subclass)."""
    if not issubclass(planned, stock):
        raise TypeError(f"{planned.__name__} must subclass {stock.__name__}")
    _PLANNED[stock] = planned


def _switch(module: nn.Module, table: dict[type, type]) -> list[tuple[nn.Module, type]]:
    switched = []
    for m in module.modules():
        to = table.get(type(m))
        if to is not None:
            switched.append((m, type(m)))
            m.__class__ = to
    return switched


def plan_kernels(module: M) -> M:
    """In place: every plain nn.Linear (and LMHead) in `module` computes with the plan's kernel from
    now on. Returns `module`."""
    _switch(module, _PLANNED)
    return module


def stock_kernels(module: M) -> M:
    """In place: the reverse of `plan_kernels`, plain nn.Linear (and LMHead) again. Returns `module`."""
    _switch(module, {planned: stock for stock, planned in _PLANNED.items()})
    return module


_TRAINING_KERNELS = (None, *LINEAR.choices)  # None: ask the plan per shape


def set_training_kernel(module: nn.Module, kernel: str | None) -> None:
    """Every planned layer in `module` (see `plan_kernels`) computes its calls that need gradients
    with `kernel` ("stock", "onednn" or "mixed"), or asks the plan per shape (None, the default).
    What the trainer applies once `anyformer.plan.linears_for_training` has timed its step."""
    if kernel not in _TRAINING_KERNELS:
        raise ValueError(f"training kernel must be one of {_TRAINING_KERNELS}, got {kernel!r}")
    planned = tuple(_PLANNED.values())
    for m in module.modules():
        if isinstance(m, planned):
            m.training_kernel = kernel


@contextlib.contextmanager
def planned_kernels(module: nn.Module) -> Iterator[nn.Module]:
    """`with planned_kernels(model):` the plan's kernels inside the block; the layers it switched are
    switched back after it (those already planned stay so)."""
    switched = _switch(module, _PLANNED)
    try:
        yield module
    finally:
        for m, stock in switched:
            m.__class__ = stock
