"""What turns stored pixels into model inputs: one object, saved with a run, used by training,
`anyformer eval`, `predict` and `attention` alike, so that every path feeds the model the same numbers.

Pixels are uint8 in [0, 255]; a model sees (x - mean) / std per channel with mean and std given on
the [0, 1] scale. The arithmetic is (x - 255 mean) * (1 / (255 std)) in float32, in that order:
a multiply by a reciprocal computed once, which is what training has always done, so a run's
evaluation and its predictions reproduce its training inputs bit for bit.

A user's picture is framed the way the training images were (drawn.py: polarity, crop, aspect,
centre), when the training images were objects on a plain dark background; the framing and the
training images' statistics are saved with the run, so a run written before either loads as it did
(no framing, no warnings). Otherwise a picture is decoded as a training image was (`load_image`).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor

from ...shapes import pair
from .drawn import Framing, fit_framing, frame, ink_fill
from .picture import read_picture
from .vision import load_image

Source = "str | os.PathLike[str] | IO[bytes] | Image.Image"

__all__ = ["ImagePreprocess"]


class ImagePreprocess:
    """Per-channel normalisation of uint8 images of one size and channel count.

    `ImagePreprocess(mean, std, channels, image_size)`; `pre(images)` takes uint8 (B, C, H, W) or
    (C, H, W) and returns float32 of the same shape on the images' device; `pre.load(source)` reads
    a picture as this preprocessing expects it (framed, or decoded and fitted to the image size as the
    training images were: scaled to cover it, then centre-cropped), still uint8;
    `pre.check(x)` says in one line why a loaded picture is unlike the training images, or None.
    framing: how the training images were framed (None: decoded as training images were); stats: the 0.1% and 99.9%
    quantiles of the training images' per-image pixel mean, std and ink fill (drawn.ink_fill) on
    [0, 1] ({"mean": [lo, hi], "std": [lo, hi], "fill": [lo, hi]}), which `check` compares against.
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float], channels: int,
                 image_size: int | Sequence[int], *, framing: Framing | None = None,
                 stats: dict[str, list[float]] | None = None) -> None:
        self.framing, self.stats = framing, stats
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
        """The per-channel mean and std of uint8 images (N, C, H, W), std at least 1e-3, with their
        framing and statistics."""
        x = images.float().div_(255)
        mean = x.mean(dim=(0, 2, 3)).tolist()
        std = x.std(dim=(0, 2, 3)).clamp_min(1e-3).tolist()
        return cls(mean, std, images.shape[1], tuple(images.shape[2:]), **cls.measure(images))

    @classmethod
    def symmetric(cls, channels: int, image_size: int | Sequence[int],
                  images: Tensor | None = None) -> "ImagePreprocess":
        """Pixels scaled to [-1, 1] (Turner's (2023) MNIST ViT); given the training images, with their framing."""
        return cls([0.5] * channels, [0.5] * channels, channels, image_size,
                   **(cls.measure(images) if images is not None else {}))

    @staticmethod
    def measure(images: Tensor, sample: int = 10000) -> dict[str, Any]:
        """The framing and statistics of uint8 training images (N, C, H, W) that `check` compares with.
        A spread sample, not the first ones: datasets stored by class would otherwise show one class."""
        a = images.numpy() if isinstance(images, Tensor) else np.asarray(images)
        a = a[np.linspace(0, len(a) - 1, min(sample, len(a))).astype(np.int64)] if len(a) else a
        if len(a) == 0:
            return {}
        x = a.astype(np.float32) / 255
        q = lambda v: [round(float(t), 5) for t in np.quantile(v, [0.001, 0.999])]  # noqa: E731
        flat = x.reshape(len(x), -1)
        return {"framing": fit_framing(a), "stats": {"mean": q(flat.mean(1)), "std": q(flat.std(1)),
                                                     "fill": q(ink_fill(x.mean(1)))}}

    # ------------------------------------------------------------------ saved with a run
    def to_dict(self) -> dict[str, Any]:
        return {"kind": "image", "mean": self.mean, "std": self.std, "channels": self.channels,
                "image_size": list(self.image_size),
                "framing": self.framing.to_dict() if self.framing is not None else None, "stats": self.stats}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ImagePreprocess":
        missing = [k for k in ("mean", "std", "channels", "image_size") if k not in d]
        if missing:
            raise ValueError(f"image preprocessing needs mean, std, channels and image_size; "
                             f"missing {missing} in {sorted(d)}")
        framing = Framing.from_dict(d["framing"]) if d.get("framing") is not None else None
        return cls(d["mean"], d["std"], d["channels"], d["image_size"], framing=framing, stats=d.get("stats"))

    @classmethod
    def from_info(cls, info: dict[str, Any]) -> "ImagePreprocess":
        """From a run's data info (config.json "data"): its "preprocess", or for runs written before
        there was one, the mean, std, channels and image_size stored beside it."""
        return cls.from_dict(info["preprocess"] if "preprocess" in info else info)

    # ------------------------------------------------------------------ used
    def load(self, source: Source, raw: bool = False) -> Tensor:
        """A picture (a path, a binary file object or a PIL image) as uint8 (C, H, W): framed like
        the training images when the run has a framing, else (or with raw) decoded exactly as a
        training image was (`vision.load_image`: upright, grey or RGB, scaled to cover the image size
        and centre-cropped), so that the model sees the numbers it would have seen in training."""
        return self.load_checked(source, raw)[0]

    def load_checked(self, source: Source, raw: bool = False) -> tuple[Tensor, str | None]:
        """`load`, and one line saying why the picture is unlike the training images (or None)."""
        if raw or self.framing is None:
            x = load_image(source, self.channels, self.image_size)
            return x, self.check(x)
        a, notes = frame(read_picture(source), self.framing, self.image_size)
        x = torch.from_numpy(a)[None]
        return x, "; ".join(filter(None, [*notes, self.check(x)])) or None

    def check(self, x: Tensor) -> str | None:
        """Why uint8 (C, H, W) pixels are far from the training images, in one line, or None: a
        confident answer about an empty canvas or a whole page of text is a wrong answer."""
        a = x.float().div(255)
        mean, std = float(a.mean()), float(a.std()) if a.numel() > 1 else 0.0
        if std < 1e-3:
            return "no drawing found in the picture (it is one plain colour once framed); the answer is a guess"
        if not self.stats:
            return None
        fill = float(ink_fill(a.mean(0, keepdim=True).numpy())[0])
        far = []
        for name, value in (("mean", mean), ("std", std), ("fill", fill)):
            if name in self.stats:
                lo, hi = self.stats[name]
                # Outside the training range (0.1% to 99.9%) by more than a quarter of its width.
                if not lo - (hi - lo) / 4 <= value <= hi + (hi - lo) / 4:
                    far.append(f"{name} {value:.2f}, training {lo:.2f}-{hi:.2f}")
        if far:
            return f"the picture is unlike the training images ({'; '.join(far)}); the answer may be wrong"
        return None

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
                f"image_size={self.image_size}, framing={self.framing})")
