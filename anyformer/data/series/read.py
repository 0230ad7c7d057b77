"""`read_series_file`: a series file read by the reader its suffix names (.ts/.tsv: archive, .csv:
wide_long_csv, .npy/.npz: npy), after the checks every format shares (the file exists, its size, its
suffix)."""
from __future__ import annotations

from pathlib import Path

from ..errors import DataError
from .archive import read_ts, read_tsv
from .npy import read_series_array
from .raw import RawSeries
from .wide_long_csv import read_series_csv

__all__ = ["SERIES_SUFFIXES", "read_series_file"]

MAX_FILE_BYTES = 2 * 1024 ** 3  # a text archive larger than this is not a classification split
SERIES_SUFFIXES = (".ts", ".tsv", ".csv", ".npy", ".npz")  # in the order a folder's pair is preferred


def read_series_file(path: str | Path, label_column: str | None = None) -> RawSeries:
    """A `.ts`, `.tsv`, `.csv`, `.npy` or `.npz` file, chosen by its suffix. `label_column` names a
    CSV's label column (None: found by its name)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"no such series file: {path}")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise DataError(f"{path} is {path.stat().st_size / 2**30:.1f} GiB; expected a series archive under "
                        f"{MAX_FILE_BYTES / 2**30:.0f} GiB")
    suffix = path.suffix.lower()
    if suffix not in SERIES_SUFFIXES:
        raise DataError(f"{path}: unknown series format {path.suffix!r}; expected a {', '.join(SERIES_SUFFIXES)} file")
    if label_column is not None and suffix != ".csv":
        raise DataError(f"{path}: --label-column {label_column!r} names a CSV column, but this is a {suffix} file "
                        f"whose labels have their own place; expected a .csv, or no --label-column")
    if suffix == ".csv":
        return read_series_csv(path, label_column)
    if suffix in (".npy", ".npz"):
        return read_series_array(path)
    return read_ts(path) if suffix == ".ts" else read_tsv(path)
