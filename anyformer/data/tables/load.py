"""Where a table's rows come from: one file (a share of it is then held out), or a folder holding
`NAME_TRAIN.csv` and `NAME_TEST.csv` (scored on the test file), in any of the formats `read_table`
reads; and which rows a seeded held-out share takes."""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from ..errors import DataError, DataWarning
from ..split import stratified_holdout
from .cells import is_missing
from .columns import find_target
from .read import TABLE_SUFFIXES, read_table

__all__ = ["TableFiles", "find_table_files", "holdout_rows", "read_labelled", "selection_rows"]

REGRESSION_FRACTION = 0.2      # the share held out of a table without a test file, for a number to predict
MIN_REGRESSION_HELD_OUT = 5    # an R^2 on fewer rows says little


@dataclass(frozen=True)
class TableFiles:
    train: Path
    test: Path | None = None


def find_table_files(data: str | Path) -> TableFiles:
    """A file (with its _TEST sibling where it is a _TRAIN file), or a folder holding one table file or
    one _TRAIN/_TEST pair."""
    path = Path(data).expanduser()
    if path.is_file():
        if path.suffix.lower() not in TABLE_SUFFIXES:
            raise DataError(f"{path}: unknown table format {path.suffix!r}; expected one of {', '.join(TABLE_SUFFIXES)}")
        stem = path.name[: -len(path.suffix)]
        if stem.upper().endswith("_TRAIN"):
            test = path.with_name(f"{stem[:-6]}_TEST{path.suffix}")
            return TableFiles(path, test if test.is_file() else None)
        if stem.upper().endswith("_TEST"):
            raise DataError(f"{path}: a test split without its training split; expected NAME_TRAIN{path.suffix} "
                            f"beside it, or rename the file to train on it alone")
        return TableFiles(path)
    if not path.is_dir():
        raise DataError(f"no table at {path}: expected a .csv (.tsv, .parquet, .xlsx) file or a folder holding one")
    files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in TABLE_SUFFIXES
                   and not p.name.startswith("."))
    trains = [p for p in files if p.stem.upper().endswith("_TRAIN")]
    if len(trains) == 1:
        return find_table_files(trains[0])
    if len(trains) > 1:
        raise DataError(f"{path} holds several _TRAIN files ({', '.join(p.name for p in trains[:4])}); pass the one "
                        f"to train on")
    if len(files) == 1:
        return find_table_files(files[0])
    raise DataError(f"{path} holds {len(files)} table files ({', '.join(p.name for p in files[:4]) or 'none'}); "
                    f"expected one, or a NAME_TRAIN/NAME_TEST pair")


def read_labelled(path: Path, target: str | None = None, asked: str | None = None) -> tuple[pd.DataFrame, str]:
    """(the table's rows that have a target value, the target's name): the target named `target`, else
    found as `find_target` finds it (`asked`: --label-column). Rows without a target value are dropped
    and counted in a warning (nothing can be learned from them, nor scored); each row's index stays
    its place among the file's rows."""
    frame = read_table(path)
    if frame.empty:
        raise DataError(f"{path}: a header and no rows; expected one row per example after the header line")
    if target is None:
        target = find_target(list(frame.columns), asked, str(path))
    elif target not in frame.columns:  # another file of a run's: the name in any case, as encode matches it
        target = {c.lower(): c for c in frame.columns}.get(target.lower(), target)
    if target in frame.columns:
        missing = is_missing(frame[target])
        if missing.all():
            raise DataError(f"{path}: the target column {target!r} is empty; expected a value to predict in each row")
        if missing.any():
            warnings.warn(DataWarning(f"{path}: {int(missing.sum())} of {len(frame)} rows have no {target!r} and are "
                                      f"left out"), stacklevel=2)
            frame = frame[~missing]
    return frame, target


def holdout_rows(n: int, labels: torch.Tensor | None, fraction: float, seed: int,
                 classes: tuple[str, ...] = ()) -> tuple[torch.Tensor, torch.Tensor]:
    """(training rows, held-out rows), sorted: stratified by class where `labels` are given, else a seeded
    share of all rows (a number to predict)."""
    if labels is not None:
        return stratified_holdout(labels, fraction, seed, classes,
                                  hint="or give a NAME_TRAIN/NAME_TEST pair of files")
    k = round(fraction * n)
    if k < MIN_REGRESSION_HELD_OUT or n - k < MIN_REGRESSION_HELD_OUT:
        raise DataError(f"a table of {n} rows holds out {k} for validation at {fraction:.0%}, leaving {n - k} to "
                        f"train on; expected at least {MIN_REGRESSION_HELD_OUT} on each side (more rows, or a "
                        f"NAME_TRAIN/NAME_TEST pair)")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return order[k:].sort().values, order[:k].sort().values


def selection_rows(labels: torch.Tensor | None, n: int, fraction: float,
                   seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows trained on, rows held back to pick the evaluation whose weights a run keeps), sorted: a seeded
    share of each class (a class too small to give one keeps all its rows), or of all rows for a number.
    Never refused: these rows only choose a step, so a small share is a weaker choice, not a wrong one."""
    g = torch.Generator().manual_seed(seed)
    groups = [torch.arange(n)] if labels is None else [(labels == c).nonzero().flatten()
                                                        for c in torch.unique(labels).tolist()]
    train, held = [], []
    for members in groups:
        order = members[torch.randperm(len(members), generator=g)]
        k = min(round(fraction * len(members)), len(members) - 1)
        held.append(order[:k])
        train.append(order[k:])
    return torch.cat(train).sort().values, torch.cat(held).sort().values

