"""Conditioning: what a generator is told besides its noisy input (the flow time t and the class y),
as vectors c (B, D) that steer every block by adaptive LayerNorm (DiT, Peebles & Xie).

    c = TimeEmbedding(t) + ClassEmbedding(y)
    shift, scale, gate = split(W SiLU(c) + b)          W, b zero at init
    x = x + gate * F(LN(x) * (1 + scale) + shift)      the block starts as the identity
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def timestep_sinusoid(t: Tensor, dim: int, scale: float = 1000.0, base: float = 10000.0) -> Tensor:
    """(B,) times in [0, 1] -> (B, dim): [cos(s t f_k), sin(s t f_k)]. The scale spreads t over the
    range the frequencies were made for (positions 0..1000), so that nearby times differ visibly."""
    if dim % 2:
        raise ValueError(f"the time sinusoid needs an even width, got {dim}")
    half = dim // 2
    freq = torch.exp(-math.log(base) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    angles = scale * t.float()[:, None] * freq[None]
    return torch.cat([angles.cos(), angles.sin()], dim=-1)


class TimeEmbedding(nn.Module):
    """Flow time t (B,) in [0, 1] -> (B, D): a fixed sinusoid, then a two-layer SiLU MLP."""

    def __init__(self, width: int, freq_dim: int = 256, scale: float = 1000.0) -> None:
        super().__init__()
        self.freq_dim, self.scale = freq_dim, scale
        self.mlp = nn.Sequential(nn.Linear(freq_dim, width), nn.SiLU(), nn.Linear(width, width))

    def forward(self, t: Tensor) -> Tensor:
        if t.dim() != 1:
            raise ValueError(f"expected times of shape (B,), got {tuple(t.shape)}")
        return self.mlp(timestep_sinusoid(t, self.freq_dim, self.scale).to(self.mlp[0].weight.dtype))


class ClassEmbedding(nn.Module):
    """Class labels (B,) -> (B, D), with one extra row, index `num_classes`, for "no class": training
    shows it in place of the label now and then (label dropout), which teaches the same network the
    unconditional velocity that classifier-free guidance extrapolates away from."""

    def __init__(self, num_classes: int, width: int) -> None:
        super().__init__()
        self.num_classes = num_classes
        # N(0, 1) rows (nn.Embedding's default), not DiT's N(0, 0.02): c = time + class, and the time
        # embedding starts at a norm of about 4-10, so rows of norm 0.3 left the class nearly unheard
        # for a short run: unit rows make the generated digits follow their class far more often
        # (measured: docs/results.md, 'Measurements behind the code's choices').
        self.weight = nn.Parameter(torch.randn(num_classes + 1, width))

    @property
    def null(self) -> int:
        return self.num_classes

    def forward(self, labels: Tensor) -> Tensor:
        if labels.dim() != 1 or labels.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"expected int64 labels of shape (B,), got {labels.dtype} {tuple(labels.shape)}")
        return nn.functional.embedding(labels, self.weight)

    def drop(self, labels: Tensor, p: float, generator: torch.Generator) -> Tensor:
        """Labels with each replaced by the null class with probability p (drawn from `generator`)."""
        if p <= 0:
            return labels
        hit = torch.rand(labels.shape, generator=generator).to(labels.device) < p
        return torch.where(hit, torch.full_like(labels, self.null), labels)


class AdaLNModulation(nn.Module):
    """c (B, D) -> `chunks` vectors (B, D) each: SiLU then a linear map that starts at zero, so that
    every shift, scale and gate is 0 at init."""

    def __init__(self, width: int, chunks: int) -> None:
        super().__init__()
        self.chunks = chunks
        self.proj = nn.Linear(width, chunks * width)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, c: Tensor) -> tuple[Tensor, ...]:
        return self.proj(nn.functional.silu(c)).chunk(self.chunks, dim=-1)


def modulate(x: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
    """x (B, N, D) * (1 + scale) + shift, with shift and scale (B, D) the same for every token."""
    return x * (1 + scale[:, None]) + shift[:, None]


class FinalAdaLN(nn.Module):
    """The last norm before the output head, modulated by c as the blocks are (DiT's final layer):
    (B, N, D), c (B, D) -> (B, N, D)."""

    def __init__(self, width: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width, eps=eps, elementwise_affine=False)
        self.modulation = AdaLNModulation(width, 2)

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        shift, scale = self.modulation(c)
        return modulate(self.norm(x), shift, scale)
