"""Input heads: turn raw data into (B, N, D) tokens.

Discrete symbols go through a lookup table, continuous vectors through a linear map, images
through patches (a strided convolution is a linear map of each non-overlapping patch).
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from ..shapes import pair


def index_span(ids: Tensor) -> tuple[int, int] | None:
    """(least, greatest) of integer ids, for a range check with a clear message; None where it is not
    read: empty ids, inside a torch.compile trace (a data-dependent branch would break the graph),
    and on a GPU while autograd records (a training step). Reading a GPU tensor makes the host wait
    for the device, and a step that waits cannot queue its kernels while the last one runs; there an
    index out of range still stops the step, at the embedding kernel's own device-side assert."""
    if not ids.numel() or torch.compiler.is_compiling() or (ids.device.type != "cpu" and torch.is_grad_enabled()):
        return None
    lo, hi = torch.aminmax(ids)  # one fused pass, one read
    return int(lo), int(hi)


class TokenEmbedding(nn.Module):
    """Lookup table: (B, T) integer ids -> (B, T, D)."""

    def __init__(self, vocab_size: int, width: int) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.weight = nn.Parameter(torch.randn(vocab_size, width).mul_(0.02))

    def forward(self, ids: Tensor) -> Tensor:
        if ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
            raise TypeError(f"token ids must be an integer tensor, got dtype {ids.dtype}")
        if ids.dim() != 2:
            raise ValueError(f"token ids must have shape (B, T), got {tuple(ids.shape)}")
        span = index_span(ids)
        if span is not None and (span[0] < 0 or span[1] >= self.vocab_size):
            raise ValueError(f"token ids must lie in [0, {self.vocab_size}); got values in [{span[0]}, {span[1]}]")
        if ids.dtype not in (torch.int64, torch.int32):  # embedding's kernel takes these two only
            ids = ids.long()
        return nn.functional.embedding(ids, self.weight)


class LinearEmbedding(nn.Module):
    """Continuous vectors: (B, N, F) -> (B, N, D) by one shared linear map."""

    def __init__(self, in_features: int, width: int, bias: bool = True) -> None:
        super().__init__()
        self.proj = nn.Linear(in_features, width, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() != 3 or x.shape[-1] != self.proj.in_features:
            raise ValueError(f"expected vectors of shape (B, N, {self.proj.in_features}), got {tuple(x.shape)}")
        return self.proj(x)


SHIFTED_COPIES = 5  # the image and its four diagonal copies


def shifted_copies(x: Tensor, shift: int) -> Tensor:
    """(B, C, H, W) -> (B, 5C, H, W): the images, then their copies moved `shift` pixels diagonally
    (the content moved down-right, down-left, up-right, up-left), each gap filled with zeros.

    The input of Lee et al.'s shifted patch tokenisation ("Vision Transformer for Small-Size
    Datasets", 2021): a patch cut from these channels also holds the pixels half a patch beyond
    each corner, so every token sees across its patch's borders.
    """
    if shift < 1:
        raise ValueError(f"a shift of at least 1 pixel is needed, got {shift}")
    h, w = x.shape[-2:]
    padded = F.pad(x, (shift, shift, shift, shift))
    corners = [padded[..., top:top + h, left:left + w] for top in (0, 2 * shift) for left in (0, 2 * shift)]
    return torch.cat([x, *corners], dim=1)


class PatchEmbedding(nn.Module):
    """Images (B, C, H, W) -> patch tokens (B, H/p * W/p, D), row-major over the patch grid.

    Any H and W divisible by the patch (non-square too) and any channel count fixed at build.
    `shifted=True` first stacks each image with its four copies moved half a patch diagonally
    (`shifted_copies`), Lee et al.'s shifted patch tokenisation, without their LayerNorm of each
    flattened patch: the projection sees 5 x C channels.
    """

    def __init__(self, patch_size: int | tuple[int, int], in_chans: int, width: int, bias: bool = True,
                 shifted: bool = False) -> None:
        super().__init__()
        self.patch_size = pair(patch_size)
        self.in_chans = in_chans
        self.shift = shift_of(self.patch_size, shifted)
        self.proj = nn.Conv2d(in_chans * (SHIFTED_COPIES if self.shift else 1), width,
                              kernel_size=self.patch_size, stride=self.patch_size, bias=bias)

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
        if self.shift:
            x = shifted_copies(x, self.shift)
        return self.proj(x).flatten(2).transpose(1, 2)


def shift_of(patch_size: tuple[int, int], shifted: bool) -> int:
    """The shifted copies' offset: half the (shorter side of the) patch, 0 where not shifted."""
    if not shifted:
        return 0
    if min(patch_size) < 2:
        raise ValueError(f"shifted patches move the image half a patch, so the patch needs a side of at least 2, "
                         f"got {patch_size[0]}x{patch_size[1]}")
    return min(patch_size) // 2


class ClassToken(nn.Module):
    """Prepends a learned class token (and optional register tokens) to the sequence.

    The class token starts independent of the input and gathers it by attending (Turner, 2023;
    Dosovitskiy et al., 2021).
    Registers are extra learned tokens that give attention somewhere to park (Darcet et al.).
    """

    def __init__(self, width: int, num_registers: int = 0, class_token: bool = True) -> None:
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, width)) if class_token else None
        self.reg_token = nn.Parameter(torch.zeros(1, num_registers, width)) if num_registers else None

    @property
    def num_prefix(self) -> int:
        return (self.cls_token is not None) + (0 if self.reg_token is None else self.reg_token.shape[1])

    def forward(self, x: Tensor) -> Tensor:
        parts = [t.expand(x.shape[0], -1, -1) for t in (self.cls_token, self.reg_token) if t is not None]
        return torch.cat([*parts, x], dim=1) if parts else x
