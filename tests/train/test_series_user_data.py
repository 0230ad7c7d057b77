"""`anyformer train series --data` on the files users have: a single CSV trains with a seeded,
stratified share held out and reported as validation; a pair is scored on its test file; a finished
run is scored on other data with its own classes; bad data is refused in one line before anything
is written."""
import json
import math

import numpy as np
import pytest
import torch

from anyformer.cli import main
from anyformer.data import DataError
from anyformer.runs import open_run
from anyformer.train import TrainConfig, recipe_config
from anyformer.train.distributed import Distributed
from anyformer.train.series import SeriesClassification, derive
from anyformer.train.tasks import make_task

CLASSES = ("down", "flat", "up")


def series_rows(n_per_class: int, seed: int, classes=CLASSES, width: int = 24) -> list[tuple[str, list[float]]]:
    """Labelled ramps of 16 to `width` steps: each class a slope, the first value the row's number so
    that every series is told apart from every other."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_per_class * len(classes)):
        label = classes[i % len(classes)]
        slope = {"down": -1.0, "up": 1.0}.get(label, 0.0)
        t = np.arange(int(rng.integers(16, width + 1)))
        rows.append((label, [float(i)] + list(slope * t[1:] / 8 + rng.normal(0, 0.05, len(t) - 1))))
    return rows


def wide_csv(path, rows, width: int = 24):
    """label,t0..: shorter series end in empty cells."""
    lines = ["label," + ",".join(f"t{j}" for j in range(width))]
    lines += [f"{label}," + ",".join([f"{v:.6f}" for v in values] + [""] * (width - len(values)))
              for label, values in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def train_cli(data, out, *extra):
    return main(["train", "series", "--data", str(data), "--out", str(out), "--max-steps", "5", "--threads", "1",
                 "--plan", "stock", "--no-progress", "--no-plots", *extra])


@pytest.fixture(scope="module")
def csv_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("series-csv")
    data = wide_csv(root / "ramps.csv", series_rows(10, seed=0))
    assert train_cli(data, root / "run") == 0
    return root, data, root / "run"


def test_a_single_csv_trains_and_reports_its_held_out_share_as_validation(csv_run, capsys):
    root, data, out = csv_run
    info = json.loads((out / "config.json").read_text())["data"]
    summary = json.loads((out / "summary.json").read_text())
    # 10 series a class, 20% held out: 2 of each class for validation, 8 to train.
    assert info["eval_split"] == "validation" and info["val_fraction"] == pytest.approx(0.2)
    assert (info["train_examples"], info["test_examples"]) == (24, 6) and info["dataset"] == str(data)
    assert info["classes"] == list(CLASSES) and info["derived"]["batch"] == 6  # a quarter of 24
    assert summary["eval_split"] == "validation" and "val_accuracy" in summary and "test_accuracy" not in summary
    # `anyformer eval` scores the very same held-out share.
    assert main(["eval", str(out)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["eval_accuracy"] == pytest.approx(summary["val_accuracy"], abs=1e-6)


def first_values(ds) -> set[float]:
    return {round(float(v), 3) for v in ds.values[:, 0, 0]}


def test_the_held_out_share_is_stratified_disjoint_and_drawn_by_the_seed_alone(tmp_path):
    data = wide_csv(tmp_path / "r.csv", series_rows(10, seed=1))
    make = lambda **kw: SeriesClassification(recipe_config("series", data=str(data), threads=1, **kw),
                                             torch.device("cpu"))
    a, again, other = make(seed=0), make(seed=0), make(seed=1)
    assert a.eval_split == "validation" and len(a.train) + len(a.test) == 30
    assert not first_values(a.train) & first_values(a.test)  # no series on both sides
    assert torch.bincount(a.test.labels).tolist() == [2, 2, 2]  # each class gives its share
    assert torch.equal(a.test.values, again.test.values) and torch.equal(a.train.values, again.train.values)
    assert first_values(other.test) != first_values(a.test)
    # The statistics are the training share's alone.
    train_share = a.train.values[:, 0][torch.arange(a.train.length)[None] < a.train.lengths[:, None]]
    assert a.preprocess.mean[0] == pytest.approx(float(train_share.double().mean()), abs=1e-5)
    wider = make(val_fraction=0.4)
    assert torch.bincount(wider.test.labels).tolist() == [4, 4, 4] and wider.run_info()["val_fraction"] == 0.4


def test_a_csv_pair_is_scored_on_its_test_file(tmp_path):
    wide_csv(tmp_path / "R_TRAIN.csv", series_rows(4, seed=2))
    wide_csv(tmp_path / "R_TEST.csv", series_rows(2, seed=3))
    task = SeriesClassification(recipe_config("series", data=str(tmp_path), threads=1), torch.device("cpu"))
    info = task.run_info()
    assert task.eval_split == "test" and info["eval_split"] == "test" and info["val_fraction"] is None
    assert (info["train_examples"], info["test_examples"]) == (12, 6)


def test_a_long_npz_and_tsv_single_file_train_too(tmp_path):
    rows = series_rows(4, seed=4)
    lines = ["id,step,value,class"] + [f"s{i},{t},{v},{label}" for i, (label, values) in enumerate(rows)
                                       for t, v in enumerate(values)]
    (tmp_path / "long.csv").write_text("\n".join(lines) + "\n")
    x = np.full((len(rows), 24), np.nan)
    for i, (_, values) in enumerate(rows):
        x[i, :len(values)] = values
    np.savez(tmp_path / "r.npz", X=x, y=np.array([label for label, _ in rows]))
    (tmp_path / "r.tsv").write_text("\n".join(f"{CLASSES.index(l)}\t" + "\t".join(map(str, v)) for l, v in rows))
    for name in ("long.csv", "r.npz", "r.tsv"):
        task = SeriesClassification(recipe_config("series", data=str(tmp_path / name), threads=1), torch.device("cpu"))
        assert task.eval_split == "validation" and len(task.train) + len(task.test) == 12, name


def test_eval_on_other_data_uses_the_runs_classes(csv_run, tmp_path):
    _, _, out = csv_run
    run = open_run(out, prepared=True)
    model, meta = run.model, run.meta

    def scored(data):
        cfg = TrainConfig.from_dict({**meta["train"], "data": str(data), "limit_train": 1})
        task = make_task(cfg, torch.device("cpu"), info=meta["data"])
        return task, task.evaluate(model, Distributed())

    # A single file of two of the run's three classes, in another order: all of it is scored, and its
    # labels are the run's class indices (its own would be down=0, up=1).
    one = wide_csv(tmp_path / "more.csv", [r for r in series_rows(3, seed=5) if r[0] != "flat"][::-1])
    task, result = scored(one)
    assert len(task.test) == 6 and task.classes == list(CLASSES)
    assert result["confusion"].sum(1).tolist() == [3, 0, 3]  # rows: down, flat, up
    model.eval()  # evaluate() leaves the model in training mode
    with torch.no_grad():
        logits = model(task.preprocess(task.test.values, task.test.lengths), task.test.lengths)
    expected = (logits.argmax(-1) == torch.tensor([2, 0] * 3)).float().mean().item()
    assert result["eval_accuracy"] == pytest.approx(expected, abs=1e-6)

    # A pair: its test file only.
    wide_csv(tmp_path / "P_TRAIN.csv", series_rows(2, seed=6))
    wide_csv(tmp_path / "P_TEST.csv", series_rows(1, seed=7))
    task, result = scored(tmp_path / "P_TRAIN.csv")
    assert len(task.test) == 3 and int(result["confusion"].sum()) == 3

    strange = wide_csv(tmp_path / "strange.csv", series_rows(2, seed=8, classes=("up", "sideways")))
    with pytest.raises(DataError, match=r"strange\.csv: label\(s\) \['sideways'\] are not among the run's classes "
                                        r"\['down', 'flat', 'up'\]"):
        scored(strange)
    np.savez(tmp_path / "two.npz", X=np.ones((4, 2, 20)), y=np.array(["up", "down"] * 2))
    with pytest.raises(DataError, match=r"two\.npz: 2 channel\(s\); the run was trained on 1"):
        scored(tmp_path / "two.npz")


def refusal(tmp_path, capsys, data, *extra) -> str:
    out = tmp_path / "run"
    assert train_cli(data, out, *extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("anyformer: error: "), err
    assert not out.exists()  # refused before anything is written
    return err[0]


def test_bad_data_is_refused_in_one_line_and_nothing_is_written(tmp_path, capsys):
    one_class = wide_csv(tmp_path / "one.csv", series_rows(10, seed=0, classes=("up",)))
    assert "holds one class only ('up', 10 examples)" in refusal(tmp_path, capsys, one_class)

    rows = series_rows(10, seed=0, classes=("up", "down")) + series_rows(2, seed=1, classes=("flat",))
    small = wide_csv(tmp_path / "small.csv", rows)
    assert ("class 'flat' has 2 examples, so a held-out share of 50% gives it 1 for validation"
            in refusal(tmp_path, capsys, small))

    mixed = wide_csv(tmp_path / "mixed.csv", [("1", [0.0, 1.0]), ("2", [1.0, 2.0]), ("three", [2.0, 3.0])])
    assert "the labels mix numbers (1, 2) and words ('three')" in refusal(tmp_path, capsys, mixed)

    (tmp_path / "empty.csv").write_text("")
    assert "empty.csv: empty; expected a header line" in refusal(tmp_path, capsys, tmp_path / "empty.csv")

    (tmp_path / "nolabel.csv").write_text("kind,a,b\nx,1,2\ny,3,4\n")
    assert ("no label column in the header ['kind', 'a', 'b']; expected a column named label, class, target, y or "
            "category, or pass --label-column NAME") in refusal(tmp_path, capsys, tmp_path / "nolabel.csv")
    assert "no column 'species' (--label-column)" in refusal(tmp_path, capsys, tmp_path / "nolabel.csv",
                                                             "--label-column", "species")

    (tmp_path / "my.json").write_text("{}")
    message = refusal(tmp_path, capsys, tmp_path / "my.json")
    assert "unknown series format '.json'; expected a .ts, .tsv, .csv, .npy, .npz file" in message


def test_a_label_column_named_on_the_command_line(tmp_path, capsys):
    rows = series_rows(10, seed=0)
    lines = ["kind," + ",".join(f"t{j}" for j in range(24))]
    lines += [f"{label}," + ",".join(f"{v:.5f}" for v in values) for label, values in rows]
    (tmp_path / "k.csv").write_text("\n".join(lines) + "\n")
    assert train_cli(tmp_path / "k.csv", tmp_path / "run", "--label-column", "kind") == 0
    assert "validation accuracy" in capsys.readouterr().out


def test_the_batch_is_never_more_than_a_quarter_of_the_training_series():
    for n in range(1, 400):
        batch = derive(n, 1, 100, "across", batch_cap=64)["batch"]
        assert 1 <= batch <= min(64, math.ceil(n / 4)), n
    assert [derive(n, 1, 100, "across", 64)["batch"] for n in (4, 12, 20, 31, 32, 36, 50)] == [1, 3, 5, 8, 8, 9, 13]
