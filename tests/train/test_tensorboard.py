"""`--log tensorboard`: the values of metrics.jsonl, also as TensorBoard scalars in RUN/tensorboard/."""
from __future__ import annotations

import pytest

from anyformer.train import TrainConfig
from anyformer.train.distributed import Distributed
from anyformer.train.rundir import RunDir


def read_scalars(folder) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@pytest.mark.slow
def test_tensorboard_holds_what_metrics_jsonl_holds(tmp_path):
    run = RunDir(tmp_path / "run", Distributed(), log="tensorboard")
    run.prepare(resume=False)
    lines = [{"step": 10, "epoch": 0.5, "train_loss": 2.25, "eval_accuracy": 0.5, "lr": 1e-3, "time": 1.5},
             {"step": 20, "epoch": 1.0, "train_loss": 1.125, "eval_accuracy": 0.75, "lr": 5e-4, "time": 3.0}]
    for line in lines:
        run.append_metrics(line)
    run.finish({"test_accuracy": 0.75}, lambda d: None)
    assert run.read_metrics() == lines
    scalars = read_scalars(tmp_path / "run" / "tensorboard")
    assert sorted(scalars) == ["epoch", "eval_accuracy", "lr", "time", "train_loss"]
    for key in scalars:
        assert [s for s, _ in scalars[key]] == [10, 20]
        assert [v for _, v in scalars[key]] == pytest.approx([line[key] for line in lines], rel=1e-6)


def test_jsonl_alone_writes_no_tensorboard_folder(tmp_path):
    run = RunDir(tmp_path / "run", Distributed())
    run.prepare(resume=False)
    run.append_metrics({"step": 1, "train_loss": 1.0})
    assert not (tmp_path / "run" / "tensorboard").exists()


def test_log_is_checked_in_one_line():
    assert TrainConfig(log="tensorboard").log == "tensorboard"
    with pytest.raises(ValueError, match=r"unknown log 'wandb'; expected one of \('jsonl', 'tensorboard'\)"):
        TrainConfig(log="wandb")


def test_missing_tensorboard_is_one_line_naming_the_extra(tmp_path, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if not installed
    with pytest.raises(ImportError, match=r'--log tensorboard needs the tensorboard package.*anyformer\[tensorboard\]'):
        RunDir(tmp_path / "run", Distributed(), log="tensorboard")
