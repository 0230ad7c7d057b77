"""Host values onto the device without making the host wait for it."""
from __future__ import annotations

import torch
from torch import Tensor


def to_device(t: Tensor, device: torch.device | str) -> Tensor:
    """`t` on `device`, the same values. From the CPU to CUDA the copy is made from page-locked memory
    and queued (`non_blocking`): a plain copy from pageable memory makes the host wait until the device
    has run everything queued before it, so a training step's batch would stall the host until the
    last step finished, where it could be queueing this step's kernels. The page-locked staging
    buffer is kept until the copy has run (torch's caching host allocator)."""
    device = torch.device(device)
    if device.type != "cuda" or t.device.type != "cpu":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def float64_on(value: Tensor | float, device: torch.device | str) -> Tensor:
    """`value` as a 0-dim float64 tensor on `device` (a tensor converted there). A Python number (a
    step's count) is filled in on the device by a kernel rather than copied from the host."""
    if isinstance(value, Tensor):
        return value.to(device=device, dtype=torch.float64)
    return torch.full((), value, dtype=torch.float64, device=device)
