"""A run's start and end on a tiny real trainer: a new run's empty state, the step plan settled
for the steps still to run and written into the run, the task's own files and the lines the run
says, the progress bar, and how a run leaves its process group."""
from __future__ import annotations

import json

import pytest
import torch

from .conftest import StandInRank, make_trainer, tiny_config
from .trainer_doubles import Bar, Budget, Closing


def test_a_new_run_starts_with_no_time_no_loss_no_evaluation_and_no_stop(trainer, monkeypatch) -> None:
    from anyformer.train import progress
    trainer.budget = Budget(126)
    monkeypatch.setattr(trainer, "_settle_step_plan", lambda: None)
    trainer.tune()
    assert trainer.budget.started == [(0, 0.0)]  # the budget counts from no seconds trained
    assert "loss" not in progress.bar_fields(trainer, 10.0, 1.0)  # no loss shown before the first sync
    assert trainer.last_eval is None  # what makes a run resumed after its end evaluate once more
    assert trainer.signals.escalate  # one process: a second Ctrl-C stops at once (torchrun's agent does it)
    trainer.dist = StandInRank(rank=0, world=2, others=0.0)
    assert not trainer._should_stop()  # under torchrun: no stop agreed before the first sync


def test_the_plan_is_written_into_the_run_and_a_failed_write_is_named(trainer) -> None:
    from anyformer.train.rundir import TrainingError
    from anyformer.train.runplan import PLAN_FILE
    trainer.files.prepare(False)
    trainer.write_plan()
    assert json.loads((trainer.run_dir / PLAN_FILE).read_text()) == json.loads(json.dumps(trainer.step_plan.state()))
    (trainer.run_dir / PLAN_FILE).unlink()
    (trainer.run_dir / PLAN_FILE).mkdir()  # a folder where the file goes: the write fails
    with pytest.raises(TrainingError, match=rf"^cannot write the plan {trainer.run_dir / PLAN_FILE}: "):
        trainer.write_plan()


def test_the_step_plan_is_settled_only_for_steps_still_to_run(trainer, monkeypatch) -> None:
    """Measured on stand-ins shaped like the step's first chunk, by the task's loss on them."""
    from anyformer.train.planning import stand_ins
    settled = []

    def settle(model, forward_model, step_loss, example, **kw):
        chunk = stand_ins(trainer.task, trainer.step, trainer.dist, trainer.cfg)
        assert model is trainer.model and forward_model is trainer.forward_model and torch.equal(example, chunk[0])
        assert torch.equal(step_loss(trainer.model), trainer.task.loss(trainer.model, chunk)[0])
        settled.append(kw)
    monkeypatch.setattr(trainer.step_plan, "settle", settle)
    trainer.step = trainer.total_steps  # the run is done: nothing left to measure for
    trainer._settle_step_plan()
    assert settled == []
    trainer.step = trainer.total_steps - 1
    trainer._settle_step_plan()
    assert settled == [{"steps_left": 1, "seconds_left": None}]
    trainer.budget = Budget(126)
    trainer.budget.left = lambda: 42.0
    trainer._settle_step_plan()
    assert settled[-1] == {"steps_left": 1, "seconds_left": 42.0}
    trainer.dist = StandInRank(rank=0, world=2, others=0.0)  # under torchrun only --compile is settled
    trainer._settle_step_plan()
    assert len(settled) == 2


@pytest.mark.parametrize("raised, wait", [(None, True), ("interrupted", True), ("other", False), ("lost", False)])
def test_a_run_leaves_its_group_waiting_for_the_others_unless_it_failed(trainer, monkeypatch, raised, wait) -> None:
    """A run that ended, or stopped by the agreed signal, leaves with the other ranks (a barrier); one
    that failed does not wait for ranks that may be gone, and a gloo transport failure is named as a
    lost rank in one line."""
    from anyformer.train import Interrupted
    from anyformer.train.rundir import TrainingError
    errors = {"interrupted": Interrupted(15, 3, None), "other": ValueError("bad"),
              "lost": RuntimeError("[../gloo/transport/tcp/pair.cc:534] Connection closed by peer")}

    def run():
        if raised:
            raise errors[raised]
        return {"steps": 0}
    monkeypatch.setattr(trainer, "_run", run)
    trainer.dist = Closing()
    trainer.step_plan.compiled = object()  # a compiled step over the wrapper
    trainer.forward_model = torch.nn.Identity()  # as DDP wraps the model
    if raised is None:
        assert trainer.run() == {"steps": 0}
    elif raised == "lost":
        with pytest.raises(TrainingError,
                           match=r"^another rank of the job stopped \(RuntimeError: \[\.\./gloo/transport"):
            trainer.run()
    else:
        with pytest.raises(type(errors[raised])):
            trainer.run()
    assert trainer.dist.closed == [wait]
    assert trainer.forward_model is trainer.model and trainer.step_plan.compiled is None


def test_a_run_writes_the_tasks_own_files_says_what_it_trains_and_starts_its_budget(tmp_path, mnist_slice,
                                                                                   capsys) -> None:
    from anyformer.train import progress
    t = make_trainer(tiny_config(tmp_path, max_steps=1, limit_eval=16, time_budget=3600), mnist_slice)
    t.task.run_files = lambda: {"tokenizer.json": b'{"kind": "test"}'}
    t.elapsed, started, start = 2.5, [], t.budget.start  # 2.5 s: as a resumed run's training seconds
    t.budget.start = lambda step, elapsed: (started.append((step, elapsed)), start(step, elapsed))
    intro = progress.intro(t)
    summary = t.run()
    assert json.loads((t.run_dir / "summary.json").read_text()) == summary and summary["resumed"] is False
    assert not any((t.run_dir / name).exists() for name in t.task.pictures)  # plots=False: nothing drawn
    assert (t.run_dir / "tokenizer.json").read_bytes() == b'{"kind": "test"}'
    assert started == [(0, 2.5)]
    out = capsys.readouterr().out
    assert out.startswith(intro + "\n") and "plan: replaying" not in out
    # One process is rank 0, which says the step plan's choices (the suite's plan forces them), then
    # without a bar prints each evaluation's line.
    lines = out.splitlines()
    assert lines[1:3] == ["linears: per-shape (linear=stock is forced for every layer)",
                          "compile: eager (compile=eager is forced)"]
    assert lines[3].startswith("step 1 | epoch 0.02 | train loss ") and "test acc" in lines[3]


def test_the_bar_moves_a_step_at_a_time_shows_the_read_loss_and_carries_the_evaluations(
        tmp_path, mnist_slice, monkeypatch, capsys) -> None:
    from anyformer.train import own_model, progress
    bar = Bar()
    monkeypatch.setattr(progress, "progress_bar", lambda total, start, enabled: bar if enabled else None)
    t = make_trainer(tiny_config(tmp_path, max_steps=2, eval_every=2, limit_train=64, limit_eval=16,
                                 progress=True), mnist_slice)
    fields = []
    real_fields = progress.bar_fields
    monkeypatch.setattr(progress, "bar_fields", lambda *a: (fields.append(a), real_fields(*a))[1])
    t.run()
    assert bar.updates == [1, 1] and bar.closed
    # Read at step 1 (the first step) and 2 (the evaluation): each time the fields of the sums read,
    # the loss among them, set without redrawing (tqdm redraws at its own pace).
    assert len(bar.postfixes) == 2 and all(refresh is False and "loss" in f for f, refresh in bar.postfixes)
    assert all(a[0] is t and a[1] > 0 and a[2] == own_model.flops_per_item(t.task, t.model) for a in fields)
    assert len(bar.lines) == 1 and bar.lines[0].startswith("step 2 | epoch ")  # above the bar, not printed
    assert "step 2 | epoch " not in capsys.readouterr().out
