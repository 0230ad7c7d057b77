"""Malformed CSVs, generated: ragged rows, stray quotes, binary bytes, huge fields, empty headers. Reading
a table and making its task from it either works or says what is wrong in one line (a DataError): never
a traceback, never a hang (each example runs under a time limit)."""
import signal
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anyformer.data import DataError
from anyformer.data.tables.columns import describe_columns, describe_target, find_target
from anyformer.data.tables.encode import TableEncoding
from anyformer.data.tables.read import read_table_bytes

SECONDS = 10  # far more than any of these small inputs needs: reaching it is a hang


@contextmanager
def time_limit(seconds: int):
    def stop(signum, frame):
        raise TimeoutError(f"still reading after {seconds} s")
    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def task_from(data: bytes) -> None:
    """What `anyformer train --data` does with a CSV before any model exists."""
    frame = read_table_bytes(data, "t.csv")
    target = find_target(list(frame.columns), frame.columns[-1] if len(frame.columns) else None, "t.csv")
    if frame.empty:
        raise DataError("t.csv: no rows")
    t = describe_target(frame[target], target, None, "t.csv")
    columns = describe_columns(frame, target, "t.csv")
    enc = TableEncoding.fit(frame, columns, t)
    enc.encode(frame, "t.csv")


cells = st.one_of(st.text(max_size=12), st.sampled_from(['"', '""', "a,b", "\n", "NA", "1e309", "-0", " 3 ", "\x00"]),
                  st.floats(allow_nan=True).map(str), st.integers(-5, 5).map(str))
rows = st.lists(st.lists(cells, min_size=0, max_size=6), min_size=0, max_size=12)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(rows, st.sampled_from([",", ";", "\t"]), st.booleans())
def test_generated_tables_are_read_or_refused_in_one_line(rows, sep, quote):
    lines = [sep.join(f'"{c}"' if quote else c for c in row) for row in rows]
    data = "\n".join(lines).encode("utf-8", "surrogatepass")
    with time_limit(SECONDS):
        try:
            task_from(data)
        except DataError as e:
            assert "\n" not in str(e) and str(e)


@settings(max_examples=60)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_are_read_or_refused_in_one_line(data):
    with time_limit(SECONDS):
        try:
            task_from(data)
        except DataError as e:
            assert "\n" not in str(e)


@pytest.mark.parametrize("data", [
    b"a,b,label\n1,2,x\n3,4,y,5,6\n",                 # a ragged row, longer than the header
    b'a,label\n"1,x\n2,y\n',                          # a stray quote
    b",,\n1,2,3\n4,5,6\n",                            # an empty header
    b"a,label\n" + b"9" * 2_000_000 + b",x\n1,y\n",   # a huge field
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",            # an image, not a table
])
def test_known_malformed_tables_are_read_or_refused_in_one_line(data):
    with time_limit(SECONDS):
        try:
            task_from(data)
        except DataError as e:
            assert "\n" not in str(e)
