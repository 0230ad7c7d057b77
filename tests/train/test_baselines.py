"""`--baseline` beside image and series runs (tables: tests/train/test_tables_train.py): the classical
method fitted on the run's own training examples, scored on the run's own scored examples, printed
beside the run's figure and recorded in summary.json; a task without one refused before training."""
import json

import pytest

from anyformer.cli import main
from tests.train.test_series_user_data import series_rows, wide_csv
from tests.train.test_your_data import photos

pytestmark = pytest.mark.slow
FAST = ["--max-steps", "3", "--threads", "1", "--plan", "stock", "--no-progress", "--no-plots"]


def baseline_of(run, capsys) -> tuple[str, dict]:
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("baseline:"))
    return line, json.loads((run / "summary.json").read_text())["baseline"]


def test_images_get_logistic_regression_on_their_pixels(tmp_path, capsys):
    pytest.importorskip("sklearn", reason="the baseline extra (pip install 'anyformer[baseline]') is not installed")
    folder = photos(tmp_path / "pics", [(48, 40), (40, 48)], per_class=16)  # each class leans to a colour
    assert main(["train", "--data", str(folder), "--out", str(tmp_path / "run"), "--baseline", *FAST]) == 0
    line, base = baseline_of(tmp_path / "run", capsys)
    assert "logistic regression on the pixels" in line and "against anyformer's" in line
    assert base["val_accuracy"] == 1.0 and base["seconds"] >= 0  # a colour per class: linear in the pixels


def test_series_get_minirocket(tmp_path, capsys):
    pytest.importorskip("aeon", reason="the series extra (pip install 'anyformer[series]') is not installed")
    data = wide_csv(tmp_path / "ramps.csv", series_rows(12, seed=0))
    assert main(["train", "series", "--data", str(data), "--out", str(tmp_path / "run"), "--baseline", *FAST]) == 0
    line, base = baseline_of(tmp_path / "run", capsys)
    assert "MiniRocket" in line and "val accuracy" in line
    assert base["val_accuracy"] == 1.0  # three slopes: what MiniRocket tells apart at once


def test_a_task_without_a_baseline_is_refused_before_it_trains(tmp_path, capsys):
    (tmp_path / "corpus.txt").write_text("some text to model, " * 200)
    out = tmp_path / "run"
    assert main(["train", "--data", str(tmp_path / "corpus.txt"), "--out", str(out), "--baseline", *FAST]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ("--baseline is built for tables, image classes, series and labelled text; this run's task is lm"
                                       in err[0])
    assert not out.exists()
