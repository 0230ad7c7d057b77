"""TrainConfig's options that shape a run, each pinned by a test that fails when the library
ignores or inverts it (test_every_option.py's OPTION_PINS): where the run is written, its length,
its evaluations, checkpoints and resumption, its time budget, the weights it saves, and what it says
and writes."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from anyformer.train import Interrupted, TrainConfig
from anyformer.train import trainer as trainer_module
from anyformer.train.resume import extended_settings

from .conftest import interrupt_at, make_trainer
from .option_runs import checkpoints, metric_steps, short

pytestmark = pytest.mark.usefixtures("no_peak_measurement")


# ---------------------------------------------------------------- where the run is written


def test_recipe_names_the_default_run_directory_and_the_summary(tmp_path, mnist_slice, monkeypatch):
    monkeypatch.chdir(tmp_path)
    summary = make_trainer(short(tmp_path, recipe="pinned", out=None, max_steps=1), mnist_slice).run()
    assert summary["recipe"] == "pinned"
    assert json.loads((tmp_path / "runs" / "pinned" / "summary.json").read_text())["recipe"] == "pinned"


def test_out_is_where_the_run_writes(tmp_path, mnist_slice, monkeypatch):
    monkeypatch.chdir(tmp_path)  # were `out` ignored, runs/<recipe> would be made here, not in the repository
    make_trainer(short(tmp_path, out=str(tmp_path / "elsewhere"), max_steps=1), mnist_slice).run()
    assert (tmp_path / "elsewhere" / "summary.json").is_file() and not (tmp_path / "runs").exists()


def test_overwrite_replaces_a_run_that_is_otherwise_refused(tmp_path, mnist_slice):
    make_trainer(short(tmp_path, max_steps=2), mnist_slice).run()
    with pytest.raises(ValueError, match="holds a run already"):
        make_trainer(short(tmp_path, max_steps=3), mnist_slice)
    make_trainer(short(tmp_path, max_steps=3, overwrite=True), mnist_slice).run()
    assert metric_steps(tmp_path / "run") == [3]  # the first run's line is gone with it


# ---------------------------------------------------------------- the step


def test_epochs_and_max_steps_set_the_length_of_the_run(tmp_path, mnist_slice):
    assert make_trainer(short(tmp_path / "e", epochs=1.5), mnist_slice).total_steps == 15  # 10 steps an epoch
    assert make_trainer(short(tmp_path / "m", epochs=1.5, max_steps=7), mnist_slice).total_steps == 7


# ---------------------------------------------------------------- evaluations, checkpoints, resume


def test_eval_every_sets_the_steps_that_are_scored(tmp_path, mnist_slice):
    make_trainer(short(tmp_path, max_steps=6, eval_every=2), mnist_slice).run()
    assert metric_steps(tmp_path / "run") == [2, 4, 6]  # not once an epoch (10 steps): only at the end


def test_checkpoints_every_n_steps_and_only_the_latest_kept(tmp_path, mnist_slice, monkeypatch):
    trainer = make_trainer(short(tmp_path, max_steps=6, checkpoint_every=1, keep_checkpoints=3), mnist_slice)
    saved, real_save = [], trainer_module.checkpoint.save
    monkeypatch.setattr(trainer_module.checkpoint, "save", lambda t: (saved.append(t.step), real_save(t))[1])
    trainer.run()
    assert saved == [1, 2, 3, 4, 5, 6]  # the one evaluation is at the end (6 steps of a 10-step epoch)
    assert checkpoints(tmp_path / "run") == [f"step-{s:09d}.pt" for s in (4, 5, 6)]


def test_resume_continues_an_interrupted_run(tmp_path, mnist_slice):
    first = make_trainer(short(tmp_path, max_steps=6, eval_every=2), mnist_slice)
    interrupt_at(first, 4)
    with pytest.raises(Interrupted):
        first.run()
    assert metric_steps(tmp_path / "run") == [2, 4]
    summary = make_trainer(short(tmp_path, max_steps=6, eval_every=2, resume=True), mnist_slice).run()
    assert summary["resumed"] is True and summary["steps"] == 6
    assert metric_steps(tmp_path / "run") == [2, 4, 6]  # continued after step 4, not started again


def test_extended_lets_a_finished_run_continue_past_its_end(tmp_path, mnist_slice):
    make_trainer(short(tmp_path, max_steps=2), mnist_slice).run()
    asked = short(tmp_path, max_steps=4, resume=True)
    with pytest.raises(ValueError, match="--max-steps 4 \\(the run has 2\\)"):  # a plain resume keeps the length
        make_trainer(asked, mnist_slice)
    continued = TrainConfig.from_dict(extended_settings(tmp_path / "run", 4, asked.to_dict()))
    assert continued.extended[0]["from_step"] == 2
    assert make_trainer(continued, mnist_slice).run()["steps"] == 4


def test_time_budget_ends_the_run_before_its_max_steps(tmp_path, mnist_slice):
    # A budget spent by the first evaluation: the fit after it allows one more step, and the run ends.
    summary = make_trainer(short(tmp_path, max_steps=50, eval_every=2, time_budget=1e-3), mnist_slice).run()
    assert summary["steps"] == 3 and metric_steps(tmp_path / "run") == [2, 3]


def test_ema_weights_are_what_is_saved(tmp_path, mnist_slice):
    trainer = make_trainer(short(tmp_path, max_steps=3, ema=0.5), mnist_slice)
    trainer.run()
    saved = load_file(tmp_path / "run" / "model.safetensors")
    average, raw = trainer.ema.model.state_dict(), trainer.model.state_dict()
    assert all(torch.equal(saved[k], average[k]) for k in saved)
    assert not any(torch.equal(saved[k], raw[k]) for k in saved if saved[k].dim() == 2)


# ---------------------------------------------------------------- what the run says and writes


def test_progress_draws_a_bar_only_when_asked(tmp_path, mnist_slice, capsys):
    make_trainer(short(tmp_path / "quiet", max_steps=2, progress=False), mnist_slice).run()
    assert "train:" not in capsys.readouterr().err
    make_trainer(short(tmp_path / "bar", max_steps=2, progress=True), mnist_slice).run()
    assert "train: 100%" in capsys.readouterr().err  # tqdm's bar, named "train"


def test_log_tensorboard_writes_event_files_beside_metrics_jsonl(tmp_path, mnist_slice):
    make_trainer(short(tmp_path, max_steps=2, log="tensorboard"), mnist_slice).run()
    run = tmp_path / "run"
    assert metric_steps(run) == [2] and list((run / "tensorboard").glob("events.out.tfevents.*"))


def test_derived_settings_are_announced_one_line_each(capsys):
    from anyformer.cli.train import announce_derived
    announce_derived(TrainConfig(derived={"batch_size": "64: a quarter of the data", "task": "classify: images"}))
    assert capsys.readouterr().out.splitlines() == ["derived: batch_size = 64: a quarter of the data",
                                                    "derived: task = classify: images"]
