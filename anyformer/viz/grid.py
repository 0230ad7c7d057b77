"""Generated images as one picture: a grid with one row per class (what a generator run shows)."""
from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import Tensor

from ..files import atomic_write


def image_grid(images: Tensor, rows: int, pad: int = 2, scale: int = 2) -> Tensor:
    """uint8 (N, C, H, W), N = rows * cols in row order -> one uint8 (C, H', W') picture, each image
    magnified `scale` times (28-pixel digits are hard to read at 1:1) and framed by `pad` pixels."""
    if images.dtype != torch.uint8 or images.dim() != 4:
        raise TypeError(f"expected uint8 images (N, C, H, W), got {images.dtype} of shape {tuple(images.shape)}")
    n, c, h, w = images.shape
    if rows < 1 or n % rows:
        raise ValueError(f"{n} images do not fill {rows} rows evenly")
    cols = n // rows
    images = images.repeat_interleave(scale, dim=2).repeat_interleave(scale, dim=3)
    h, w = h * scale, w * scale
    out = torch.full((c, rows * (h + pad) + pad, cols * (w + pad) + pad), 64, dtype=torch.uint8)
    for i in range(n):
        r, k = divmod(i, cols)
        out[:, pad + r * (h + pad):pad + r * (h + pad) + h, pad + k * (w + pad):pad + k * (w + pad) + w] = images[i]
    return out


def save_grid(images: Tensor, rows: int, path: str | os.PathLike) -> Path:
    """Write `image_grid(images, rows)` as a PNG, atomically."""
    from PIL import Image
    grid = image_grid(images, rows)
    array = grid[0].numpy() if grid.shape[0] == 1 else grid.permute(1, 2, 0).numpy()
    picture = Image.fromarray(array)  # (H, W) uint8 is grey, (H, W, 3) is RGB
    atomic_write(path, lambda f: picture.save(f, format="PNG"))
    return Path(path)
