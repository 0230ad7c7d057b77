"""--time-budget: the run's steps are fitted to its measured speed, never past what --epochs asks."""
import pytest

from anyformer.cli.args import duration as _duration
from anyformer.train import TrainConfig
from anyformer.train import timebudget
from anyformer.train.timebudget import TimeBudget

from .conftest import make_trainer, tiny_config


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(timebudget.time, "perf_counter", c)
    return c


def test_the_fit_counts_steps_evaluations_and_the_final_one(clock):
    b = TimeBudget(100.0)
    b.start(step=0, elapsed=0.0)
    clock.now += 10.0            # 20 steps took 10 s of wall time, 8 s of it in the steps
    assert b.fit(20, 8.0, eval_every=50, current=1000, asked=1000) == 20 + int(90 / 0.4)
    b.evaluated(5.0)             # an evaluation costs 5 s: one per 50 steps, and the final one
    assert b.fit(20, 8.0, eval_every=50, current=245, asked=1000) == 20 + int(85 / (0.4 + 0.1))


def test_the_fit_never_asks_for_more_than_the_epochs_nor_less_than_one_more_step(clock):
    b = TimeBudget(100.0)
    b.start(step=0, elapsed=0.0)
    clock.now += 1.0
    assert b.fit(10, 1.0, eval_every=50, current=300, asked=300) == 300   # plenty of time
    clock.now += 500.0
    assert b.fit(10, 1.0, eval_every=50, current=300, asked=300) == 11    # over budget: stop after the next


def test_resumed_runs_count_only_this_process(clock):
    b = TimeBudget(60.0)
    b.start(step=400, elapsed=300.0)  # resumed: 300 s of training were an earlier process's
    clock.now += 6.0
    assert b.fit(410, 305.0, eval_every=1000, current=2000, asked=2000) == 410 + int(54 / 0.5)


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), True, "9m"])
def test_a_bad_budget_is_refused(bad):
    with pytest.raises(ValueError, match="time_budget must be a number of seconds"):
        TrainConfig(time_budget=bad)


def test_durations_parse():
    assert [_duration(t) for t in ("540", "90s", "9m", "1h30m", "none", "0")] == [540, 90, 540, 5400, 0, 0]


@pytest.mark.slow
def test_a_run_ends_within_its_budget_instead_of_its_epochs(tmp_path, mnist_slice, capsys):
    cfg = tiny_config(tmp_path, epochs=40, time_budget=2.0)  # 40 epochs of 63 steps: far more than 2 s here
    trainer = make_trainer(cfg, mnist_slice)
    summary = trainer.run()
    assert summary["steps"] < 40 * 63 and summary["steps"] == trainer.total_steps
    assert summary["time_budget"] == 2.0
    assert "time budget 2 s:" in capsys.readouterr().out


def test_the_first_fit_comes_once_even_if_its_step_was_passed(clock):
    b = TimeBudget(60.0)
    b.start(step=0, elapsed=0.0)
    assert not b.due(5)
    assert b.due(57)        # a compile plan took the first 50 steps: fitted at the loop's first step after
    assert not b.due(58)


def test_one_off_costs_count_once_not_per_step(clock):
    b = TimeBudget(100.0)
    b.start(step=0, elapsed=0.0)
    clock.now += 30.0                 # a compile and the plan's 50 timed steps: 30 s of wall and of training
    b.steady(step=50, elapsed=30.0)   # the usual steps start here
    clock.now += 10.0
    assert b.fit(70, 40.0, eval_every=1000, current=5000, asked=5000) == 70 + int(60 / 0.5)


def test_the_default_recipe_keeps_within_its_budget_unless_a_length_is_asked():
    """`mnist` carries a 9-minute budget (8 epochs took 12 min 46 s in fp32 on a 2-core Intel Xeon);
    an explicit --epochs or --max-steps is taken as asked, --time-budget none (0) switches it off."""
    from anyformer.train import recipe_config
    assert recipe_config(None).time_budget == 540.0
    assert recipe_config("mnist", epochs=2).time_budget is None
    assert recipe_config("mnist", max_steps=50).time_budget is None
    assert recipe_config("mnist", epochs=2, time_budget=60.0).time_budget == 60.0
    assert recipe_config("mnist", time_budget=0.0).time_budget == 0.0
    assert recipe_config("fashion-mnist").time_budget is None


def test_left_counts_down_from_the_start(clock):
    b = TimeBudget(100.0)
    b.start(step=0, elapsed=0.0)
    clock.now += 30.0
    assert b.left() == pytest.approx(70.0)
    clock.now += 200.0
    assert b.left() == 0.0


def test_a_later_fit_times_the_latest_stretch_not_the_mean_since_the_start(clock):
    """Steps that sped up (a compiled run's first epochs ran slower) are fitted at their latest speed."""
    b = TimeBudget(1000.0)
    b.start(step=0, elapsed=0.0)
    clock.now += 100.0
    b.fit(200, 100.0, eval_every=10**6, current=10**6, asked=10**6)      # 0.5 s a step so far
    clock.now += 50.0                                                      # the next 200 steps: 0.25 s each
    assert b.fit(400, 150.0, eval_every=10**6, current=10**6, asked=10**6) == 400 + int(850 / 0.25)
    clock.now += 5.0                                                       # 10 more steps at 0.5 s: too few
    assert b.fit(410, 155.0, eval_every=10**6, current=10**6, asked=10**6) == 410 + int(845 / (155.0 / 410))
