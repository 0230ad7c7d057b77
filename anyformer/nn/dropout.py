"""Dropout whose mask costs less on the CPU.

torch's CPU dropout draws its mask with `bernoulli_`, which runs single-threaded: one activation's
mask can take as long as a large matmul. Comparing uniform draws with p gives the same
Bernoulli(1 - p) keep-mask from torch's same generator in a fraction of the time
(measured: docs/results.md, 'Measurements behind the code's choices'). Same maths: each value kept
with probability 1 - p and scaled by 1 / (1 - p); only the random stream differs from F.dropout's.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """`F.dropout` (not in place), with the cheaper mask for float32/float64 CPU tensors."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float64) or not 0.0 < p < 1.0:
        return F.dropout(x, p, training)  # CUDA has a fused kernel; bf16 draws are too coarse for p
    mask = torch.rand_like(x).ge_(p).div_(1.0 - p)
    return x * mask


class Dropout(nn.Dropout):
    """nn.Dropout with the cheaper CPU mask of `dropout` (not in place)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training, inplace=True) if self.inplace else dropout(x, self.p, self.training)
