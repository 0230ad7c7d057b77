"""What turns stored pixels into model inputs: one object, saved with a run, used by training,
`anyformer eval`, `predict` and `attention` alike, so that every path feeds the model the same numbers.

Pixels are uint8 in [0, 255]; a model sees (x - mean) / std per channel with mean and std given on
the [0, 1] scale. The arithmetic is (x - 255 mean) * (1 / (255 std)) in float32, in that order:
a multiply by a reciprocal computed once, which is what training has always done, so a run's
evaluation and its predictions reproduce its training inputs bit for bit.
"""
from __future__ import annotations

import os
from typing import Any, Sequence

import torch
from torch import Tensor

from ..shapes import pair
from .vision import load_image

__all__ = ["ImagePreprocess"]


class ImagePreprocess:
    """Per-channel normalisation of uint8 images of one size and channel count.

    `ImagePreprocess(mean, std, channels, image_size)`; `pre(images)` takes uint8 (B, C, H, W) or
    (C, H, W) and returns float32 of the same shape on the images' device; `pre.load(path)` reads
    an image file as this preprocessing expects it (grey or RGB, resized), still uint8.
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float], channels: int,
                 image_size: int | Sequence[int]) -> None:
        self.mean, self.std = [float(m) for m in mean], [float(s) for s in std]
        self.channels, self.image_size = int(channels), pair(image_size, "image_size")
        if len(self.mean) != self.channels or len(self.std) != self.channels:
            raise ValueError(f"expected one mean and one std per channel ({self.channels}), got "
                             f"{len(self.mean)} means and {len(self.std)} stds")
        if not all(s > 0 for s in self.std):
            raise ValueError(f"std must be positive in every channel, got {self.std}")
        # Computed once on the CPU in float32 and copied to each device asked for: the same bits everywhere.
        self._mean_255 = torch.tensor(self.mean).view(-1, 1, 1) * 255
        self._inv_std_255 = 1 / (torch.tensor(self.std).view(-1, 1, 1) * 255)
        self._on: dict[torch.device, tuple[Tensor, Tensor]] = {}

    # ------------------------------------------------------------------ made from data
    @classmethod
    def from_images(cls, images: Tensor) -> "ImagePreprocess":
        """The per-channel mean and std of uint8 images (N, C, H, W), std at least 1e-3."""
        x = images.float().div_(255)
        mean = x.mean(dim=(0, 2, 3)).tolist()
        std = x.std(dim=(0, 2, 3)).clamp_min(1e-3).tolist()
        return cls(mean, std, images.shape[1], tuple(images.shape[2:]))

    @classmethod
    def symmetric(cls, channels: int, image_size: int | Sequence[int]) -> "ImagePreprocess":
        """Pixels scaled to [-1, 1] (seed 000's choice)."""
        return cls([0.5] * channels, [0.5] * channels, channels, image_size)

    # ------------------------------------------------------------------ saved with a run
    def to_dict(self) -> dict[str, Any]:
        return {"kind": "image", "mean": self.mean, "std": self.std, "channels": self.channels,
                "image_size": list(self.image_size)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ImagePreprocess":
        missing = [k for k in ("mean", "std", "channels", "image_size") if k not in d]
        if missing:
            raise ValueError(f"image preprocessing needs mean, std, channels and image_size; "
                             f"missing {missing} in {sorted(d)}")
        return cls(d["mean"], d["std"], d["channels"], d["image_size"])

    @classmethod
    def from_info(cls, info: dict[str, Any]) -> "ImagePreprocess":
        """From a run's data info (config.json "data"): its "preprocess", or for runs written before
        there was one, the mean, std, channels and image_size stored beside it."""
        return cls.from_dict(info["preprocess"] if "preprocess" in info else info)

    # ------------------------------------------------------------------ used
    def load(self, path: str | os.PathLike[str]) -> Tensor:
        """An image file as uint8 (C, H, W): grey or RGB as the model expects, resized to its size."""
        return load_image(path, self.channels, self.image_size)

    def __call__(self, images: Tensor) -> Tensor:
        if not isinstance(images, Tensor) or images.dtype != torch.uint8 or images.dim() not in (3, 4):
            got = (f"a {images.dtype} tensor of shape {tuple(images.shape)}" if isinstance(images, Tensor)
                   else type(images).__name__)
            raise TypeError(f"expected uint8 images (B, C, H, W) or (C, H, W), got {got}")
        if images.shape[-3] != self.channels:
            raise ValueError(f"expected images with {self.channels} channels, got shape {tuple(images.shape)}")
        mean, inv_std = self._constants(images.device)
        return (images.to(torch.float32) - mean) * inv_std

    def _constants(self, device: torch.device) -> tuple[Tensor, Tensor]:
        if device not in self._on:
            self._on[device] = (self._mean_255.to(device), self._inv_std_255.to(device))
        return self._on[device]

    def __repr__(self) -> str:
        return (f"ImagePreprocess(mean={self.mean}, std={self.std}, channels={self.channels}, "
                f"image_size={self.image_size})")
