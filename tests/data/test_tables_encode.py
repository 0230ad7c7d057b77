"""Rows as a model's inputs, with what the training rows taught: quantiles, vocabularies, the target's
scale; new rows matched by name, unseen values and missing cells as their own tokens."""
import math
import warnings

import numpy as np
import pandas as pd
import pytest
import torch

from anyformer.data import DataError, DataWarning
from anyformer.data.tables.columns import describe_columns, describe_target
from anyformer.data.tables.encode import MISSING_INDEX, UNKNOWN_INDEX, TableEncoding, quantile_normal


def fitted(frame: pd.DataFrame, target: str = "y", task=None) -> TableEncoding:
    frame = frame.astype(str)
    return TableEncoding.fit(frame, describe_columns(frame, target, "t"), describe_target(frame[target], target, task, "t"))


def test_the_quantile_map_sends_the_training_values_to_a_standard_normal():
    rng = np.random.default_rng(0)
    x = rng.lognormal(0, 2, 5000)  # heavy-tailed: a plain standardisation would leave it skewed
    q = np.quantile(x, np.linspace(0, 1, 1000))
    z = quantile_normal(x, q)
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.05 and abs(np.median(z)) < 0.02
    assert np.all(np.diff(quantile_normal(np.sort(x), q)) >= 0)  # order kept
    assert np.isnan(quantile_normal(np.array([np.nan, 1.0]), q)[0])
    assert np.all(quantile_normal(np.array([-1e9, 1e9]), q) == quantile_normal(np.array([x.min(), x.max()]), q))
    assert np.all(quantile_normal(np.array([5.0, np.nan]), np.array([2.0, 2.0]))[:1] == 0)  # one value: the middle


def test_ties_map_to_the_middle_of_their_run():
    q = np.array([0.0, 1.0, 1.0, 1.0, 2.0])  # the value 1 spans ranks 0.25 to 0.75
    assert quantile_normal(np.array([1.0]), q)[0] == pytest.approx(0.0, abs=1e-9)


def test_categories_keep_values_seen_twice_and_read_others_and_missing_as_their_own_rows():
    frame = pd.DataFrame({"k": ["a", "a", "b", "b", "once", ""], "x": ["1.5", "2.5", "3.5", "4.5", "5.5", "6.5"],
                          "y": ["p", "q", "p", "q", "p", "q"]})
    enc = fitted(frame)
    assert enc.categories == {"k": ["a", "b"]} and enc.cardinalities == [4]
    new = pd.DataFrame({"k": ["b", "once", "never", "NA"], "x": ["1", "", "2.5", "3"], "y": ["p"] * 4})
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        rows = enc.encode(new, "new.csv")
    assert rows.categories[:, 0].tolist() == [3, UNKNOWN_INDEX, UNKNOWN_INDEX, MISSING_INDEX]
    assert math.isnan(rows.numbers[1, 0]) and not math.isnan(rows.numbers[0, 0])
    (warning,) = [w for w in said if issubclass(w.category, DataWarning)]
    assert "1 cells hold categories the training rows did not have" in str(warning.message) and "'k' (1)" in str(warning.message)


def test_integer_codes_and_yes_no_read_the_same_however_they_are_written():
    frame = pd.DataFrame({"cyl": ["4", "6", "8", "4"] * 3, "ok": ["yes", "no", "Yes", "NO"] * 3, "y": ["a", "b"] * 6})
    enc = fitted(frame)
    rows = enc.encode(pd.DataFrame({"cyl": ["6.0", "8"], "ok": ["Yes", "no"], "y": ["a", "b"]}), "n")
    assert rows.categories.tolist() == [[3, 3], [4, 2]]


def test_dates_become_a_number_a_month_and_a_weekday():
    frame = pd.DataFrame({"when": ["2024-01-31", "2024-03-02", "", "2024-07-14"] * 3, "y": ["a", "b"] * 6})
    enc = fitted(frame)
    rows = enc.encode(frame.astype(str), "t")
    assert list(enc.numbers) == ["when"] and list(enc.categories) == ["when (month)", "when (weekday)"]
    assert rows.categories[0].tolist() == [2, 4] and rows.categories[2].tolist() == [MISSING_INDEX, MISSING_INDEX]
    assert rows.numbers[0, 0] < rows.numbers[1, 0] < rows.numbers[3, 0] and math.isnan(rows.numbers[2, 0])


def test_columns_are_matched_by_name_in_any_case_and_a_missing_one_is_refused():
    frame = pd.DataFrame({"a": [str(2 * i) for i in range(12)], "b": ["u", "v"] * 6, "y": ["p", "q"] * 6})
    enc = fitted(frame)
    swapped = pd.DataFrame({"B": ["v"], "extra": ["1"], "A": ["3"], "y": ["p"]})
    assert enc.encode(swapped, "n").categories.tolist() == [[3]]
    with pytest.raises(DataError, match=r"new\.csv: no column 'b', which the run reads"):
        enc.encode(pd.DataFrame({"a": ["1"], "y": ["p"]}), "new.csv")
    with pytest.raises(DataError, match=r"new\.csv: column 'a': 'many' is not a number"):
        enc.encode(pd.DataFrame({"a": ["many"], "b": ["u"], "y": ["p"]}), "new.csv")
    with pytest.raises(DataError, match=r"class\(es\) \['r'\] of 'y' are not among the run's classes"):
        enc.encode(pd.DataFrame({"a": ["1"], "b": ["u"], "y": ["r"]}), "new.csv")


def test_a_regression_target_is_standardised_and_comes_back_in_its_units():
    y = np.linspace(100, 300, 40)
    frame = pd.DataFrame({"x": [str(3 * v) for v in range(40)], "y": [f"{v:.3f}" for v in y]})
    enc = fitted(frame)
    rows = enc.encode(frame.astype(str), "t")
    assert enc.target.task == "regress"
    assert abs(float(rows.target.mean())) < 1e-5 and abs(float(rows.target.std(unbiased=False)) - 1) < 1e-4
    assert torch.allclose(enc.target_units(rows.target), torch.tensor(y, dtype=torch.float64), atol=1e-3)


def test_an_encoding_saved_as_a_dict_encodes_alike():
    frame = pd.DataFrame({"x": [f"{v / 7:.4f}" for v in range(30)], "k": ["a", "b", "c"] * 10,
                          "when": ["2024-01-01", "2023-05-06", ""] * 10, "y": ["p", "q"] * 15})
    enc = fitted(frame)
    again = TableEncoding.from_dict(__import__("json").loads(__import__("json").dumps(enc.to_dict())))
    a, b = enc.encode(frame.astype(str), "t"), again.encode(frame.astype(str), "t")
    assert torch.equal(a.categories, b.categories) and torch.equal(a.target, b.target)
    assert torch.allclose(a.numbers, b.numbers, equal_nan=True)
