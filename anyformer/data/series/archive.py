"""Readers for the time-series classification archives' two text formats (`read_series_file` in
read.py picks a reader by the file's suffix).

`.ts` (the UEA/UCR archive's, also aeon's): `#` or `%` comment lines, `@key value` header lines,
then after `@data` one case per line: each channel's values comma-separated, channels separated by
`:`, the class label last. `.tsv` (the UCR 2018 archive's): one univariate case per line, the label
first, then tab-separated values; shorter series are padded with NaN at the end.

Values are parsed as plain decimal numbers (never evaluated); a malformed line is refused in one
line that names the file, the line number and what was expected there.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..errors import DataError
from .raw import RawSeries, check_label_kinds

__all__ = ["read_ts", "read_tsv"]


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
