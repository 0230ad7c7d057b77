"""Pictures as people make them, framed the way the training set's pictures were framed.

MNIST's digits are light strokes on black, scaled (aspect kept) so the longest side fits a 20x20
box and placed in 28x28 so that their centre of mass is the centre. Fashion-MNIST's objects are
light on black too, but scaled so the longest side fills all 28 pixels and centred by their
bounding box (Zalando's README: trim, resize the longest edge to 28, centre on the canvas, negate).
A user's picture is usually neither: dark ink on light paper, any size, off-centre, with alpha.

So the framing is measured from the training images themselves (`fit_framing`), not named per
dataset: the longest side of the ink, whether the centre of mass or the box centre is where the
images agree, and the stroke width. `frame` then turns any picture into that form: composite alpha
over the background the strokes stand out from, detect polarity from the border, subtract the
paper, crop to the ink, scale keeping the aspect ratio, thicken a pen much thinner than the
training strokes, and place the centre where training placed it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

__all__ = ["Framing", "already_framed", "fit_framing", "frame", "ink_fill"]

_WORK_SIDE = 2048     # pictures larger than this are reduced first: the framing ends at 28 pixels anyway
_OVERSAMPLE = 4       # the ink is cropped and thickened at 4x the final box, then averaged down
_TRIM = 0.001         # the fraction of ink mass ignored at each edge of the crop (dust, JPEG specks)


@dataclass(frozen=True)
class Framing:
    """box: the ink's longest side in the model's pixels; centre: "mass" or "box", the point placed
    at `at` (y, x, pixel-index coordinates); stroke: the training strokes' typical width over box."""

    box: int
    centre: str
    at: tuple[float, float]
    stroke: float

    def to_dict(self) -> dict[str, Any]:
        return {"box": self.box, "centre": self.centre, "at": list(self.at), "stroke": self.stroke}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Framing":
        try:
            framing = cls(int(d["box"]), str(d["centre"]), (float(d["at"][0]), float(d["at"][1])),
                          float(d["stroke"]))
        except (KeyError, TypeError, IndexError, ValueError):
            raise ValueError(f"framing needs box, centre, at (y, x) and stroke, got {d!r}") from None
        if framing.centre not in ("mass", "box") or framing.box < 1:
            raise ValueError(f"framing centre must be 'mass' or 'box' and box >= 1, got {d!r}")
        return framing


def _extent(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First and last True index along the last axis of (N, L) masks."""
    first = mask.argmax(1)
    last = mask.shape[1] - 1 - mask[:, ::-1].argmax(1)
    return first, last


def ink_fill(a: np.ndarray) -> np.ndarray:
    """How much of its bounding box the ink of each (N, H, W) image in [0, 1] fills: a digit's strokes
    fill a third or so, a blob or a thumb over the lens all of it. Blank images give 0."""
    ink = a > 0
    has = ink.any(axis=(1, 2))
    r0, r1 = _extent(ink.any(2))
    c0, c1 = _extent(ink.any(1))
    area = (r1 - r0 + 1) * (c1 - c0 + 1)
    return np.where(has, a.sum((1, 2)) / np.maximum(area, 1), 0.0)


def _stroke_width(mask: np.ndarray) -> float:
    """About twice the area over the boundary: a stroke w pixels wide and L long has area wL and
    2L boundary pixels (w >= 2), so the ratio is its width whatever its length."""
    if not mask.any():
        return 0.0
    p = np.pad(mask, 1)
    inner = p[1:-1, 1:-1] & p[:-2, 1:-1] & p[2:, 1:-1] & p[1:-1, :-2] & p[1:-1, 2:]
    boundary = int(mask.sum() - inner.sum())
    return 2.0 * float(mask.sum()) / max(1, boundary)


def fit_framing(images: np.ndarray, sample: int = 5000) -> Framing | None:
    """The framing of uint8 (N, 1, H, W) training images, or None when they are not objects on a
    plain dark background (colour photos such as CIFAR: those keep plain resizing)."""
    if images.ndim != 4 or images.shape[1] != 1 or len(images) == 0:
        return None
    a = np.asarray(images[:sample, 0], dtype=np.float32) / 255
    n, h, w = a.shape
    ring = np.concatenate([a[:, 0, :], a[:, -1, :], a[:, 1:-1, 0], a[:, 1:-1, -1]], axis=1)
    if np.mean(np.median(ring, axis=1) < 0.02) < 0.9:
        return None
    ink = a > 0
    keep = ink.any(axis=(1, 2))
    a, ink = a[keep], ink[keep]
    if len(a) == 0:
        return None
    r0, r1 = _extent(ink.any(2))
    c0, c1 = _extent(ink.any(1))
    box = int(np.median(np.maximum(r1 - r0 + 1, c1 - c0 + 1)))
    ys, xs = np.arange(h, dtype=np.float32), np.arange(w, dtype=np.float32)
    mass = a.sum((1, 2))
    com = np.stack([(a.sum(2) * ys).sum(1) / mass, (a.sum(1) * xs).sum(1) / mass], 1)
    mid = np.stack([(r0 + r1) / 2, (c0 + c1) / 2], 1)
    # Whichever centre the training images agree on (varies least) is the one their maker placed.
    by_mass = com.std(0).sum() < mid.std(0).sum()
    at = (com if by_mass else mid).mean(0)
    stroke = float(np.median([_stroke_width(m) for m in (a[:500] > 0.5)])) / box
    return Framing(box, "mass" if by_mass else "box", (round(float(at[0]) * 2) / 2, round(float(at[1]) * 2) / 2),
                   round(stroke, 4))


def _grey(im: Image.Image) -> np.ndarray:
    """Luminance in [0, 1]; transparent parts become the background the strokes stand out from
    (a canvas's transparent pixels are often stored black, whatever colour they show on screen)."""
    has_alpha = im.mode in ("RGBA", "LA", "PA", "La", "RGBa") or "transparency" in im.info
    if not has_alpha:
        return np.asarray(im.convert("L"), dtype=np.float32) / 255
    rgba = np.asarray(im.convert("RGBA"), dtype=np.float32) / 255
    lum = rgba[..., :3] @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    alpha = rgba[..., 3]
    if alpha.min() > 0.99:
        return lum
    if alpha.sum() < 1e-6:
        return np.zeros_like(lum)  # all transparent: nothing drawn
    stroke = float((lum * alpha).sum() / alpha.sum())
    background = 1.0 if stroke < 0.5 else 0.0
    return lum * alpha + background * (1 - alpha)


def _resize(x: np.ndarray, hw: tuple[int, int]) -> np.ndarray:
    h, w = hw
    shrink = h < x.shape[0] or w < x.shape[1]
    # BOX averages every source pixel into the one it lands in, as anti-aliased scanning does.
    resample = Image.Resampling.BOX if shrink else Image.Resampling.BILINEAR
    return np.array(Image.fromarray(np.ascontiguousarray(x, dtype=np.float32)).resize((w, h), resample))


def _crop(x: np.ndarray, trim: float) -> np.ndarray:
    def span(m: np.ndarray) -> slice:
        c = np.cumsum(m) / m.sum()
        return slice(int(np.searchsorted(c, trim, "right")), int(np.searchsorted(c, 1 - trim, "left")) + 1)
    return x[span(x.sum(1)), span(x.sum(0))]


def _scaled(x: np.ndarray, side: int) -> np.ndarray:
    s = side / max(x.shape)
    return _resize(x, (max(1, round(x.shape[0] * s)), max(1, round(x.shape[1] * s))))


def _dilate(x: np.ndarray, k: int) -> np.ndarray:
    """Grey dilation by a (k+1) x (k+1) square: a stroke k pixels wider, by separable maxima."""
    x = np.pad(x, k)  # zeros, so that a roll by at most k wraps nothing but background
    for axis in (0, 1):
        out = x.copy()
        for s in range(-(k // 2), k - k // 2 + 1):
            np.maximum(out, np.roll(x, s, axis=axis), out=out)
        x = out
    return x


def already_framed(g: np.ndarray, framing: Framing, size: tuple[int, int]) -> bool:
    """True for a picture of the model's size that is framed like the training images already (a
    test image saved as PNG): framing it again would only blur it by resampling."""
    if g.shape != tuple(size) or np.median(np.concatenate([g[0], g[-1], g[:, 0], g[:, -1]])) > 0.02:
        return False
    ink = g > 0
    if not ink.any():
        return False
    rows, cols = np.flatnonzero(ink.any(1)), np.flatnonzero(ink.any(0))
    if abs(max(rows[-1] - rows[0], cols[-1] - cols[0]) + 1 - framing.box) > 2:
        return False
    if framing.centre == "mass":
        m = g.sum()
        cy, cx = (g.sum(1) @ np.arange(g.shape[0])) / m, (g.sum(0) @ np.arange(g.shape[1])) / m
    else:
        cy, cx = (rows[0] + rows[-1]) / 2, (cols[0] + cols[-1]) / 2
    return abs(cy - framing.at[0]) <= 1.5 and abs(cx - framing.at[1]) <= 1.5


def frame(im: Image.Image, framing: Framing, size: tuple[int, int]) -> tuple[np.ndarray, list[str]]:
    """A picture as uint8 (H, W), framed like the training images, and what looked wrong in it."""
    notes: list[str] = []
    if im.size == (size[1], size[0]) and im.mode in ("L", "1", "P", "RGB"):
        plain = np.asarray(im.convert("L"))
        if already_framed(plain.astype(np.float32) / 255, framing, size):
            return plain.copy(), notes
    if max(im.size) > _WORK_SIDE:
        im = im.copy()
        im.thumbnail((_WORK_SIDE, _WORK_SIDE), Image.Resampling.BOX)
    g = _grey(im)
    r = max(1, round(0.02 * min(g.shape)))
    ring = np.concatenate([g[:r].ravel(), g[-r:].ravel(), g[:, :r].ravel(), g[:, -r:].ravel()])
    if np.median(ring) > 0.5:  # light paper, dark ink: the training images are the other way round
        g, ring = 1 - g, 1 - ring
    lo, hi = np.percentile(ring, [10, 90])
    if hi - lo > 0.3:
        notes.append("the picture's border is not one plain colour, so background and ink may be confused")
    floor = float(np.percentile(ring, 99)) + 0.02  # uneven paper and sensor noise stay background
    above = g[g > floor]
    ink = float(np.percentile(above, 90)) if above.size else floor
    canvas = np.zeros(size, dtype=np.float32)
    if ink - floor < 0.1:
        return canvas.astype(np.uint8), notes  # nothing drawn: check() names it
    x = np.clip((g - floor) / (ink - floor), 0, 1)
    side = framing.box * _OVERSAMPLE
    x = _scaled(_crop(x, _TRIM), side)
    # A pen far thinner than the training strokes fades to a grey hairline at 28 pixels: widen it.
    target, width = framing.stroke * side, _stroke_width(x > 0.5)
    if width < 0.5 * target:
        x = _crop(_dilate(x, int(round(target - width))), 0.0)
        x = _scaled(x, side)
    x = _scaled(x, framing.box)
    x /= max(float(x.max()), 1e-6)
    h, w = x.shape
    if framing.centre == "mass":
        m = x.sum()
        cy, cx = (x.sum(1) @ np.arange(h)) / m, (x.sum(0) @ np.arange(w)) / m
    else:
        cy, cx = (h - 1) / 2, (w - 1) / 2
    top, left = int(round(framing.at[0] - cy)), int(round(framing.at[1] - cx))
    # Paste with clipping: a shift can push an edge of the ink past the canvas.
    y0, x0 = max(0, top), max(0, left)
    y1, x1 = min(size[0], top + h), min(size[1], left + w)
    if y1 > y0 and x1 > x0:
        canvas[y0:y1, x0:x1] = x[y0 - top:y1 - top, x0 - left:x1 - left]
    return np.round(canvas * 255).astype(np.uint8), notes
