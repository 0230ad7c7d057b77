"""Tables: rows of number, category and date columns with a target (classes or a number).

`read` turns a file into text cells (pandas), `cells` says what a cell is, `columns` what a column is
and what the target asks for, `encode` turns rows into a model's inputs with what the training rows
taught it, and `load` finds the files and the held-out rows."""
from .columns import Column, Target, describe_columns, describe_target, find_target
from .encode import EncodedRows, TableEncoding
from .load import TableFiles, find_table_files, holdout_rows, read_labelled
from .read import TABLE_SUFFIXES, read_header, read_table, read_table_bytes, text_frame

__all__ = ["Column", "EncodedRows", "TABLE_SUFFIXES", "TableEncoding", "TableFiles", "Target", "describe_columns",
           "describe_target", "find_table_files", "find_target", "holdout_rows", "read_header", "read_labelled",
           "read_table", "read_table_bytes", "text_frame"]
