"""Readers for the time-series classification archives' two text formats, the helpers every series
reader shares, and `read_series_file`, which picks a reader by the file's suffix (.csv: series_csv,
.npy/.npz: series_npy).

`.ts` (the UEA/UCR archive's, also aeon's): `#` or `%` comment lines, `@key value` header lines,
then after `@data` one case per line: each channel's values comma-separated, channels separated by
`:`, the class label last. `.tsv` (the UCR 2018 archive's): one univariate case per line, the label
first, then tab-separated values; shorter series are padded with NaN at the end.

Values are parsed as plain decimal numbers (never evaluated); a malformed line is refused in one
line that names the file, the line number and what was expected there.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import DataError

__all__ = ["SERIES_SUFFIXES", "RawSeries", "check_label_kinds", "padded_length", "problem_name", "read_series_file",
           "read_ts", "read_tsv"]

MAX_FILE_BYTES = 2 * 1024 ** 3  # a text archive larger than this is not a classification split
SERIES_SUFFIXES = (".ts", ".tsv", ".csv", ".npy", ".npz")  # in the order a folder's pair is preferred


@dataclass
class RawSeries:
    """Series as read: one float32 (C, T_i) array per case, its label as written, and the label
    names the header declares (in their declared order; None when the file declares none)."""

    series: list[np.ndarray]
    labels: list[str]
    declared: list[str] | None
    name: str


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
    # Imported here: those readers build on this module's RawSeries and helpers.
    if suffix == ".csv":
        from .series_csv import read_series_csv
        return read_series_csv(path, label_column)
    if suffix in (".npy", ".npz"):
        from .series_npy import read_series_array
        return read_series_array(path)
    return read_ts(path) if suffix == ".ts" else read_tsv(path)


def problem_name(path: Path) -> str:
    """The problem a file holds: its stem without a _TRAIN/_TEST tag."""
    stem = path.name[: -len(path.suffix)] if path.suffix else path.name
    for tag in ("_TRAIN", "_TEST"):
        if stem.upper().endswith(tag):
            return stem[: -len(tag)]
    return stem


def is_number(text: str) -> bool:
    """A finite decimal number (NaN and infinity are not labels or values)."""
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def check_label_kinds(labels: list[str], where: str) -> None:
    """Refuse labels of two kinds: numbers beside words are a shifted column or a typo more often than
    classes, and their order (numeric or alphabetical) would be undefined."""
    distinct = list(dict.fromkeys(labels))
    numbers = [l for l in distinct if is_number(l)]
    if numbers and len(numbers) < len(distinct):
        words = [l for l in distinct if not is_number(l)]
        raise DataError(f"{where}: the labels mix numbers ({', '.join(numbers[:5])}) and words "
                        f"({', '.join(repr(w) for w in words[:5])}); expected labels of one kind, all numbers or all "
                        f"names")


def padded_length(row: np.ndarray) -> tuple[int, int | None]:
    """(length, first gap) of one channel read with NaN for missing cells: NaNs after the last number
    are padding (the archive's way of ending a shorter series); a NaN before it is a gap, refused by
    the callers, which know how to name its place."""
    present = ~np.isnan(row)
    if not present.any():
        return 0, None
    length = int(np.flatnonzero(present)[-1]) + 1
    gaps = np.flatnonzero(~present[:length])
    return length, (int(gaps[0]) if gaps.size else None)


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text (byte {e.start}); expected a .ts/.tsv text file") from None


def _number(text: str, path: Path, line: int, what: str) -> float:
    """One value; '?' and NaN are missing values, refused: the archive's own copies have none."""
    t = text.strip()
    try:
        value = float(t)
    except ValueError:
        if t in ("?", ""):
            raise DataError(f"{path}:{line}: missing value in {what}; expected numbers only (fill or drop "
                            f"missing values first)") from None
        raise DataError(f"{path}:{line}: {t[:40]!r} in {what} is not a number; expected comma-separated "
                        f"decimal values") from None
    if math.isnan(value):
        raise DataError(f"{path}:{line}: missing value (NaN) in {what}; expected numbers only (fill or drop "
                        f"missing values first)")
    if math.isinf(value):
        raise DataError(f"{path}:{line}: infinite value in {what}; expected finite numbers")
    return value


def _header(path: Path, lines: list[str]) -> tuple[dict[str, str], int]:
    """The `@key value` pairs (keys lower-cased) and the index of the first data line."""
    header: dict[str, str] = {}
    for i, raw in enumerate(lines):
        text = raw.strip()
        if not text or text[0] in "#%":
            continue
        if not text.startswith("@"):
            raise DataError(f"{path}:{i + 1}: expected a header line (@key value) or @data before the data, "
                            f"got {text[:40]!r}")
        key, _, value = text[1:].partition(" ")
        if key.lower() == "data":
            return header, i + 1
        header[key.lower()] = value.strip()
    raise DataError(f"{path}: no @data line; expected a .ts header ending in @data, then one case per line")


def _flag(header: dict[str, str], key: str) -> bool:
    return header.get(key, "false").split()[0].lower() == "true" if header.get(key) else False


def read_ts(path: str | Path) -> RawSeries:
    """A `.ts` file: univariate or multivariate, equal or unequal lengths, labelled cases."""
    path = Path(path)
    lines = _lines(path)
    header, start = _header(path, lines)
    if _flag(header, "timestamps"):
        raise DataError(f"{path}: @timeStamps true; expected plain values (timestamped .ts files are not read)")
    label_decl = header.get("classlabel", "").split()
    if not label_decl or label_decl[0].lower() != "true":
        raise DataError(f"{path}: @classLabel is {header.get('classlabel', 'absent')!r}; expected "
                        f"'@classLabel true <names>' (a classification problem)")
    declared = label_decl[1:] or None
    dims = int(header["dimensions"]) if header.get("dimensions", "").isdigit() else None
    series, labels = [], []
    for i in range(start, len(lines)):
        text = lines[i].strip()
        if not text or text[0] in "#%":
            continue
        parts = text.split(":")
        if len(parts) < 2:
            raise DataError(f"{path}:{i + 1}: expected channels separated by ':' and a class label last, "
                            f"got no ':'")
        label, channels = parts[-1].strip(), parts[:-1]
        if not label:
            raise DataError(f"{path}:{i + 1}: empty class label; expected one of {declared} after the last ':'")
        if declared is not None and label not in declared:
            raise DataError(f"{path}:{i + 1}: class label {label[:40]!r} is not declared; expected one of "
                            f"{declared[:12]}")
        if channels and "(" in channels[0]:
            raise DataError(f"{path}:{i + 1}: timestamped values '(t,v)'; expected plain comma-separated values")
        if series and len(channels) != series[0].shape[0]:
            raise DataError(f"{path}:{i + 1}: {len(channels)} channels, expected {series[0].shape[0]} as on "
                            f"the first case")
        if dims is not None and len(channels) != dims:
            raise DataError(f"{path}:{i + 1}: {len(channels)} channels, expected @dimensions {dims}")
        rows = []
        for c, chan in enumerate(channels):
            values = [_number(v, path, i + 1, f"channel {c}") for v in chan.split(",")]
            if rows and len(values) != len(rows[0]):
                raise DataError(f"{path}:{i + 1}: channel {c} has {len(values)} values, expected "
                                f"{len(rows[0])} like channel 0 (channels of one case share a length)")
            rows.append(values)
        series.append(np.asarray(rows, dtype=np.float32))
        labels.append(label)
    if not series:
        raise DataError(f"{path}: no cases after @data; expected one case per line")
    return RawSeries(series, labels, declared, header.get("problemname", path.stem))


def read_tsv(path: str | Path) -> RawSeries:
    """A UCR 2018 `.tsv` file: label, then values; trailing NaNs are padding (unequal lengths)."""
    path = Path(path)
    series, labels = [], []
    for i, raw in enumerate(_lines(path)):
        text = raw.strip()
        if not text:
            continue
        fields = text.split("\t") if "\t" in text else text.split(",")
        if len(fields) < 2:
            raise DataError(f"{path}:{i + 1}: expected a class label then tab-separated values, got "
                            f"{len(fields)} field")
        values = [v.strip() for v in fields[1:]]
        while values and values[-1].lower() == "nan":  # the archive pads unequal lengths at the end
            values.pop()
        if not values:
            raise DataError(f"{path}:{i + 1}: no values after the label; expected a series")
        row = [_number(v, path, i + 1, "the series") for v in values]
        series.append(np.asarray([row], dtype=np.float32))
        labels.append(fields[0].strip())
    if not series:
        raise DataError(f"{path}: empty; expected one labelled series per line")
    check_label_kinds(labels, f"{path}: the first column")
    return RawSeries(series, labels, None, path.stem.rsplit("_", 1)[0])
