"""Reading a table as people write it: quoting, line breaks inside fields, byte-order marks, the
delimiters of other locales, UTF-16, Parquet and Excel; and each malformed file refused in one line."""
import pandas as pd
import pytest

from anyformer.data import DataError
from anyformer.data.tables.read import read_header, read_table, read_table_bytes


def test_quoted_commas_and_line_breaks_stay_inside_their_cell(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('name,note,price\nA,"one, two",1.5\nB,"line one\nline two",2\n')
    frame = read_table(path)
    assert list(frame.columns) == ["name", "note", "price"]
    assert frame["note"].tolist() == ["one, two", "line one\nline two"]
    assert frame["price"].tolist() == ["1.5", "2"]  # every cell is text: what it is, is decided elsewhere


@pytest.mark.parametrize("sep", [";", "\t", "|"])
def test_the_delimiter_is_the_one_the_header_uses(sep):
    frame = read_table_bytes(f"a{sep}b{sep}c\n1,5{sep}x{sep}3\n".encode(), "t.csv")
    assert list(frame.columns) == ["a", "b", "c"]
    assert frame.iloc[0].tolist() == ["1,5", "x", "3"]  # a decimal comma stays in its cell


def test_a_byte_order_mark_and_utf16_read_as_their_text():
    assert list(read_table_bytes("\ufeffspecies,x\nA,1\n".encode("utf-8"), "t").columns) == ["species", "x"]
    frame = read_table_bytes("größe,wert\nÄ,1\n".encode("utf-16"), "t")
    assert list(frame.columns) == ["größe", "wert"] and frame.iloc[0, 0] == "Ä"


def test_cells_are_stripped_and_blank_lines_skipped():
    frame = read_table_bytes(b"a, b\n 1 , x \n\n2,y\n", "t")
    assert list(frame.columns) == ["a", "b"] and frame["a"].tolist() == ["1", "2"] and frame["b"].tolist() == ["x", "y"]


def test_a_short_row_reads_its_missing_cells_as_empty():
    assert read_table_bytes(b"a,b,c\n1,2\n", "t").iloc[0].tolist() == ["1", "2", ""]


@pytest.mark.parametrize("data,said", [
    (b"", "empty; expected a header line"),
    (b"   \n\n", "empty; expected a header line"),
    (b"a,b\n1,2,3\n", "a row has more fields than the header names (2)"),
    (b'a,b\n1,"2\n', "EOF inside string"),
    (b"a,b\n\x00\x01\x02", "binary data (a NUL byte)"),
    (b"a,b\n\xff\xfe\xfa,1\n", "not UTF-8 text (byte 4)"),
    (b"a,A\n1,2\n", "column(s) ['A', 'a'] appear more than once"),
])
def test_malformed_files_are_refused_in_one_line(data, said):
    with pytest.raises(DataError) as e:
        read_table_bytes(data, "t.csv")
    assert said in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith("t.csv")


def test_a_header_is_read_from_the_first_bytes_alone(tmp_path):
    path = tmp_path / "big.csv"
    path.write_text("id,size,label\n" + "1,2,x\n" * 200_000)
    assert read_header(path) == ["id", "size", "label"]


def test_parquet_and_excel_read_as_the_same_text_cells(tmp_path):
    frame = pd.DataFrame({"n": [1.5, None, 3.0], "k": ["a", None, "b"], "i": [1, 2, 3],
                          "d": pd.to_datetime(["2024-01-31", "2024-02-01", None])})
    frame.to_parquet(tmp_path / "t.parquet")
    frame.to_excel(tmp_path / "t.xlsx", index=False)
    for name in ("t.parquet", "t.xlsx"):
        got = read_table(tmp_path / name)
        assert got["n"].tolist() == ["1.5", "", "3"], name
        assert got["k"].tolist() == ["a", "", "b"] and got["i"].tolist() == ["1", "2", "3"], name
        assert got["d"].tolist()[0].startswith("2024-01-31") and got["d"].tolist()[2] == "", name


def test_a_damaged_parquet_file_is_refused_in_one_line(tmp_path):
    (tmp_path / "t.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match=r"t\.parquet: not a readable \.parquet table"):
        read_table(tmp_path / "t.parquet")
