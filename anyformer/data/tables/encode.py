"""A table's rows as a model's inputs, with what was learned from the training rows alone, saved in
the run's config.json so that `eval`, `predict` and `serve` read new rows exactly as training did.

- a number: mapped through the training values' quantiles onto a standard normal (the quantile
  transform of Gorishniy et al.'s FT-Transformer experiments): heavy tails and odd units arrive at
  one scale. A missing number is NaN, which the model replaces by its column's learned token.
- a category: an index into its column's lookup table: 0 missing, 1 unknown (a value training never
  saw, or saw once: a value seen once teaches nothing the unknown row cannot), 2... its values.
- a date: its day as a number, and its month and weekday as categories.
- the target: a class index, or a number standardised with the training mean and standard deviation
  (reported back in its own units).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from ..errors import DataError, DataWarning
from .cells import as_booleans, as_dates, as_numbers, is_missing, number_mask
from .columns import Column, Target

__all__ = ["EncodedRows", "TableEncoding", "class_cells", "MISSING_INDEX", "UNKNOWN_INDEX"]

MISSING_INDEX, UNKNOWN_INDEX = 0, 1
MIN_COUNT = 2                  # a category value seen fewer times in training reads as unknown
MAX_QUANTILES = 1000
SECONDS_PER_DAY = 86_400.0


@dataclass
class EncodedRows:
    """numbers (N, F_num) float32, NaN where missing; categories (N, F_cat) int64; target (N,) int64
    class indices or float32 standardised numbers (None where the rows have no target)."""

    numbers: torch.Tensor
    categories: torch.Tensor
    target: torch.Tensor | None

    def __len__(self) -> int:
        return int(self.numbers.shape[0])

    def take(self, index: torch.Tensor) -> "EncodedRows":
        return EncodedRows(self.numbers[index], self.categories[index],
                           None if self.target is None else self.target[index])


def quantile_normal(values: np.ndarray, quantiles: np.ndarray) -> np.ndarray:
    """Values mapped through a column's training quantiles onto N(0, 1); NaN stays NaN. Ties in the
    quantiles (a value repeated across many of them) map to the middle of their run, as
    scikit-learn's QuantileTransformer does, by averaging the interpolation up and down."""
    if quantiles[-1] == quantiles[0]:
        return np.where(np.isnan(values), np.nan, 0.0)
    ranks = np.linspace(0.0, 1.0, len(quantiles))
    up = np.interp(values, quantiles, ranks)
    down = -np.interp(-values, -quantiles[::-1], -ranks[::-1])
    u = np.clip(0.5 * (up + down), 1e-7, 1 - 1e-7)
    return torch.special.ndtri(torch.from_numpy(u)).numpy()


class TableEncoding:
    """Fitted on the training rows (`fit`), saved as a dict (`to_dict`, `from_dict`), applied to any rows
    with the same columns, matched by name (`encode`)."""

    def __init__(self, columns: list[Column], target: Target, numbers: dict[str, list[float]],
                 categories: dict[str, list[str]], target_scale: tuple[float, float] | None) -> None:
        self.columns = columns                # the input columns, skipped ones included (said in summaries)
        self.target = target
        self.numbers = numbers                # number input name -> its training quantiles
        self.categories = categories          # category input name -> its values (index 2 + position)
        self.target_scale = target_scale      # regression: (mean, std) of the training target

    # ------------------------------------------------------------------ fitting
    @classmethod
    def fit(cls, frame: pd.DataFrame, columns: list[Column], target: Target) -> "TableEncoding":
        numbers: dict[str, list[float]] = {}
        categories: dict[str, list[str]] = {}
        for col in columns:
            cells = frame[col.name]
            if col.kind == "number":
                numbers[col.name] = _quantiles(as_numbers(cells))
            elif col.kind == "date":
                stamps = as_dates(cells)
                numbers[col.name] = _quantiles(_days(stamps))
                categories[f"{col.name} (month)"] = [str(m) for m in range(1, 13)]
                categories[f"{col.name} (weekday)"] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
            elif col.kind == "category":
                categories[col.name] = _vocabulary(_category_cells(cells, col), col)
        scale = None
        if target.task == "regress":
            y = as_numbers(frame[target.name])
            y = y[~np.isnan(y)]
            std = float(y.std())
            scale = (float(y.mean()), std if std > 0 else 1.0)
        return cls(columns, target, numbers, categories, scale)

    # ------------------------------------------------------------------ applying
    def encode(self, frame: pd.DataFrame, where: str, with_target: bool = True) -> EncodedRows:
        """`frame`'s rows as model inputs; columns matched by name (in any case), a missing one refused
        in one line, an unseen category mapped to unknown and counted in one warning."""
        by_lower = {str(c).lower(): c for c in frame.columns}
        cols = {}
        for col in self.used:
            if col.name in frame.columns:
                cols[col.name] = frame[col.name]
            elif col.name.lower() in by_lower:
                cols[col.name] = frame[by_lower[col.name.lower()]]
            else:
                raise DataError(f"{where}: no column {col.name!r}, which the run reads; expected the columns "
                                f"{[c.name for c in self.used][:12]}")
        n = len(frame)
        num = np.empty((n, len(self.numbers)), dtype=np.float32)
        cat = np.empty((n, len(self.categories)), dtype=np.int64)
        unseen: dict[str, int] = {}
        ni = ci = 0
        for col in self.used:
            cells = cols[col.name]
            if col.kind == "number":
                num[:, ni] = quantile_normal(_numbers(cells, col.name, where), np.asarray(self.numbers[col.name]))
                ni += 1
            elif col.kind == "date":
                stamps = _dates(cells, col.name, where)
                num[:, ni] = quantile_normal(_days(stamps), np.asarray(self.numbers[col.name]))
                ni += 1
                month = stamps.dt.month.to_numpy(dtype=np.float64, na_value=np.nan)
                weekday = stamps.dt.weekday.to_numpy(dtype=np.float64, na_value=np.nan)
                cat[:, ci] = np.where(np.isnan(month), MISSING_INDEX, 1 + np.nan_to_num(month)).astype(np.int64)
                cat[:, ci + 1] = np.where(np.isnan(weekday), MISSING_INDEX, 2 + np.nan_to_num(weekday)).astype(np.int64)
                ci += 2
            else:
                index, unknown = self._category_index(_category_cells(cells, col), col)
                cat[:, ci] = index
                if unknown:
                    unseen[col.name] = unknown
                ci += 1
        if unseen:
            said = ", ".join(f"{k!r} ({v})" for k, v in list(unseen.items())[:4])
            warnings.warn(DataWarning(f"{where}: {sum(unseen.values())} cells hold categories the training rows did not "
                                      f"have, read as unknown: {said}"), stacklevel=2)
        target = self._target(frame, where) if with_target else None
        return EncodedRows(torch.from_numpy(num), torch.from_numpy(cat), target)

    def _category_index(self, cells: pd.Series, col: Column) -> tuple[np.ndarray, int]:
        """Each cell's row of its column's table, and how many present cells hold a value the training
        file never had (a value seen once there reads as unknown by design, and is not counted)."""
        lookup = {v: 2 + i for i, v in enumerate(self.categories[col.name])}
        missing = is_missing(cells)
        index = cells.map(lookup).fillna(UNKNOWN_INDEX).to_numpy(dtype=np.int64, copy=True)
        index[missing] = MISSING_INDEX
        unknown = int((~missing & ~cells.isin(lookup.keys()).to_numpy() & ~cells.isin(col.values).to_numpy()).sum())
        return index, unknown

    def _target(self, frame: pd.DataFrame, where: str) -> torch.Tensor:
        t = self.target
        name = t.name if t.name in frame.columns else {str(c).lower(): c for c in frame.columns}.get(t.name.lower())
        if name is None:
            raise DataError(f"{where}: no target column {t.name!r}; expected the column the run predicts")
        cells = frame[name]
        if is_missing(cells).any():
            raise DataError(f"{where}: the target {t.name!r} is missing in {int(is_missing(cells).sum())} rows; "
                            f"expected a value in every row scored")
        if t.task == "regress":
            y = _numbers(cells, t.name, where)
            mean, std = self.target_scale
            return torch.from_numpy(((y - mean) / std).astype(np.float32))
        index = {c: i for i, c in enumerate(t.classes)}
        labels = class_cells(cells, t)
        unknown = sorted(set(labels) - set(index))
        if unknown:
            raise DataError(f"{where}: class(es) {unknown[:8]} of {t.name!r} are not among the run's classes "
                            f"{list(t.classes)[:12]}; expected rows of the classes the run was trained on")
        return torch.tensor([index[c] for c in labels], dtype=torch.int64)

    def target_units(self, y: torch.Tensor) -> torch.Tensor:
        """Standardised regression outputs back in the target's own units."""
        mean, std = self.target_scale
        return y.double() * std + mean

    # ------------------------------------------------------------------ what it holds
    @property
    def used(self) -> list[Column]:
        return [c for c in self.columns if c.kind != "skipped"]

    @property
    def cardinalities(self) -> list[int]:
        """Rows of each category input's lookup table: missing, unknown and its values."""
        return [2 + len(v) for v in self.categories.values()]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "table-encoding",
                "columns": [{"name": c.name, "kind": c.kind, "why": c.why, "missing": c.missing,
                             "values": list(c.values)} for c in self.columns],
                "target": {"name": self.target.name, "task": self.target.task, "why": self.target.why,
                           "classes": list(self.target.classes)},
                "numbers": self.numbers, "categories": self.categories,
                "target_scale": list(self.target_scale) if self.target_scale else None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TableEncoding":
        if d.get("kind") != "table-encoding":
            raise ValueError(f"not a table encoding (kind {d.get('kind')!r}); expected a run written by "
                             f"`anyformer train` on a table")
        columns = [Column(c["name"], c["kind"], c["why"], c.get("missing", 0), tuple(c.get("values", ())))
                   for c in d["columns"]]
        t = d["target"]
        scale = tuple(d["target_scale"]) if d.get("target_scale") else None
        return cls(columns, Target(t["name"], t["task"], t["why"], tuple(t["classes"])), dict(d["numbers"]),
                   dict(d["categories"]), scale)


def _quantiles(values: np.ndarray) -> list[float]:
    present = values[~np.isnan(values)]
    if present.size == 0:
        return [0.0, 0.0]
    k = int(max(2, min(MAX_QUANTILES, present.size // 30 if present.size >= 300 else present.size)))
    return np.quantile(present, np.linspace(0.0, 1.0, k)).tolist()


def _days(stamps: pd.Series) -> np.ndarray:
    seconds = (stamps - pd.Timestamp(0, tz="UTC")).dt.total_seconds()
    return seconds.to_numpy(dtype=np.float64, na_value=np.nan) / SECONDS_PER_DAY


def _numbers(cells: pd.Series, name: str, where: str) -> np.ndarray:
    values = as_numbers(cells)
    if values is None:
        bad = cells[~number_mask(cells) & ~is_missing(cells)].iloc[0]
        raise DataError(f"{where}: column {name!r}: {bad[:40]!r} is not a number; expected numbers (or an empty "
                        f"cell), as in the rows the run was trained on")
    return values


def _dates(cells: pd.Series, name: str, where: str) -> pd.Series:
    stamps = as_dates(cells)
    if stamps is None:
        raise DataError(f"{where}: column {name!r} holds cells that are not ISO dates; expected dates such as "
                        f"2024-01-31, as in the rows the run was trained on")
    return stamps


def _category_cells(cells: pd.Series, col: Column) -> pd.Series:
    """A category column's cells in the form its values were recorded in: yes/no words as 'no'/'yes',
    integer codes as integers ('4.0' reads '4')."""
    if col.why == "yes/no":
        booleans = as_booleans(cells)
        return booleans if booleans is not None else cells
    if col.why.startswith("integers"):
        numbers = pd.to_numeric(cells, errors="coerce")
        whole = numbers.notna() & (numbers == numbers.round())
        return cells.where(~whole, numbers.where(whole, 0).astype("int64").astype(str))
    return cells


def class_cells(cells: pd.Series, target: Target) -> list[str]:
    """Target cells as class names: integer classes written 4.0 or 4 alike."""
    numbers = pd.to_numeric(cells, errors="coerce")
    if numbers.notna().all() and all(number_mask(pd.Series(list(target.classes)))):
        return [_number_name(v, target.classes) for v in numbers]
    return list(cells)


def _number_name(value: float, classes: tuple[str, ...]) -> str:
    for c in classes:
        if float(c) == value:
            return c
    return repr(value)


def _vocabulary(cells: pd.Series, col: Column) -> list[str]:
    """The values kept in the lookup table: those seen at least MIN_COUNT times (every value of a yes/no
    or integer-code column), in sorted order."""
    counts = cells[~is_missing(cells)].value_counts()
    if col.why == "yes/no" or col.why.startswith("integers"):
        return [v for v in col.values]
    return sorted(str(v) for v, k in counts.items() if k >= MIN_COUNT)
