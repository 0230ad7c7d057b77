"""The choosing scripts' ranks (benchmarks/choosing.py): the rule written before their first rounds says that ties
share the average rank, and means of the same counts taken in another order are ties."""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from choosing import ranks  # noqa: E402


def test_means_of_the_same_counts_tie_and_share_the_average_rank():
    # Image round 37's textures: 635 + 640 and 637 + 638 of 645 a fold, the same 1275 of 1290 right.
    base = statistics.fmean([100 * (635 / 645), 100 * (640 / 645)])  # as the scripts score: 100 x accuracy
    other = statistics.fmean([100 * (637 / 645), 100 * (638 / 645)])
    assert base != other  # the last bits differ ...
    assert ranks({"base": base, "other": other}) == {"base": 1.5, "other": 1.5}  # ... the rule sees a tie


def test_ranks_order_by_score_and_average_over_ties():
    assert ranks({"a": 90.0, "b": 95.0, "c": 80.0}) == {"b": 1.0, "a": 2.0, "c": 3.0}
    assert ranks({"a": 90.0, "b": 95.0, "c": 90.0, "d": 70.0}) == {"b": 1.0, "a": 2.5, "c": 2.5, "d": 4.0}
    assert ranks({"only": 50.0}) == {"only": 1.0}
