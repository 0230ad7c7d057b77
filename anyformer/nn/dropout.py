"""Dropout whose mask costs less on the CPU.

torch's CPU dropout draws its mask with `bernoulli_`, which runs single-threaded at about 130
million values a second: 11 ms for one (16, 256, 384) activation, as long as a 4096 x 384 x 1536
matmul on oneDNN. Comparing uniform draws with p gives the same Bernoulli(1 - p) keep-mask from
torch's same generator in about a third of the time (benchmarks/results/amd-epyc/gpt_cpu.md: dropout 0.2
on nanoGPT's char model). Same maths: each value kept with probability 1 - p and scaled by
1 / (1 - p); only the random stream differs from F.dropout's.
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
