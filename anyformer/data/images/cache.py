"""The on-disk cache of decoded image datasets, so the second load of even 60k JPEGs is near-instant.

One uncompressed .npz per (source, split, options), under ``<cache_dir>/decoded/``. Its name holds a
key of everything that changes the decoded arrays, the source files' sizes and mtimes included, so
an edited source is decoded again rather than served stale.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...files import atomic_write
from .dataset import ImageDataset
from .folders import list_folder
from .readers import idx_pair
from .registry import IDX_FILES, TITLES, Source, find_idx

__all__ = ["cache_file", "cache_load", "cache_save", "fingerprint"]

# Bump when the decoded-cache layout or decoding rules change, so stale caches are ignored. 2: EXIF
# orientation applied, unreadable images skipped, what was skipped stored beside the pixels.
# (The resizing rule has its own name, picture.RESIZE_RULE, in the key the caller gives.)
_CACHE_VERSION = 2


def _stat_key(p: Path) -> list[Any]:
    st = p.stat()
    return [str(p.resolve()), st.st_size, st.st_mtime_ns]


def fingerprint(src: Source, split: str) -> list[Any]:
    """What identifies the source's current content, cheaply (stat, not a hash of the data)."""
    if src.kind == "idx":
        title = TITLES.get(src.named or "", src.name)
        splits = [split] if split in IDX_FILES else [s for s, names in IDX_FILES.items()
                                                             if all(find_idx(src.path, n) for n in names)]
        return [_stat_key(p) for s in splits for p in idx_pair(src.path, s, title, src.hint)]
    if src.kind == "folder":
        # Any added, removed or edited image changes the key (and with it which images are unreadable);
        # so does any stray file or unreadable photo added or removed, which the cache's warnings name.
        # Hashed as built, there is no file to hash.
        listing = list_folder(src.path)
        h = hashlib.sha256()
        for rel in listing.images:
            st = (src.path / rel).stat()
            h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        for rel in [*listing.strays, *(f for f, _ in listing.unsupported)]:
            h.update(f"skipped\0{rel}\n".encode())
        return [str(src.path.resolve()), h.hexdigest()]
    return [_stat_key(src.path)]


def cache_file(root: Path, name: str, split: str, key_parts: list[Any]) -> Path:
    """The cache path for a dataset decoded with `key_parts` (which must be JSON-serialisable)."""
    key = hashlib.sha256(json.dumps([_CACHE_VERSION, *key_parts]).encode()).hexdigest()[:20]
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:60]
    return root / "decoded" / f"{safe}-{split}-{key}.npz"


def cache_load(path: Path) -> ImageDataset | None:
    """The cached dataset, or None when there is none or it cannot be read (it is rebuilt then)."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            images, labels = z["images"], z["labels"]
            classes = [str(c) for c in z["classes"].tolist()]
            name = str(z["name"])
            left_out = json.loads(str(z["left_out"]))
        return ImageDataset(torch.from_numpy(images), torch.from_numpy(labels), classes, name,
                            skipped=left_out["skipped"], unreadable=[tuple(u) for u in left_out["unreadable"]],
                            derived_size=left_out["derived_size"])
    except Exception as e:  # noqa: BLE001 - any broken cache is simply rebuilt
        warnings.warn(f"ignoring unreadable dataset cache {path}: {e}", stacklevel=3)
        return None


def cache_save(path: Path, ds: ImageDataset) -> None:
    """Write the cache whole or not at all; a cache that cannot be written only costs speed."""

    def write(f: Any) -> None:
        # Uncompressed on purpose: loading must be I/O-bound, not zlib-bound.
        np.savez(
            f,
            images=ds.images.numpy(),
            labels=ds.labels.numpy(),
            classes=np.array(ds.classes, dtype=np.str_),
            name=np.array(ds.name, dtype=np.str_),
            # What decoding skipped and chose, so that a cache hit warns and reports as the first load did.
            left_out=np.array(json.dumps({"skipped": ds.skipped, "unreadable": ds.unreadable,
                                          "derived_size": ds.derived_size}), dtype=np.str_),
        )

    try:
        atomic_write(path, write)
    except OSError as e:
        warnings.warn(f"could not write dataset cache {path}: {e}; continuing without it", stacklevel=3)
