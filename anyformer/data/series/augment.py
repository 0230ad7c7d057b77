"""Augmentation for series (B, C, T) with lengths (B,), batched, drawn from a given generator.

The usual label-preserving changes for time-series classification (Um et al., 2017; Le Guennec
et al., 2016, "window slicing"): additive jitter, per-channel scaling, a smooth random warp of the
time axis, and a random crop stretched back to the series' length. Warp and crop are one
resampling: output step j reads the series at a monotone random position, linearly interpolated.
Padding past each series' length stays zero.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..transfer import to_device

__all__ = ["augment_series", "resample"]


def _positions(lengths: Tensor, T: int, g: torch.Generator, warp: float, crop: float, share: float,
               knots: int = 4) -> Tensor:
    """(B, T) source positions: for a `share` of the series, a crop of [1 - crop, 1] of it warped by
    speeds exp(N(0, warp)) on `knots` pieces; for the others its own steps; mapped onto 0 .. length - 1."""
    B = lengths.shape[0]
    speeds = torch.exp(torch.randn(B, knots, generator=g) * warp)
    # Piecewise-constant speed -> piecewise-linear monotone map of [0, 1] onto [0, 1].
    cum = torch.cat([torch.zeros(B, 1), speeds.cumsum(1)], dim=1)
    cum = cum / cum[:, -1:]
    n = lengths.double().clamp_min(1)[:, None].cpu()
    u = (torch.arange(T, dtype=torch.float64)[None] / (n - 1).clamp_min(1)).clamp(max=1)   # (B, T) in [0, 1]
    seg = (u * knots).floor().clamp(max=knots - 1)
    frac = u * knots - seg
    lo, hi = cum.double().gather(1, seg.long()), cum.double().gather(1, seg.long() + 1)
    warped = lo + frac * (hi - lo)
    keep = 1 - torch.rand(B, 1, generator=g, dtype=torch.float64) * crop     # share of the series kept
    start = torch.rand(B, 1, generator=g, dtype=torch.float64) * (1 - keep)
    # Only some series are warped and cropped: on shape-defined classes (ArrowHead) changing every
    # series' timing cost more accuracy than it gained elsewhere (GunPoint).
    on = torch.rand(B, 1, generator=g) < share
    warped, keep, start = torch.where(on, warped, u), torch.where(on, keep, 1.0), torch.where(on, start, 0.0)
    return ((start + warped * keep) * (n - 1)).float()


def resample(x: Tensor, positions: Tensor) -> Tensor:
    """x (B, C, T) read at fractional positions (B, T'): linear interpolation -> (B, C, T')."""
    T = x.shape[-1]
    p = to_device(positions, x.device).clamp(0, T - 1)
    left = p.floor().long().clamp(max=T - 1)
    right = (left + 1).clamp(max=T - 1)
    w = (p - left)[:, None].to(x.dtype)
    idx = lambda i: i[:, None].expand(-1, x.shape[1], -1)
    return x.gather(2, idx(left)) * (1 - w) + x.gather(2, idx(right)) * w


def resample_to(x: Tensor, lengths: Tensor, length: int) -> Tensor:
    """Each series of x (B, C, T), its first lengths[b] steps, stretched or shrunk to `length` steps."""
    scale = (lengths.to(torch.float32) - 1) / max(1, length - 1)
    return resample(x, torch.arange(length, dtype=torch.float32)[None] * scale[:, None])


def augment_series(x: Tensor, lengths: Tensor, g: torch.Generator, *, jitter: float = 0.02,
                   scale: float = 0.1, warp: float = 0.2, crop: float = 0.2, share: float = 0.5) -> Tensor:
    """Standardised series (B, C, T) -> augmented, the same shape; each change drawn per series."""
    B, C, T = x.shape
    valid = (torch.arange(T, device=x.device)[None] < to_device(lengths, x.device)[:, None])[:, None]
    x = resample(x, _positions(lengths, T, g, warp, crop, share))
    factor = 1 + torch.randn(B, C, 1, generator=g) * scale
    noise = torch.randn(B, C, T, generator=g) * jitter
    return (x * to_device(factor, x.device) + to_device(noise, x.device)) * valid
