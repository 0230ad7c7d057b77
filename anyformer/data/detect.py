"""What a user's data is, from its files: images to classify, text to model, labelled series, or a
table (rows of number and category columns with a target).

`anyformer train --data PATH` with no recipe asks this first, then derives the run's settings from
the data (anyformer/train/derive.py). Only names and the first bytes of files are read here.
"""
from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .errors import DataError
from .images.folders import IMAGE_EXTS
from .series.read import SERIES_SUFFIXES
from .tables.read import read_header
from .text.labelled import has_class_folders, table_text_column

__all__ = ["DataKind", "detect_kind", "SERIES_EXTS"]

# What the series loader reads, and ARFF, which it names as unsupported (rather than text to model).
SERIES_EXTS = {*SERIES_SUFFIXES, ".arff"}
TABLE_ONLY_EXTS = {".parquet", ".pq", ".xlsx", ".xls"}
# A CSV is series, not a table, where its columns are a series' layout by name: a long CSV's time and
# value columns, or (wide) every column but the label and an id named like steps: a shared prefix and
# consecutive numbers (t0, t1, ... or 1, 2, ...). A few columns numbered under another prefix are a
# table's features (x1, x2, x3); many (at least _MIN_STEPS) are a series whatever their prefix.
_TIME_PREFIXES = ("", "t", "time", "step", "timestep", "tick")
_MIN_STEPS = 8
_LONG_TIME, _LONG_VALUE = ("time", "t", "timestamp", "step"), ("value", "v")
_LABEL_OR_ID = ("label", "class", "target", "y", "category", "id", "series_id", "name")
TAR_ENDINGS = (".tar", ".tar.gz", ".tgz")
# Files that are neither data nor a reason to refuse it: what operating systems and editors leave behind.
_DEBRIS = {".ds_store", "thumbs.db", "desktop.ini"}
_PEEK_BYTES = 1 << 16
_MAX_FILES = 200_000  # enough to classify any folder; a larger one is judged by its first files


@dataclass(frozen=True)
class DataKind:
    kind: str    # "images" | "text" | "series" | "table" | "labelled-text"
    why: str     # one phrase, e.g. "a folder of 9 class folders holding 1,906 images"


def detect_kind(path: str | os.PathLike[str], label_column: str | None = None) -> DataKind:
    """The kind of data at `path`, and why; a one-line DataError where it is none of them. `label_column`
    (--label-column) names a table's target, where a table of texts is told from other tables."""
    p = Path(path).expanduser()
    if not p.exists():
        raise DataError(f"no data at {p}: expected a folder of class folders of images, a text file or folder "
                        f"of them, a .csv/.ts/.tsv/.npy/.npz of labelled series, or a table (.csv, .parquet, .xlsx)")
    return _detect_file(p, label_column) if p.is_file() else _detect_folder(p, label_column)


def _suffix(p: Path) -> str:
    return p.suffix.lower()


def _detect_file(p: Path, label_column: str | None = None) -> DataKind:
    if _suffix(p) in TABLE_ONLY_EXTS or (_suffix(p) in (".csv", ".tsv") and csv_holds_table(p)):
        return _table_or_texts(p, f"a {_suffix(p)} table", label_column)
    if _suffix(p) in SERIES_EXTS:
        return DataKind("series", f"a {_suffix(p)} file of labelled series")
    if p.name.lower().endswith(TAR_ENDINGS):
        return DataKind("images", "a tar archive (of class folders of images)")
    if _suffix(p) in IMAGE_EXTS:
        raise DataError(f"{p} is one image; expected a folder of class folders of images (cats/1.jpg, dogs/2.png, "
                        f"...) to train a classifier on, or `anyformer predict RUN {p.name}` to classify it")
    if _is_text(p):
        return DataKind("text", "a text file")
    raise DataError(f"{p} is neither text (UTF-8 or UTF-16) nor a file of series (.csv, .ts, .tsv, .npy, .npz) "
                    f"nor a tar of images; expected one of those, or a folder of them")


def _table_or_texts(p: Path, table: str, label_column: str | None) -> DataKind:
    """A labelled table whose rows hold a free-text column is labelled text (a text classifier's data);
    any other, a table. The cells are read to tell: a text column is known by its values, not its name."""
    column = table_text_column(p, label_column)
    if column is None:
        return DataKind("table", table)
    return DataKind("labelled-text", f"{table} with a free-text column {column!r}")


def _is_text(p: Path) -> bool:
    """UTF-8 (a BOM allowed) or UTF-16 with a BOM, judged by the first 64 KiB: a character cut at the
    end is allowed, a NUL byte or an invalid sequence is not."""
    with open(p, "rb") as f:
        head = f.read(_PEEK_BYTES)
    if not head:
        return False
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return True
    if b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start >= len(head) - 3 and e.reason == "unexpected end of data"
    return True


def csv_holds_table(p: Path) -> bool:
    """Whether a CSV (or TSV) with a header is a table rather than series, by its column names alone
    (see _LONG_TIME). A .tsv without a header line (the UCR archive's) is series."""
    names = [n.strip() for n in read_header(p)]
    if _suffix(p) == ".tsv" and sum(not _is_number(n) for n in names) < 2:
        return False
    lowered = [n.lower() for n in names]
    if any(n in _LONG_TIME for n in lowered) and any(n in _LONG_VALUE for n in lowered):
        return False
    steps = [n for n in names if n.lower() not in _LABEL_OR_ID and not n.startswith("column ")]
    return not _named_like_steps(steps)


def _named_like_steps(names: list[str]) -> bool:
    parts = [re.fullmatch(r"(.*?)(\d+)", n) for n in names]
    if len(names) < 2 or not all(parts):
        return False
    prefixes = {m[1] for m in parts}
    numbers = sorted(int(m[2]) for m in parts)
    if len(prefixes) != 1 or numbers != list(range(numbers[0], numbers[0] + len(numbers))):
        return False
    return len(names) >= _MIN_STEPS or prefixes.pop().lower().rstrip("_- ") in _TIME_PREFIXES


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _files(folder: Path) -> list[Path]:
    out = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__MACOSX")
        out += [Path(root) / n for n in sorted(names) if not n.startswith(".") and n.lower() not in _DEBRIS]
        if len(out) >= _MAX_FILES:
            break
    return out


def _detect_folder(p: Path, label_column: str | None = None) -> DataKind:
    files = _files(p)
    if not files:
        raise DataError(f"the folder {p} is empty (hidden files aside); expected class folders of images, text "
                        f"files, or files of labelled series")
    kinds = Counter("images" if _suffix(f) in IMAGE_EXTS else "series" if _suffix(f) in SERIES_EXTS
                    else "tar" if f.name.lower().endswith(TAR_ENDINGS) else "other" for f in files)
    if kinds["images"]:
        classes = {f.relative_to(p).parts[-2] for f in files if _suffix(f) in IMAGE_EXTS
                   and len(f.relative_to(p).parts) >= 2}
        if kinds["images"] >= max(kinds["series"], kinds["other"]):
            return DataKind("images", f"a folder of {kinds['images']:,} images in {len(classes)} folders")
    tables = [f for f in files if _suffix(f) in TABLE_ONLY_EXTS
              or (_suffix(f) in (".csv", ".tsv") and csv_holds_table(f))]
    series_only = kinds["series"] - sum(_suffix(f) in SERIES_EXTS for f in tables)  # series files that are no table
    if tables and len(tables) >= series_only:
        return _table_or_texts(p, f"a folder of {len(tables)} table file{'s' if len(tables) > 1 else ''}",
                               label_column)
    if kinds["series"]:
        return DataKind("series", f"a folder of {kinds['series']} series files")
    if kinds["tar"] == len(files):
        return DataKind("images", "a folder holding a tar archive (of class folders of images)")
    text = [f for f in files if _is_text(f)]
    if text and has_class_folders(p):  # class folders of text files: labelled text, not a corpus
        return DataKind("labelled-text", f"a folder of {len(text):,} text files in class folders")
    if text:
        return DataKind("text", f"a folder of {len(text)} text files")
    raise DataError(f"the folder {p} holds {len(files)} files, none of them images, text or series files; "
                    f"expected class folders of images, text files, or .csv/.ts/.tsv/.npy/.npz series")
