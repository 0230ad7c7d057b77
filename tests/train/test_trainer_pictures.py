"""A run's pictures, on a tiny real trainer: drawn from the last evaluation (of the weight average
where there is one), into the run directory asked, at the end or after every evaluation as the task
asks, from one plain CPU copy of the weights under FSDP; a failed drawing named with the directory."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from anyformer.train import outputs
from anyformer.train.distributed import Distributed

from .conftest import make_trainer, tiny_config


def test_the_pictures_are_drawn_from_the_last_evaluation_of_the_average_where_there_is_one(tmp_path,
                                                                                          mnist_slice) -> None:
    for ema in (None, 0.5):
        t = make_trainer(tiny_config(tmp_path / str(ema), ema=ema), mnist_slice)
        t.files.prepare(False)
        drawn = []
        t.task.draw = lambda model, result, run_dir: drawn.append((model, result, run_dir))
        t.last_eval = {"eval_accuracy": 0.25}
        outputs.draw(t, t.run_dir)
        assert drawn == [(t.model if ema is None else t.ema.model, {"eval_accuracy": 0.25}, t.run_dir)]


def test_a_run_resumed_after_its_last_step_evaluates_once_and_draws_from_that(tmp_path, mnist_slice) -> None:
    import dataclasses
    cfg = tiny_config(tmp_path, max_steps=1, limit_train=64, limit_eval=16)
    make_trainer(cfg, mnist_slice).run()
    t = make_trainer(dataclasses.replace(cfg, resume=True, plots=True), mnist_slice)
    drawn = []
    t.task.draw = lambda model, result, run_dir: drawn.append(result)
    t.run()
    assert t.step == 1 and len(drawn) == 1 and drawn[0] is t.last_eval and "eval_accuracy" in drawn[0]


def test_the_run_directory_is_where_the_pictures_go(trainer, tmp_path: Path) -> None:
    trainer.files.prepare(False)
    where = []
    trainer.task.draw = lambda model, result, run_dir: where.append(run_dir)
    outputs.draw(trainer, tmp_path / "elsewhere")
    assert where == [tmp_path / "elsewhere"]


def test_under_fsdp_the_plain_model_is_one_cpu_copy_of_the_gathered_weights(trainer) -> None:
    """Built once, without moving the training random state, and refilled with the weights each time."""
    trainer.dist = Distributed(fsdp=True)  # one rank: the gather is the model's own full state
    state = torch.get_rng_state()
    copy = outputs.plain_model(trainer)
    assert torch.equal(torch.get_rng_state(), state)
    assert copy is not trainer.model and type(copy) is type(trainer.model) and copy.config == trainer.model.config
    for k, v in trainer.model.state_dict().items():
        assert torch.equal(copy.state_dict()[k], v), k
    with torch.no_grad():
        next(trainer.model.parameters()).add_(1.0)
    assert outputs.plain_model(trainer) is copy
    assert torch.equal(next(copy.parameters()), next(trainer.model.parameters()))
    drawn = []  # the pictures are drawn from that copy: rank 0's shard alone is not a model
    trainer.task.draw = lambda model, results, run_dir: drawn.append(model)
    outputs.draw_on_main(trainer, trainer.run_dir)
    assert drawn == [copy]


def test_a_failed_drawing_is_named_with_the_run_directory(trainer) -> None:
    from anyformer.train.rundir import TrainingError
    trainer.files.prepare(False)

    def full(model, result, run_dir):
        raise OSError(28, "No space left on device")
    trainer.task.draw = full
    with pytest.raises(TrainingError, match=rf"^cannot draw the pictures into {trainer.run_dir}: No space left"):
        outputs.draw(trainer, trainer.run_dir)


@pytest.mark.parametrize("each", [False, True])
def test_pictures_are_drawn_at_the_end_or_at_every_evaluation_where_the_task_asks(tmp_path, mnist_slice,
                                                                                   each) -> None:
    t = make_trainer(tiny_config(tmp_path, max_steps=2, eval_every=1, limit_train=64, limit_eval=16,
                                 plots=True), mnist_slice)
    drawn = []
    t.task.draw = lambda model, result, run_dir: drawn.append((t.step, run_dir))
    if each:
        t.task.draw_each_evaluation = True  # as the flow task asks: its samples after every evaluation
    t.run()
    assert drawn == [(step, t.run_dir) for step in ([1, 2, 2] if each else [2])]
