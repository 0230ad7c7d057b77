"""Labelled series in NumPy files, loaded with `allow_pickle=False` so that a stranger's file can hold
numbers and text only, never code.

`.npy`: one array (N, 1 + T), the label in column 0 and the series after it, as the archive's .tsv
lays out its rows. `.npz`: arrays `X`, (N, T) or (N, C, T), and `y`, (N,) of numbers or text. In
both a shorter series ends with NaN (padding, its length kept); a NaN before its last number is a
gap, refused with its place. The file's content decides how it is read, not its suffix: an .npz
saved under .npy reads as the .npz it is.
"""
from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from ..errors import DataError
from .raw import RawSeries, check_label_kinds, padded_length, problem_name

__all__ = ["read_series_array"]

EXPECTED = ("expected an .npy array (N, 1 + T) with the label in column 0, or an .npz with arrays X (N, T) or "
            "(N, C, T) and y (N,)")


def read_series_array(path: str | Path) -> RawSeries:
    """An .npy or .npz file of labelled series (module docstring)."""
    path = Path(path)
    loaded = _load(path, lambda: np.load(path, allow_pickle=False))
    if isinstance(loaded, np.ndarray):
        x, y = _split_label_column(path, loaded)
    else:
        with loaded:  # an .npz: each array is read (and checked for pickles) when asked for
            arrays = _load(path, lambda: {k: loaded[k] for k in loaded.files})
        x, y = _x_and_y(path, arrays)
    return _raw(path, x, y)


def _load(path: Path, read):
    """`read()`, its failures (a pickle, a truncated or foreign file) as one line."""
    try:
        return read()
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError) as e:
        raise DataError(f"{path}: not a plain numeric NumPy file ({_first_line(e)}); {EXPECTED}") from None


def _first_line(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:120]


def _numeric(path: Path, array: np.ndarray, what: str) -> np.ndarray:
    if array.dtype.kind not in "biuf":
        raise DataError(f"{path}: {what} is a {array.dtype} array; expected numbers")
    return array.astype(np.float64)


def _split_label_column(path: Path, array: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """(N, 1, T) values and N labels from an .npy (N, 1 + T)."""
    if array.ndim != 2 or array.shape[1] < 2 or array.shape[0] < 1:
        raise DataError(f"{path}: an array of shape {tuple(array.shape)}; {EXPECTED}")
    array = _numeric(path, array, "the array")
    labels = [_label_text(path, v, r) for r, v in enumerate(array[:, 0])]
    return array[:, None, 1:], labels


def _x_and_y(path: Path, arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, list[str]]:
    """(N, C, T) values and N labels from an .npz's X and y."""
    xk = next((k for k in ("X", "x") if k in arrays), None)
    yk = next((k for k in ("y", "Y") if k in arrays), None)
    if xk is None or yk is None:
        raise DataError(f"{path}: arrays {sorted(arrays)[:8]}; {EXPECTED}")
    x, y = arrays[xk], arrays[yk]
    if x.ndim not in (2, 3) or x.shape[0] < 1 or x.shape[-1] < 1:
        raise DataError(f"{path}: X has shape {tuple(x.shape)}; {EXPECTED}")
    y = y.reshape(-1) if y.ndim == 2 and 1 in y.shape else y
    if y.ndim != 1 or len(y) != len(x):
        raise DataError(f"{path}: y has shape {tuple(y.shape)} for {len(x)} series in X; expected one label per "
                        f"series, y of shape ({len(x)},)")
    x = _numeric(path, x, "X")
    if y.dtype.kind in "US":
        labels = [(v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)).strip() for v in y.tolist()]
        empty = next((r for r, l in enumerate(labels) if not l), None)
        if empty is not None:
            raise DataError(f"{path}: y[{empty}] is empty; expected every series labelled")
    else:
        labels = [_label_text(path, v, r) for r, v in enumerate(_numeric(path, y, "y"))]
    return (x[:, None] if x.ndim == 2 else x), labels


def _label_text(path: Path, value: float, row: int) -> str:
    """A numeric label as a class name: 1.0 reads '1', as the archive's text files write it."""
    if not np.isfinite(value):
        raise DataError(f"{path}: the label of series {row} is {value}; expected a finite number or a name")
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _raw(path: Path, x: np.ndarray, labels: list[str]) -> RawSeries:
    """RawSeries from (N, C, T) with NaN padding; every channel of a series ends at the same step."""
    if np.isinf(x).any():
        n, c, t = (int(i[0]) for i in np.nonzero(np.isinf(x)))
        raise DataError(f"{path}: series {n}, channel {c}, step {t}: infinite value; expected finite numbers")
    series = []
    for n in range(x.shape[0]):
        ends = []
        for c in range(x.shape[1]):
            length, gap = padded_length(x[n, c])
            if gap is not None:
                raise DataError(f"{path}: series {n}, channel {c}, step {gap}: missing value (NaN) inside the "
                                f"series; expected NaN only at the end of a shorter series")
            ends.append(length)
        if ends[0] == 0 or len(set(ends)) > 1:
            raise DataError(f"{path}: series {n} has channels of {sorted(set(ends))} steps; expected every channel "
                            f"of a series with values, all of one length (NaN pads only at the end)")
        series.append(x[n, :, : ends[0]].astype(np.float32))
    check_label_kinds(labels, f"{path}: the labels")
    return RawSeries(series, labels, None, problem_name(path))
