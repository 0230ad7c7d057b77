"""A table from a file, as people write them: CSV (any of the usual delimiters, quoted fields with
commas and line breaks, a byte-order mark, UTF-8 or UTF-16), TSV, Parquet or an Excel sheet.

pandas does the reading (it knows quoting, dialects and line breaks inside fields); every cell comes
back as text, so that what a cell *is* (a number, a category, a date, missing) is decided in one
place (`cells.py`, `columns.py`) for every table and every series CSV alike. What pandas refuses is
said in one line naming the file; nothing in a file is evaluated.
"""
from __future__ import annotations

import csv
import io
import warnings
from pathlib import Path

import pandas as pd

from ..errors import DataError

__all__ = ["TABLE_SUFFIXES", "read_csv_rows", "read_header", "read_table", "read_table_bytes", "text_frame"]

TABLE_SUFFIXES = (".csv", ".tsv", ".txt", ".parquet", ".pq", ".xlsx", ".xls")
MAX_FILE_BYTES = 2 * 1024 ** 3   # larger tables are not what a 2-core machine trains from memory
DELIMITERS = ",;\t|"             # what spreadsheets of every locale and database dumps write
EXPECTED = "expected a header line naming the columns, then one row per example"


def read_table(path: str | Path) -> pd.DataFrame:
    """Every cell of the table at `path` as text (stripped; a missing cell is ''), columns named by the
    header. One-line DataError for an empty file, a ragged row, an unclosed quote, binary bytes."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"no such table file: {path}")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise DataError(f"{path} is {size / 2**30:.1f} GiB; expected a table under {MAX_FILE_BYTES / 2**30:.0f} GiB")
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq"):
        return _as_text(_typed(path, lambda: pd.read_parquet(path), "pyarrow"), path)
    if suffix in (".xlsx", ".xls"):
        return _as_text(_typed(path, lambda: pd.read_excel(path, dtype=object), "openpyxl"), path)
    return read_table_bytes(path.read_bytes(), str(path))


def read_header(path: str | Path) -> list[str]:
    """The column names of a CSV, read from its first bytes only (for telling a table from series);
    a typed file's (Parquet, Excel) from the file."""
    path = Path(path)
    if path.suffix.lower() in (".parquet", ".pq", ".xlsx", ".xls"):
        return list(read_table(path).columns)
    with open(path, "rb") as f:
        head = f.read(1 << 20)
    text = _decode(head, str(path), partial=True)
    if not text.strip():
        raise DataError(f"{path}: empty; {EXPECTED}")
    return _header(text, _delimiter(text), str(path))


def read_table_bytes(data: bytes, where: str) -> pd.DataFrame:
    """CSV bytes -> the table as text; `where` names the source in errors (a path, an upload)."""
    text = _decode(data, where)
    if not text.strip():
        raise DataError(f"{where}: empty; {EXPECTED}")
    sep = _delimiter(text)
    header = _header(text, sep, where)
    return _stripped(_parse(text, sep, header, where, header_line=True))


def read_csv_rows(data: bytes, where: str) -> list[tuple[int, list[str]]]:
    """Every row of CSV bytes that holds a value, the first line's included (a header or not: the caller
    knows), as (the line it starts on, its stripped fields). The reader of the series CSVs: the same
    parsing as a table's, with each row's place in the file kept for the messages that name it."""
    text = _decode(data, where)
    if not text.strip():
        return []
    sep = _delimiter(text)
    width = len(_header(text, sep, where, check=False))
    frame = _stripped(_parse(text, sep, list(range(width)), where, header_line=False, blank_rows=True))
    rows, line = [], 1
    for fields in frame.itertuples(index=False):
        fields = list(fields)
        if any(fields):
            rows.append((line, fields))
        line += 1 + sum(f.count("\n") for f in fields)  # a quoted line break moves the next row down
    return rows


def _parse(text: str, sep: str, names: list, where: str, header_line: bool, blank_rows: bool = False) -> pd.DataFrame:
    """pandas' C reader, every cell as text; `header_line`: the first line holds the names (replaced by
    `names`); `blank_rows`: blank lines kept as rows of empty cells (so that lines can be counted)."""
    try:
        with warnings.catch_warnings():
            # A row longer than the header makes pandas drop cells with only a warning: refused instead.
            warnings.simplefilter("error", pd.errors.ParserWarning)
            return pd.read_csv(io.StringIO(text), sep=sep, dtype=str, keep_default_na=False, na_filter=False,
                               index_col=False, skip_blank_lines=not blank_rows, skipinitialspace=True,
                               header=0 if header_line else None, names=names, engine="c")
    except pd.errors.ParserWarning:
        raise DataError(f"{where}: a row has more fields than the header names ({len(names)}); "
                        f"{EXPECTED}, no more fields in a row than columns") from None
    except (pd.errors.ParserError, csv.Error, ValueError, OverflowError) as e:
        raise DataError(f"{where}: {_first_line(e)}; {EXPECTED} (quotes closed, one field per column)") from None


def _decode(data: bytes, where: str, partial: bool = False) -> str:
    """Text from UTF-8 (a byte-order mark allowed) or UTF-16 with its mark; `partial`: the first bytes of
    a longer file, whose last character may be cut."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):  # Excel's "Unicode text"
        try:
            return data.decode("utf-16", errors="ignore" if partial else "strict")
        except UnicodeDecodeError as e:
            raise DataError(f"{where}: broken UTF-16 text (byte {e.start}); expected a CSV file") from None
    if b"\x00" in data[: 1 << 16]:
        raise DataError(f"{where}: binary data (a NUL byte), not text; expected a CSV file (or .parquet, .xlsx)")
    try:
        return data.decode("utf-8-sig")  # a spreadsheet's byte-order mark is not part of the first column's name
    except UnicodeDecodeError as e:
        if partial and e.start >= len(data) - 3 and e.reason == "unexpected end of data":
            return data[: e.start].decode("utf-8-sig")
        raise DataError(f"{where}: not UTF-8 text (byte {e.start}); expected a CSV saved as UTF-8") from None


def _delimiter(text: str) -> str:
    """The separator of the header line: the candidate it holds most often outside quotes (a comma
    on a tie), as spreadsheets of other locales write `;` and database dumps tabs or bars."""
    first = next(line for line in text.splitlines() if line.strip())
    outside = "".join(part for i, part in enumerate(first.split('"')) if i % 2 == 0)
    counts = {d: outside.count(d) for d in DELIMITERS}
    best = max(counts.values())
    return "," if best == 0 or counts[","] == best else max(counts, key=counts.get)


def _header(text: str, sep: str, where: str, check: bool = True) -> list[str]:
    """The column names as written; an empty name becomes `column N`, and a name given twice is refused
    (pandas would rename the second one silently); `check` False: the first line's fields as they are."""
    try:
        row = next(csv.reader(io.StringIO(text), delimiter=sep, skipinitialspace=True))
    except (csv.Error, StopIteration) as e:
        raise DataError(f"{where}: the header line cannot be read ({e}); {EXPECTED}") from None
    if not check:
        return row
    names = [name.strip() or f"column {i + 1}" for i, name in enumerate(row)]
    lowered = [n.lower() for n in names]
    twice = sorted({n for n in names if lowered.count(n.lower()) > 1})
    if twice:
        raise DataError(f"{where}:1: column(s) {twice[:5]} appear more than once in the header; expected distinct names")
    return names


def _stripped(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.apply(lambda column: column.str.strip()) if len(frame.columns) else frame


def _typed(path: Path, read, package: str) -> pd.DataFrame:
    try:
        return read()
    except ImportError:
        raise ImportError(f"{path.name}: reading {path.suffix} files needs {package}: pip install {package}") from None
    except Exception as e:  # noqa: BLE001 - the readers raise many kinds for a damaged file
        raise DataError(f"{path}: not a readable {path.suffix} table ({_first_line(e)})") from None


def text_frame(frame: pd.DataFrame, where: str) -> pd.DataFrame:
    """A DataFrame a user holds (typed by pandas or written by hand) as text cells, as a CSV reads."""
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"{where}: expected a pandas DataFrame (or a table file's path), got {type(frame).__name__}")
    return _as_text(frame, where)


def _as_text(frame: pd.DataFrame, path: Path | str) -> pd.DataFrame:
    """A typed table (Parquet, Excel) as text like a CSV's cells: missing values '', numbers as Python
    writes them, dates in ISO form."""
    names = [str(c).strip() or f"column {i + 1}" for i, c in enumerate(frame.columns)]
    lowered = [n.lower() for n in names]
    twice = sorted({n for n in names if lowered.count(n.lower()) > 1})
    if twice:
        raise DataError(f"{path}: column(s) {twice[:5]} appear more than once; expected distinct names")

    def text(value) -> str:
        if value is None or (not isinstance(value, str) and pd.isna(value)):
            return ""
        if isinstance(value, pd.Timestamp):
            return value.isoformat()
        if isinstance(value, float) and value.is_integer():
            return str(int(value))  # 3.0 from a typed column reads as the 3 a CSV holds
        return str(value).strip()

    out = pd.DataFrame({name: [text(v) for v in frame[col]] for name, col in zip(names, frame.columns)},
                       dtype=object)
    return out


def _first_line(e: BaseException) -> str:
    return " ".join((str(e).splitlines() or [type(e).__name__])[0].split())[:200]
