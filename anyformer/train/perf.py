"""Throughput accounting: model FLOPs per trained item and the device's measured matmul peak.

MFU here is achieved model FLOP/s over the FLOP/s that a large matrix multiply reaches on the
same device in the same precision, measured at start-up rather than taken from a spec sheet.
"""
from __future__ import annotations

import functools
import time

import torch
from torch import nn

from .precision import resolve_amp


@functools.lru_cache(maxsize=None)
def _peak(device_type: str, device_index: int | None, dtype: torch.dtype) -> float:
    device = torch.device(device_type, device_index) if device_index is not None else torch.device(device_type)
    n = 4096 if device_type == "cuda" else 512  # large enough to saturate 2-16 cores, small enough for ~0.1 s
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(3):
        _sync(device)
        t = time.perf_counter()
        for _ in range(4):
            a @ b
        _sync(device)
        best = min(best, (time.perf_counter() - t) / 4)
    return 2 * n ** 3 / best


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measured_peak_flops(device: torch.device, amp: str = "none") -> float:
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(resolve_amp(amp, device), torch.float32)
    return _peak(device.type, device.index, dtype)


def _linear_params(module: nn.Module) -> int:
    return sum(m.weight.numel() for m in module.modules() if isinstance(m, (nn.Linear, nn.Conv2d)))


def flops_per_item(model: nn.Module, task) -> float:
    """Training FLOPs (forward + backward = 3 x forward) per image or per token.

    Called by the tasks only (their `flops_per_item`), until the models count their own forward."""
    c = model.config
    if model.family == "vit":
        gh, gw = c.grid
        n = gh * gw + model.prefix.num_prefix
        fwd = 2 * n * _linear_params(model.backbone) + 2 * gh * gw * _linear_params(model.patch_embed)
        fwd += 4 * c.depth * n * n * c.width + 2 * _linear_params(model.head)
    else:  # language model, per token, attending over the training sequence (nanoGPT's count)
        t = getattr(task, "seq_len", c.context)
        fwd = 2 * _linear_params(model.backbone) + 2 * c.vocab_size * c.width + 4 * c.depth * t * c.width
    return 3.0 * fwd
