"""Test-time views of a batch of images: the views a classifier's logits are averaged over in eval mode.

A model trained with mirror images (colour pictures) or with small shifts (grey ones) learns those views
as the same class; scoring each image on several of them and averaging the logits is test-time
augmentation. The views are stacked into one batch, so a model runs them in one pass.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["shifted", "stack_views", "view_count"]


def shifted(images: Tensor, shift: int) -> list[Tensor]:
    """The four copies of `images` (B, C, H, W) moved by `shift` pixels up, down, left and right; the
    pixels that come in repeat the edge (no fill value to know: a grey picture's background is whatever
    its edge is)."""
    if shift <= 0:
        return []
    h, w = images.shape[-2:]
    if shift >= min(h, w):
        raise ValueError(f"a test-time shift must be under the image's shorter side ({min(h, w)} px), got {shift}")
    s = shift
    padded = F.pad(images, (s, s, s, s), mode="replicate")
    # A window at (row, column) of the padded image is the image moved by (s - row, s - column).
    return [padded[..., r:r + h, c:c + w] for r, c in ((2 * s, s), (0, s), (s, 2 * s), (s, 0))]


def view_count(mirror: bool, shift: int) -> int:
    """How many views `stack_views` makes of each image."""
    return 1 + int(mirror) + (4 if shift > 0 else 0)


def stack_views(images: Tensor, mirror: bool, shift: int) -> Tensor:
    """(V * B, C, H, W): the images, then their mirror images (if `mirror`), then their four shifts by
    `shift` pixels (if above 0), view after view; `logits.view(V, B, -1).mean(0)` averages them."""
    views = [images] + ([images.flip(-1)] if mirror else []) + shifted(images, shift)
    return torch.cat(views) if len(views) > 1 else images
