"""A convolutional stem: the hybrid input head of the ViT paper (Dosovitskiy et al., section 3.1),
in the small form of Xiao et al., "Early convolutions help transformers see better".

A patch embedding is one strided convolution with kernel = stride = patch. The stem reaches the
same token grid through a few 3x3 stride-2 convolutions, so that each token is built from
overlapping, local features. On small data that inductive bias makes the ViT learn in far fewer
steps; the transformer on top is unchanged.
"""
from __future__ import annotations

import math

from torch import Tensor, nn

from .embeddings import pair


class ConvStem(nn.Module):
    """Images (B, C, H, W) -> tokens (B, H/p * W/p, D) for a power-of-two patch p, by log2(p)
    stride-2 3x3 convolutions (channels doubling up to D/2) and a final 1x1 projection to D."""

    def __init__(self, patch_size: int | tuple[int, int], in_chans: int, width: int) -> None:
        super().__init__()
        ph, pw = pair(patch_size)
        if ph != pw or ph < 2 or ph & (ph - 1):
            raise ValueError(f"a conv stem needs a square power-of-two patch size, got {ph}x{pw}")
        self.patch_size, self.in_chans = (ph, pw), in_chans
        layers: list[nn.Module] = []
        steps = int(math.log2(ph))
        channels = in_chans
        for i in range(steps):
            out = max(8, width // 2 ** (steps - i))
            layers += [nn.Conv2d(channels, out, 3, stride=2, padding=1), nn.GELU()]
            channels = out
        self.convs = nn.Sequential(*layers)
        self.proj = nn.Conv2d(channels, width, 1)

    def grid(self, height: int, width: int) -> tuple[int, int]:
        ph, pw = self.patch_size
        if height % ph or width % pw:
            raise ValueError(f"image size {height}x{width} is not divisible by the patch size {ph}x{pw}")
        return height // ph, width // pw

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() != 4:
            raise ValueError(f"expected images of shape (B, C, H, W), got a tensor of rank {x.dim()}: {tuple(x.shape)}")
        if x.shape[1] != self.in_chans:
            raise ValueError(f"expected {self.in_chans} image channels, got {x.shape[1]} (shape {tuple(x.shape)})")
        if not x.is_floating_point():
            raise TypeError(f"images must be a floating-point tensor, got dtype {x.dtype}")
        self.grid(x.shape[2], x.shape[3])
        return self.proj(self.convs(x)).flatten(2).transpose(1, 2)
