"""A time budget inside a run, on a tiny real trainer without a training run: its fit sets the
steps and the bar (rank 0's figure on every rank; a line only for a change of more than 1%), it
starts at the run's step and time, and it is told how long each evaluation took."""
from __future__ import annotations

import time

import torch

from anyformer.train.timebudget import fit_run

from .conftest import StandInRank, make_trainer, tiny_config
from .trainer_doubles import Bar, Budget


def test_the_fit_sets_the_steps_and_the_bar_and_says_so(trainer, capsys) -> None:
    trainer.budget, trainer.step, trainer.elapsed = Budget(80), 10, 4.5
    assert trainer.total_steps == 126 and trainer.eval_every == 63
    bar = Bar(126)
    fit_run(trainer, bar)
    assert trainer.budget.asked == [(10, 4.5, 63, 126, 126)]
    assert trainer.total_steps == 80 and bar.total == 80
    assert bar.lines == ["time budget 3600 s: 80 steps (1.27 epochs) instead of 126"]
    trainer.budget.fitted = 76
    fit_run(trainer, bar)  # 4 of the 80 said: within a tenth, followed silently
    assert trainer.total_steps == 76 and bar.total == 76 and len(bar.lines) == 1
    trainer.budget.fitted = 60
    fit_run(trainer, None)  # 20 of the 80 said: said again, without a bar printed
    assert trainer.total_steps == 60
    assert capsys.readouterr().out == "time budget 3600 s: 60 steps (0.95 epochs) instead of 80\n"


def test_a_change_of_one_percent_or_less_is_made_silently(trainer) -> None:
    trainer.budget, trainer.total_steps = Budget(990), 1000
    bar = Bar(1000)
    fit_run(trainer, bar)
    assert trainer.total_steps == 990 and bar.total == 990 and bar.lines == []
    trainer.budget.fitted = 1000  # back up by 10 of 990: 1.01%, said (nothing was said before)
    fit_run(trainer, bar)
    assert bar.lines == ["time budget 3600 s: 1000 steps (15.87 epochs) instead of 990"]


def test_the_fit_stops_once_the_steps_are_done(trainer) -> None:
    trainer.budget, trainer.step, trainer.total_steps = Budget(500), 126, 126
    fit_run(trainer, None)
    assert trainer.budget.asked == [] and trainer.total_steps == 126
    trainer.step = 125
    fit_run(trainer, None)
    assert trainer.total_steps == 500


def test_under_torchrun_every_rank_takes_rank_zeros_fit(trainer, capsys) -> None:
    trainer.budget = Budget(77)  # this rank's own fit, which it must not use
    trainer.dist = StandInRank(rank=1, world=2, others=90.0)
    bar = Bar(126)
    fit_run(trainer, bar)
    (sent,) = trainer.dist.summed
    assert sent.dtype == torch.float64 and sent.tolist() == [0.0]  # a rank other than 0 adds nothing
    assert trainer.total_steps == 90 and bar.total == 90
    assert bar.lines == [] and capsys.readouterr().out == ""  # rank 0 alone says it
    trainer.dist = StandInRank(rank=0, world=2, others=0.0)
    fit_run(trainer, bar)
    assert trainer.dist.summed[0].tolist() == [77.0] and trainer.total_steps == 77 and len(bar.lines) == 1


def test_tune_starts_the_budget_at_the_runs_step_and_time(trainer, monkeypatch) -> None:
    trainer.budget, trainer.step, trainer.elapsed = Budget(126), 3, 1.25
    settled = []
    monkeypatch.setattr(trainer, "_settle_step_plan", lambda: settled.append(True))
    assert isinstance(trainer.tune(), dict)
    assert trainer.budget.started == [(3, 1.25)] and settled == [True]


def test_a_budgets_new_step_count_is_written_above_the_bar_and_moves_its_end(tmp_path, mnist_slice, monkeypatch,
                                                                            capsys) -> None:
    from anyformer.train import progress
    bar = Bar()
    monkeypatch.setattr(progress, "progress_bar", lambda total, start, enabled: bar if enabled else None)
    t = make_trainer(tiny_config(tmp_path, max_steps=4, eval_every=1, limit_train=64, limit_eval=16,
                                 time_budget=3600, progress=True), mnist_slice)
    t.budget.fit = lambda *asked: 2  # after step 1's evaluation: time for 2 steps, not 4
    t.run()
    assert t.step == t.total_steps == bar.total == 2
    assert "time budget 3600 s: 2 steps (1.00 epochs) instead of 4" in bar.lines
    assert "time budget" not in capsys.readouterr().out


def test_the_time_budget_is_told_how_long_each_evaluation_took(tmp_path, mnist_slice) -> None:
    t = make_trainer(tiny_config(tmp_path, max_steps=2, eval_every=1, limit_train=64, limit_eval=16,
                                 time_budget=3600), mnist_slice)
    told, evaluate = [], t._evaluate_task
    t.budget.evaluated = told.append
    t._evaluate_task = lambda: (time.sleep(0.3), evaluate())[1]  # each evaluation: 0.3 s at least
    wall = time.perf_counter()
    t.run()
    wall = time.perf_counter() - wall
    # each evaluation's own time: at least its sleep, and (the two being disjoint) together within the run
    assert len(told) == 2 and all(seconds >= 0.3 for seconds in told) and sum(told) <= wall
