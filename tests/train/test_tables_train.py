"""`anyformer train --data table.csv` end to end: the task derived and said, classes and a number out,
the held-out rows listed, eval from elsewhere, predict on new rows, the baseline, same seed same bits,
and every refusal in one line with nothing written."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import anyformer as af
from anyformer.cli import main

pytestmark = pytest.mark.slow
FAST = ["--plan", "stock", "--no-progress", "--no-plots"]


def classes_csv(path: Path, n: int = 160, seed: int = 0) -> Path:
    """A table as people have one: numbers with gaps, words, yes/no, dates, an id, free text with commas
    and line breaks inside quotes; the class follows `size` and `colour`."""
    rng = np.random.default_rng(seed)
    size = rng.normal(10, 3, n)
    colour = rng.choice(["red", "green", "blue"], n)
    label = np.where(size > 11, "big", np.where(colour == "red", "red-small", "small"))
    frame = pd.DataFrame({
        "id": [f"c{i:04d}" for i in range(n)],
        "size": np.round(size, 2), "colour": colour, "member": rng.choice(["yes", "no"], n),
        "joined": pd.date_range("2021-01-01", periods=n, freq="3D").strftime("%Y-%m-%d"),
        "note": [f"said, on line one\nand on line two: {i} things about item {i * 7}" for i in range(n)],
        "label": label})
    frame.loc[::9, "size"] = np.nan
    frame.loc[::13, "colour"] = None
    frame.to_csv(path, index=False)
    return path


def numbers_csv(path: Path, n: int = 200, seed: int = 1) -> Path:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 10, n)
    kind = rng.choice(["a", "b"], n)
    price = 1000 + 250 * x + np.where(kind == "a", 500, 0) + rng.normal(0, 50, n)
    pd.DataFrame({"area": np.round(x, 3), "kind": kind, "price": np.round(price, 2)}).to_csv(path, index=False)
    return path


def train(data: Path, out: Path, *extra: str, steps: int = 40) -> int:
    return main(["train", "--data", str(data), "--out", str(out), "--max-steps", str(steps), *FAST, *extra])


def test_a_table_of_classes_trains_and_says_what_it_read(tmp_path, capsys):
    data = classes_csv(tmp_path / "shop.csv")
    assert train(data, tmp_path / "run") == 0
    out = capsys.readouterr().out
    assert ("derived: task = table: a table of 160 rows: 1 number column, 2 category columns, 1 date column, "
            "31 missing cells; target label: 3 classes") in out
    assert "derived: skipped = 'id' (an id (a different value in every row)); 'note' (free text" in out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["eval_split"] == "validation" and 0 <= summary["val_accuracy"] <= 1
    meta = json.loads((tmp_path / "run" / "config.json").read_text())
    assert meta["family"] == "table" and meta["data"]["kind"] == "table"
    held = [int(l) for l in (tmp_path / "run" / "heldout.txt").read_text().splitlines() if not l.startswith("#")]
    assert len(held) == meta["data"]["test_examples"] == 32 and all(1 <= r <= 160 for r in held)


def test_eval_from_elsewhere_scores_the_same_rows_and_predict_answers_each_row(tmp_path, capsys, monkeypatch):
    data = classes_csv(tmp_path / "shop.csv")
    assert train(data, tmp_path / "run") == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    capsys.readouterr()
    monkeypatch.chdir(tmp_path.parent)
    assert main(["eval", str(tmp_path / "run")]) == 0
    assert json.loads(capsys.readouterr().out)["eval_accuracy"] == pytest.approx(summary["val_accuracy"], abs=1e-6)

    new = pd.read_csv(data).drop(columns=["label"]).head(3)
    new.loc[0, "colour"] = "purple"  # a colour training never saw
    new.to_csv(tmp_path / "new.csv", index=False)
    assert main(["predict", str(tmp_path / "run"), str(tmp_path / "new.csv")]) == 0
    captured = capsys.readouterr()
    lines = captured.out.strip().splitlines()
    assert lines[0] == "file,row,label,probability" and len(lines) == 4
    assert all(l.split(",")[2] in ("big", "small", "red-small") for l in lines[1:])
    assert "1 cells hold categories the training rows did not have, read as unknown: 'colour' (1)" in captured.err

    run = af.open_run(tmp_path / "run")
    frame = run.predict(pd.read_csv(data).head(5))
    assert list(frame.columns) == ["label", "probability", "p(big)", "p(red-small)", "p(small)"]
    assert np.allclose(frame[["p(big)", "p(red-small)", "p(small)"]].sum(axis=1), 1, atol=1e-5)


def test_eval_on_other_rows_matches_columns_by_name_and_refuses_a_missing_one(tmp_path, capsys):
    data = classes_csv(tmp_path / "shop.csv")
    assert train(data, tmp_path / "run") == 0
    other = pd.read_csv(classes_csv(tmp_path / "more.csv", 50, seed=9))
    other = other[["label", "member", "colour", "size", "joined"]].rename(columns={"size": "SIZE"})
    other.to_csv(tmp_path / "other.csv", index=False)  # other order, a name in other case, id and note gone
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run"), "--data", str(tmp_path / "other.csv")]) == 0
    scored = json.loads(capsys.readouterr().out)
    run = af.open_run(tmp_path / "run")
    predicted = run.predict(tmp_path / "other.csv")["label"]
    assert scored["eval_accuracy"] == pytest.approx(float((predicted == other["label"]).mean()), abs=1e-9)
    other.drop(columns=["colour"]).to_csv(tmp_path / "less.csv", index=False)
    assert main(["eval", str(tmp_path / "run"), "--data", str(tmp_path / "less.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "less.csv: no column 'colour', which the run reads" in err[0]


def test_a_number_is_predicted_and_reported_in_its_own_units(tmp_path, capsys):
    data = numbers_csv(tmp_path / "houses.csv")
    assert train(data, tmp_path / "run", "--label-column", "price", steps=300) == 0
    out = capsys.readouterr().out
    assert "target price: a number (200 values; --task classify to read them as classes)" in out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    # Scored again by hand from the run's predictions on its held-out rows, in dollars.
    rows = [int(l) - 1 for l in (tmp_path / "run" / "heldout.txt").read_text().splitlines() if not l.startswith("#")]
    held = pd.read_csv(data).iloc[rows]
    predicted = af.open_run(tmp_path / "run").predict(held.drop(columns=["price"]))["price"].to_numpy()
    err = predicted - held["price"].to_numpy()
    assert summary["val_rmse"] == pytest.approx(float(np.sqrt((err ** 2).mean())), rel=1e-4)
    assert summary["val_mae"] == pytest.approx(float(np.abs(err).mean()), rel=1e-4)
    r2 = 1 - (err ** 2).sum() / ((held["price"] - held["price"].mean()) ** 2).sum()
    assert summary["val_r2"] == pytest.approx(float(r2), abs=1e-4) and summary["val_r2"] > 0.5


def test_task_overrides_what_the_target_s_cells_suggest(tmp_path, capsys):
    frame = pd.DataFrame({"x": np.arange(60) * 1.5, "grade": np.arange(60) % 3 + 1})
    frame.to_csv(tmp_path / "g.csv", index=False)
    assert main(["train", "--data", str(tmp_path / "g.csv"), "--label-column", "grade", "--out", str(tmp_path / "a"),
                 "--max-steps", "40", *FAST]) == 0
    assert "target grade: 3 classes; --task regress to predict it as a number" in capsys.readouterr().out
    assert main(["train", "--data", str(tmp_path / "g.csv"), "--label-column", "grade", "--task", "regress",
                 "--out", str(tmp_path / "b"), "--max-steps", "40", *FAST]) == 0
    assert "target grade: a number (--task regress; 3 values)" in capsys.readouterr().out
    assert "val_r2" in json.loads((tmp_path / "b" / "summary.json").read_text())


def test_a_train_and_test_pair_is_scored_on_the_test_file(tmp_path, capsys):
    folder = tmp_path / "shop"
    folder.mkdir()
    classes_csv(folder / "shop_TRAIN.csv", 120, seed=2)
    classes_csv(folder / "shop_TEST.csv", 40, seed=3)
    assert train(folder, tmp_path / "run") == 0
    assert "test accuracy" in capsys.readouterr().out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["eval_split"] == "test" and "test_accuracy" in summary
    assert (tmp_path / "run" / "heldout.txt").read_text().startswith("# scored on every row of")


def test_the_same_seed_gives_the_same_bits(tmp_path):
    data = classes_csv(tmp_path / "shop.csv")
    assert train(data, tmp_path / "a", "--seed", "3") == 0
    assert train(data, tmp_path / "b", "--seed", "3") == 0
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
    assert train(data, tmp_path / "c", "--seed", "4") == 0
    assert (tmp_path / "a" / "model.safetensors").read_bytes() != (tmp_path / "c" / "model.safetensors").read_bytes()


def test_the_baseline_is_fitted_on_the_same_split_and_recorded(tmp_path, capsys):
    pytest.importorskip("lightgbm", reason="the baseline extra (pip install 'anyformer[baseline]') is not installed")
    data = numbers_csv(tmp_path / "houses.csv")
    assert train(data, tmp_path / "run", "--label-column", "price", "--baseline", steps=300) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("baseline:"))
    assert "LightGBM" in line and "val r2" in line and "against anyformer's" in line
    base = json.loads((tmp_path / "run" / "summary.json").read_text())["baseline"]
    assert set(base) >= {"method", "val_r2", "val_rmse", "val_mae", "seconds"} and base["val_r2"] > 0.5


def refusal(tmp_path: Path, capsys, data: Path, *extra: str) -> str:
    out = tmp_path / "refused"
    assert train(data, out, *extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("anyformer: error: "), err
    assert not out.exists()
    return err[0]


def test_tables_that_cannot_train_are_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "none.csv").write_text("a,b\n1.5,x\n2.5,y\n")
    assert "no target column among ['a', 'b']" in refusal(tmp_path, capsys, tmp_path / "none.csv")
    (tmp_path / "one.csv").write_text("a,label\n" + "".join(f"{i}.5,same\n" for i in range(20)))
    assert "holds one class only ('same', 20 rows)" in refusal(tmp_path, capsys, tmp_path / "one.csv")
    (tmp_path / "mixed.csv").write_text("a,label\n" + "".join(f"{i}.5,{'xy'[i % 2]}\n" for i in range(30)) + "oops,x\n")
    assert "column 'a' mixes numbers" in refusal(tmp_path, capsys, tmp_path / "mixed.csv")
    (tmp_path / "empty.csv").write_text("a,label\n")
    assert "empty.csv: a header and no rows" in refusal(tmp_path, capsys, tmp_path / "empty.csv")
    (tmp_path / "blank.csv").write_text("")
    assert "blank.csv: empty" in refusal(tmp_path, capsys, tmp_path / "blank.csv")
