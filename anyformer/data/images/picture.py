"""One picture: decoded upright (EXIF orientation applied), grey or RGB, and fitted to a target size
by one rule (`fit_image`: scaled to cover the target, then centre-cropped; the aspect is kept,
nothing is distorted). A dataset's images (anyformer/data/images/folders.py) and a single picture that a
trained run classifies (`read_picture`: predict, serve, `af.open_run(...).classify`) go through the
same functions, so the same file reaches the model as the same numbers.

An image that cannot be decoded (truncated, corrupt, too many pixels) is an `UnreadableImage`
naming the file and the reason, which a dataset skips and reports.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from ...shapes import pair
from ..errors import DataError

__all__ = ["UnreadableImage", "decode_image", "fit_image", "open_header", "open_image", "orientation", "pillow_quiet",
           "read_picture", "size_hw", "to_pixels", "upright_size", "GRAY_MODES", "MAX_PIXELS", "RESIZE_RULE"]

GRAY_MODES = {"1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "I;16N", "F", "La"}
_SIXTEEN_BIT = {"I;16", "I;16B", "I;16L", "I;16N"}
# A 108-megapixel phone photo fits; a PNG of a few kilobytes that claims to be 100000 x 100000 (a
# decompression bomb) is refused from its header, before gigabytes are allocated to decode it.
MAX_PIXELS = 128 * 2**20
# Names the resizing rule of `fit_image` (and `decode_image`'s JPEG draft): part of the decoded
# cache's key, so a change of the rule never serves pixels resized by the old one.
RESIZE_RULE = "cover-centre-crop-bilinear-draft/1"


def size_hw(size: int | tuple[int, int]) -> tuple[int, int]:
    """An image size as (H, W); a bad one is a DataError, so that callers see one kind of data error."""
    try:
        return pair(size, "image size")
    except ValueError as e:
        raise DataError(str(e)) from None


@contextlib.contextmanager
def pillow_quiet() -> Iterator[None]:
    """Pillow's own warnings (palette transparency, EXIF, decompression bomb) stay inside: what the
    user should hear about an image is said once, by us, in one line."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=r"PIL(\.|$)")
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        yield


def _palette_is_gray(im: Image.Image) -> bool:
    pal = im.getpalette() or []
    return all(pal[i] == pal[i + 1] == pal[i + 2] for i in range(0, len(pal) - 2, 3))


def _is_gray(im: Image.Image) -> bool:
    return im.mode in GRAY_MODES or (im.mode == "P" and _palette_is_gray(im))


class UnreadableImage(DataError):
    """An image that cannot be decoded; `name` and `reason` let a dataset skip it and say why."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"cannot read image {name}: {reason}; delete or replace the file")
        self.name, self.reason = name, reason


def open_header(data: bytes | IO[bytes], name: str) -> Image.Image:
    """Pillow's header read, with the pixel limit; nothing decoded yet."""
    try:
        with pillow_quiet():
            im = Image.open(io.BytesIO(data) if isinstance(data, bytes) else data)
    except UnidentifiedImageError:  # Pillow's own text names the in-memory buffer, not the file
        raise UnreadableImage(name, "not an image format Pillow reads (PNG, JPEG, ...)") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        raise UnreadableImage(name, str(e) or type(e).__name__) from None
    if im.width * im.height > MAX_PIXELS:
        raise UnreadableImage(name, f"{im.width}x{im.height} pixels is more than the {MAX_PIXELS // 2**20} "
                                    f"megapixels allowed; scale it down first")
    return im


def _load(im: Image.Image, name: str) -> None:
    try:
        with pillow_quiet():
            im.load()
    except (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError) as e:
        raise UnreadableImage(name, str(e) or type(e).__name__) from None


def orientation(im: Image.Image) -> int:
    """The EXIF orientation (1-8) from the header alone; 1 where there is none or it is broken.
    A PNG's EXIF is only looked for where its header already holds it (asking Pillow for a PNG's
    EXIF otherwise decodes the whole image)."""
    if im.format == "PNG" and "exif" not in im.info:
        return 1
    try:
        with pillow_quiet():
            value = im.getexif().get(0x0112, 1)
        return value if isinstance(value, int) and 1 <= value <= 8 else 1
    except Exception:  # noqa: BLE001 - a broken EXIF block must not make the image unusable
        return 1


def upright_size(im: Image.Image) -> tuple[int, int]:
    """(H, W) of an opened image once its EXIF orientation is applied (5-8 turn it a quarter)."""
    return (im.width, im.height) if orientation(im) in (5, 6, 7, 8) else (im.height, im.width)


def _cover(hw: tuple[int, int], target: tuple[int, int]) -> tuple[int, int]:
    """(H, W) of an image of size `hw` scaled to just cover `target` (the aspect kept)."""
    scale = max(target[0] / hw[0], target[1] / hw[1])
    return math.ceil(hw[0] * scale), math.ceil(hw[1] * scale)


def _draft(im: Image.Image, target: tuple[int, int]) -> None:
    """Let a JPEG decode at the smallest DCT scale (1/2, 1/4, 1/8) still covering `target`: a phone
    photo made 64x64 decodes 64 times faster. Pillow's draft only ever reduces, never below the size
    asked; the sizes are those of the file as stored, before any EXIF turn."""
    if im.format not in ("JPEG", "MPO"):
        return
    h, w = _cover(upright_size(im), target)
    with pillow_quiet():
        im.draft(None, (h, w) if orientation(im) in (5, 6, 7, 8) else (w, h))


def _upright(im: Image.Image) -> Image.Image:
    try:
        with pillow_quiet():
            return ImageOps.exif_transpose(im)
    except Exception:  # noqa: BLE001 - a broken EXIF block should not make the image unusable
        return im


def open_image(data: bytes, name: str) -> Image.Image:
    """Decode one encoded image as stored (no EXIF turn); anything Pillow cannot read (a truncated
    file, too many pixels) is a DataError naming the file."""
    im = open_header(data, name)
    _load(im, name)
    return im


def decode_image(data: bytes | IO[bytes], name: str, size: tuple[int, int] | None = None) -> Image.Image:
    """One encoded image, decoded and upright (EXIF orientation applied, as phone photos need), in
    its own mode. With `size` (H, W), a JPEG decodes at the smallest scale still covering it
    (`_draft`); `to_pixels` then fits it. An image that cannot be decoded is an `UnreadableImage`."""
    im = open_header(data, name)
    if size is not None:
        _draft(im, size)
    _load(im, name)
    return _upright(im)


def _eight_bit(im: Image.Image) -> Image.Image:
    """A 16-bit grey image as 8-bit by its top byte (Pillow's own conversion clips at 255: white)."""
    if im.mode in _SIXTEEN_BIT:
        return Image.fromarray((np.asarray(im).astype(np.uint16) >> 8).astype(np.uint8))
    return im


def on_white(im: Image.Image) -> Image.Image:
    """An image with transparency laid on white, as a viewer shows it. Pillow's convert("RGB") drops
    the alpha and keeps whatever colour the transparent pixels hold, most often black: an icon drawn
    in black on a transparent ground would decode as black on black."""
    if im.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in im.info:
        rgba = im.convert("RGBA")
        return Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba)
    return im


def fit_image(im: Image.Image, size: tuple[int, int]) -> Image.Image:
    """`im` resized to `size` (H, W): scaled (bilinear) so that it covers the target, then cropped
    about its centre. The aspect is kept, nothing is distorted: a 4:3 photo made square loses the
    sides. An image of the target's aspect is plainly resized; one of the target's size is untouched."""
    h, w = size
    if (im.height, im.width) == (h, w):
        return im
    if im.width * h == im.height * w:
        return im.resize((w, h), Image.Resampling.BILINEAR)
    scale = max(w / im.width, h / im.height)
    # The part of the image the target shows, in the image's pixels (never past its edges, which
    # float rounding could otherwise put a hair outside).
    cw, ch = min(im.width, w / scale), min(im.height, h / scale)
    left, top = max(0.0, (im.width - cw) / 2), max(0.0, (im.height - ch) / 2)
    # One resampling of that box: the same numbers as scaling the whole image and then cropping, without
    # computing the part that is thrown away.
    return im.resize((w, h), Image.Resampling.BILINEAR, box=(left, top, left + cw, top + ch))


def to_pixels(im: Image.Image, channels: int | None, size: tuple[int, int] | None) -> tuple[np.ndarray, bool]:
    """(uint8 (H, W) if grey else (H, W, 3), whether grey) of a decoded image: grey images (and any
    image where `channels` is 1) as luminance, others as RGB, then fitted to `size` when given.
    A grey image in a colour set is replicated into three channels by the caller."""
    grey = channels == 1 or _is_gray(im)
    with pillow_quiet():
        im = on_white(_eight_bit(im)).convert("L" if grey else "RGB")
        if size is not None:
            im = fit_image(im, size)
    return np.asarray(im), grey


def read_picture(source: "str | os.PathLike[str] | IO[bytes] | Image.Image",
                 size: tuple[int, int] | None = None) -> Image.Image:
    """One picture as a person hands it over: a path, a binary file object (an upload) or a PIL
    image, upright (EXIF orientation applied, as phone photos need), in any mode. `size`: the size it
    will be fitted to, which lets a JPEG decode at a reduced scale (as a dataset's images do)."""
    if isinstance(source, Image.Image):
        if source.width * source.height > MAX_PIXELS:
            raise DataError(f"image is {source.width}x{source.height} pixels, more than the {MAX_PIXELS // 2**20} "
                            f"megapixels allowed; scale it down first")
        return _upright(source)
    if isinstance(source, (str, os.PathLike)):
        p = Path(source)
        try:
            data = p.read_bytes()
        except FileNotFoundError:
            raise DataError(f"image not found: {p}; check the path") from None
        except OSError as e:
            raise DataError(f"cannot read image {p}: {e.strerror or e}; check the path and permissions") from None
        return decode_image(data, str(p), size)
    if hasattr(source, "read"):
        name = str(getattr(source, "name", "upload"))
        data = source.read()
        if not isinstance(data, bytes):
            raise DataError(f"expected a binary file object for image {name}, got one that reads "
                            f"{type(data).__name__}; open it with 'rb'")
        return decode_image(data, name, size)
    raise TypeError(f"expected an image path, a binary file object or a PIL image, got {type(source).__name__}")
