"""One series from a file, for `predict`, `attention` and the like: a CSV (one column per channel,
one row per time step; a univariate series may also be one row) or a NumPy .npy array, (T,), (C, T)
or (T, C). Read as numbers only: a .npy is loaded without pickles, so that no file can run code."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import DataError
from ..tables.cells import as_numbers, is_missing, number_mask
from ..tables.read import read_csv_rows

__all__ = ["orient_series", "parse_series_csv", "read_series_input"]

MAX_VALUES = 50_000_000  # a single series beyond this is not one a classifier of archive sizes takes


def _csv(path: Path) -> np.ndarray:
    return parse_series_csv(path.read_bytes(), str(path))


def parse_series_csv(data: bytes, where: str) -> np.ndarray:
    """CSV bytes -> (rows, columns) float64, NaN where a cell is missing (which `orient_series` then
    refuses by its place); a first line that is not numbers is a header naming the channels. Read by the
    package's one CSV reader and its one opinion of what a number and a missing cell are."""
    rows = read_csv_rows(data, where)
    values = []
    for i, (line, fields) in enumerate(rows):
        numbers = as_numbers(pd.Series(fields, dtype=object))
        if numbers is None:
            if i == 0:  # a header line naming the channels
                continue
            bad = next(f for f in fields if not number_mask(pd.Series([f]))[0] and not is_missing(pd.Series([f]))[0])
            raise DataError(f"{where}:{line}: {bad[:40]!r} is not a number; expected comma-separated values, "
                            f"one column per channel")
        if values and len(numbers) != len(values[0]):
            raise DataError(f"{where}:{line}: {len(numbers)} values, expected {len(values[0])} as on the first row")
        values.append(numbers)
    if not values:
        raise DataError(f"{where}: no values; expected a CSV with one column per channel, one row per time step")
    return np.asarray(values, dtype=np.float64)


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
