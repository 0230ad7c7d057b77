"""What each column of a table is, read from its cells alone (never from its name, but for the
target): a number, a category, a date, or skipped (an id, free text, empty, constant); and what the
target asks for: classes or a number.

The rules, each a plain function of the column's cells so that the same file reads the same anywhere:
- number: every present cell a finite decimal number; integers with few distinct values (at most
  CATEGORY_INTEGERS: cylinders 4/6/8, a class 1/2/3) are categories instead;
- yes/no: every present cell one word of a pair (true/false, yes/no, y/n, t/f): a category;
- date: every present cell an ISO 8601 date or date and time;
- id: present in every row and different in every row, short words or a run of consecutive integers:
  it names a row and says nothing about it, so it is skipped and said so;
- text: words mostly different and long (at least TEXT_CHARS on average): skipped (free text is
  labelled text's task, not a table's);
- category: the rest, words; numbers mixed with words are a category where the column has few
  distinct values (codes such as 1, 2, 3+), and refused where it has many (a shifted column or a typo
  is likelier than a category).
A missing cell is missing in every kind (a learned "missing" token, never a zero or a dropped row).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..errors import DataError
from .cells import as_booleans, as_dates, as_numbers, is_missing, number_mask

__all__ = ["Column", "Target", "TARGET_NAMES", "describe_columns", "describe_target", "find_target"]

TARGET_NAMES = ("label", "labels", "class", "target", "y", "outcome", "category")
CATEGORY_INTEGERS = 10   # integer columns with at most this many values are categories
MIXED_CATEGORIES = 20    # numbers mixed with words: a category up to this many values, refused above
TEXT_CHARS = 30          # a column of mostly different words this long on average is free text
CLASS_NUMBERS = 20       # a target of integers with at most this many values is classes, above it a number
ID_ROWS = 10             # fewer rows than this cannot show a column is unique by design


@dataclass(frozen=True)
class Column:
    """One input column: kind "number", "category", "date" or "skipped"; `why` says what it was read as."""

    name: str
    kind: str
    why: str
    missing: int = 0
    values: tuple[str, ...] = field(default=())  # a category's values as read (for a yes/no column: no, yes)


@dataclass(frozen=True)
class Target:
    """The column to predict: task "classify" (classes, in their order) or "regress" (a number)."""

    name: str
    task: str
    why: str
    classes: tuple[str, ...] = ()


def find_target(columns: list[str], asked: str | None, where: str) -> str:
    """The target's name: `asked` (exact, else in any case), else the one column named like a target."""
    if asked is not None:
        hits = [c for c in columns if c == asked] or [c for c in columns if c.lower() == asked.lower()]
        if not hits:
            raise DataError(f"{where}: no column {asked!r} (--label-column) among {_show(columns)}; expected the "
                            f"name of the column to predict")
        return hits[0]
    hits = [c for c in columns if c.lower() in TARGET_NAMES]
    if len(hits) > 1:
        raise DataError(f"{where}: columns {' and '.join(map(repr, hits))} could each be the target; expected one: "
                        f"pass --label-column NAME")
    if not hits:
        raise DataError(f"{where}: no target column among {_show(columns)}; expected a column named "
                        f"{', '.join(TARGET_NAMES[:-1])} or {TARGET_NAMES[-1]}, or pass --label-column NAME")
    return hits[0]


def describe_target(cells: pd.Series, name: str, asked_task: str | None, where: str) -> Target:
    """Classes or a number, from the target's present cells; `asked_task` ("classify" or "regress",
    --task) overrides what the cells suggest where it can apply."""
    present = cells[~is_missing(cells)]
    if present.empty:
        raise DataError(f"{where}: the target column {name!r} is empty; expected a value to predict in each row")
    numbers = as_numbers(present)
    distinct = present.unique()
    if asked_task == "regress":
        if numbers is None:
            word = next(v for v in distinct if not number_mask(pd.Series([v]))[0])
            raise DataError(f"{where}: --task regress, but the target {name!r} holds words ({word[:40]!r}); expected "
                            f"numbers to predict, or --task classify")
        if np.unique(numbers).size < 2:
            raise DataError(f"{where}: the target {name!r} holds one value only ({present.iloc[0]!r}); expected "
                            f"numbers that vary")
        return Target(name, "regress", f"a number (--task regress; {len(np.unique(numbers)):,} values)")
    if numbers is not None and asked_task is None:
        whole = bool(np.all(numbers == np.round(numbers)))
        count = np.unique(numbers).size
        if count > CLASS_NUMBERS or not whole and count > 2:
            if count < 2:
                raise DataError(f"{where}: the target {name!r} holds one value only; expected values that vary")
            return Target(name, "regress", f"a number ({count:,} values; --task classify to read them as classes)")
    classes = _class_order(distinct, numbers is not None)
    if len(classes) < 2:
        raise DataError(f"{where}: the target {name!r} holds one class only ({classes[0]!r}, {len(present)} rows); "
                        f"a classifier needs at least two classes to tell apart")
    if numbers is None and len(classes) <= MIXED_CATEGORIES:
        _refuse_mixed_labels(classes, name, where)
    hint = "" if numbers is None or asked_task else "; --task regress to predict it as a number"
    return Target(name, "classify", f"{len(classes)} classes{hint}", tuple(classes))


def _class_order(distinct: np.ndarray, numeric: bool) -> list[str]:
    """Classes sorted as numbers where they are numbers (2 before 10), else as text."""
    names = sorted(str(v) for v in distinct)
    return sorted(names, key=float) if numeric else names


def _refuse_mixed_labels(classes: list[str], name: str, where: str) -> None:
    numbers = [c for c in classes if number_mask(pd.Series([c]))[0]]
    if numbers and len(numbers) < len(classes):
        words = [c for c in classes if c not in numbers]
        raise DataError(f"{where}: the target {name!r} mixes numbers ({', '.join(numbers[:5])}) and words "
                        f"({', '.join(repr(w) for w in words[:5])}); expected labels of one kind")


def describe_columns(frame: pd.DataFrame, target: str, where: str) -> list[Column]:
    """Every column but the target, read as the module docstring says. Refused: a column that mixes many
    numbers with words, and a table with no column left to learn from."""
    columns = [_describe(frame[name], name, where) for name in frame.columns if name != target]
    if not any(c.kind != "skipped" for c in columns):
        skipped = "; ".join(f"{c.name!r}: {c.why}" for c in columns[:4]) or "none"
        raise DataError(f"{where}: no column to learn from besides the target {target!r} (skipped: {skipped}); "
                        f"expected number, category or date columns, or, for a column of short texts such "
                        f"as titles, --task text")
    return columns


def _describe(cells: pd.Series, name: str, where: str) -> Column:
    missing = is_missing(cells)
    n_missing, present = int(missing.sum()), cells[~missing]
    if present.empty:
        return Column(name, "skipped", "empty", n_missing)
    distinct = present.unique()
    if len(distinct) == 1 and not n_missing:
        return Column(name, "skipped", f"the same value in every row ({distinct[0][:20]!r})")
    numbers = as_numbers(cells)
    unique_rows = not n_missing and len(distinct) == len(cells) >= ID_ROWS
    if numbers is not None:
        values = np.unique(numbers[~missing])
        whole = bool(np.all(values == np.round(values)))
        if unique_rows and whole and values[-1] - values[0] == len(values) - 1:
            return Column(name, "skipped", "an id (consecutive integers, one per row)")
        if whole and len(values) <= CATEGORY_INTEGERS:
            names = [_integer_text(v) for v in values]
            return Column(name, "category", f"integers with {len(values)} values", n_missing, tuple(names))
        return Column(name, "number", "numbers", n_missing)
    yes_no = as_booleans(cells)
    if yes_no is not None:
        return Column(name, "category", "yes/no", n_missing, ("no", "yes"))
    if as_dates(cells) is not None:
        return Column(name, "date", "dates", n_missing)
    is_number = number_mask(present)
    if is_number.any():
        if len(distinct) > MIXED_CATEGORIES:
            words = present[~is_number].unique()
            raise DataError(f"{where}: column {name!r} mixes numbers ({', '.join(present[is_number].unique()[:3])}) "
                            f"and words ({', '.join(repr(w[:20]) for w in words[:3])}) in {len(distinct)} values; "
                            f"expected one kind per column (numbers with missing cells left empty or NA, or "
                            f"words)")
    long = float(present.str.len().mean()) >= TEXT_CHARS
    if long and len(distinct) >= 0.5 * len(present):
        return Column(name, "skipped", f"free text ({present.str.len().mean():.0f} characters on average)", n_missing)
    if unique_rows:
        return Column(name, "skipped", "an id (a different value in every row)")
    return Column(name, "category", f"words with {len(distinct)} values", n_missing, tuple(sorted(distinct)))


def _integer_text(value: float) -> str:
    return str(int(value))


def _show(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:8])
    return f"[{shown}{f', ... ({len(names)} columns)' if len(names) > 8 else ''}]"
