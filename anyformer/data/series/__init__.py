"""Labelled time series to classify: the UCR/UEA archives' files and the CSV and NumPy files people have.

One file a question:
- `dataset`: where a problem's files are (a name, a folder, a file), the splits in memory
  (`SeriesDataset`), and the normalisation a run saves (`SeriesPreprocess`);
- `read`: `read_series_file`, which picks the reader by the file's suffix;
- `archive` (.ts, .tsv), `wide_long_csv` (a CSV in either layout), `npy` (.npy, .npz): the readers,
  each giving a `RawSeries` (`raw`: it and the checks every reader shares);
- `one_series`: one series from a file, for `predict`, `attention` and the server;
- `augment`: batched augmentation (jitter, scaling, warp, crop) and resampling.
"""

from .archive import read_ts, read_tsv
from .augment import augment_series, resample
from .dataset import (SeriesDataset, SeriesPreprocess, aeon_data_dir, find_series_files, fit_to_model, load_series_data,
                      load_series_dataset, load_series_splits, looks_like_series, standardise_each)
from .npy import read_series_array
from .one_series import read_series_input
from .raw import RawSeries
from .read import SERIES_SUFFIXES, read_series_file
from .wide_long_csv import read_series_csv

__all__ = [
    "RawSeries",
    "SERIES_SUFFIXES",
    "SeriesDataset",
    "SeriesPreprocess",
    "aeon_data_dir",
    "augment_series",
    "find_series_files",
    "fit_to_model",
    "load_series_data",
    "load_series_dataset",
    "load_series_splits",
    "looks_like_series",
    "read_series_array",
    "read_series_csv",
    "read_series_file",
    "read_series_input",
    "read_ts",
    "read_tsv",
    "resample",
    "standardise_each",
]
