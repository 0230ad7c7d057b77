"""A convolutional stem: the hybrid input head of the ViT paper (Dosovitskiy et al., section 3.1),
in the small form of Xiao et al., "Early convolutions help transformers see better".

A patch embedding is one strided convolution with kernel = stride = patch. The stem reaches the
same token grid through a few 3x3 stride-2 convolutions, so that each token is built from
overlapping, local features. On small data that inductive bias makes the ViT learn in far fewer
steps; the transformer on top is unchanged. Xiao et al.'s stem also normalises each convolution
(BatchNorm) and can stack stride-1 3x3 convolutions within a stage; both are options here
(`convs`, `norm`), off by default.
"""
from __future__ import annotations

import math

from torch import nn

from ..shapes import pair
from .embeddings import SHIFTED_COPIES, PatchEmbedding, shift_of


STEM_NORMS = ("none", "batch")


class ConvStem(PatchEmbedding):
    """Images (B, C, H, W) -> tokens (B, H/p * W/p, D) for a power-of-two patch p, by log2(p)
    stages of `convs` 3x3 convolutions each, the first of a stage stride 2 and the rest stride 1
    (channels doubling up to `channels`, D/2 where 0; never fewer than 8), and a final 1x1
    projection to D. `norm="batch"`: each 3x3 convolution (then without its bias) is followed by
    BatchNorm before its GELU, as in Xiao et al.

    Everything but the projection (shape checks, the token grid, the flattening, the shifted
    copies where `shifted`) is the patch embedding's: the stem is a deeper `proj`.
    """

    def __init__(self, patch_size: int | tuple[int, int], in_chans: int, width: int,
                 channels: int = 0, convs: int = 1, norm: str = "none", shifted: bool = False) -> None:
        ph, pw = pair(patch_size)
        if ph != pw or ph < 2 or ph & (ph - 1):
            raise ValueError(f"a conv stem needs a square power-of-two patch size, got {ph}x{pw}")
        if isinstance(convs, bool) or not isinstance(convs, int) or convs < 1:
            raise ValueError(f"a conv stem needs at least 1 convolution a stage, got {convs!r}")
        if norm not in STEM_NORMS:
            raise ValueError(f"unknown conv stem norm {norm!r}; expected one of {STEM_NORMS}")
        # Not PatchEmbedding.__init__: its single conv would be built and thrown away, drawing from the RNG.
        nn.Module.__init__(self)
        self.patch_size, self.in_chans = (ph, pw), in_chans
        self.shift = shift_of(self.patch_size, shifted)
        layers: list[nn.Module] = []
        steps = int(math.log2(ph))
        last = channels or width // 2
        have = in_chans * (SHIFTED_COPIES if self.shift else 1)
        for i in range(steps):
            out = max(8, last // 2 ** (steps - 1 - i))
            for j in range(convs):
                layers.append(nn.Conv2d(have, out, 3, stride=1 if j else 2, padding=1, bias=norm == "none"))
                layers += [nn.BatchNorm2d(out), nn.GELU()] if norm == "batch" else [nn.GELU()]
                have = out
        self.proj = nn.Sequential(*layers, nn.Conv2d(have, width, 1))
