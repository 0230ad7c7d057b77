"""Mixed precision: which half type a run computes in, autocast, and loss scaling for fp16.

bf16 keeps fp32's exponent range, so gradients never underflow and need no scaling; it is the
CPU's half type. fp16 has five exponent bits: small gradients flush to zero unless the loss is
scaled up before the backward pass and the gradients scaled back down before the update, which
is what a GradScaler does. fp16 is therefore a CUDA-only choice here.
"""
from __future__ import annotations

from contextlib import AbstractContextManager

import torch

from ..plan import amp_dtype


def resolve_amp(amp: str, device: torch.device) -> str:
    """`auto`: bf16 autocast where the speed plan measured it clearly faster than fp32 on this
    machine (a model-sized MLP step, both ways; `anyformer doctor` shows the times), else fp32.
    Native bf16 (avx512_bf16, AMX) made it about 2x faster on an AMD EPYC; without it, emulated
    bf16 was 1.7x slower on an Intel Xeon. On CUDA: bf16 where the GPU supports it."""
    if amp != "auto":
        return amp
    return amp_dtype(device)


def check_amp(amp: str, device: torch.device) -> None:
    """Refuse fp16 where it cannot be trained properly: anywhere but CUDA."""
    if resolve_amp(amp, device) == "fp16" and device.type != "cuda":
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
    return torch.amp.GradScaler(device.type) if resolve_amp(amp, device) == "fp16" else None
