"""Labelled series in a CSV with a header line, in either of the two layouts tables come in.

Wide: one row per series. The label column is found by its name (label, class, target, y or
category, in any case) or named by `--label-column`; an id column (id, series_id, name) is an
identifier and is skipped, as is a first column without a name (the index pandas writes); every
other column is a time step. A shorter series ends with empty cells or NaN (trailing ones are
padding, its length is kept); a missing cell with numbers after it is a gap, refused with its row
and column.

Long: one row per value, columns found by name: id (id, series, series_id), time (time, t,
timestamp, step), value (value, v), an optional channel (channel, dim, dimension, variable) and the
label (label, class, target, or `--label-column`). Rows may come in any order: each series' steps
are sorted by time (numbers, or ISO dates and times); series are ordered by id and channels by name,
so that the order of the rows never changes what is read. A file is long when its header names a
time and a value column.

Cells are parsed as decimal numbers only; nothing is evaluated. Every refusal is one line naming the
file, the row (and its line) and the column.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import numpy as np

from ..errors import DataError
from ..tables.cells import MISSING as CELLS_MISSING
from ..tables.read import read_csv_rows
from .raw import RawSeries, check_label_kinds, is_number, padded_length, problem_name

__all__ = ["LABEL_NAMES", "ID_NAMES", "LONG_NAMES", "read_series_csv"]

LABEL_NAMES = ("label", "class", "target", "y", "category")
ID_NAMES = ("id", "series_id", "name")
LONG_NAMES = {"id": ("id", "series", "series_id"), "time": ("time", "t", "timestamp", "step"),
              "value": ("value", "v"), "channel": ("channel", "dim", "dimension", "variable"),
              "label": ("label", "class", "target")}
# What spreadsheets, pandas, R and the UCI archive write for "no value": the tables' own list, one opinion.
MISSING = tuple(sorted(CELLS_MISSING))
EXPECTED = ("expected a header line, then one row per series (wide: a label column and one column per step) "
            "or one row per value (long: id, time, value[, channel], label)")

Row = tuple[int, list[str]]  # (line number in the file, its fields)


def read_series_csv(path: str | Path, label_column: str | None = None) -> RawSeries:
    """A wide or a long CSV of labelled series (module docstring); `label_column` names the label column."""
    path = Path(path)
    rows = _rows(path)
    if not rows:
        raise DataError(f"{path}: empty; {EXPECTED}")
    header, body = [h.strip() for h in rows[0][1]], rows[1:]
    if len(header) > 1 and header[0] == "":
        # pandas' to_csv writes its row index first, under no name: a row number, not a step of the series.
        header, body = header[1:], [(line, fields[1:]) for line, fields in body]
    if all(is_number(h) for h in header if h):
        raise DataError(f"{path}:1: the first line holds numbers, not column names; {EXPECTED} (a file of "
                        f"label-first rows without a header is read as the archive's .tsv: rename it so)")
    lowered = [h.lower() for h in header]
    twice = sorted({h for h in header if lowered.count(h.lower()) > 1})
    if twice:
        raise DataError(f"{path}:1: column(s) {twice[:5]} appear more than once in the header; expected distinct names")
    if not body:
        raise DataError(f"{path}: a header and no rows; {EXPECTED}")
    long = any(h in LONG_NAMES["time"] for h in lowered) and any(h in LONG_NAMES["value"] for h in lowered)
    return _read_long(path, header, body, label_column) if long else _read_wide(path, header, body, label_column)


def _rows(path: Path) -> list[Row]:
    """The rows that hold a value, with the line each starts on: read by the package's one CSV reader
    (pandas, as a table is read: quoting, line breaks inside fields, a byte-order mark, the delimiter
    the first line uses)."""
    return read_csv_rows(path.read_bytes(), str(path))


def _either(names: Sequence[str]) -> str:
    return ", ".join(names[:-1]) + f" or {names[-1]}"


def _show(names: Sequence[str]) -> str:
    """A header for a message: a wide file's hundreds of step columns shortened."""
    shown = ", ".join(repr(n) for n in names[:8])
    return f"[{shown}{f', ... ({len(names)} columns)' if len(names) > 8 else ''}]"


def _column(path: Path, header: list[str], asked: str | None, aliases: Sequence[str], role: str) -> int | None:
    """The index of the column named `asked` (exact, else in any case), or else of the one column named
    like `role`'s aliases (None when there is none); two candidates are refused."""
    if asked is not None:
        hits = [i for i, h in enumerate(header) if h == asked] or \
               [i for i, h in enumerate(header) if h.lower() == asked.lower()]
        if not hits:
            raise DataError(f"{path}: no column {asked!r} (--label-column) in the header {_show(header)}; "
                            f"expected the name of the column that holds the labels")
        return hits[0]
    hits = [i for i, h in enumerate(header) if h.lower() in aliases]
    if len(hits) > 1:
        names = " and ".join(repr(header[i]) for i in hits)
        hint = "; pass --label-column NAME" if role == "label" else ""
        raise DataError(f"{path}: columns {names} could each be the {role} column; expected one{hint}")
    return hits[0] if hits else None


def _cell(fields: list[str], i: int) -> str:
    """A row's field `i`; a row cut short (a spreadsheet drops trailing empty cells) reads as empty."""
    return fields[i].strip() if i < len(fields) else ""


def _label(path: Path, fields: list[str], i: int, name: str, row: int, line: int) -> str:
    label = _cell(fields, i)
    if label.lower() in MISSING:
        raise DataError(f"{path}: row {row} (line {line}), column {name!r}: no label; expected every row labelled")
    return label


# ------------------------------------------------------------------------------------------ wide
def _read_wide(path: Path, header: list[str], body: list[Row], label_column: str | None) -> RawSeries:
    li = _column(path, header, label_column, LABEL_NAMES, "label")
    if li is None:
        raise DataError(f"{path}: no label column in the header {_show(header)}; expected a column named "
                        f"{_either(LABEL_NAMES)}, or pass --label-column NAME")
    # An identifier names a series; read as a value it would be a step of it.
    columns = [i for i, h in enumerate(header) if i != li and h.lower() not in ID_NAMES]
    if not columns:
        raise DataError(f"{path}: the header {_show(header)} has no value columns besides the label; expected "
                        f"one column per time step")
    series, labels = [], []
    for row, (line, fields) in enumerate(body, 1):
        labels.append(_label(path, fields, li, header[li], row, line))
        values = _wide_values(path, [_cell(fields, i) for i in columns], [header[i] for i in columns], row, line)
        series.append(values[None])
    check_label_kinds(labels, f"{path}: column {header[li]!r}")
    return RawSeries(series, labels, None, problem_name(path))


def _wide_values(path: Path, cells: list[str], names: list[str], row: int, line: int) -> np.ndarray:
    """One row's values, float32, its trailing missing cells dropped; a gap or a non-number refused."""
    values = np.empty(len(cells), dtype=np.float64)
    for j, text in enumerate(cells):
        if text.lower() in MISSING:
            values[j] = math.nan
            continue
        try:
            values[j] = float(text)
        except ValueError:
            raise DataError(f"{path}: row {row} (line {line}), column {names[j]!r}: {text[:40]!r} is not a number; "
                            f"expected decimal values") from None
        if math.isinf(values[j]):
            raise DataError(f"{path}: row {row} (line {line}), column {names[j]!r}: infinite value; expected "
                            f"finite numbers")
    length, gap = padded_length(values)
    if gap is not None:
        raise DataError(f"{path}: row {row} (line {line}), column {names[gap]!r}: missing value inside the series "
                        f"(values follow it); expected empty cells or NaN only at the end of a shorter series")
    if length == 0:
        raise DataError(f"{path}: row {row} (line {line}) has a label and no values; expected a series")
    return values[:length].astype(np.float32)


# ------------------------------------------------------------------------------------------ long
def _long_columns(path: Path, header: list[str], label_column: str | None) -> dict[str, int]:
    """{role: column index} of a long CSV; a missing role or an unknown column refused."""
    roles: dict[str, int] = {}
    for role, aliases in LONG_NAMES.items():
        asked = label_column if role == "label" else None
        i = _column(path, header, asked, aliases, role)
        if i is not None:
            roles[role] = i
    for role in ("id", "label"):
        if role not in roles:
            hint = " (or pass --label-column NAME)" if role == "label" else ""
            raise DataError(f"{path}: a long CSV (it has time and value columns) without an {role} column: the "
                            f"header is {_show(header)}; expected a column named "
                            f"{_either(LONG_NAMES[role])}{hint}")
    # Refused rather than skipped: an unread column may be a second measurement the user expects used.
    extra = [h for i, h in enumerate(header) if i not in roles.values()]
    if extra:
        raise DataError(f"{path}: column(s) {extra[:5]} are not part of a long CSV; expected only id, time, "
                        f"value, label and an optional channel column")
    return roles


def _read_long(path: Path, header: list[str], body: list[Row], label_column: str | None) -> RawSeries:
    roles = _long_columns(path, header, label_column)
    cells: dict[str, dict[str, list[tuple[str, float, int]]]] = {}  # id -> channel -> [(time, value, line)]
    first_label: dict[str, tuple[str, int]] = {}
    for row, (line, fields) in enumerate(body, 1):
        sid = _cell(fields, roles["id"])
        if sid.lower() in MISSING:
            raise DataError(f"{path}: row {row} (line {line}), column {header[roles['id']]!r}: no id; expected "
                            f"every row to name its series")
        label = _label(path, fields, roles["label"], header[roles["label"]], row, line)
        seen = first_label.setdefault(sid, (label, line))
        if seen[0] != label:
            raise DataError(f"{path}: id {sid!r} has two labels, {seen[0]!r} (line {seen[1]}) and {label!r} "
                            f"(line {line}); expected one label per series")
        channel = _cell(fields, roles["channel"]) if "channel" in roles else ""
        value = _long_value(path, _cell(fields, roles["value"]), header[roles["value"]], row, line)
        time = _cell(fields, roles["time"])
        if time.lower() in MISSING:
            raise DataError(f"{path}: row {row} (line {line}), column {header[roles['time']]!r}: no time; expected "
                            f"each value's time step")
        cells.setdefault(sid, {}).setdefault(channel, []).append((time, value, line))
    clock = _time_reader(path, cells, header[roles["time"]])
    channels = _ordered({c for chans in cells.values() for c in chans})
    series, labels = [], []
    for sid in _ordered(cells):
        series.append(_long_series(path, sid, cells[sid], channels, clock))
        labels.append(first_label[sid][0])
    check_label_kinds(labels, f"{path}: column {header[roles['label']]!r}")
    return RawSeries(series, labels, None, problem_name(path))


def _long_value(path: Path, text: str, name: str, row: int, line: int) -> float:
    if text.lower() in MISSING:
        raise DataError(f"{path}: row {row} (line {line}), column {name!r}: missing value; expected a number on "
                        f"every row (a long CSV needs no padding: leave the row out of every channel)")
    if not is_number(text):
        raise DataError(f"{path}: row {row} (line {line}), column {name!r}: {text[:40]!r} is not a finite number; "
                        f"expected decimal values")
    return float(text)


def _ordered(names) -> list[str]:
    """Ids or channel names in a fixed order whatever the rows' order: as numbers where all are numbers."""
    names = sorted(names)
    return sorted(names, key=float) if all(is_number(n) for n in names) else names


def _time_reader(path: Path, cells: dict, name: str):
    """A function from a time cell to a sortable number: all times are numbers, or all ISO dates and times."""
    times = [(t, line) for chans in cells.values() for steps in chans.values() for t, _, line in steps]
    numbers = [is_number(t) for t, _ in times]
    if all(numbers):
        return float
    expected = "expected every time as a number or every time as a date (2024-01-31 12:00)"
    for t, line in times:
        if not is_number(t) and not _is_date(t):
            raise DataError(f"{path}:{line}: column {name!r}: {t[:40]!r} is neither a number nor an ISO date and "
                            f"time; {expected}")
    if any(numbers):
        t, line = times[numbers.index(True)]
        raise DataError(f"{path}:{line}: column {name!r}: {t[:40]!r} is a number among dates; {expected}")
    # Naive and zone-aware times do not compare: their timestamps do (a naive one read as local time).
    return lambda t: datetime.fromisoformat(t).timestamp()


def _is_date(text: str) -> bool:
    try:
        datetime.fromisoformat(text)
        return True
    except ValueError:
        return False


def _long_series(path: Path, sid: str, chans: dict[str, list[tuple[str, float, int]]], channels: list[str],
                 clock) -> np.ndarray:
    """One series (C, T): each channel's values in time order, every channel at the same times."""
    rows, first_times = [], None
    for c in channels:
        if c not in chans:
            raise DataError(f"{path}: id {sid!r} has no rows for channel {c!r}; expected every series to have "
                            f"every channel ({', '.join(channels[:8])})")
        steps = sorted(chans[c], key=lambda s: clock(s[0]))
        times = [clock(t) for t, _, _ in steps]
        for k in range(1, len(times)):
            if times[k] == times[k - 1]:
                raise DataError(f"{path}: id {sid!r}{_of(c)}: time {steps[k][0]!r} appears twice (lines "
                                f"{steps[k - 1][2]} and {steps[k][2]}); expected one value per time step")
        if first_times is not None and times != first_times:
            raise DataError(f"{path}: id {sid!r}: channel {c!r} has {len(times)} steps at other times than channel "
                            f"{channels[0]!r} ({len(first_times)} steps); expected the channels of a series "
                            f"measured at the same times")
        first_times = times
        rows.append([v for _, v, _ in steps])
    return np.asarray(rows, dtype=np.float32)


def _of(channel: str) -> str:
    return f", channel {channel!r}" if channel else ""
