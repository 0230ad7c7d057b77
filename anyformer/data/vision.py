"""Image classification datasets: MNIST, Fashion-MNIST, CIFAR-10 and your own images.

Everything decodes to one in-memory form, `ImageDataset` (uint8 images, int64
labels), which is cached on disk as an uncompressed .npz so the second load of
even a 60k-JPEG dataset is near-instant.

This module is the public face; the work is done a floor below, one job a file:
`registry` (named datasets, checksums, where each is looked for), `readers` (one per
kind of source: IDX, mnist.pkl.gz, image folder, tar), `images` and `numpy_pickle`
(the formats), `cache` (the decoded .npz files).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

import numpy as np
import torch
from PIL import Image

from .cache import cache_file, cache_load, cache_save, fingerprint
from .dataset import ImageDataset
from .errors import DataError
from .images import read_picture, size_hw
from .numpy_pickle import load_numpy_pickle
from .readers import read_source
from .registry import ALIASES, DATASET_NAMES, SPLITS, default_cache_dir, resolve_named, resolve_path

__all__ = [
    "ImageDataset",
    "load_image_dataset",
    "load_image",
    "load_numpy_pickle",
    "default_cache_dir",
    "DATASET_NAMES",
]


def load_image_dataset(
    spec: str | os.PathLike[str],
    split: str = "train",
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    limit_per_class: int | None = None,
    image_size: int | tuple[int, int] | None = None,
    download: bool = True,
    cache: bool = True,
) -> ImageDataset:
    """Load an image classification dataset as uint8 (N, C, H, W) images and int64 labels.

    spec: "mnist", "fashion-mnist", "cifar10", or a path to
      - a folder with the IDX files (train-images-idx3-ubyte[.gz], ..., t10k-labels-idx1-ubyte[.gz]),
      - a folder of <class>/<image> files, or with train/<class>/ and test/<class>/ subfolders,
      - a .tar(.gz) archive of such a folder (wrapper folders are skipped),
      - a classic mnist.pkl.gz.
      A bare dataset name always means the named dataset; write "./mnist" for a local folder.
    split: "train" or "test".
    cache_dir: where downloads and decoded caches go (default $ANYFORMER_CACHE or ~/.cache/anyformer).
    limit_per_class: keep only the first N images of each class (fast partial loads).
    image_size: resize every image to (H, W) (or N x N) instead of requiring equal sizes.
    download: allow fetching MNIST / Fashion-MNIST from the network.
    cache: read and write the decoded cache.
    """
    if split not in SPLITS:
        raise DataError(f"bad split {split!r}: expected one of {', '.join(SPLITS)}")
    if limit_per_class is not None and (not isinstance(limit_per_class, int) or limit_per_class < 1):
        raise DataError(f"bad limit_per_class {limit_per_class!r}: expected a positive int or None")
    hw = size_hw(image_size) if image_size is not None else None
    cache_root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()

    spec_str = os.fspath(spec)
    key = ALIASES.get(spec_str.strip().lower())
    path = Path(spec_str).expanduser()
    if key is not None and os.sep not in spec_str and "/" not in spec_str:
        src = resolve_named(key, split, cache_root, download)
    elif path.exists():
        src = resolve_path(path)
    else:
        raise DataError(
            f"no dataset {spec_str!r}: expected one of {', '.join(DATASET_NAMES)} or an existing folder / "
            ".tar / .pkl.gz path; check the spelling or the path"
        )

    cache_path = None
    if cache:
        cache_path = cache_file(
            cache_root, src.name, split, [src.kind, src.named, split, limit_per_class, hw, fingerprint(src, split)]
        )
        hit = cache_load(cache_path)
        if hit is not None:
            return hit
    ds = read_source(src, spec_str, split, limit_per_class, hw)
    if cache_path is not None:
        cache_save(cache_path, ds)
    return ds


def load_image(
    source: "str | os.PathLike[str] | IO[bytes] | Image.Image", channels: int, size: int | tuple[int, int]
) -> torch.Tensor:
    """Read one PNG/JPEG/... of any size and mode as uint8 (channels, H, W) by plain resizing.

    source: a path, a binary file object or a PIL image. channels: 1 (grey) or 3 (RGB). size: (H, W)
    or N for N x N; the image is resized (bilinear) when it differs. EXIF rotation is applied, as phone
    photos need it. `ImagePreprocess.load` frames drawn pictures the way the training set was framed.
    """
    if channels not in (1, 3):
        raise DataError(f"bad channels {channels!r}: expected 1 (grey) or 3 (RGB)")
    h, w = size_hw(size)
    im = read_picture(source).convert("L" if channels == 1 else "RGB")
    if (im.height, im.width) != (h, w):
        im = im.resize((w, h), Image.Resampling.BILINEAR)
    a = np.array(im, dtype=np.uint8)  # a writable copy: torch warns on read-only buffers
    a = a[None] if channels == 1 else np.ascontiguousarray(a.transpose(2, 0, 1))
    return torch.from_numpy(a)
