"""What a cell is: missing, a number, yes or no, a date. One opinion for every reader in the package
(tables and series CSVs alike), so that a cell reads the same wherever it is."""
from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["MISSING", "BOOLEANS", "is_missing", "as_numbers", "as_booleans", "as_dates"]

# What spreadsheets, pandas, R and the UCI archive write for "no value", compared in lower case.
MISSING = frozenset({"", "na", "n/a", "nan", "-nan", "null", "none", "<na>", "#n/a", "#na", "?", "nat"})
# Pairs a yes/no column is written in; a column of one side of a pair only is still yes/no.
BOOLEANS = (("false", "true"), ("no", "yes"), ("n", "y"), ("f", "t"))


def is_missing(cells: pd.Series) -> np.ndarray:
    """(N,) bool: True where a cell holds no value."""
    return cells.str.lower().isin(MISSING).to_numpy()


def as_numbers(cells: pd.Series) -> np.ndarray | None:
    """(N,) float64 with NaN where a cell is missing; None where any other cell is not a finite decimal
    number (infinity is not a value a model can read)."""
    missing = is_missing(cells)
    values = pd.to_numeric(cells.where(~missing, None), errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    if np.isnan(values[~missing]).any() or np.isinf(values).any():
        return None
    return values


def number_mask(cells: pd.Series) -> np.ndarray:
    """(N,) bool: True where a cell, not missing, reads as a finite number."""
    values = pd.to_numeric(cells, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    return np.isfinite(values) & ~is_missing(cells)


def as_booleans(cells: pd.Series) -> pd.Series | None:
    """The cells as 'no' / 'yes' ('' where missing) where every present one is one word of a yes/no
    pair (true/false, yes/no, y/n, t/f, in any case); else None."""
    missing = is_missing(cells)
    words = set(cells[~missing].str.lower())
    for no, yes in BOOLEANS:
        if words and words <= {no, yes}:
            return cells.str.lower().map({no: "no", yes: "yes"}).fillna("")
    return None


def as_dates(cells: pd.Series) -> pd.Series | None:
    """The cells as timestamps (NaT where missing) where every present one is an ISO 8601 date or date
    and time (YYYY-MM-DD, YYYY-MM-DD HH:MM); else None. Day-first and month-first forms are
    ambiguous, so they are not guessed at: such a column is read as categories."""
    missing = is_missing(cells)
    present = cells[~missing]
    if present.empty or not present.str.match(r"^\d{4}-\d{2}-\d{2}").all():
        return None
    stamps = pd.to_datetime(cells.where(~missing, None), format="ISO8601", errors="coerce", utc=True)
    if stamps[~missing].isna().any():
        return None
    return stamps
