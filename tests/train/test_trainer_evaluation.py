"""An evaluation on a tiny real trainer: the metrics line of the period's means (and a new period
started), the steps' sums read first, the weight average scored where a run keeps one, the
gathered weights under FSDP, and the peak the MFU divides by, measured once."""
from __future__ import annotations

import contextlib

import pytest
import torch

from anyformer.train import perf

from .conftest import make_trainer, tiny_config


def test_an_evaluation_writes_the_periods_means_and_starts_a_new_period(trainer) -> None:
    """train_loss is the mean of the period's step losses, the rate its items over its seconds, the
    epoch the step over the steps per epoch (4 places), lr the rate of the step just taken."""
    from anyformer.train.optim import lr_at
    trainer.files.prepare(False)
    trainer.task.evaluate = lambda model, dist: {"eval_accuracy": 0.5, "confusion": torch.eye(2)}
    trainer.step, trainer.elapsed = 10, 12.3456
    trainer.sums = {"loss": 3.0, "steps": 4, "items": 100, "seconds": 0.5, "correct": 40, "count": 128}
    line = trainer.evaluate()
    assert line == {"step": 10, "epoch": 0.1587, "train_loss": 0.75, "train_accuracy": 40 / 128,
                    "eval_accuracy": 0.5, "lr": lr_at(9, 126, trainer.cfg), "images_per_s": 200.0, "time": 12.35}
    assert lr_at(9, 126, trainer.cfg) != lr_at(11, 126, trainer.cfg)
    assert trainer.sums == {} and trainer.metrics_lines == 1
    assert set(trainer.last_eval) == {"eval_accuracy", "confusion"}
    assert trainer.files.read_metrics() == [line]
    trainer.sums = {"loss": 0.6, "steps": 1}  # one step: its own loss
    assert trainer.evaluate()["train_loss"] == 0.6
    trainer.sums = {}  # no step since the last evaluation (a resumed run's final one): zeros, not a failure
    empty = trainer.evaluate()
    assert (empty["train_loss"], empty["images_per_s"]) == (0.0, 0.0)


def test_an_evaluation_needs_the_steps_read_first(trainer) -> None:
    trainer.pending.append((0, 32, [], torch.zeros(1)))
    with pytest.raises(RuntimeError, match=r"^evaluate\(\) needs the steps' sums read first \(sync\)$"):
        trainer.evaluate()


def test_an_ema_run_is_scored_on_its_average(tmp_path, mnist_slice) -> None:
    t = make_trainer(tiny_config(tmp_path, ema=0.5), mnist_slice)
    scored = []
    t.task.evaluate = lambda model, dist: scored.append(model) or {}
    t._evaluate_task()
    assert scored == [t.ema.model] and t.ema.model is not t.model


def test_the_peak_is_measured_once_for_the_runs_precision(trainer, monkeypatch) -> None:
    asked = []
    monkeypatch.setattr(perf, "peak_flops", lambda device, amp: asked.append((device, amp)) or (5e9, "measured"))
    trainer.cfg.amp = "bf16"
    assert trainer.peak.flops() == 5e9 and trainer.peak.source() == "measured" and trainer.peak.flops() == 5e9
    assert asked == [(trainer.device, "bf16")]


def test_an_evaluation_runs_on_the_gathered_weights(trainer) -> None:
    """Under FSDP each rank holds a shard; the evaluation's forwards need them whole."""
    gathered = []
    trainer.dist.gathered = lambda model: (gathered.append(model), contextlib.nullcontext())[1]
    trainer.last_eval = trainer._evaluate_task()
    assert gathered == [trainer.model] and "eval_accuracy" in trainer.last_eval
