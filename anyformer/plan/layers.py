"""The layers `prepare` swaps into a model: the same parameters, names and state dict as the plain
`nn.Linear`, `LMHead` and `nn.GELU` they replace (a class swap, in place), each computing with the
kernel the plan chose for it when the model was prepared; and `NativePacked`, the attention
function a self-attention layer may hand its packed projection to (`MultiHeadAttention.attend_packed`).
No forward here asks the planner: the choice is an attribute, set once.

torch's CPU wheels send fp32 `addmm`/`mm` to their BLAS (MKL); oneDNN, which torch ships too, picks
its kernels by instruction set, and where the plan measured it faster for a layer's shape a layer
runs on it (`kernels.onednn_linear`, same maths, only the summation order differs). The native
kernels (`native.py`) take an fp32 CPU GELU, and a self-attention layer's packed projection whole.
Anything else (bf16, autocast, CUDA, float64, empty tensors, torch.compile except as below, jit and
fx tracing, torch.func transforms and dispatch modes) takes the stock path: a custom op or
autograd.Function would break those, or be baked into them.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..nn import MLP, ClassifierHead, LMHead
from . import native
from .decisions.common import _MAX_LEN
from .decisions.linear import TRAINING_KERNELS
from .kernels import onednn_linear, onednn_linear_op

_ONEDNN = onednn_linear_op() is not None

# Looked up once: these checks run on every linear call, and a one-token generation step makes
# ~50 such calls, where a microsecond each is a measurable share of the step.
_is_compiling = torch.compiler.is_compiling
_jit_tracing_state = torch._C._get_tracing_state
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)
_autocast_on = torch.is_autocast_enabled
_dispatch_modes = torch._C._len_torch_dispatch_stack


def plain_eager(x: Tensor, *, autocast_ok: bool = False) -> bool:
    """A plain tensor (not a Proxy, FakeTensor or other subclass) outside torch.compile, jit
    tracing, torch.func transforms, dispatch modes and autocast: where anyformer's own kernels may
    run (a custom op would break those, or be baked into them). `autocast_ok`: for a kernel that takes
    autocast's precision itself (the packed attention's bf16, `native.takes_packed`), autocast is no bar."""
    return type(x) is Tensor and not (_is_compiling() or _jit_tracing_state() is not None or _functorch_active()
                                      or _dispatch_modes() or (_autocast_on("cpu") and not autocast_ok))


def plain_fp32_cpu(x: Tensor, weight: Tensor) -> bool:
    """Plain fp32 CPU tensors outside any tracer, transform or dispatch mode (`plain_eager`), where a
    linear layer may run on another kernel than F.linear; fx's symbolic tracing passes a Proxy, which
    the exact type test turns away before anything branches on it, and so do tensor subclasses (e.g.
    DTensor), which keep their F.linear handling."""
    return (_ONEDNN and type(x) is Tensor and type(weight) in (Tensor, nn.Parameter)
            and x.dtype is torch.float32 and weight.dtype is torch.float32
            and x.device.type == "cpu" and weight.device.type == "cpu"
            and plain_eager(x) and x.numel() > 0 and weight.numel() > 0)  # a jit trace's numel is a tensor


def native_gelu_may_run(x: Tensor) -> bool:
    """Where a GELU may run on the native kernel: a plain fp32 CPU tensor, not empty (`plain_eager`)."""
    return x.device.type == "cpu" and x.dtype == torch.float32 and plain_eager(x) and x.numel() > 0


def needs_grad(x: Tensor, *params: Tensor | None) -> bool:
    """Whether this call is a training call: gradients on, and the input or a parameter wants one."""
    return torch.is_grad_enabled() and (x.requires_grad or any(p is not None and p.requires_grad for p in params))


# The most rows `rowwise_linear` takes under torch.compile: a compiled generation step's few sequences
# (measured: docs/results.md, "Measurements behind the code's choices").
ROWWISE_MAX_ROWS = 4


def rowwise_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x W^T + b for a few rows x (..., K), as a product and a sum over K. Inductor lowers such an
    F.linear on the CPU to a BLAS call that reads one row's weights slowly; this it lowers to a
    reduction fused into one pass over the weight, with the norms, activations and residuals around
    it. IEEE products; only the summation order differs, as between MKL and oneDNN."""
    y = (x.unsqueeze(-2) * weight).sum(-1)
    return y if bias is None else y + bias


def linear(x: Tensor, weight: Tensor, bias: Tensor | None, layer: "PlannedLinear | PlannedLMHead") -> Tensor:
    """x W^T + b on the layer's kernels ("stock": F.linear, "onednn"; in training also "mixed",
    oneDNN with the weight gradient on BLAS; for a few rows without gradients also "native", one pass
    over the weight): `training_kernel` for training calls, `few_rows_kernel` for at most
    ROWWISE_MAX_ROWS rows without gradients (a generation step), `kernel` for the rest; under
    torch.compile, a few rows on the CPU without gradients `rowwise_linear`."""
    if _is_compiling():
        few = not torch.is_grad_enabled() and x.device.type == "cpu" and 0 < x.numel() <= ROWWISE_MAX_ROWS * x.shape[-1]
        return rowwise_linear(x, weight, bias) if few else F.linear(x, weight, bias)
    if not plain_fp32_cpu(x, weight):
        return F.linear(x, weight, bias)
    few = x.numel() <= ROWWISE_MAX_ROWS * x.shape[-1]
    if needs_grad(x, weight, bias):
        chosen = layer.training_kernel
    else:
        chosen = layer.few_rows_kernel if few else layer.kernel
    if chosen == "stock" or (chosen == "native" and not (few and x.numel() <= native.ROWS_MAX * x.shape[-1])):
        return F.linear(x, weight, bias)
    if chosen == "native":
        return native.linear_rows(x, weight, bias)
    return onednn_linear(x, weight, bias, blas_dw=chosen == "mixed")


class _LinearKernels:
    """A planned linear layer's kernels (see `linear`), "stock" until `prepare` chooses. The training
    kernel is written here alone: `planned_training` is prepare's own answer for the layer, and
    `training_kernel` what its training calls run, that answer or a model-wide one (`set_training_kernel`)."""

    kernel = few_rows_kernel = training_kernel = planned_training = "stock"

    def train_with(self, kernel: str | None, *, planned: bool = False) -> None:
        """Training calls run `kernel` (None: the planned one); with `planned`, it becomes the planned one."""
        if planned:
            self.planned_training = kernel
        self.training_kernel = self.planned_training if kernel is None else kernel


class PlannedLinear(_LinearKernels, nn.Linear):
    """nn.Linear on the kernels `prepare` chose for it (see `linear`)."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias, self)


class PlannedLMHead(_LinearKernels, LMHead):
    """LMHead on the kernels `prepare` chose for it (see `linear`)."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias, self)


class PlannedGELU(nn.GELU):
    """nn.GELU on anyformer's own kernel (`native.gelu`) where `prepare` chose it: `native_training`
    for training calls, `native_few` for a few rows without gradients (a generation step), `native`
    for the rest; F.gelu elsewhere and under tracers (`plain_eager`)."""

    native = native_few = native_training = False

    def forward(self, x: Tensor) -> Tensor:
        if torch.is_grad_enabled() and x.requires_grad:
            chosen = self.native_training
        else:
            few = x.dim() == 0 or x.numel() <= ROWWISE_MAX_ROWS * x.shape[-1]  # a scalar: one row of one
            chosen = self.native_few if few else self.native
        if chosen and native_gelu_may_run(x):
            return native.gelu(x, self.approximate)
        return super().forward(x)


class NativePacked:
    """A self-attention layer's `attend_packed` where `prepare` chose the native kernel
    (`native.attention_packed`, which takes the packed projection whole and writes the heads
    concatenated) for calls without gradients (`native`) and training calls (`training`): fp32 on
    the CPU (or an autocast step's bf16, computed in fp32), a head size the kernel has, at most
    _MAX_LEN tokens, eager or under torch.compile (which calls the kernel as one custom op). Any
    other call it leaves to the layer (None)."""

    def __init__(self, native: bool, training: bool) -> None:
        self.native, self.training = native, training

    def __call__(self, qkv: Tensor, causal: bool) -> Tensor | None:
        chosen = self.training if torch.is_grad_enabled() and qkv.requires_grad else self.native
        if (chosen and qkv.shape[1] <= _MAX_LEN and native.takes_packed(qkv.dtype, qkv.shape[-1], qkv.device)
                and (_is_compiling() or plain_eager(qkv, autocast_ok=True))):
            return native.attention_packed(qkv, causal)
        return None

    def __repr__(self) -> str:
        return f"NativePacked(native={self.native}, training={self.training})"


# Plain class -> the class prepare swaps in (same parameters; forward on the chosen kernel).
PLANNED: dict[type, type] = {nn.Linear: PlannedLinear, LMHead: PlannedLMHead, nn.GELU: PlannedGELU}
STOCK: dict[type, type] = {planned: plain for plain, planned in PLANNED.items()}


def swap(module: nn.Module, table: dict[type, type]) -> list[nn.Module]:
    """In place: every submodule of exactly a type in `table` becomes that type's entry (a GELU only
    where it is token-wise: `token_wise_gelus`). Returns them."""
    gelus = token_wise_gelus(module)
    swapped = []
    for m in module.modules():
        to = table.get(type(m))
        if to is not None and (not isinstance(m, nn.GELU) or id(m) in gelus):
            m.__class__ = to
            swapped.append(m)
    return swapped


def token_wise_gelus(module: nn.Module) -> set[int]:
    """The GELUs of the token-wise MLPs and of the classifier's pre-logits layer: those the native GELU
    is measured and offered for. Others (a convolutional stem's, a user's own) keep PyTorch's, so that
    forcing gelu=native changes what it always changed."""
    found = set()
    for m in module.modules():
        if isinstance(m, MLP):
            found.add(id(m.act))
        elif isinstance(m, ClassifierHead) and m.pre_logits is not None:
            found.update(id(a) for a in m.pre_logits if isinstance(a, nn.GELU))
    return found


def set_training_kernel(module: nn.Module, kernel: str | None) -> None:
    """Every planned linear layer in `module` computes its training calls with `kernel` ("stock",
    "onednn" or "mixed"), or with what `prepare` chose for it (None): what the trainer applies once
    `linears_for_training` has timed its whole step on each."""
    if kernel is not None and kernel not in TRAINING_KERNELS:
        raise ValueError(f"training kernel must be one of None, {', '.join(map(repr, TRAINING_KERNELS))}; "
                         f"got {kernel!r}")
    for m in module.modules():
        if isinstance(m, _LinearKernels):
            m.train_with(kernel)
