"""Sizes given as one int or a (height, width) pair: the one helper every floor uses."""
from __future__ import annotations

import numbers
from typing import Any

__all__ = ["pair", "patch_grid"]


def pair(v: Any, what: str = "size") -> tuple[int, int]:
    """An image, patch or grid size as (height, width): 28 -> (28, 28), [32, 48] -> (32, 48).

    Anything else (a bool, a float, a zero, three numbers) is refused with what was expected.
    """
    hw = (v, v) if isinstance(v, numbers.Integral) else tuple(v) if isinstance(v, (tuple, list)) else None
    if hw is None or len(hw) != 2 or not all(
            isinstance(n, numbers.Integral) and not isinstance(n, bool) and n > 0 for n in hw):
        raise ValueError(f"bad {what} {v!r}: expected a positive int or (height, width)")
    return int(hw[0]), int(hw[1])


def patch_grid(image_size: Any, patch_size: Any) -> tuple[int, int]:
    """The (rows, columns) of patches that tile an image, refused in one line when they do not fit."""
    (h, w), (ph, pw) = pair(image_size, "image_size"), pair(patch_size, "patch_size")
    if h % ph or w % pw:
        raise ValueError(f"image size {h}x{w} is not divisible by the patch size {ph}x{pw}")
    return h // ph, w // pw
