"""Time-series classification data: the archives' splits in memory, found by name or path, and the
normalisation a run saves so that `eval`, `predict` and `attention` see series exactly as training did.

Named datasets are looked for in `$ANYFORMER_DATA/<name>/`, then in the data folder of an installed
`aeon` (located through its package metadata, never imported): GunPoint, ItalyPowerDemand, ArrowHead,
BasicMotions, JapaneseVowels, JapaneseVowels_eq and others ship there as `<name>_TRAIN.ts` and
`<name>_TEST.ts`. A path is a folder holding such a pair or one of the two files, in any of the
formats `read_series_file` reads (.ts, .tsv, .csv, .npy, .npz); or a single file (or a folder holding
one), which has no test split: the task then holds out a share of it.
"""
from __future__ import annotations

import importlib.metadata
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..errors import DataError
from .augment import resample_to
from .raw import RawSeries
from .read import SERIES_SUFFIXES, read_series_file

__all__ = ["SeriesDataset", "SeriesPreprocess", "find_series_files", "load_series_data", "load_series_dataset",
           "load_series_splits", "looks_like_series"]

SPLIT_TAGS = {"train": "TRAIN", "test": "TEST"}


@dataclass
class SeriesDataset:
    """values: float32 (N, C, T), zero past each series' end; lengths: int64 (N,); labels: int64 (N,)."""

    values: Tensor
    lengths: Tensor
    labels: Tensor
    classes: list[str]
    name: str

    def __len__(self) -> int:
        return int(self.values.shape[0])

    @property
    def channels(self) -> int:
        return int(self.values.shape[1])

    @property
    def length(self) -> int:
        return int(self.values.shape[2])

    def head(self, n: int) -> "SeriesDataset":
        return SeriesDataset(self.values[:n], self.lengths[:n], self.labels[:n], self.classes, self.name)

    def take(self, index: Tensor) -> "SeriesDataset":
        """The series at `index`, with every class (a held-out share keeps the names of all)."""
        return SeriesDataset(self.values[index], self.lengths[index], self.labels[index], self.classes, self.name)


def aeon_data_dir() -> Path | None:
    """aeon's bundled datasets, found from its metadata so that none of its code runs."""
    try:
        dist = importlib.metadata.distribution("aeon")
    except importlib.metadata.PackageNotFoundError:
        return None
    d = Path(str(dist.locate_file("aeon/datasets/data")))
    return d if d.is_dir() else None


def _pair_in(folder: Path, problem: str | None) -> dict[str, Path] | None:
    """{split: file} for `problem` in `folder` (.ts preferred, then .tsv, .csv, .npz, .npy); problem None:
    the folder's only complete pair, else its only series file (no test split), else None."""
    found: dict[str, dict[str, Path]] = {}
    files = [p for p in sorted(folder.iterdir()) if p.is_file()] if folder.is_dir() else []
    for suffix in SERIES_SUFFIXES:  # the preferred suffix first: setdefault keeps it
        for p in files:
            for split, tag in SPLIT_TAGS.items():
                end = f"_{tag}{suffix}"
                if p.name.upper().endswith(end.upper()):
                    found.setdefault(p.name[: -len(end)], {}).setdefault(split, p)
    if problem is not None:
        return found.get(problem)
    complete = {k: v for k, v in found.items() if len(v) == 2}
    if len(complete) == 1:
        return next(iter(complete.values()))
    if folder.name in complete:
        return complete[folder.name]
    if complete:
        raise DataError(f"{folder} holds several problems {sorted(complete)[:8]}; pass one of their _TRAIN files")
    single = [p for p in files if p.suffix.lower() in SERIES_SUFFIXES]
    if len(single) == 1:
        return _single(single[0])
    if single:
        raise DataError(f"{folder} holds {len(single)} series files and no _TRAIN/_TEST pair "
                        f"({', '.join(p.name for p in single[:6])}); expected one file, or a pair: pass the file to "
                        f"train on")
    return None


def _single(path: Path) -> dict[str, Path]:
    """A file without its pair: it is the training data (the task holds out a share). A _TEST file
    alone is refused: what is named a test split should not be trained on without saying so."""
    stem = path.name[: -len(path.suffix)]
    if stem.upper().endswith("_TEST"):
        other = path.with_name(f"{stem[:-5]}_TRAIN{path.suffix}")
        raise DataError(f"{path}: a test split without its training split {other.name}; expected the pair, or "
                        f"rename the file to train on it alone")
    return {"train": path}


def find_series_files(data: str) -> dict[str, Path]:
    """The files of `data`: {"train", "test"} for a pair (a dataset name, a folder holding a pair, or
    either file of one); {"train"} alone for a single file or a folder holding one."""
    path = Path(data).expanduser()
    if path.is_file():
        stem, suffix = path.name[: -len(path.suffix)], path.suffix
        if suffix.lower() not in SERIES_SUFFIXES:
            raise DataError(f"{path}: unknown series format {suffix!r}; expected a {', '.join(SERIES_SUFFIXES)} file "
                            f"(or a _TRAIN/_TEST pair of them)")
        for tag in SPLIT_TAGS.values():
            if stem.upper().endswith("_" + tag):
                base = stem[: -len(tag) - 1]
                pair = {s: path.with_name(f"{base}_{t}{suffix}") for s, t in SPLIT_TAGS.items()}
                if all(p.is_file() for p in pair.values()):
                    return pair
        return _single(path)
    if path.is_dir():
        pair = _pair_in(path, None)
        if pair is None:
            raise DataError(f"{path} holds no series file; expected a <problem>_TRAIN/_TEST pair or one file "
                            f"({', '.join(SERIES_SUFFIXES)})")
        return pair
    looked = []
    env = os.environ.get("ANYFORMER_DATA")
    roots = ([("$ANYFORMER_DATA", Path(env).expanduser())] if env else []) + [("aeon", aeon_data_dir())]
    for label, root in roots:
        if root is None:
            looked.append("aeon (not installed: pip install 'anyformer[series]')")
            continue
        # aeon keeps variants beside the original: JapaneseVowels/JapaneseVowels_eq_TRAIN.ts.
        for folder in dict.fromkeys((root / data, root / data.split("_")[0])):
            pair = _pair_in(folder, data)
            if pair is not None and len(pair) == 2:
                return pair
        looked.append(f"{label} {root}")
    raise DataError(f"series dataset {data!r} not found: looked in {', '.join(looked)}; expected a name such as "
                    f"GunPoint, or a folder or file path holding <problem>_TRAIN.ts and <problem>_TEST.ts")


def _stack(raw: RawSeries, classes: list[str], where: Path) -> SeriesDataset:
    lengths = [s.shape[1] for s in raw.series]
    c = raw.series[0].shape[0]
    values = np.zeros((len(raw.series), c, max(lengths)), dtype=np.float32)
    for i, s in enumerate(raw.series):
        values[i, :, : s.shape[1]] = s
    index = {name: i for i, name in enumerate(classes)}
    unknown = sorted({l for l in raw.labels if l not in index})
    if unknown:
        raise DataError(f"{where}: class label(s) {unknown[:8]} do not occur in the training split; expected "
                        f"one of {classes[:12]}")
    return SeriesDataset(torch.from_numpy(values), torch.tensor(lengths, dtype=torch.int64),
                         torch.tensor([index[l] for l in raw.labels], dtype=torch.int64), classes, raw.name)


def _class_names(raw: RawSeries) -> list[str]:
    """The header's declared order; else the labels sorted (as numbers where all are numbers)."""
    if raw.declared:
        return list(dict.fromkeys(raw.declared))
    names = sorted(set(raw.labels))
    try:
        return sorted(names, key=float)
    except ValueError:
        return names


def load_series_data(data: str, label_column: str | None = None) -> tuple[SeriesDataset, SeriesDataset | None]:
    """(train, test) of `data`, with the classes named as the training file names them; test is None
    where the data is a single file. `label_column` names a CSV's label column."""
    files = find_series_files(data)
    train_raw = read_series_file(files["train"], label_column)
    classes = _class_names(train_raw)
    train = _stack(train_raw, classes, files["train"])
    if "test" not in files:
        return train, None
    test = _stack(read_series_file(files["test"], label_column), classes, files["test"])
    if train.channels != test.channels:
        raise DataError(f"{files['test']}: {test.channels} channels, but the training split has {train.channels}")
    return train, test


def load_series_splits(data: str) -> tuple[SeriesDataset, SeriesDataset]:
    """(train, test) of `data`, which must have a test split (an archive pair)."""
    train, test = load_series_data(data)
    if test is None:
        raise DataError(f"{data}: a single file, without a test split; expected a _TRAIN/_TEST pair")
    return train, test


def looks_like_series(path: Path) -> bool:
    """Cheap, by names alone (nothing is read): a file with a series suffix (.ts, .tsv, .csv, .npy, .npz),
    a folder holding one directly, or a name of an archive dataset found as `find_series_files` finds it."""
    path = Path(path).expanduser()
    if path.is_file():
        return path.suffix.lower() in SERIES_SUFFIXES
    if path.is_dir():
        return any(p.is_file() and p.suffix.lower() in SERIES_SUFFIXES for p in path.iterdir())
    if path.exists() or len(path.parts) != 1:
        return False
    try:
        find_series_files(str(path))
    except DataError:
        return False
    return True


def load_series_dataset(data: str, split: str) -> SeriesDataset:
    if split not in SPLIT_TAGS:
        raise ValueError(f"unknown split {split!r}; expected one of {tuple(SPLIT_TAGS)}")
    return load_series_splits(data)[0 if split == "train" else 1]


def valid_mask(lengths: Tensor, length: int) -> Tensor:
    """(N, T) bool, True at the time steps each series has."""
    return torch.arange(length, device=lengths.device)[None] < lengths[:, None]


@dataclass
class SeriesPreprocess:
    """Per-channel standardisation with the training series' statistics (over the steps they have),
    saved in config.json's data section like the images' mean and std. Padding stays zero.

    `per_series`: then each channel of each series is also standardised by its own mean and standard
    deviation (z-normalisation, the UCR archive's practice; the instance normalisation of PatchTST,
    Nie et al. 2023), so a series' offset and scale no longer tell its class."""

    mean: list[float]
    std: list[float]
    per_series: bool = False

    @classmethod
    def from_dataset(cls, ds: SeriesDataset, per_series: bool = False) -> "SeriesPreprocess":
        m = valid_mask(ds.lengths, ds.length)[:, None].expand_as(ds.values)
        v = ds.values.double().masked_fill(~m, 0)
        n = m.sum((0, 2)).clamp_min(1)
        mean = v.sum((0, 2)) / n
        var = ((v - mean[None, :, None]) ** 2).masked_fill(~m, 0).sum((0, 2)) / n
        # A constant channel keeps unit scale rather than dividing by zero.
        std = torch.where(var.sqrt() > 1e-8, var.sqrt(), torch.ones_like(var))
        return cls(mean.float().tolist(), std.float().tolist(), per_series)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "series-standardise", "mean": self.mean, "std": self.std, "per_series": self.per_series}

    @classmethod
    def from_info(cls, info: dict[str, Any]) -> "SeriesPreprocess":
        pre = info.get("preprocess") or {}
        if pre.get("kind") != "series-standardise":
            raise ValueError(f"the run's data section has no series normalisation (got {pre.get('kind')!r}); "
                             f"expected a run written by `anyformer train series`")
        # Runs saved before per-series normalisation existed were standardised per channel only.
        return cls(list(pre["mean"]), list(pre["std"]), bool(pre.get("per_series", False)))

    def __call__(self, values: Tensor, lengths: Tensor) -> Tensor:
        """(B, C, T) raw -> standardised, zero past each series' length."""
        mean = torch.tensor(self.mean, dtype=values.dtype, device=values.device)[None, :, None]
        std = torch.tensor(self.std, dtype=values.dtype, device=values.device)[None, :, None]
        keep = valid_mask(lengths.to(values.device), values.shape[-1])[:, None]
        out = ((values - mean) / std) * keep
        return standardise_each(out, lengths) if self.per_series else out


def standardise_each(values: Tensor, lengths: Tensor) -> Tensor:
    """Each channel of each series (B, C, T) to mean 0 and standard deviation 1 over its own steps
    (a constant one to 0), zero past its length."""
    keep = valid_mask(lengths.to(values.device), values.shape[-1])[:, None].to(values.dtype)
    n = lengths.to(values.device).clamp_min(1)[:, None, None].to(values.dtype)
    mean = (values * keep).sum(-1, keepdim=True) / n
    sd = ((((values - mean) * keep) ** 2).sum(-1, keepdim=True) / n).sqrt()
    return (values - mean) / torch.where(sd > 1e-8, sd, torch.ones_like(sd)) * keep


def fit_to_model(raw: Tensor, length: int, pre: SeriesPreprocess) -> tuple[Tensor, Tensor, str | None]:
    """One series (1, C, T) as a model of `length` steps reads it: (raw, standardised, warning). A longer
    series is resampled down to `length` (as the test split's longer series are), with a warning
    saying so; a shorter one is read as it is, its padding masked by the model."""
    warning = None
    if raw.shape[-1] > length:
        warning = f"{raw.shape[-1]} steps, longer than the {length} the model was trained on: resampled to {length}"
        raw = resample_to(raw, torch.tensor([raw.shape[-1]]), length)
    return raw, pre(raw, torch.tensor([raw.shape[-1]])), warning
