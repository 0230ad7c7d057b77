"""What every series reader gives and shares: `RawSeries` (series as read, labels as written) and the
helpers the readers of each format (archive.py, wide_long_csv.py, npy.py) check their files with."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DataError

__all__ = ["RawSeries", "check_label_kinds", "is_number", "padded_length", "problem_name"]


@dataclass
class RawSeries:
    """Series as read: one float32 (C, T_i) array per case, its label as written, and the label
    names the header declares (in their declared order; None when the file declares none)."""

    series: list[np.ndarray]
    labels: list[str]
    declared: list[str] | None
    name: str


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
