"""One series from a file, for `predict`, `attention` and the like: a CSV (one column per channel,
one row per time step; a univariate series may also be one row) or a NumPy .npy array, (T,), (C, T)
or (T, C). Read as numbers only: a .npy is loaded without pickles, so that no file can run code."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import DataError

__all__ = ["orient_series", "parse_series_csv", "read_series_input"]

MAX_VALUES = 50_000_000  # a single series beyond this is not one a classifier of archive sizes takes


def _csv(path: Path) -> np.ndarray:
    return parse_series_csv(path.read_bytes(), str(path))


def parse_series_csv(data: bytes, where: str) -> np.ndarray:
    """CSV bytes -> (rows, columns) float64; `where` names the source in errors (a path, an upload)."""
    try:
        lines = [l.strip() for l in data.decode("utf-8").splitlines() if l.strip()]
    except UnicodeDecodeError as e:
        raise DataError(f"{where}: not UTF-8 text (byte {e.start}); expected a CSV of numbers") from None
    sep = ";" if lines and ";" in lines[0] and "," not in lines[0] else "\t" if lines and "\t" in lines[0] else ","
    rows = []
    for i, line in enumerate(lines):
        fields = [f.strip() for f in line.split(sep)]
        try:
            rows.append([float(f) for f in fields])
        except ValueError:
            if i == 0 and not rows:  # a header line naming the channels
                continue
            bad = next(f for f in fields if not _is_number(f))
            raise DataError(f"{where}:{i + 1}: {bad[:40]!r} is not a number; expected comma-separated values, "
                            f"one column per channel") from None
        if len(rows[-1]) != len(rows[0]):
            raise DataError(f"{where}:{i + 1}: {len(rows[-1])} values, expected {len(rows[0])} as on the first row")
    if not rows:
        raise DataError(f"{where}: no values; expected a CSV with one column per channel, one row per time step")
    return np.asarray(rows, dtype=np.float64)


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def read_series_input(path: str | Path, channels: int) -> np.ndarray:
    """(C, T) float32 from `path`, oriented by the model's channel count; one-line errors otherwise."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"no such series file: {path}")
    if path.suffix.lower() == ".npy":
        try:
            array = np.load(path, allow_pickle=False)
        except ValueError as e:
            raise DataError(f"{path}: not a plain numeric .npy array ({str(e).splitlines()[0][:120]})") from None
        if not (np.issubdtype(array.dtype, np.number) or array.dtype == bool):
            raise DataError(f"{path}: a {array.dtype} array; expected numbers")
        array = array.astype(np.float64)
    elif path.suffix.lower() in (".csv", ".txt"):
        array = _csv(path)
    else:
        raise DataError(f"{path}: unknown series file type {path.suffix!r}; expected .csv or .npy")
    return orient_series(array, channels, str(path))


def orient_series(array: np.ndarray, channels: int, path: str) -> np.ndarray:
    """(C, T) float32 from an array read from `path`: oriented by the model's channel count, checked."""
    if array.size > MAX_VALUES:
        raise DataError(f"{path}: {array.size:,} values; expected at most {MAX_VALUES:,}")
    array = np.squeeze(array) if array.ndim > 2 else array
    if array.ndim == 1 or (array.ndim == 2 and 1 in array.shape and channels == 1):
        array = array.reshape(1, -1)
    elif array.ndim == 2 and array.shape[1] == channels and array.shape[0] != channels:
        array = array.T  # rows are time steps, columns channels
    if array.ndim != 2 or array.shape[0] != channels:
        shape = "x".join(map(str, array.shape))
        raise DataError(f"{path}: a series of shape {shape} has no axis of {channels} channels; this model takes "
                        f"{channels} channel(s): one column per channel, one row per time step")
    if array.shape[1] < 1:
        raise DataError(f"{path}: an empty series; expected at least one time step")
    bad = ~np.isfinite(array)
    if bad.any():
        c, t = map(int, np.argwhere(bad)[0])
        raise DataError(f"{path}: {'NaN' if np.isnan(array[c, t]) else 'an infinite value'} at channel {c}, "
                        f"step {t}; expected finite numbers (fill missing values first)")
    return array.astype(np.float32)
