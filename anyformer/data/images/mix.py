"""Mixing images and their labels within a batch: mixup (Zhang et al. 2018) and CutMix (Yun et al. 2019).

Each image is mixed with its partner in the batch read backwards (as timm's `Mixup` pairs them): mixup
blends the two, lam * x + (1 - lam) * partner; CutMix pastes a box of the partner, of area about (1 - lam)
of the image. The labels are mixed by the same share (for CutMix, the box's area as cut at the borders), so
the target is a distribution over the classes. lam is drawn from Beta(alpha, alpha) once a batch; with
both kinds on, each batch takes one of them with even odds, as DeiT trains. Every draw comes from the
step's generator: a resumed run, or one on another device, mixes alike.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor


def mix_batch(x: Tensor, labels: Tensor, classes: int, mixup: float, cutmix: float,
              generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """(mixed images (B, C, H, W), target distributions (B, classes)); mixup and cutmix are the Beta
    distributions' alpha, 0 for off (both 0: the batch as it is, one-hot targets)."""
    if mixup < 0 or cutmix < 0:
        raise ValueError(f"mixup and cutmix take a Beta alpha >= 0 (0: off), got {mixup} and {cutmix}")
    target = F.one_hot(labels, classes).to(x.dtype)
    if not (mixup or cutmix):
        return x, target
    # numpy draws the Beta (torch's has no generator); its seed comes from the step's torch generator
    rng = np.random.default_rng(int(torch.randint(0, 2 ** 62, (1,), generator=generator)))
    use_cutmix = bool(cutmix) and (not mixup or rng.random() < 0.5)
    lam = float(rng.beta(cutmix, cutmix) if use_cutmix else rng.beta(mixup, mixup))
    partner = x.flip(0)
    if use_cutmix:
        h, w = x.shape[-2:]
        cut_h, cut_w = int(h * (1 - lam) ** 0.5), int(w * (1 - lam) ** 0.5)
        cy, cx = int(rng.integers(h)), int(rng.integers(w))
        top, bottom = max(cy - cut_h // 2, 0), min(cy + cut_h // 2, h)
        left, right = max(cx - cut_w // 2, 0), min(cx + cut_w // 2, w)
        x = x.clone()
        x[..., top:bottom, left:right] = partner[..., top:bottom, left:right]
        lam = 1 - (bottom - top) * (right - left) / (h * w)  # the share the box left, as cut at the borders
    else:
        x = lam * x + (1 - lam) * partner
    return x, lam * target + (1 - lam) * target.flip(0)
