"""Readers: one per kind of `Source` (IDX folder, mnist.pkl.gz, image folder, tar), chosen by `READERS`.

A reader turns a resolved source into an `ImageDataset`; a source that resolved from a dataset
name is also checked to be that dataset (checksums, classes, image size).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from PIL import Image

from ..files import sha256_file
from .dataset import ImageDataset
from .errors import DataError
from .idx import parse_idx, read_idx_bytes
from .images import decode_folder, decode_tar
from .numpy_pickle import decode_mnist_pickle
from .registry import CIFAR10_TAR, CLASSES, IDX_FILES, IDX_SHA256, TITLES, Source, find_idx

__all__ = ["READERS", "idx_pair", "read_source"]

# (source, the spec as the user wrote it, split, limit_per_class, image_size (H, W) or None)
Reader = Callable[[Source, str, str, int | None, tuple[int, int] | None], ImageDataset]


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
    limit: int | None, image_size: tuple[int, int] | None,
) -> ImageDataset:
    """The grey (N, H, W) images of an IDX folder or pickle as a dataset: named, limited, resized."""
    name = detected if src.named is None and detected is not None else src.name
    classes = _idx_classes(labels, detected, spec)
    labels = labels.astype(np.int64)
    keep = _limit_array(labels, limit)
    if keep is not None:
        images, labels = images[keep], labels[keep]
    if image_size is not None and images.shape[1:] != image_size:
        h, w = image_size
        chw = np.stack([np.asarray(Image.fromarray(a).resize((w, h), Image.Resampling.BILINEAR)) for a in images])
        chw = chw[:, None]
    else:
        chw = images[:, None]
    return ImageDataset(torch.from_numpy(np.ascontiguousarray(chw)), torch.from_numpy(labels), classes, name)


def read_idx_source(src: Source, spec: str, split: str, limit: int | None,
                    image_size: tuple[int, int] | None) -> ImageDataset:
    title = TITLES.get(src.named or "", src.name)
    images, labels, detected = _decode_idx_folder(src.path, split, src.named, title, src.hint)
    return _grey_dataset(src, images, labels, detected, spec, limit, image_size)


def read_pickle_source(src: Source, spec: str, split: str, limit: int | None,
                       image_size: tuple[int, int] | None) -> ImageDataset:
    images, labels, matched = decode_mnist_pickle(src.path, split, verify=src.named is not None)
    return _grey_dataset(src, images, labels, "mnist" if matched else None, spec, limit, image_size)


def _check_cifar10_tar(src: Source) -> None:
    if src.named == "cifar10" and src.path.name == CIFAR10_TAR[0]:
        got = sha256_file(src.path)
        if got != CIFAR10_TAR[1]:
            raise DataError(
                f"sha256 mismatch for {src.path}: expected {CIFAR10_TAR[1]}, got {got}; the archive is "
                "corrupt or modified, fetch it again"
            )


def _image_dataset(src: Source, images: np.ndarray, labels: np.ndarray, classes: list[str]) -> ImageDataset:
    if src.named == "cifar10":
        if classes != CLASSES["cifar10"] or images.shape[1:] != (3, 32, 32):
            raise DataError(
                f"{src.path} is not CIFAR-10: classes {classes} images {images.shape[1:]}, expected "
                f"{CLASSES['cifar10']} and (3, 32, 32); pass it as a path instead of 'cifar10'"
            )
    return ImageDataset(torch.from_numpy(images), torch.from_numpy(labels), classes, src.name)


def read_folder_source(src: Source, spec: str, split: str, limit: int | None,
                       image_size: tuple[int, int] | None) -> ImageDataset:
    return _image_dataset(src, *decode_folder(src.path, split, limit, image_size))


def read_tar_source(src: Source, spec: str, split: str, limit: int | None,
                    image_size: tuple[int, int] | None) -> ImageDataset:
    _check_cifar10_tar(src)
    return _image_dataset(src, *decode_tar(src.path, split, limit, image_size))


READERS: dict[str, Reader] = {
    "idx": read_idx_source,
    "pickle": read_pickle_source,
    "folder": read_folder_source,
    "tar": read_tar_source,
}


def read_source(src: Source, spec: str, split: str, limit: int | None,
                image_size: tuple[int, int] | None) -> ImageDataset:
    """Decode `src` with the reader its kind names."""
    return READERS[src.kind](src, spec, split, limit, image_size)
