"""Images to classify: named datasets (MNIST, Fashion-MNIST, CIFAR-10) and your own folders and tars.

One file a question:
- `vision`: the public face, `load_image_dataset` and `load_image` (resolve, read, cache);
- `registry`: which named datasets there are, their files and checksums, where each is looked for;
- `readers`: one reader per kind of source (IDX folder, mnist.pkl.gz, image folder, tar);
- `idx`, `numpy_pickle`: the formats MNIST comes in (IDX files, the classic mnist.pkl.gz);
- `folders`: a folder (or tar) of class folders of encoded images, listed and decoded;
- `picture`: one picture decoded upright, grey or RGB, and fitted to a size;
- `scan`: what a folder holds, from the image headers alone (the settings of a run are derived from it);
- `cache`: the on-disk cache of decoded datasets;
- `dataset`: `ImageDataset`, the in-memory form every source decodes to;
- `preprocess`: pixels to model inputs, saved with a run; `drawn`: a user's picture framed like the
  training images; `augment`: batched augmentation on the device.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...lazy import lazy_names

# Names are imported on first use: `registry` (which names there are), which reads no picture, is imported
# by runs on text too, which need not pay for Pillow.
_EXPORTS = {
    **dict.fromkeys(("random_affine", "random_crop_flip", "random_elastic", "random_erasing",
                     "random_resized_crop_flip", "random_stroke_width"), "augment"),
    "ImageDataset": "dataset", "Framing": "drawn", "fit_framing": "drawn", "IMAGE_EXTS": "folders",
    "parse_idx": "idx", "read_idx": "idx", "load_numpy_pickle": "numpy_pickle",
    "UnreadableImage": "picture", "fit_image": "picture", "read_picture": "picture",
    "ImagePreprocess": "preprocess", "DATASET_NAMES": "registry",
    "ImageFolderScan": "scan", "derive_image_size": "scan", "scan_images": "scan",
    **dict.fromkeys(("load_image", "load_image_dataset", "source_splits", "warn_skipped"), "vision"),
}
__all__ = [
    "DATASET_NAMES",
    "Framing",
    "IMAGE_EXTS",
    "ImageDataset",
    "ImageFolderScan",
    "ImagePreprocess",
    "UnreadableImage",
    "derive_image_size",
    "fit_framing",
    "fit_image",
    "load_image",
    "load_image_dataset",
    "load_numpy_pickle",
    "parse_idx",
    "random_affine",
    "random_crop_flip",
    "random_elastic",
    "random_erasing",
    "random_resized_crop_flip",
    "random_stroke_width",
    "read_idx",
    "read_picture",
    "scan_images",
    "source_splits",
    "warn_skipped",
]
_MODULES = ("augment", "cache", "dataset", "decode_process", "drawn", "folders", "idx", "mix", "numpy_pickle",
            "picture", "preprocess", "readers", "registry", "scan", "vision")

if TYPE_CHECKING:
    from .augment import (random_affine, random_crop_flip, random_elastic, random_erasing, random_resized_crop_flip,
                          random_stroke_width)
    from .dataset import ImageDataset
    from .drawn import Framing, fit_framing
    from .folders import IMAGE_EXTS
    from .idx import parse_idx, read_idx
    from .numpy_pickle import load_numpy_pickle
    from .picture import UnreadableImage, fit_image, read_picture
    from .preprocess import ImagePreprocess
    from .registry import DATASET_NAMES
    from .scan import ImageFolderScan, derive_image_size, scan_images
    from .vision import load_image, load_image_dataset, source_splits, warn_skipped


__getattr__, __dir__ = lazy_names(__name__, _EXPORTS, _MODULES)
