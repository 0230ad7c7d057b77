"""Datasets for anyformer: IDX/MNIST readers, image folders and tars, checksummed
downloads, an on-disk decoded cache, and batched GPU-friendly augmentation."""

from .augment import random_affine, random_crop_flip
from .download import download, sha256_file
from .errors import DataError
from .idx import parse_idx, read_idx
from .vision import (
    DATASET_NAMES,
    ImageDataset,
    default_cache_dir,
    load_image,
    load_image_dataset,
    load_numpy_pickle,
)

__all__ = [
    "DATASET_NAMES",
    "DataError",
    "ImageDataset",
    "default_cache_dir",
    "download",
    "load_image",
    "load_image_dataset",
    "load_numpy_pickle",
    "parse_idx",
    "random_affine",
    "random_crop_flip",
    "read_idx",
    "sha256_file",
]
