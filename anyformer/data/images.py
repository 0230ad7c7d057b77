"""Encoded images (PNG, JPEG, ...): one file, a folder of <class>/<image>, or a tar of such a folder.

Every image set decodes to uint8 (N, C, H, W) with labels that index the sorted class names.
"""

from __future__ import annotations

import io
import os
import tarfile
import warnings
import zlib
from collections import Counter
from collections.abc import Iterator
from typing import IO
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from ..shapes import pair
from .errors import DataError
from .registry import SPLITS

__all__ = ["decode_folder", "decode_images", "decode_tar", "open_image", "read_picture", "size_hw", "walk_images",
           "MAX_PIXELS"]

IMAGE_EXTS = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm", ".pbm"}
_GRAY_MODES = {"1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "I;16N", "F", "La"}
# A 108-megapixel phone photo fits; a PNG of a few kilobytes that claims to be 100000 x 100000 (a
# decompression bomb) is refused from its header, before gigabytes are allocated to decode it.
MAX_PIXELS = 128 * 2**20


def size_hw(size: int | tuple[int, int]) -> tuple[int, int]:
    """An image size as (H, W); a bad one is a DataError, so that callers see one kind of data error."""
    try:
        return pair(size, "image size")
    except ValueError as e:
        raise DataError(str(e)) from None


def _is_image_name(rel: str) -> bool:
    parts = rel.split("/")
    # Skip hidden files and macOS "._x.jpg"/"__MACOSX" debris that tar and zip tools leave.
    if any(p.startswith(".") or p == "__MACOSX" for p in parts):
        return False
    return os.path.splitext(parts[-1])[1].lower() in IMAGE_EXTS


def _layout(rel_paths: list[str], split: str, source: str) -> tuple[list[str], list[tuple[str, int]]]:
    """Map image paths to (classes, [(path, label)]) for a `class/img` or `split/class/img` layout.

    Wrapper folders (like "cifar10_jpg/") are stripped first. Classes are the
    union over all splits, sorted, so train and test labels always agree. The images come with the
    classes interleaved (each class's first image by name, then each one's second, ...): the first
    N (`--limit-train N`) are then a balanced subset, where class by class they were N images of
    the first class, a one-class problem that any model solves at once.
    """
    if not rel_paths:
        raise DataError(
            f"no images found in {source}: expected <class>/<image> or {{train,test}}/<class>/<image> "
            f"files with extensions {', '.join(sorted(IMAGE_EXTS))}"
        )
    parts = [r.split("/") for r in rel_paths]
    depth = 0
    while True:
        firsts = {p[depth] for p in parts}
        remaining = min(len(p) for p in parts) - depth
        if len(firsts) == 1 and remaining >= 3 and next(iter(firsts)) not in SPLITS:
            depth += 1
        else:
            break
    rest = [p[depth:] for p in parts]
    lengths = {len(r) for r in rest}
    if lengths == {3} and all(r[0] in SPLITS for r in rest):
        classes = sorted({r[1] for r in rest})
        chosen = [(r, path) for r, path in zip(rest, rel_paths) if r[0] == split]
        if not chosen:
            found = sorted({r[0] for r in rest})
            raise DataError(f"no {split}/ images in {source}: found only {', '.join(found)}/; add {split}/<class>/ folders")
        items = sorted(((classes.index(r[1]), r[2], path) for r, path in chosen))
    elif lengths == {2}:
        if split != "train":
            raise DataError(
                f"{source} has no train/ and test/ subfolders, so it is a single split: load it with "
                f"split='train', or arrange it as train/<class>/ and {split}/<class>/"
            )
        classes = sorted({r[0] for r in rest})
        items = sorted(((classes.index(r[0]), r[1], path) for r, path in zip(rest, rel_paths)))
    else:
        common = Counter(len(r) for r in rest).most_common(1)[0][0]
        odd = sorted(p for r, p in zip(rest, rel_paths) if len(r) != common or (common == 3 and r[0] not in SPLITS))[0]
        raise DataError(
            f"unexpected layout in {source}: {odd!r} does not fit <class>/<image> or "
            "{train,test}/<class>/<image>; put every image in a folder named after its class"
        )
    rank: Counter[int] = Counter()
    interleaved = []
    for label, _, path in items:  # sorted by class, then by name
        interleaved.append((rank[label], label, path))
        rank[label] += 1
    return classes, [(path, label) for _, label, path in sorted(interleaved)]


def _limit(items: list[tuple[str, int]], limit_per_class: int | None) -> list[tuple[str, int]]:
    if limit_per_class is None:
        return items
    seen: dict[int, int] = {}
    out = []
    for path, label in items:
        if seen.get(label, 0) < limit_per_class:
            seen[label] = seen.get(label, 0) + 1
            out.append((path, label))
    return out


def _palette_is_gray(im: Image.Image) -> bool:
    pal = im.getpalette() or []
    return all(pal[i] == pal[i + 1] == pal[i + 2] for i in range(0, len(pal) - 2, 3))


def _is_gray(im: Image.Image) -> bool:
    return im.mode in _GRAY_MODES or (im.mode == "P" and _palette_is_gray(im))


def open_image(data: bytes, name: str) -> Image.Image:
    """Decode one encoded image; anything Pillow cannot read (a truncated file, too many pixels) is a
    DataError naming the file."""
    try:
        with warnings.catch_warnings():  # Pillow's own bomb warning: MAX_PIXELS below is the limit we keep
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            im = Image.open(io.BytesIO(data))
        if im.width * im.height > MAX_PIXELS:
            raise DataError(f"cannot read image {name}: {im.width}x{im.height} pixels is more than the "
                            f"{MAX_PIXELS // 2**20} megapixels allowed; scale it down first")
        im.load()
    except UnidentifiedImageError:  # Pillow's own text names the in-memory buffer, not the file
        raise DataError(f"cannot read image {name}: not an image format Pillow reads (PNG, JPEG, ...); "
                        f"delete or replace the file") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        raise DataError(f"cannot read image {name}: {e}; delete or replace the file") from None
    return im


def read_picture(source: "str | os.PathLike[str] | IO[bytes] | Image.Image") -> Image.Image:
    """One picture as a person hands it over: a path, a binary file object (an upload) or a PIL
    image, upright (EXIF orientation applied, as phone photos need), in any mode."""
    if isinstance(source, Image.Image):
        im, name = source, "image"
        if im.width * im.height > MAX_PIXELS:
            raise DataError(f"image is {im.width}x{im.height} pixels, more than the {MAX_PIXELS // 2**20} "
                            f"megapixels allowed; scale it down first")
    elif isinstance(source, (str, os.PathLike)):
        p = Path(source)
        try:
            data = p.read_bytes()
        except FileNotFoundError:
            raise DataError(f"image not found: {p}; check the path") from None
        except OSError as e:
            raise DataError(f"cannot read image {p}: {e.strerror or e}; check the path and permissions") from None
        im, name = open_image(data, str(p)), str(p)
    elif hasattr(source, "read"):
        name = str(getattr(source, "name", "upload"))
        data = source.read()
        if not isinstance(data, bytes):
            raise DataError(f"expected a binary file object for image {name}, got one that reads "
                            f"{type(data).__name__}; open it with 'rb'")
        im = open_image(data, name)
    else:
        raise TypeError(f"expected an image path, a binary file object or a PIL image, got {type(source).__name__}")
    try:
        return ImageOps.exif_transpose(im)
    except Exception:  # noqa: BLE001 - a broken EXIF block should not make the image unusable
        return im


def decode_images(
    blobs: Iterator[tuple[str, bytes]], n: int, image_size: tuple[int, int] | None
) -> np.ndarray:
    """Decode n encoded images into uint8 (N, C, H, W).

    C is 1 if every image is greyscale, else 3 (grey images are replicated),
    so a folder of digits stays single-channel and one colour image upgrades all.
    """
    out: np.ndarray | None = None
    gray = np.zeros(n, dtype=bool)
    hw = image_size
    first_name = ""
    for i, (name, data) in enumerate(blobs):
        im = open_image(data, name)
        gray[i] = _is_gray(im)
        im = im.convert("L" if gray[i] else "RGB")
        if hw is None:
            hw, first_name = (im.height, im.width), name
        if (im.height, im.width) != hw:
            if image_size is None:
                raise DataError(
                    f"image {name} is {im.height}x{im.width} but {first_name} is {hw[0]}x{hw[1]}; all images "
                    "must have the same size, or pass image_size=(H, W) to resize them"
                )
            im = im.resize((hw[1], hw[0]), Image.Resampling.BILINEAR)
        if out is None:
            out = np.empty((n, hw[0], hw[1], 3), dtype=np.uint8)
        a = np.asarray(im)
        if gray[i]:
            out[i, :, :, 0] = a
        else:
            out[i] = a
    if out is None:
        raise DataError("no images to decode")
    if gray.all():
        return np.ascontiguousarray(out[:, :, :, 0][:, None])
    g = np.flatnonzero(gray)
    out[g, :, :, 1] = out[g, :, :, 0]
    out[g, :, :, 2] = out[g, :, :, 0]
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2))


def walk_images(folder: Path) -> list[str]:
    """The image files below `folder`, as '/'-separated paths relative to it (hidden ones skipped)."""
    rels = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        rel_root = Path(root).relative_to(folder).as_posix()
        for f in files:
            rel = f if rel_root == "." else f"{rel_root}/{f}"
            if _is_image_name(rel):
                rels.append(rel)
    return rels


def decode_folder(
    folder: Path, split: str, limit: int | None, image_size: tuple[int, int] | None
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(images uint8 (N, C, H, W), labels int64 (N,), classes) of a folder of <class>/<image> files."""
    classes, items = _layout(walk_images(folder), split, str(folder))
    items = _limit(items, limit)

    def blobs() -> Iterator[tuple[str, bytes]]:
        for rel, _ in items:
            p = folder / rel
            try:
                yield str(p), p.read_bytes()
            except OSError as e:
                raise DataError(f"cannot read image {p}: {e.strerror or e}; check permissions") from None

    images = decode_images(blobs(), len(items), image_size)
    return images, np.array([lbl for _, lbl in items], dtype=np.int64), classes


def _member_name(name: str) -> str:
    while name.startswith("./"):
        name = name[2:]
    return name.lstrip("/")


def _open_tar(path: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(path, "r:*")
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        raise DataError(f"cannot read tar archive {path}: {e}; expected a .tar(.gz) of <class>/<image> files") from None


def decode_tar(
    path: Path, split: str, limit: int | None, image_size: tuple[int, int] | None
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """As `decode_folder`, for a .tar(.gz) of such a folder, read without unpacking it to disk."""
    with _open_tar(path) as tf:
        try:
            members = {_member_name(m.name): m for m in tf.getmembers() if m.isfile()}
        except (tarfile.TarError, EOFError, zlib.error, OSError) as e:
            raise DataError(f"corrupt tar archive {path}: {e}; download it again") from None
        rels = [n for n in members if _is_image_name(n)]
        classes, items = _layout(rels, split, str(path))
        items = _limit(items, limit)

        def blobs() -> Iterator[tuple[str, bytes]]:
            for rel, _ in items:
                try:
                    f = tf.extractfile(members[rel])
                    data = f.read() if f is not None else b""
                except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
                    raise DataError(f"cannot read {path}:{rel}: {e}; the archive is corrupt") from None
                yield f"{path}:{rel}", data

        images = decode_images(blobs(), len(items), image_size)
    return images, np.array([lbl for _, lbl in items], dtype=np.int64), classes
