"""Readers: one per kind of `Source` (IDX folder, mnist.pkl.gz, image folder, tar), chosen by `READERS`.

A reader turns a resolved source into an `ImageDataset`; a source that resolved from a dataset
name is also checked to be that dataset (checksums, classes, image size). A split is "train",
"test", "val" (image folders with such a folder) or "all" (every image the source holds).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from PIL import Image

from ...files import sha256_file
from ..errors import DataError
from .dataset import ImageDataset
from .folders import Decoded, ImageSizesDiffer, decode_folder, decode_tar
from .idx import parse_idx, read_idx_bytes
from .numpy_pickle import decode_mnist_pickle
from .picture import fit_image
from .registry import CIFAR10_TAR, CLASSES, IDX_FILES, IDX_SHA256, TITLES, Source, find_idx
from .scan import derive_image_size, describe_image_size, scan_images

__all__ = ["READERS", "idx_pair", "read_source"]

# (source, the spec as the user wrote it, split, limit_per_class, image_size (H, W) or None,
#  channels: 1 or 3 where the caller fixes them, None: as the images are)
Reader = Callable[[Source, str, str, int | None, tuple[int, int] | None, int | None], ImageDataset]


def idx_pair(folder: Path, split: str, title: str, hint: str) -> tuple[Path, Path]:
    """The (images, labels) IDX files of `split` in `folder`, or a DataError naming the missing ones."""
    img_name, lbl_name = IDX_FILES[split]
    img, lbl = find_idx(folder, img_name), find_idx(folder, lbl_name)
    if img is None or lbl is None:
        missing = [n for n, p in ((img_name, img), (lbl_name, lbl)) if p is None]
        raise DataError(
            f"{title} {split} split not found in {folder}: expected {' and '.join(m + '[.gz]' for m in missing)}; {hint}"
        )
    return img, lbl


def _decode_idx_folder(
    folder: Path, split: str, named: str | None, title: str, hint: str
) -> tuple[np.ndarray, np.ndarray, str | None]:
    """(images (N, H, W) uint8, labels (N,), detected dataset name or None)."""
    img_path, lbl_path = idx_pair(folder, split, title, hint)
    img_raw, lbl_raw = read_idx_bytes(img_path), read_idx_bytes(lbl_path)
    names = IDX_FILES[split]
    # Hashed in memory, not with sha256_file: the pins are of the decompressed bytes, and the
    # file on disk may be gzipped.
    lbl_sha = hashlib.sha256(lbl_raw).hexdigest()
    if named is not None:
        for raw, path, fname in ((img_raw, img_path, names[0]), (lbl_raw, lbl_path, names[1])):
            got = lbl_sha if raw is lbl_raw else hashlib.sha256(raw).hexdigest()
            want = IDX_SHA256[named][fname]
            if got != want:
                raise DataError(
                    f"sha256 mismatch for {path}: expected {want} ({title} {fname}), got {got}; "
                    "the file is corrupt or not this dataset, delete it and fetch it again"
                )
        detected: str | None = named
    else:
        # The tiny labels file identifies the dataset without hashing the images.
        detected = next((k for k, t in IDX_SHA256.items() if t[names[1]] == lbl_sha), None)
    images, labels = parse_idx(img_raw, str(img_path)), parse_idx(lbl_raw, str(lbl_path))
    if images.ndim != 3 or images.dtype != np.uint8:
        raise DataError(f"{img_path}: expected uint8 images (N, H, W), got {images.dtype} {images.shape}")
    if labels.ndim != 1 or labels.dtype.kind not in "iu" or labels.shape[0] != images.shape[0]:
        raise DataError(
            f"{lbl_path}: expected {images.shape[0]} integer labels to match {img_path.name}, "
            f"got {labels.dtype} {labels.shape}"
        )
    return images, labels, detected


def _idx_classes(labels: np.ndarray, detected: str | None, spec: str) -> list[str]:
    if detected in CLASSES:
        return list(CLASSES[detected])
    # A bare folder cannot tell MNIST from Fashion-MNIST; the user's spec name can.
    if "fashion" in spec.lower():
        return list(CLASSES["fashion-mnist"])
    return [str(i) for i in range(max(10, int(labels.max(initial=0)) + 1))]


def _limit_array(labels: np.ndarray, limit: int | None) -> np.ndarray | None:
    if limit is None:
        return None
    idx = np.concatenate([np.flatnonzero(labels == c)[:limit] for c in np.unique(labels)])
    idx.sort()  # keep the file's order
    return idx


def _grey_dataset(
    src: Source, images: np.ndarray, labels: np.ndarray, detected: str | None, spec: str,
    limit: int | None, image_size: tuple[int, int] | None, channels: int | None,
) -> ImageDataset:
    """The grey (N, H, W) images of an IDX folder or pickle as a dataset: named, limited, resized
    (images.fit_image's rule, as every image source), and replicated into RGB where 3 channels are asked."""
    name = detected if src.named is None and detected is not None else src.name
    classes = _idx_classes(labels, detected, spec)
    labels = labels.astype(np.int64)
    keep = _limit_array(labels, limit)
    if keep is not None:
        images, labels = images[keep], labels[keep]
    if image_size is not None and images.shape[1:] != image_size:
        images = np.stack([np.asarray(fit_image(Image.fromarray(a), image_size)) for a in images])
    chw = images[:, None] if channels != 3 else np.repeat(images[:, None], 3, axis=1)
    return ImageDataset(torch.from_numpy(np.ascontiguousarray(chw)), torch.from_numpy(labels), classes, name)


def _idx_splits(src: Source) -> list[str]:
    """The splits whose two IDX files are both in the folder."""
    return [s for s, names in IDX_FILES.items() if all(find_idx(src.path, n) for n in names)]


def _both_splits(src: Source, read_one: Callable[[str], tuple[np.ndarray, np.ndarray, str | None]],
                 split: str) -> tuple[np.ndarray, np.ndarray, str | None]:
    """(images, labels, detected) of one split, or with split "all" of every split there, in turn."""
    if split == "val":
        raise DataError(f"{src.path} holds train and test splits only (IDX or pickle files), no val split; "
                        f"expected split 'train', 'test' or 'all'")
    if split != "all":
        return read_one(split)
    parts = [read_one(s) for s in (_idx_splits(src) if src.kind == "idx" else list(IDX_FILES))]
    if not parts:
        return read_one("train")  # refused there, naming the files it expected
    return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
            parts[0][2] if all(p[2] == parts[0][2] for p in parts) else None)


def read_idx_source(src: Source, spec: str, split: str, limit: int | None,
                    image_size: tuple[int, int] | None, channels: int | None = None) -> ImageDataset:
    title = TITLES.get(src.named or "", src.name)
    images, labels, detected = _both_splits(
        src, lambda s: _decode_idx_folder(src.path, s, src.named, title, src.hint), split)
    return _grey_dataset(src, images, labels, detected, spec, limit, image_size, channels)


def read_pickle_source(src: Source, spec: str, split: str, limit: int | None,
                       image_size: tuple[int, int] | None, channels: int | None = None) -> ImageDataset:
    def one(s: str) -> tuple[np.ndarray, np.ndarray, str | None]:
        images, labels, matched = decode_mnist_pickle(src.path, s, verify=src.named is not None)
        return images, labels, "mnist" if matched else None

    images, labels, detected = _both_splits(src, one, split)
    return _grey_dataset(src, images, labels, detected, spec, limit, image_size, channels)


def _check_cifar10_tar(src: Source) -> None:
    if src.named == "cifar10" and src.path.name == CIFAR10_TAR[0]:
        got = sha256_file(src.path)
        if got != CIFAR10_TAR[1]:
            raise DataError(
                f"sha256 mismatch for {src.path}: expected {CIFAR10_TAR[1]}, got {got}; the archive is "
                "corrupt or modified, fetch it again"
            )


def _image_dataset(src: Source, d: Decoded) -> ImageDataset:
    if src.named == "cifar10":
        if d.classes != CLASSES["cifar10"] or d.images.shape[1:] != (3, 32, 32):
            raise DataError(
                f"{src.path} is not CIFAR-10: classes {d.classes} images {d.images.shape[1:]}, expected "
                f"{CLASSES['cifar10']} and (3, 32, 32); pass it as a path instead of 'cifar10'"
            )
    return ImageDataset(torch.from_numpy(d.images), torch.from_numpy(d.labels), d.classes, src.name,
                        skipped=d.strays, unreadable=d.unreadable)


def _decode_sized(src: Source, split: str, limit: int | None, image_size: tuple[int, int] | None,
                  channels: int | None, decode: Callable[..., Decoded]) -> ImageDataset:
    """Decode a folder or tar; where no size is asked and its images differ in size, derive one from
    the headers of every image of every split (so that train and test agree) and decode again."""
    try:
        return _image_dataset(src, decode(src.path, split, limit, image_size, channels))
    except ImageSizesDiffer:
        if image_size is not None:
            raise
    scan = scan_images(src.path)
    ds = _image_dataset(src, decode(src.path, split, limit, derive_image_size(scan.sizes), channels))
    ds.derived_size = describe_image_size(scan.sizes)
    return ds


def read_folder_source(src: Source, spec: str, split: str, limit: int | None,
                       image_size: tuple[int, int] | None, channels: int | None = None) -> ImageDataset:
    return _decode_sized(src, split, limit, image_size, channels, decode_folder)


def read_tar_source(src: Source, spec: str, split: str, limit: int | None,
                    image_size: tuple[int, int] | None, channels: int | None = None) -> ImageDataset:
    _check_cifar10_tar(src)
    return _decode_sized(src, split, limit, image_size, channels, decode_tar)


READERS: dict[str, Reader] = {
    "idx": read_idx_source,
    "pickle": read_pickle_source,
    "folder": read_folder_source,
    "tar": read_tar_source,
}


def read_source(src: Source, spec: str, split: str, limit: int | None,
                image_size: tuple[int, int] | None, channels: int | None = None) -> ImageDataset:
    """Decode `src` with the reader its kind names."""
    return READERS[src.kind](src, spec, split, limit, image_size, channels)
