"""Mixed precision: which half type a run computes in, autocast, and loss scaling for fp16.

bf16 keeps fp32's exponent range, so gradients never underflow and need no scaling; it is the
CPU's half type. fp16 has five exponent bits: small gradients flush to zero unless the loss is
scaled up before the backward pass and the gradients scaled back down before the update, which
is what a GradScaler does. fp16 is therefore a CUDA-only choice here.
"""
from __future__ import annotations

import os
from contextlib import AbstractContextManager

import torch

from ..plan import amp_dtype

_SETTLED: dict[str, str] = {}  # device type -> what `auto` was settled to for the model being trained


def settle_amp(amp: str, device: torch.device, *, width: int, hidden: int,
               decided: str | None = None) -> str:
    """Decide `auto` once, for the model at hand: bf16 autocast where the speed plan measured an
    MLP step of this width and hidden size (forward and backward, both ways) clearly faster than
    fp32 on this machine, else fp32: measured, not assumed from the CPU's flags, because bf16 can
    halve a step where the CPU computes it natively (avx512_bf16, AMX) and slow it where the CPU
    emulates it (measured: docs/results.md, 'Measurements behind the code's choices'). On CUDA: bf16
    where supported.
    `decided`: what another process settled (rank 0's choice, under torchrun): taken as it is, so
    that every rank computes in the same precision and only one of them measures.
    Later `resolve_amp("auto")` calls (the tasks' evaluation, the summary) return this choice."""
    if amp != "auto":
        return amp
    _SETTLED[device.type] = decided or amp_dtype(device, width=width, hidden=hidden)
    return _SETTLED[device.type]


def resolve_amp(amp: str, device: torch.device) -> str:
    """What `amp` means here: `auto` as `settle_amp` decided it (or, before that, as the plan
    decides for a mid-sized model), anything else as it is."""
    if amp != "auto":
        return amp
    return _SETTLED.get(device.type) or amp_dtype(device)


def check_amp(amp: str, device: torch.device) -> None:
    """Refuse fp16 where it cannot be trained properly: anywhere but CUDA."""
    if amp == "fp16" and device.type != "cuda":  # `auto` never means fp16
        raise ValueError(f"--amp fp16 needs a CUDA device (fp16 training needs loss scaling, which runs on "
                         f"CUDA), but the run is on {device.type}; use --amp bf16, the {device.type}'s half "
                         f"type, or --amp none")


def autocast(amp: str, device: torch.device) -> AbstractContextManager:
    amp = resolve_amp(amp, device)
    if amp == "none":
        return torch.autocast(device.type, enabled=False)
    return torch.autocast(device.type, dtype=torch.bfloat16 if amp == "bf16" else torch.float16)


def make_scaler(amp: str, device: torch.device) -> torch.amp.GradScaler | None:
    """A GradScaler for fp16 (dynamic loss scale: halved on an overflow, doubled after 2000 clean
    steps); None for bf16 and fp32, which need none. Without --grad-clip the fused AdamW reads the
    overflow flag on the device; clipping needs the gradients unscaled first, and then the scaler
    reads the flag on the host each step."""
    check_amp(amp, device)
    return torch.amp.GradScaler(device.type) if amp == "fp16" else None


def fast_fp32_matmuls(device: torch.device) -> None:
    """On CUDA, float32 matrix products on TF32 tensor cores (inputs rounded to a 10-bit mantissa,
    sums in fp32), as timm's and nanoGPT's training scripts set: several times the fp32 rate on a
    card with TF32 tensor cores, for the parts of a step that autocast leaves in fp32 and for
    `--amp none`. The CPU has no such mode; nothing changes there."""
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")


def deterministic_kernels() -> None:
    """Only kernels that give the same bits for the same inputs: on CUDA, atomics-free backward passes
    (embeddings, attention) and a fixed cuBLAS workspace, which NVIDIA documents as needed for
    reproducible products. cuBLAS reads the variable when it first starts, so it is set here, before
    a step's first product; a process that already ran one should set it before it starts."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
