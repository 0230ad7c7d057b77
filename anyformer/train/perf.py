"""Throughput accounting: the device's measured matmul peak and the precision `amp=auto` means.

Model FLOPs come from the models themselves (`Model.forward_flops`), through each task.

MFU here is achieved model FLOP/s over the FLOP/s that a large matrix multiply reaches on the
same device in the same precision, measured at start-up rather than taken from a spec sheet.
"""
from __future__ import annotations

import functools
import time

import torch

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
