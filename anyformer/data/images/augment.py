"""Batched data augmentation on float tensors (B, C, H, W).

Every op draws all its randomness for the whole batch in one call and
transforms the batch with a few tensor ops (no Python loop over samples), so it
is cheap enough for the training hot path and runs on whatever device `x` is on.

The random numbers are drawn where the `generator` lives (the CPU for a plain `torch.Generator()`,
and without one) and then moved to x's device (queued, `transfer.to_device`): the same seed augments
alike on every device, so a resumed run, or one under torchrun, draws the same transforms on a GPU as
on the CPU.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..transfer import to_device

__all__ = ["AFFINE_ROTATE_DEG", "AFFINE_SCALE", "AFFINE_SHIFT", "CROP_PAD", "ELASTIC_MAGNITUDE", "ELASTIC_SPACING",
           "random_affine", "random_crop_flip", "random_elastic", "random_erasing", "random_resized_crop_flip",
           "random_stroke_width"]

# random_affine's default ranges (grey digits and glyphs: +-2 px on 28x28, +-10 degrees, 0.9-1.1 zoom); the
# trainer's `--augment-strength` scales these (train/classify.py digits_affine).
AFFINE_SHIFT = 2 / 28
AFFINE_ROTATE_DEG = 10.0
AFFINE_SCALE = 0.1
CROP_PAD = 4  # random_crop_flip's pad: CIFAR's 4 pixels (1/8 of a 32-pixel side)
# random_elastic's defaults, as shares of the side: Simard et al. (2003) smoothed MNIST's random displacement
# fields with a Gaussian of 4 px and scaled them by 34, which leaves each pixel moved by about 1.4 px (a standard
# deviation) and neighbours within about 7 px moving together; here control points 7/28 of the side apart,
# each moved by a normal draw of standard deviation 1.4/28 of the side.
ELASTIC_MAGNITUDE = 1.4 / 28
ELASTIC_SPACING = 7 / 28


def _draw(fn, *args, generator: torch.Generator | None, device: torch.device, **kwargs) -> torch.Tensor:
    """`fn(*args)` (torch.rand, torch.randint) drawn on the generator's device, then moved to `device`."""
    here = generator.device if generator is not None else torch.device("cpu")
    return to_device(fn(*args, generator=generator, device=here, **kwargs), device)


def _check_area_ratio(fn: str, area_name: str, area: tuple[float, float], ratio: tuple[float, float]) -> None:
    """A rectangle's ranges, checked: its area as a share of the image's in (0, 1], its side ratio positive."""
    lo, hi = area
    if not 0 < lo <= hi <= 1:
        raise ValueError(f"{fn}: {area_name} must be (lo, hi) with 0 < lo <= hi <= 1, got {area}")
    r_lo, r_hi = ratio
    if not 0 < r_lo <= r_hi:
        raise ValueError(f"{fn}: ratio must be (lo, hi) with 0 < lo <= hi, got {ratio}")


def _log_uniform(u: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    """Uniform draws `u` in [0, 1) mapped log-uniformly onto [lo, hi] (a side ratio: r and 1/r alike likely)."""
    return torch.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))


def _check_batch(x: torch.Tensor, fn: str, need_float: bool) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"{fn}: expected a (B, C, H, W) tensor, got {shape}")
    if need_float and not x.is_floating_point():
        raise ValueError(f"{fn}: expected a floating point tensor, got {x.dtype}; convert with x.float() / 255 first")


def random_affine(
    x: torch.Tensor,
    max_shift: float = AFFINE_SHIFT,
    max_rotate_deg: float = AFFINE_ROTATE_DEG,
    scale: tuple[float, float] = (1 - AFFINE_SCALE, 1 + AFFINE_SCALE),
    generator: torch.Generator | None = None,
    *,
    fill: float = 0.0,
) -> torch.Tensor:
    """Random per-sample rotation, zoom and translation (for digits and the like).

    max_shift: maximum translation as a FRACTION of the image size along each axis,
      uniform in [-max_shift, max_shift]; the default 2/28 is +-2 pixels on 28x28.
    max_rotate_deg: rotation angle uniform in [-max_rotate_deg, max_rotate_deg] degrees.
    scale: zoom factor uniform in [scale[0], scale[1]]; > 1 enlarges the content.
    fill: value for pixels sampled from outside the image (use the background
      value, e.g. the normalised black level if `x` is already normalised).
    Bilinear resampling; returns a new tensor of the same shape and dtype.
    """
    _check_batch(x, "random_affine", need_float=True)
    if not 0 <= max_shift < 1:
        raise ValueError(f"random_affine: max_shift is a fraction of the image size in [0, 1), got {max_shift}")
    lo, hi = scale
    if not 0 < lo <= hi:
        raise ValueError(f"random_affine: scale must be (lo, hi) with 0 < lo <= hi, got {scale}")
    b, _, h, w = x.shape
    u = _draw(torch.rand, b, 4, generator=generator, device=x.device, dtype=x.dtype) * 2 - 1  # uniform [-1, 1)
    angle = u[:, 0] * math.radians(max_rotate_deg)
    s = lo + (u[:, 1] + 1) * 0.5 * (hi - lo)
    # affine_grid maps output coords to input coords in [-1, 1] units on each axis; a
    # shift of f*size pixels is 2f there, and rotation needs the H/W aspect correction
    # to stay a true rotation on non-square images.
    tx, ty = u[:, 2] * (2 * max_shift), u[:, 3] * (2 * max_shift)
    cos, sin = torch.cos(angle) / s, torch.sin(angle) / s
    a00, a01 = cos, -sin * (h / w)
    a10, a11 = sin * (w / h), cos
    theta = torch.stack(
        [
            torch.stack([a00, a01, -(a00 * tx + a01 * ty)], dim=1),
            torch.stack([a10, a11, -(a10 * tx + a11 * ty)], dim=1),
        ],
        dim=1,
    )  # (B, 2, 3): in = A (out - t), i.e. the content moves by +t
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    if fill == 0.0:
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    # grid_sample can only pad with zeros, so shift the background to zero and back.
    return F.grid_sample(x - fill, grid, mode="bilinear", padding_mode="zeros", align_corners=False) + fill


def random_crop_flip(
    x: torch.Tensor,
    pad: int = CROP_PAD,
    flip: bool = True,
    generator: torch.Generator | None = None,
    *,
    padding_mode: str = "reflect",
) -> torch.Tensor:
    """Pad by `pad` pixels, take a random same-size crop per sample, and mirror
    half the samples left-right (the standard CIFAR augmentation).

    padding_mode: "reflect" (needs pad < H and W) or "zeros". Pixels are moved,
    never interpolated. Implemented as one gather over the padded batch.
    """
    _check_batch(x, "random_crop_flip", need_float=False)
    if pad < 0:
        raise ValueError(f"random_crop_flip: pad must be >= 0, got {pad}")
    if padding_mode not in ("reflect", "zeros"):
        raise ValueError(f"random_crop_flip: padding_mode must be 'reflect' or 'zeros', got {padding_mode!r}")
    b, c, h, w = x.shape
    if padding_mode == "reflect" and pad >= min(h, w):
        raise ValueError(f"random_crop_flip: reflect padding needs pad < {min(h, w)}, got {pad}")
    dev = x.device
    if pad:
        xp = F.pad(x, (pad, pad, pad, pad), mode="reflect" if padding_mode == "reflect" else "constant")
        offs = _draw(torch.randint, 0, 2 * pad + 1, (b, 2), generator=generator, device=dev)
    else:
        xp = x
        offs = torch.zeros(b, 2, dtype=torch.long, device=dev)
    wp = w + 2 * pad
    rows = offs[:, :1] + torch.arange(h, device=dev)  # (B, H)
    cols = offs[:, 1:] + torch.arange(w, device=dev)  # (B, W)
    if flip:
        flipped = _draw(torch.rand, b, 1, generator=generator, device=dev) < 0.5
        cols = torch.where(flipped, cols.flip(1), cols)  # mirror = read the crop's columns backwards
    idx = (rows[:, :, None] * wp + cols[:, None, :]).reshape(b, 1, h * w).expand(b, c, h * w)
    return xp.reshape(b, c, -1).gather(2, idx).reshape(b, c, h, w)


def random_resized_crop_flip(
    x: torch.Tensor,
    scale: tuple[float, float] = (0.35, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
    flip: bool = True,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """A random crop of each sample, scaled back to the full size, mirrored left-right for half the samples
    (Inception's and DeiT's random-resized crop, batched).

    scale: the crop's area as a fraction of the image's, uniform in [scale[0], scale[1]].
    ratio: the crop's width / height, log-uniform in [ratio[0], ratio[1]]; a crop that would not fit is
      shrunk to fit (torchvision retries instead; a batched draw cannot).
    The crop's place is uniform where it fits. Bilinear resampling (one affine_grid + grid_sample for the
    batch, so every sample is resampled even at scale 1); returns a new tensor of the same shape and dtype.
    """
    _check_batch(x, "random_resized_crop_flip", need_float=True)
    _check_area_ratio("random_resized_crop_flip", "scale", scale, ratio)
    lo, hi = scale
    b = x.shape[0]
    u = _draw(torch.rand, b, 5, generator=generator, device=x.device, dtype=x.dtype)
    area = lo + u[:, 0] * (hi - lo)
    aspect = _log_uniform(u[:, 1], *ratio)
    # The crop's sides as fractions of the image's (its area = sw * sh): capped at the whole side.
    sw = torch.sqrt(area * aspect).clamp(max=1.0)
    sh = torch.sqrt(area / aspect).clamp(max=1.0)
    # Its centre in affine_grid's [-1, 1] units, uniform where the crop fits: at most 1 - side away from 0.
    cx = (u[:, 2] * 2 - 1) * (1 - sw)
    cy = (u[:, 3] * 2 - 1) * (1 - sh)
    mirror = torch.where(u[:, 4] < 0.5, -1.0, 1.0).to(x.dtype) if flip else torch.ones_like(sw)
    zero = torch.zeros_like(sw)
    theta = torch.stack([torch.stack([sw * mirror, zero, cx], dim=1),
                         torch.stack([zero, sh, cy], dim=1)], dim=1)  # (B, 2, 3): output coords -> input coords
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


def random_erasing(
    x: torch.Tensor,
    p: float = 0.25,
    area: tuple[float, float] = (0.02, 1 / 3),
    ratio: tuple[float, float] = (0.3, 1 / 0.3),
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Random erasing (Zhong et al. 2020), as DeiT trains with it (timm's RandomErasing, mode "pixel", one
    rectangle): each sample, with probability `p`, has one rectangle replaced by standard normal noise, a draw a
    pixel and channel. Meant for a batch already normalised, where that noise is at the data's own scale.

    area: the rectangle's area as a fraction of the image's, uniform in [area[0], area[1]].
    ratio: its height / width, log-uniform in [ratio[0], ratio[1]]; sides are rounded to whole pixels (at
      least 1) and a rectangle that would not fit is cut to the image's side (timm draws again instead; a
      batched draw cannot). Its place is uniform where it fits.
    Returns a new tensor of the same shape and dtype; `p=0` returns `x` unchanged and draws nothing.
    """
    _check_batch(x, "random_erasing", need_float=True)
    if not 0 <= p <= 1:
        raise ValueError(f"random_erasing: p is a probability in [0, 1], got {p}")
    _check_area_ratio("random_erasing", "area", area, ratio)
    if p == 0:
        return x
    b, c, h, w = x.shape
    u = _draw(torch.rand, b, 5, generator=generator, device=x.device, dtype=torch.float64)
    lo, hi = area
    frac = lo + u[:, 1] * (hi - lo)
    aspect = _log_uniform(u[:, 2], *ratio)
    eh = torch.round(torch.sqrt(frac * h * w * aspect)).clamp(1, h).long()
    ew = torch.round(torch.sqrt(frac * h * w / aspect)).clamp(1, w).long()
    top = (u[:, 3] * (h - eh + 1)).long()  # uniform over the h - eh + 1 places that fit
    left = (u[:, 4] * (w - ew + 1)).long()
    rows = torch.arange(h, device=x.device)[None, :]
    cols = torch.arange(w, device=x.device)[None, :]
    inside_rows = (rows >= top[:, None]) & (rows < (top + eh)[:, None])  # (B, H)
    inside_cols = (cols >= left[:, None]) & (cols < (left + ew)[:, None])  # (B, W)
    erased = (inside_rows[:, :, None] & inside_cols[:, None, :]) & (u[:, 0] < p)[:, None, None]
    noise = _draw(torch.randn, b, c, h, w, generator=generator, device=x.device, dtype=x.dtype)
    return torch.where(erased[:, None], noise, x)


def random_stroke_width(x: torch.Tensor, p: float = 0.5, generator: torch.Generator | None = None) -> torch.Tensor:
    """Strokes made thicker or thinner (glyphs in another face's weight, a pen pressed harder): each sample, with
    probability `p`, is moved towards its grey-level dilation (a 3x3 maximum filter) or its erosion (a 3x3
    minimum filter), each direction alike likely, by a share drawn uniform in [0, 1). Dilation widens the bright
    strokes of light-on-dark writing by up to a pixel a side and narrows dark-on-light ones; erosion the other way,
    so the result does not depend on which of the two a folder holds. Monotone in the pixel values, so it may run
    before or after a positive per-channel normalisation alike.

    Returns a new tensor of the same shape and dtype; `p=0` returns `x` unchanged and draws nothing.
    """
    _check_batch(x, "random_stroke_width", need_float=True)
    if not 0 <= p <= 1:
        raise ValueError(f"random_stroke_width: p is a probability in [0, 1], got {p}")
    if p == 0:
        return x
    u = _draw(torch.rand, x.shape[0], 3, generator=generator, device=x.device, dtype=x.dtype)
    share = (u[:, 1] * (u[:, 0] < p))[:, None, None, None]
    thicker = (u[:, 2] < 0.5)[:, None, None, None]
    dilated = F.max_pool2d(x, 3, stride=1, padding=1)  # max_pool pads with -inf: the border is not a stroke
    eroded = -F.max_pool2d(-x, 3, stride=1, padding=1)
    return torch.lerp(x, torch.where(thicker, dilated, eroded), share)


def random_elastic(x: torch.Tensor, p: float = 0.5, magnitude: float = ELASTIC_MAGNITUDE,
                   spacing: float = ELASTIC_SPACING, generator: torch.Generator | None = None) -> torch.Tensor:
    """Elastic distortion (Simard et al. 2003, "Best practices for convolutional neural networks applied to visual
    document analysis"): each sample, with probability `p`, is resampled through a smooth random displacement
    field, the wobble of a hand that never draws a stroke twice alike. The field: control points on a grid
    `spacing` of the side apart (the corners included), each moved along each axis by a normal draw with standard
    deviation `magnitude` of that axis's side, interpolated bicubically between them (Simard smoothed per-pixel
    noise with a Gaussian; a coarse grid gives a field of the same kind in one small draw). Bilinear resampling;
    pixels moved in from outside take the nearest border pixel's value, so light-on-dark and dark-on-light
    pictures are treated alike and no normalised background value is needed.

    Returns a new tensor of the same shape and dtype; `p=0` returns `x` unchanged and draws nothing.
    """
    _check_batch(x, "random_elastic", need_float=True)
    if not 0 <= p <= 1:
        raise ValueError(f"random_elastic: p is a probability in [0, 1], got {p}")
    if not magnitude >= 0 or not 0 < spacing <= 1:
        raise ValueError(f"random_elastic: magnitude >= 0 and spacing in (0, 1] (shares of the side), got "
                         f"{magnitude} and {spacing}")
    if p == 0:
        return x
    b, _, h, w = x.shape
    points = math.ceil(1 / spacing) + 1  # control points an axis, corners included
    chosen = _draw(torch.rand, b, generator=generator, device=x.device, dtype=x.dtype) < p
    field = _draw(torch.randn, b, 2, points, points, generator=generator, device=x.device, dtype=x.dtype)
    # grid_sample reads positions in [-1, 1] on each axis: a move of m of the side is 2m there.
    field = field * (2 * magnitude) * chosen[:, None, None, None]
    field = F.interpolate(field, size=(h, w), mode="bicubic", align_corners=True)  # (B, 2: x then y, H, W)
    identity = F.affine_grid(torch.eye(2, 3, dtype=x.dtype, device=x.device).expand(b, 2, 3), [b, 1, h, w],
                             align_corners=False)
    grid = identity + field.permute(0, 2, 3, 1)
    moved = F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)
    return torch.where(chosen[:, None, None, None], moved, x)  # the rest bit for bit, not resampled at 0 shift
