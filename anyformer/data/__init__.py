"""Data for anyformer, one folder per kind and one file per question (like timm's data/readers/):

- `images/`: image classification: MNIST, Fashion-MNIST, CIFAR-10 and your own folders and tars,
  read, checked, cached decoded, preprocessed and augmented;
- `text/`: text for language models: sources, reading, memory-mapped token streams, tokenizers;
- `series/`: labelled time series: the UCR/UEA archives' files, CSV and NumPy files;
- `tables/`: rows of number, category and date columns with a target;
- here, what every kind uses: `detect` (which kind a path holds), `download` (checksummed
  downloads), `locations` (the cache folder), `split` (a held-out share), `transfer` (host to
  device), `errors` (`DataError`, `DataWarning`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names

# `download`, `errors` and `locations` load now: they are light, and `download` must be the function, not its
# module of the same name. The rest load on first use, as the package `anyformer`'s names do: a language model's
# run reads text and should not pay for Pillow and pandas, which the image and table readers import (0.4 s).
from .download import download, sha256_file
from .errors import DataError, DataWarning
from .locations import default_cache_dir

_EXPORTS = {
    **dict.fromkeys(("DATASET_NAMES", "ImageDataset", "ImagePreprocess", "load_image", "load_image_dataset",
                     "load_numpy_pickle", "parse_idx", "random_affine", "random_crop_flip", "random_elastic",
                     "random_erasing", "random_resized_crop_flip", "random_stroke_width", "read_idx"), "images"),
    **dict.fromkeys(("TEXT_NAMES", "BPETokenizer", "CharTokenizer", "TokenCorpus", "load_corpus", "load_tokenizer",
                     "read_text", "tokenizer_from_info"), "text"),
}
__all__ = [
    "BPETokenizer",
    "CharTokenizer",
    "DATASET_NAMES",
    "DataError",
    "DataWarning",
    "ImageDataset",
    "ImagePreprocess",
    "default_cache_dir",
    "download",
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
    "read_text",
    "sha256_file",
    "TEXT_NAMES",
    "TokenCorpus",
    "load_corpus",
    "load_tokenizer",
    "tokenizer_from_info",
]
# The folders and modules below, reachable as attributes (`af.data.images`) without importing each first
# (`download`, `errors` and `locations` are loaded already).
_MODULES = ("images", "text", "series", "tables", "detect", "split", "transfer")

if TYPE_CHECKING:
    from .images import (DATASET_NAMES, ImageDataset, ImagePreprocess, load_image, load_image_dataset,
                         load_numpy_pickle, parse_idx, random_affine, random_crop_flip, random_elastic,
                         random_erasing, random_resized_crop_flip, random_stroke_width, read_idx)
    from .text import (TEXT_NAMES, BPETokenizer, CharTokenizer, TokenCorpus, load_corpus, load_tokenizer, read_text,
                       tokenizer_from_info)


__getattr__, __dir__ = lazy_names(__name__, _EXPORTS, _MODULES)
