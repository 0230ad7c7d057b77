"""Datasets for anyformer: IDX/MNIST readers, image folders and tars, checksummed
downloads, an on-disk decoded cache, batched GPU-friendly augmentation, and text
(character and GPT-2 BPE tokenizers, memory-mapped token streams)."""

from .download import download, sha256_file
from .errors import DataError, DataWarning
from .images import (DATASET_NAMES, ImageDataset, ImagePreprocess, load_image, load_image_dataset, load_numpy_pickle,
                     parse_idx, random_affine, random_crop_flip, read_idx)
from .locations import default_cache_dir
from .text import TEXT_NAMES, TokenCorpus, load_corpus, read_text
from .tokenizers import BPETokenizer, CharTokenizer, load_tokenizer, tokenizer_from_info

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
    "read_idx",
    "read_text",
    "sha256_file",
    "TEXT_NAMES",
    "TokenCorpus",
    "load_corpus",
    "load_tokenizer",
    "tokenizer_from_info",
]
