"""What a folder (or tar) of class folders of images holds, from the image headers alone.

`scan_images(path)` reads no pixels: Pillow's `Image.open` parses a header and stops, so thousands
of photos are scanned in about a second. What it finds (splits, classes and their counts, sizes,
colour, formats, stray and unreadable files) is what the settings of a run are derived from;
`derive_image_size` is the image size a set of mixed sizes is resized to.

A truncated image whose header is intact passes the scan; decoding it later skips it then.
"""
from __future__ import annotations

import os
import statistics
import tarfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable, Iterator
from typing import IO

from PIL import Image

from ..errors import DataError
from .folders import FolderLayout, Listing, list_folder, list_names, open_tar, parse_layout, tar_members
from .picture import GRAY_MODES, UnreadableImage, open_header, upright_size

__all__ = ["ImageFolderScan", "derive_image_size", "describe_image_size", "scan_images", "upscale_factor"]

# The derived square side lies in [MIN_SIDE, MAX_SIDE], a multiple of SIDE_STEP: a ViT's patches tile
# it (4 or 8 pixels), and more than 64x64 pixels costs far more steps than small data sets repay. Pictures
# of one size keep it, scaled up by a whole factor where a side is under MIN_SIDE (too few tokens).
MIN_SIDE, MAX_SIDE, SIDE_STEP = 16, 64, 8


@dataclass
class ImageFolderScan:
    """splits: split name ("train", "test", "val"; "all" where there are no split folders) -> class
    -> readable images; classes: every class, sorted; sizes: (H, W) of each readable image, EXIF
    orientation applied; colour: whether any image is not grey; formats: Pillow format names ->
    count; skipped: stray files that are not images (relative paths); unreadable: (file, reason) of
    images whose header cannot be read (or that this Pillow cannot decode)."""

    splits: dict[str, dict[str, int]]
    classes: list[str]
    sizes: list[tuple[int, int]]
    colour: bool
    formats: Counter = field(default_factory=Counter)
    skipped: list[str] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)

    @property
    def images(self) -> int:
        """Readable images in all splits."""
        return len(self.sizes)


def _header_is_grey(im: Image.Image) -> bool:
    """Grey by the header: a grey mode, or a palette whose entries are all grey (read from the
    header's palette; `getpalette` would decode the image)."""
    if im.mode in GRAY_MODES:
        return True
    if im.mode != "P" or im.palette is None:  # as decoding judges it (images._is_gray)
        return False
    raw, step = bytes(im.palette.palette), len(im.palette.mode)
    return step >= 3 and all(raw[i] == raw[i + 1] == raw[i + 2] for i in range(0, len(raw) - 2, step))


def _headers(layout: FolderLayout,
             open_file: Callable[[str], IO[bytes]]) -> Iterator[tuple[str, str, str, Image.Image | str]]:
    """(split, class, path, opened image or the reason it cannot be read) for each image."""
    for split, cls, rel in layout.entries:
        try:
            with open_file(rel) as f:
                im = open_header(f, rel)
                yield split, cls, rel, im
                im.close()
        except UnreadableImage as e:
            yield split, cls, rel, e.reason
        except OSError as e:
            yield split, cls, rel, e.strerror or str(e)


def _summarise(layout: FolderLayout, listing: Listing,
               headers: Iterator[tuple[str, str, str, Image.Image | str]]) -> ImageFolderScan:
    splits: dict[str, dict[str, int]] = {s: {} for s in layout.splits}
    scan = ImageFolderScan(splits, list(layout.classes), [], False, Counter(), list(listing.strays),
                           list(listing.unsupported))
    for split, cls, rel, im in headers:
        if isinstance(im, str):
            scan.unreadable.append((rel, im))
            continue
        splits[split][cls] = splits[split].get(cls, 0) + 1
        scan.sizes.append(upright_size(im))
        scan.colour = scan.colour or not _header_is_grey(im)
        scan.formats[im.format or "unknown"] += 1
    scan.unreadable.sort()
    return scan


def scan_images(path: str | os.PathLike[str]) -> ImageFolderScan:
    """Scan a folder of <class>/<image> files (split folders train/, test/, val/ allowed, wrapper
    folders stripped) or a .tar(.gz) of one, reading image headers only. A folder with no images,
    or images outside class folders, is a one-line DataError."""
    p = Path(path).expanduser()
    if p.is_dir():
        listing = list_folder(p)
        layout = parse_layout(listing.images, str(p))
        return _summarise(layout, listing, _headers(layout, lambda rel: open(p / rel, "rb")))
    if not p.exists():
        raise DataError(f"no images at {p}: expected a folder of class folders of images, or a .tar of one")
    if not tarfile.is_tarfile(p):
        raise DataError(f"unsupported dataset file {p}: expected a folder of class folders of images, or a "
                        f".tar(.gz) of one")
    with open_tar(p) as tf:
        members = tar_members(tf, p)
        listing = list_names(list(members))
        layout = parse_layout(listing.images, str(p))
        # In archive order: in a .tar.gz a backward seek decompresses from the start again.
        order = {rel: members[rel].offset_data for _, _, rel in layout.entries}
        layout = FolderLayout(layout.classes, sorted(layout.entries, key=lambda e: order[e[2]]), layout.source)

        def member(rel: str) -> IO[bytes]:
            f = tf.extractfile(members[rel])
            if f is None:
                raise OSError(f"{rel} is not a regular file")
            return f

        return _summarise(layout, listing, _headers(layout, member))


def upscale_factor(h: int, w: int) -> int:
    """The smallest whole factor that brings the shorter side of an (h, w) picture to MIN_SIDE or more.
    An 8x8 picture gives 16 tokens at the smallest patch (2); at 16x16 it gives the 64 the other
    sizes give, and both 8x8 CHOOSE folders scored higher so (image round 28)."""
    return -(-MIN_SIDE // max(1, min(h, w)))


def derive_image_size(sizes: list[tuple[int, int]]) -> tuple[int, int]:
    """The (H, W) a set of images is resized to: where every image has the same size with both
    sides at most 64, that size, scaled up by a whole factor where its shorter side is under 16
    (and the longer then stays within 64); else a square whose side is the median shorter side,
    clamped to [16, 64] and rounded down to a multiple of 8. (Resizing covers the target and
    centre-crops.)"""
    if not sizes:
        raise DataError("no image sizes to derive an image size from: expected at least one readable image")
    first = tuple(sizes[0])
    if all(tuple(s) == first for s in sizes) and max(first) <= MAX_SIDE:
        h, w = int(first[0]), int(first[1])
        k = upscale_factor(h, w)
        if max(h, w) * k <= MAX_SIDE:
            return h * k, w * k
    shorter = statistics.median(min(h, w) for h, w in sizes)
    side = min(MAX_SIDE, max(MIN_SIDE, int(shorter))) // SIDE_STEP * SIDE_STEP
    return side, side


def describe_image_size(sizes: list[tuple[int, int]]) -> str:
    """Why `derive_image_size(sizes)` is what it is, in one phrase (for a run's derived settings)."""
    h, w = derive_image_size(sizes)
    distinct = sorted(set(map(tuple, sizes)))
    if len(distinct) == 1 and (h, w) == distinct[0]:
        return f"every image is {h}x{w}"
    if len(distinct) == 1 and (h, w) == tuple(upscale_factor(*distinct[0]) * s for s in distinct[0]):
        return (f"{h}x{w}: every image is {distinct[0][0]}x{distinct[0][1]}, scaled up {h // distinct[0][0]}x to a "
                f"shorter side of at least {MIN_SIDE} px (more tokens a picture)")
    shorter = statistics.median(min(a, b) for a, b in sizes)
    spread = (f"{len(distinct)} sizes from {distinct[0][0]}x{distinct[0][1]} to {distinct[-1][0]}x{distinct[-1][1]}"
              if len(distinct) > 1 else f"every image is {distinct[0][0]}x{distinct[0][1]}")
    return (f"{h}x{w}: {spread}, median shorter side {shorter:g} clamped to [{MIN_SIDE}, {MAX_SIDE}] in steps "
            f"of {SIDE_STEP}; each image scaled to cover it and centre-cropped")
