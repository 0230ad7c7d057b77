"""Image classification datasets: MNIST, Fashion-MNIST, CIFAR-10 and your own images.

Everything decodes to one in-memory form, `ImageDataset` (uint8 images, int64
labels), which is cached on disk as an uncompressed .npz so the second load of
even a 60k-JPEG dataset is near-instant.

This module is the public face; the work is done a floor below, one job a file:
`registry` (named datasets, checksums, where each is looked for), `readers` (one per
kind of source: IDX, mnist.pkl.gz, image folder, tar), `folders` and `numpy_pickle`
(the formats), `scan` (what a folder holds, from headers), `cache` (the decoded .npz files).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import IO

import numpy as np
import torch
from PIL import Image

from ..errors import DataError, DataWarning
from ..locations import default_cache_dir
from .cache import cache_file, cache_load, cache_save, fingerprint
from .dataset import ImageDataset
from .folders import list_folder, list_names, open_tar, parse_layout, tar_members
from .numpy_pickle import load_numpy_pickle
from .picture import RESIZE_RULE, read_picture, size_hw, to_pixels
from .readers import read_source
from .registry import (ALIASES, DATASET_NAMES, IDX_FILES, SPLITS, TITLES, Source, find_idx, resolve_named,
                       resolve_path)

__all__ = [
    "ImageDataset",
    "load_image_dataset",
    "load_image",
    "source_splits",
    "warn_skipped",
    "load_numpy_pickle",
    "default_cache_dir",
    "DATASET_NAMES",
]

# "val": a folder's val/ split; "all": every image of a source (a folder without split folders is all train).
ALL_SPLITS = ("train", "test", "val", "all")


def _resolve(spec: str | os.PathLike[str], split: str, cache_root: Path, download: bool) -> tuple[Source, str]:
    """The source `spec` names, and the spec as a string."""
    spec_str = os.fspath(spec)
    key = ALIASES.get(spec_str.strip().lower())
    path = Path(spec_str).expanduser()
    if key is not None and os.sep not in spec_str and "/" not in spec_str:
        if split not in SPLITS:
            raise DataError(f"{TITLES[key]} comes as train and test splits, not {split!r}; expected split "
                            f"'train' or 'test'")
        return resolve_named(key, split, cache_root, download), spec_str
    if path.exists():
        return resolve_path(path), spec_str
    raise DataError(
        f"no dataset {spec_str!r}: expected one of {', '.join(DATASET_NAMES)} or an existing folder / "
        ".tar / .pkl.gz path; check the spelling or the path"
    )


def load_image_dataset(
    spec: str | os.PathLike[str],
    split: str = "train",
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    limit_per_class: int | None = None,
    image_size: int | tuple[int, int] | None = None,
    channels: int | None = None,
    download: bool = True,
    cache: bool = True,
    warn: bool = True,
) -> ImageDataset:
    """Load an image classification dataset as uint8 (N, C, H, W) images and int64 labels.

    spec: "mnist", "fashion-mnist", "cifar10", or a path to
      - a folder with the IDX files (train-images-idx3-ubyte[.gz], ..., t10k-labels-idx1-ubyte[.gz]),
      - a folder of <class>/<image> files, with or without train/, test/ (or val/) split folders,
      - a .tar(.gz) archive of such a folder (wrapper folders are skipped),
      - a classic mnist.pkl.gz.
      A bare dataset name always means the named dataset; write "./mnist" for a local folder.
    split: "train", "test", "val" (a folder's val/), or "all" (every image of a folder, tar or IDX
      folder). A folder without split folders is one split: "train" and "all" both load all of it.
    cache_dir: where downloads and decoded caches go (default $ANYFORMER_CACHE or ~/.cache/anyformer).
    limit_per_class: keep only the first N images of each class (fast partial loads).
    image_size: fit every image to (H, W) (or N x N): scaled to cover it, then centre-cropped (the
      aspect kept, see images.fit_image). None: as stored where every image has one size; a folder
      or tar of several sizes is fitted to the size `scan.derive_image_size` derives from all
      of its images (`ImageDataset.derived_size` says why).
    channels: 1 or 3 to fix the channels (a trained run's); None: 1 where every image is grey, else 3.
    download: allow fetching MNIST / Fashion-MNIST from the network.
    cache: read and write the decoded cache.
    warn: say in one DataWarning line each which stray files and which unreadable images were skipped.
    """
    if split not in ALL_SPLITS:
        raise DataError(f"bad split {split!r}: expected one of {', '.join(ALL_SPLITS)}")
    if limit_per_class is not None and (not isinstance(limit_per_class, int) or limit_per_class < 1):
        raise DataError(f"bad limit_per_class {limit_per_class!r}: expected a positive int or None")
    if channels not in (None, 1, 3):
        raise DataError(f"bad channels {channels!r}: expected 1 (grey), 3 (RGB) or None (as the images are)")
    hw = size_hw(image_size) if image_size is not None else None
    cache_root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    src, spec_str = _resolve(spec, split, cache_root, download)

    cache_path = None
    ds = None
    if cache:
        key = [src.kind, src.named, split, limit_per_class, hw, channels, RESIZE_RULE, fingerprint(src, split)]
        cache_path = cache_file(cache_root, src.name, split, key)
        ds = cache_load(cache_path)
    if ds is None:
        ds = read_source(src, spec_str, split, limit_per_class, hw, channels)
        if cache_path is not None:
            cache_save(cache_path, ds)
    if warn and src.named is None:  # a named dataset's files are the registry's (CIFAR-10's tar holds a README)
        warn_skipped(str(src.path), ds.skipped, ds.unreadable)
    return ds


def source_splits(spec: str | os.PathLike[str]) -> tuple[str, tuple[str, ...]]:
    """(kind, splits) of the dataset `spec` names, without decoding an image. kind: "named", "idx",
    "pickle", "folder" or "tar". splits: ("train", "test") for the named datasets and pickles, those
    whose IDX files are present, a folder's or tar's split folders among ("train", "test", "val"), or
    ("all",) where its class folders sit at the top."""
    spec_str = os.fspath(spec)
    if ALIASES.get(spec_str.strip().lower()) is not None and os.sep not in spec_str and "/" not in spec_str:
        return "named", SPLITS
    src, _ = _resolve(spec, "train", default_cache_dir(), download=False)
    if src.kind == "idx":
        return "idx", tuple(s for s in SPLITS if all(find_idx(src.path, n) for n in IDX_FILES[s]))
    if src.kind == "pickle":
        return "pickle", SPLITS
    if src.kind == "folder":
        return "folder", parse_layout(list_folder(src.path).images, str(src.path)).splits
    with open_tar(src.path) as tf:
        return "tar", parse_layout(list_names(list(tar_members(tf, src.path))).images, str(src.path)).splits


def _some(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def warn_skipped(source: str, skipped: list[str], unreadable: list[tuple[str, str]]) -> None:
    """One DataWarning line for the stray files skipped, one for the unreadable images (each named
    with why); nothing where there were none."""
    if skipped:
        n = len(skipped)
        warnings.warn(f"skipped {n} file{'s' if n > 1 else ''} that {'are' if n > 1 else 'is'} not "
                      f"{'images' if n > 1 else 'an image'} in {source}: {_some(skipped)}", DataWarning, stacklevel=2)
    if unreadable:
        n = len(unreadable)
        warnings.warn(f"skipped {n} unreadable image{'s' if n > 1 else ''} in {source}: "
                      f"{_some([f'{f} ({why})' for f, why in unreadable], 3)}", DataWarning, stacklevel=2)


def load_image(
    source: "str | os.PathLike[str] | IO[bytes] | Image.Image", channels: int, size: int | tuple[int, int]
) -> torch.Tensor:
    """Read one PNG/JPEG/... of any size and mode as uint8 (channels, H, W), exactly as a dataset's
    image is decoded (images.to_pixels): upright (EXIF orientation applied, as phone photos need),
    grey or RGB, and fitted to `size` ((H, W) or N for N x N) by scaling it to cover the size and
    cropping about the centre (the aspect is kept). `ImagePreprocess.load` frames drawn pictures the
    way the training set was framed instead, where the run recorded a framing.

    source: a path, a binary file object or a PIL image. channels: 1 (grey) or 3 (RGB).
    """
    if channels not in (1, 3):
        raise DataError(f"bad channels {channels!r}: expected 1 (grey) or 3 (RGB)")
    h, w = size_hw(size)
    a, grey = to_pixels(read_picture(source, (h, w)), channels, (h, w))
    if grey and channels == 3:
        a = np.repeat(a[:, :, None], 3, axis=2)
    a = np.array(a, dtype=np.uint8)  # a writable copy: torch warns on read-only buffers
    a = a[None] if channels == 1 else np.ascontiguousarray(a.transpose(2, 0, 1))
    return torch.from_numpy(a)
