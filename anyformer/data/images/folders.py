"""Encoded images (PNG, JPEG, WebP, BMP, ... whatever Pillow reads): one file, a folder of
<class>/<image>, with or without train/, test/ or val/ split folders, or a tar of such a folder.

Every image set decodes to uint8 (N, C, H, W) with labels that index the sorted class names. Each
image is decoded as a single picture is (anyformer/data/images/picture.py: upright, grey or RGB, fitted
by one rule), so a picture a trained run classifies reaches the model as the same numbers as the
same file did in training.

Files that are not images (.DS_Store, README.txt, Thumbs.db, ...) are skipped and listed; an image
that cannot be decoded (truncated, corrupt, too large) is skipped and named with the reason.
"""

from __future__ import annotations

import os
import tarfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from ..errors import DataError
from .picture import UnreadableImage, decode_image, to_pixels

__all__ = ["Decoded", "FolderLayout", "ImageSizesDiffer", "Listing", "decode_folder", "decode_images", "decode_tar",
           "list_folder", "list_names", "open_tar", "parse_layout", "tar_members", "walk_images", "IMAGE_EXTS",
           "SPLIT_FOLDERS"]

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
