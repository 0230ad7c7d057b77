"""Labelled text: texts and their classes, from a table (CSV, TSV, Parquet) whose rows hold a free-text
column and a label, or from a folder of class folders of text files (20 Newsgroups' layout, scikit-learn's
`load_files`).

A text column is told from a category column by its values, never by its name: long on average (at least
the tables' TEXT_CHARS) and mostly distinct (tables/columns.py skips such a column "as free text"). Other
columns are skipped and named. Splits as for tables: a NAME_TRAIN/NAME_TEST pair of files, or `train/` and
`test/` folders of class folders, is scored on its test part; otherwise a seeded share is held out.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..errors import DataError
from ..split import check_classes
from ..tables.cells import is_missing
from ..tables.columns import TEXT_CHARS, describe_columns
from ..tables.load import find_table_files, read_labelled
from ..tables.read import TABLE_SUFFIXES
from .read import _read_chunks

__all__ = ["LabelledTexts", "TextSource", "find_text_column", "has_class_folders", "read_labelled_text",
           "table_text_column", "read_texts_file", "describe_text_source"]

SPLIT_FOLDERS = ("train", "test")
# Files in a class folder that are not its texts: what operating systems and editors leave behind.
_DEBRIS = {".ds_store", "thumbs.db", "desktop.ini"}
MIN_TEXT_SHARE = 0.5      # a text column's distinct values, as a share of its present cells
MAX_TABLE_INPUTS = 2      # a table with this many number, category or date columns beside its text stays a table
SHORT_TEXT_SHARE = 0.9    # ... and of a column of short texts, the only one besides the label


@dataclass
class LabelledTexts:
    """Texts and their class names as read (`labels[i]` the class of `texts[i]`); `rows` says where each
    came from (a table's data row, counted from 1 after the header, or a file's path in its folder)."""

    texts: list[str]
    labels: list[str]
    rows: list[str]
    where: str

    def __len__(self) -> int:
        return len(self.texts)


@dataclass
class TextSource:
    """Where labelled text comes from and how it was read: `layout` "table" or "folders"; for a table its
    text and label columns and the columns skipped (name -> why)."""

    layout: str
    train: Path
    test: Path | None = None
    text_column: str | None = None
    label_column: str | None = None
    skipped: dict[str, str] = field(default_factory=dict)
    text_why: str = ""


# ---------------------------------------------------------------------------------------------- tables

def find_text_column(frame: pd.DataFrame, target: str, lone: bool = False) -> tuple[str | None, str, dict[str, str]]:
    """(the free-text column, why, the other columns skipped with why): the column whose present cells are
    longest on average among those at least TEXT_CHARS long and mostly distinct; None where there is none.
    With `lone` (--task text: the user says the table holds texts), a table of one column beside the label
    has that column read as its texts, however short, unless its cells are all numbers."""
    candidates: list[tuple[float, str, str]] = []
    others: dict[str, str] = {}
    for name in frame.columns:
        if name == target:
            continue
        cells = frame[name]
        present = cells[~is_missing(cells)]
        mean = float(present.str.len().mean()) if len(present) else 0.0
        distinct = present.nunique() / max(1, len(present))
        if mean >= TEXT_CHARS and distinct >= MIN_TEXT_SHARE:
            candidates.append((mean, name, f"{mean:.0f} characters on average, {distinct:.0%} distinct"))
        else:
            others[name] = (f"{mean:.0f} characters on average, {present.nunique():,} values" if len(present)
                            else "empty")
    if not candidates and len(others) == 1:
        # A table of texts and labels alone: short texts (titles, subject lines) are texts still, where
        # they are words (two or more on average) nearly all distinct.
        name = next(iter(others))
        present = frame[name][~is_missing(frame[name])]
        words = float(present.str.split().str.len().mean()) if len(present) else 0.0
        numbers = len(present) > 0 and bool(pd.to_numeric(present, errors="coerce").notna().all())
        if lone and not numbers or words >= 2 and present.nunique() >= SHORT_TEXT_SHARE * len(present):
            return name, f"{present.str.len().mean():.0f} characters on average, {words:.1f} words, the only column", {}
    if not candidates:
        return None, "", others
    candidates.sort(key=lambda c: (-c[0], c[1]))
    _, name, why = candidates[0]
    for mean, other, other_why in candidates[1:]:
        others[other] = f"also free text ({other_why}); the longer column {name!r} is read"
    return name, why, others


def table_text_column(path: str | Path, label_column: str | None = None) -> str | None:
    """The free-text column of a labelled table at `path` (a file or a folder as tables read it), None
    where it has no target or no such column, or where MAX_TABLE_INPUTS or more other columns hold numbers,
    categories or dates (a table with a note beside its columns stays a table; --task text reads it as
    text): what tells labelled text from a table."""
    try:
        files = find_table_files(path)
        frame, target = read_labelled(files.train, asked=label_column)
    except DataError:
        return None
    if target not in frame.columns:
        return None
    text = find_text_column(frame, target)[0]
    if text is None:
        return None
    try:
        used = [c for c in describe_columns(frame, target, str(files.train)) if c.kind != "skipped"]
    except DataError:  # nothing but text (or a column no table reads): labelled text
        used = []
    return text if len(used) < MAX_TABLE_INPUTS else None


def text_columns(frame: pd.DataFrame, text_column: str, where: str, expected: str) -> list[str]:
    """The frame's columns that `text_column` names: one name, or several joined by commas (a title and a
    body), each matched exactly, else in any case; a one-line DataError naming what the file holds."""
    if text_column in frame.columns:
        return [text_column]
    names = [n.strip() for n in text_column.split(",")]
    found = []
    for name in names:
        hits = [c for c in frame.columns if c == name] or [c for c in frame.columns if c.lower() == name.lower()]
        if not name or not hits:
            raise DataError(f"{where}: no column {name!r} among {list(frame.columns)[:8]}; expected {expected}")
        found.append(hits[0])
    return found


def text_cells(frame: pd.DataFrame, columns: list[str]) -> list[str]:
    """Each row's text: its cells of `columns` joined by line breaks, a missing cell left out; a row with
    none is an empty text (the model still sees [CLS] [SEP] and answers for it)."""
    parts = [frame[c].where(~is_missing(frame[c]), "").astype(str) for c in columns]
    if len(parts) == 1:
        return parts[0].tolist()
    return ["\n".join(x for x in row if x) for row in zip(*(p.tolist() for p in parts))]


def _table_texts(frame: pd.DataFrame, columns: list[str], label: str, where: str) -> LabelledTexts:
    return LabelledTexts(text_cells(frame, columns), frame[label].astype(str).tolist(),
                         [str(int(i) + 1) for i in frame.index], where)


def read_texts_file(path: str | Path, text_column: str, label_column: str | None) -> LabelledTexts:
    """A table's texts by the column names a run recorded (any case); without `label_column` the labels
    are left empty (texts to predict)."""
    from ..tables.read import read_table
    path = Path(path)
    if label_column is not None:
        frame, label = read_labelled(path, label_column)
    else:
        frame, label = read_table(path), None
    columns = text_columns(frame, text_column, str(path), "the text column the run was trained on")
    if label is not None and label not in frame.columns:
        raise DataError(f"{path}: no label column {label_column!r} among {list(frame.columns)[:8]}; expected the "
                        f"label column the run was trained on")
    if label is None:
        return LabelledTexts(text_cells(frame, columns), [""] * len(frame), [str(int(i) + 1) for i in frame.index],
                             str(path))
    return _table_texts(frame, columns, label, str(path))


# ---------------------------------------------------------------------------------------------- folders

def _visible(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if not p.name.startswith(".") and p.name.lower() not in _DEBRIS
                  and p.name != "__MACOSX")


def _class_folders(folder: Path) -> list[Path] | None:
    """The class folders of `folder` where every visible entry is a folder holding only files, at least two
    of them; None otherwise."""
    entries = _visible(folder)
    if len(entries) < 2 or not all(p.is_dir() for p in entries):
        return None
    for d in entries:
        if not all(f.is_file() for f in _visible(d)):
            return None
    return entries


def has_class_folders(folder: str | Path) -> bool:
    """A folder of class folders of files, or `train/` (and `test/`) folders of them."""
    folder = Path(folder)
    if not folder.is_dir():
        return False
    split = _split_folders(folder)
    return _class_folders(split[0] if split else folder) is not None


def _split_folders(folder: Path) -> tuple[Path, Path | None] | None:
    names = {p.name.lower(): p for p in _visible(folder) if p.is_dir()}
    if "train" in names and set(names) <= set(SPLIT_FOLDERS):
        return names["train"], names.get("test")
    return None


def _read_file(path: Path) -> str:
    return "".join(_read_chunks(path))


def _folder_texts(folder: Path) -> LabelledTexts:
    classes = _class_folders(folder)
    if classes is None:
        raise DataError(f"{folder}: expected class folders (each a folder of text files, at least two), found "
                        f"{', '.join(p.name for p in _visible(folder)[:5]) or 'nothing'}")
    texts, labels, rows = [], [], []
    for d in classes:
        for f in _visible(d):
            texts.append(_read_file(f))
            labels.append(d.name)
            rows.append(str(f.relative_to(folder)))
    return LabelledTexts(texts, labels, rows, str(folder))


# ---------------------------------------------------------------------------------------------- both

def describe_text_source(data: str | Path, label_column: str | None = None,
                         text_column: str | None = None, lone: bool = False) -> TextSource:
    """How the labelled text at `data` is laid out (no texts kept): a table's columns, or class folders.
    `text_column` (--text-column) names a table's text column, or several joined by commas, over the
    column its values would pick; `lone` (--task text): a table's one column beside the label is its text."""
    path = Path(data).expanduser()
    if path.is_dir() and has_class_folders(path):
        split = _split_folders(path)
        train, test = split if split else (path, None)
        return TextSource("folders", train, test)
    if path.is_dir() and not any(p.suffix.lower() in TABLE_SUFFIXES and p.suffix.lower() != ".txt"
                                 for p in _visible(path)):
        _folder_texts(path)  # refused there, naming what the folder holds
    files = find_table_files(path)
    frame, target = read_labelled(files.train, asked=label_column)
    if text_column:
        named = text_columns(frame, text_column, str(files.train), "a text column (--text-column)")
        if target in named:
            raise DataError(f"{files.train}: --text-column names the label column {target!r}; expected a column "
                            f"of texts beside it")
        others = {c: "not named by --text-column" for c in frame.columns if c != target and c not in named}
        return TextSource("table", files.train, files.test, ",".join(named), target, others,
                          "named by --text-column")
    text, why, others = find_text_column(frame, target, lone)
    if text is None:
        shown = "; ".join(f"{k!r} ({v})" for k, v in list(others.items())[:4])
        raise DataError(f"{files.train}: no free-text column besides the label {target!r} ({shown}); expected a "
                        f"column of texts at least {TEXT_CHARS} characters long on average, mostly distinct, or "
                        f"one named by --text-column")
    return TextSource("table", files.train, files.test, text, target, others, why)


def read_labelled_text(source: TextSource) -> tuple[LabelledTexts, LabelledTexts | None]:
    """(the training texts, the test texts or None): every text and its class name, as `source` reads them."""
    if source.layout == "folders":
        train = _folder_texts(source.train)
        test = _folder_texts(source.test) if source.test is not None else None
    else:
        frame, label = read_labelled(source.train, source.label_column)
        columns = text_columns(frame, source.text_column, str(source.train), "the text column")
        train = _table_texts(frame, columns, label, str(source.train))
        test = (read_texts_file(source.test, source.text_column, source.label_column)
                if source.test is not None else None)
    _check(train)
    return train, test


def _check(texts: LabelledTexts) -> None:
    import torch
    classes = sorted(set(texts.labels))
    index = {c: i for i, c in enumerate(classes)}
    check_classes(torch.tensor([index[c] for c in texts.labels], dtype=torch.long), classes, texts.where)
