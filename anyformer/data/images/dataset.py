"""`ImageDataset`: the one in-memory form every image source decodes to."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..errors import DataError

__all__ = ["ImageDataset"]


@dataclass
class ImageDataset:
    """A labelled image set held in memory.

    images: uint8 (N, C, H, W), C is 1 (grey) or 3 (RGB); labels: int64 (N,)
    indexing `classes`; name: where it came from ("mnist", a folder name, ...).
    What a folder's or tar's decoding left out or chose, for the warnings and the run's record:
    skipped: stray files that are not images; unreadable: (file, reason) of images that could not
    be decoded; derived_size: why the images were resized to their size, where it was derived
    because they came in several sizes (None: as asked, or as stored).
    """

    images: torch.Tensor  # uint8 (N, C, H, W)
    labels: torch.Tensor  # int64 (N,)
    classes: list[str]
    name: str
    skipped: list[str] = field(default_factory=list, repr=False)
    unreadable: list[tuple[str, str]] = field(default_factory=list, repr=False)
    derived_size: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # Fail here, at construction, rather than deep inside a training step.
        if not isinstance(self.images, torch.Tensor) or self.images.dtype != torch.uint8 or self.images.dim() != 4:
            raise DataError(f"ImageDataset {self.name!r}: images must be a uint8 tensor (N, C, H, W), "
                            f"got {_described(self.images)}")
        if not isinstance(self.labels, torch.Tensor) or self.labels.dtype != torch.int64 or self.labels.dim() != 1:
            raise DataError(f"ImageDataset {self.name!r}: labels must be an int64 tensor (N,), "
                            f"got {_described(self.labels)}")
        if self.images.shape[0] != self.labels.shape[0]:
            raise DataError(
                f"ImageDataset {self.name!r}: {self.images.shape[0]} images but {self.labels.shape[0]} labels; "
                "they must pair up one to one"
            )
        if not self.classes or not all(isinstance(c, str) for c in self.classes):
            raise DataError(f"ImageDataset {self.name!r}: classes must be a non-empty list of str, got {self.classes!r}")
        if self.labels.numel():
            lo, hi = int(self.labels.min()), int(self.labels.max())
            if lo < 0 or hi >= len(self.classes):
                raise DataError(
                    f"ImageDataset {self.name!r}: labels span [{lo}, {hi}] but there are {len(self.classes)} "
                    f"classes; labels must be in [0, {len(self.classes) - 1}]"
                )

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def channels(self) -> int:
        return int(self.images.shape[1])

    @property
    def image_size(self) -> tuple[int, int]:
        """(H, W)."""
        return int(self.images.shape[2]), int(self.images.shape[3])

    def __repr__(self) -> str:
        n, c, h, w = self.images.shape
        return f"ImageDataset(name={self.name!r}, n={n}, shape=({c}, {h}, {w}), classes={len(self.classes)})"


def _described(value: object) -> str:
    """A tensor as its dtype and shape, anything else as its type: what a refused argument was."""
    if isinstance(value, torch.Tensor):
        return f"{value.dtype} {tuple(value.shape)}"
    return type(value).__name__
