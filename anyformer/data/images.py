"""Encoded images (PNG, JPEG, WebP, BMP, ... whatever Pillow reads): one file, a folder of
<class>/<image>, with or without train/, test/ or val/ split folders, or a tar of such a folder.

Every image set decodes to uint8 (N, C, H, W) with labels that index the sorted class names.

One decoding serves a dataset and a single picture alike (`decode_image`, `to_pixels`): the picture
is upright (EXIF orientation applied), grey or RGB, and fitted to a target size by the rule
`fit_image` states (scaled to cover the target, then centre-cropped: the aspect is kept, nothing is
distorted). A picture that a trained run classifies therefore reaches the model as the same numbers
as the same file did in training.

Files that are not images (.DS_Store, README.txt, Thumbs.db, ...) are skipped and listed; an image
that cannot be decoded (truncated, corrupt, too large) is skipped and named with the reason.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import tarfile
import warnings
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from ..shapes import pair
from .errors import DataError

__all__ = ["FolderLayout", "Listing", "decode_folder", "decode_image", "decode_images", "decode_tar", "fit_image",
           "list_folder", "list_names", "open_image", "parse_layout", "pillow_quiet", "read_picture", "size_hw",
           "to_pixels", "walk_images", "IMAGE_EXTS", "MAX_PIXELS", "RESIZE_RULE", "SPLIT_FOLDERS"]

# The extensions Pillow can open here, less formats that are not pictures people keep in a class
# folder (scientific containers, vector and video stubs, formats that need outside programs).
_NOT_PICTURES = {".bufr", ".grib", ".h5", ".hdf", ".mpeg", ".mpg", ".eps", ".ps", ".wmf", ".emf", ".pdf"}
IMAGE_EXTS = ({ext for ext, fmt in Image.registered_extensions().items() if fmt in Image.OPEN} | {".mpo"}) \
    - _NOT_PICTURES
# Photos that this Pillow cannot decode: reported as unreadable (with what to do), not as stray files.
_UNSUPPORTED = {ext: "HEIC/HEIF photos need a plugin Pillow lacks here; convert them to JPEG"
                for ext in (".heic", ".heif")}
if ".avif" not in IMAGE_EXTS:
    _UNSUPPORTED.update({ext: "this Pillow reads no AVIF; convert it to JPEG or PNG" for ext in (".avif", ".avifs")})
# Folders that tools and file servers leave beside the data (never class folders).
_DEBRIS_DIRS = {"__MACOSX", "@eaDir", "__pycache__"}
# Split folder names as people spell them -> the split they hold.
SPLIT_FOLDERS = {"train": "train", "training": "train", "test": "test", "testing": "test",
                 "val": "val", "valid": "val", "validation": "val"}
_GRAY_MODES = {"1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "I;16N", "F", "La"}
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


# --------------------------------------------------------------------------- which files are images


def _kind_of_name(rel: str) -> str:
    """"image", "unsupported" (a photo Pillow cannot read here) or "stray" (not an image)."""
    base = rel.rsplit("/", 1)[-1]
    # Hidden files (.DS_Store) and macOS "._x.jpg" resource forks are not images, whatever the extension.
    if base.startswith("."):
        return "stray"
    ext = os.path.splitext(base)[1].lower()
    return "image" if ext in IMAGE_EXTS else "unsupported" if ext in _UNSUPPORTED else "stray"


def _skipped_dir(name: str) -> bool:
    return name.startswith(".") or name in _DEBRIS_DIRS


@dataclass
class Listing:
    """The files of a folder or tar, as '/'-separated relative paths, sorted: the images, the photos
    this Pillow cannot read (with why), and the stray files that are not images."""

    images: list[str] = field(default_factory=list)
    unsupported: list[tuple[str, str]] = field(default_factory=list)
    strays: list[str] = field(default_factory=list)


def list_names(rels: list[str]) -> Listing:
    """Sort relative file paths (of a folder or a tar) into images, unsupported photos and strays."""
    out = Listing()
    for rel in sorted(rels):
        parts = rel.split("/")
        if any(_skipped_dir(p) for p in parts[:-1]):
            continue  # a hidden folder (.git) or tool debris (__MACOSX): not the user's data, not counted
        kind = _kind_of_name(rel)
        if kind == "image":
            out.images.append(rel)
        elif kind == "unsupported":
            out.unsupported.append((rel, _UNSUPPORTED[os.path.splitext(rel)[1].lower()]))
        else:
            out.strays.append(rel)
    return out


def list_folder(folder: Path) -> Listing:
    """Every file below `folder`, sorted into images, unsupported photos and strays."""
    rels = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not _skipped_dir(d)]
        rel_root = Path(root).relative_to(folder).as_posix()
        rels += [f if rel_root == "." else f"{rel_root}/{f}" for f in files]
    return list_names(rels)


def walk_images(folder: Path) -> list[str]:
    """The image files below `folder`, as '/'-separated paths relative to it, sorted."""
    return list_folder(folder).images


# --------------------------------------------------------------------------- layouts


@dataclass
class FolderLayout:
    """What a folder's image paths mean: the classes (sorted, the union over every split, so that
    train and test labels agree) and each image's (split, class, path). split is "train", "test"
    or "val" under split folders, "all" where the class folders sit at the top."""

    classes: list[str]
    entries: list[tuple[str, str, str]]
    source: str

    @property
    def splits(self) -> tuple[str, ...]:
        """The splits present, in the order train, test, val (or ("all",))."""
        have = {s for s, _, _ in self.entries}
        return tuple(s for s in ("train", "test", "val", "all") if s in have)

    def items(self, split: str) -> list[tuple[str, int]]:
        """[(path, label)] of `split` ("all": every image), classes interleaved.

        The images come with the classes interleaved (each class's first image by name, then each
        one's second, ...): the first N (`--limit-train N`) are then a balanced subset, where class
        by class they were N images of the first class, a one-class problem any model solves at once.
        """
        flat = self.splits == ("all",)
        if split not in ("all", *self.splits) and not (flat and split == "train"):
            if flat:
                raise DataError(f"{self.source} has no train/ and test/ subfolders, so it has no {split} split: "
                                f"its class folders sit at the top (load it whole, split 'all' or 'train'), or "
                                f"arrange it as train/<class>/ and {split}/<class>/")
            raise DataError(f"no {split}/ images in {self.source}: found only "
                            f"{', '.join(s + '/' for s in self.splits)}; add {split}/<class>/ folders")
        # A folder without split folders is one training set: 'train' means all of it.
        want = {s for s, _, _ in self.entries} if split == "all" or flat else {split}
        index = {c: i for i, c in enumerate(self.classes)}
        chosen = sorted((index[c], path.rsplit("/", 1)[-1], path) for s, c, path in self.entries if s in want)
        rank: Counter[int] = Counter()
        interleaved = []
        for label, _, path in chosen:  # sorted by class, then by file name
            interleaved.append((rank[label], label, path))
            rank[label] += 1
        return [(path, label) for _, label, path in sorted(interleaved)]


def parse_layout(rel_paths: list[str], source: str) -> FolderLayout:
    """Map image paths to their classes and splits, for a `class/img` or `split/class/img` layout.
    Wrapper folders (like "cifar10_jpg/") are stripped first; split folder names are read in any
    case and spelling of SPLIT_FOLDERS (train/, Test/, validation/, ...)."""
    if not rel_paths:
        raise DataError(
            f"no images found in {source}: expected <class>/<image> or {{train,test}}/<class>/<image> "
            f"files (PNG, JPEG, WebP, BMP, GIF, TIFF, ...)"
        )
    parts = [r.split("/") for r in rel_paths]
    depth = 0
    while True:
        firsts = {p[depth] for p in parts}
        remaining = min(len(p) for p in parts) - depth
        if len(firsts) == 1 and remaining >= 3 and next(iter(firsts)).lower() not in SPLIT_FOLDERS:
            depth += 1
        else:
            break
    rest = [p[depth:] for p in parts]
    lengths = {len(r) for r in rest}
    if lengths == {3} and all(r[0].lower() in SPLIT_FOLDERS for r in rest):
        entries = [(SPLIT_FOLDERS[r[0].lower()], r[1], path) for r, path in zip(rest, rel_paths)]
    elif lengths == {2}:
        entries = [("all", r[0], path) for r, path in zip(rest, rel_paths)]
    else:
        common = Counter(len(r) for r in rest).most_common(1)[0][0]
        odd = sorted(p for r, p in zip(rest, rel_paths)
                     if len(r) != common or (common == 3 and r[0].lower() not in SPLIT_FOLDERS))[0]
        raise DataError(
            f"unexpected layout in {source}: {odd!r} does not fit <class>/<image> or "
            "{train,test}/<class>/<image>; put every image in a folder named after its class"
        )
    return FolderLayout(sorted({c for _, c, _ in entries}), entries, source)


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


# --------------------------------------------------------------------------- one image


def _palette_is_gray(im: Image.Image) -> bool:
    pal = im.getpalette() or []
    return all(pal[i] == pal[i + 1] == pal[i + 2] for i in range(0, len(pal) - 2, 3))


def _is_gray(im: Image.Image) -> bool:
    return im.mode in _GRAY_MODES or (im.mode == "P" and _palette_is_gray(im))


class UnreadableImage(DataError):
    """An image that cannot be decoded; `name` and `reason` let a dataset skip it and say why."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"cannot read image {name}: {reason}; delete or replace the file")
        self.name, self.reason = name, reason


def _open(data: bytes | IO[bytes], name: str) -> Image.Image:
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
    im = _open(data, name)
    _load(im, name)
    return im


def decode_image(data: bytes | IO[bytes], name: str, size: tuple[int, int] | None = None) -> Image.Image:
    """One encoded image, decoded and upright (EXIF orientation applied, as phone photos need), in
    its own mode. With `size` (H, W), a JPEG decodes at the smallest scale still covering it
    (`_draft`); `to_pixels` then fits it. An image that cannot be decoded is an `UnreadableImage`."""
    im = _open(data, name)
    if size is not None:
        _draft(im, size)
    _load(im, name)
    return _upright(im)


def _eight_bit(im: Image.Image) -> Image.Image:
    """A 16-bit grey image as 8-bit by its top byte (Pillow's own conversion clips at 255: white)."""
    if im.mode in _SIXTEEN_BIT:
        return Image.fromarray((np.asarray(im).astype(np.uint16) >> 8).astype(np.uint8))
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
        im = _eight_bit(im).convert("L" if grey else "RGB")
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


# --------------------------------------------------------------------------- many images


class ImageSizesDiffer(DataError):
    """Images of different sizes met with no target size: the caller derives one and decodes again."""


def decode_images(
    blobs: Iterator[tuple[str, "bytes | UnreadableImage"]], n: int, image_size: tuple[int, int] | None,
    channels: int | None = None, *, source: str = "the images",
) -> tuple[np.ndarray, np.ndarray, list[tuple[str, str]]]:
    """Decode n encoded images into (uint8 (M, C, H, W), the indices of the M decoded ones among
    the n, [(name, reason)] of those skipped because they cannot be decoded).

    C is `channels` where given; else 1 if every image is greyscale, else 3 (grey images are
    replicated), so a folder of digits stays single-channel and one colour image upgrades all.
    Without `image_size`, images of different sizes raise ImageSizesDiffer. A blob may be the
    UnreadableImage that reading its file raised: it is skipped as an undecodable one is.
    """
    out: np.ndarray | None = None
    gray = np.zeros(n, dtype=bool)
    kept = np.zeros(n, dtype=bool)
    unreadable: list[tuple[str, str]] = []
    hw, first_name = image_size, ""
    for i, (name, data) in enumerate(blobs):
        try:
            if isinstance(data, UnreadableImage):
                raise data
            a, gray[i] = to_pixels(decode_image(data, name, image_size), channels, image_size)
        except UnreadableImage as e:
            unreadable.append((e.name, e.reason))
            continue
        if hw is None:
            hw, first_name = a.shape[:2], name
        if a.shape[:2] != hw:
            raise ImageSizesDiffer(f"image {name} is {a.shape[0]}x{a.shape[1]} but {first_name} is "
                                   f"{hw[0]}x{hw[1]}")
        if out is None:
            out = np.empty((n, hw[0], hw[1], 3), dtype=np.uint8)
        if gray[i]:
            out[i, :, :, 0] = a
        else:
            out[i] = a
        kept[i] = True
    if out is None:
        first = f" (first: {unreadable[0][0]}: {unreadable[0][1]})" if unreadable else ""
        raise DataError(f"no readable images in {source}: all {n} failed to decode{first}; expected PNG, "
                        f"JPEG, ... files that Pillow can read")
    idx = np.flatnonzero(kept)
    if len(idx) < n:  # a copy only where images were skipped: a whole CIFAR-10 is 150 MB
        out, gray = out[idx], gray[idx]
    if channels == 1 or (channels is None and gray.all()):
        return np.ascontiguousarray(out[:, :, :, 0][:, None]), idx, unreadable
    g = np.flatnonzero(gray)
    out[g, :, :, 1] = out[g, :, :, 0]
    out[g, :, :, 2] = out[g, :, :, 0]
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2)), idx, unreadable


@dataclass
class Decoded:
    """A folder's or tar's split, decoded: images, labels, classes, and what was left out."""

    images: np.ndarray
    labels: np.ndarray
    classes: list[str]
    strays: list[str]
    unreadable: list[tuple[str, str]]


def _decode_items(layout: FolderLayout, listing: Listing, split: str, limit: int | None,
                  image_size: tuple[int, int] | None, channels: int | None,
                  read: Callable[[str], bytes]) -> Decoded:
    items = _limit(layout.items(split), limit)

    def blobs() -> Iterator[tuple[str, bytes]]:
        for rel, _ in items:
            try:
                yield rel, read(rel)
            except UnreadableImage as e:  # a file that cannot even be read is skipped like a corrupt one
                yield rel, e

    images, idx, unreadable = decode_images(blobs(), len(items), image_size, channels, source=layout.source)
    labels = np.array([items[i][1] for i in idx], dtype=np.int64)
    # Photos this Pillow cannot read are unreadable images of every split, as the user sees them.
    return Decoded(images, labels, layout.classes, listing.strays, [*listing.unsupported, *unreadable])


def decode_folder(
    folder: Path, split: str, limit: int | None, image_size: tuple[int, int] | None, channels: int | None = None
) -> Decoded:
    """A folder of <class>/<image> files (or split/<class>/<image>), its `split` decoded."""
    listing = list_folder(folder)
    layout = parse_layout(listing.images, str(folder))

    def read(rel: str) -> bytes:
        try:
            return (folder / rel).read_bytes()
        except OSError as e:
            raise UnreadableImage(rel, e.strerror or str(e)) from None

    return _decode_items(layout, listing, split, limit, image_size, channels, read)


def _member_name(name: str) -> str:
    while name.startswith("./"):
        name = name[2:]
    return name.lstrip("/")


def open_tar(path: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(path, "r:*")
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        raise DataError(f"cannot read tar archive {path}: {e}; expected a .tar(.gz) of <class>/<image> files") from None


def tar_members(tf: tarfile.TarFile, path: Path) -> dict[str, tarfile.TarInfo]:
    """The regular files of an open tar by their cleaned names; a cut archive is a one-line DataError."""
    try:
        return {_member_name(m.name): m for m in tf.getmembers() if m.isfile()}
    except (tarfile.TarError, EOFError, zlib.error, OSError) as e:
        raise DataError(f"corrupt tar archive {path}: {e}; download it again") from None


def decode_tar(
    path: Path, split: str, limit: int | None, image_size: tuple[int, int] | None, channels: int | None = None
) -> Decoded:
    """As `decode_folder`, for a .tar(.gz) of such a folder, read without unpacking it to disk."""
    with open_tar(path) as tf:
        members = tar_members(tf, path)
        listing = list_names(list(members))
        layout = parse_layout(listing.images, str(path))

        wanted = [rel for rel, _ in _limit(layout.items(split), limit)]
        blobs = read_members(tf, path, [members[rel] for rel in wanted])
        return _decode_items(layout, listing, split, limit, image_size, channels, lambda rel: blobs.pop(rel))


def read_members(tf: tarfile.TarFile, path: Path, wanted: list[tarfile.TarInfo]) -> dict[str, bytes]:
    """The bytes of `wanted` members by cleaned name, read in the archive's order: in a .tar.gz a
    backward seek decompresses from the start again, so reading in class-interleaved order would
    cost a pass over the archive per image."""
    out = {}
    for m in sorted(wanted, key=lambda m: m.offset_data):
        try:
            f = tf.extractfile(m)
            out[_member_name(m.name)] = f.read() if f is not None else b""
        except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
            raise DataError(f"cannot read {path}:{_member_name(m.name)}: {e}; the archive is corrupt") from None
    return out
