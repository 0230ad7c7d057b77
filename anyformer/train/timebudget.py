"""--time-budget: fit a run's length to a wall-clock budget, from its own measured speed.

The budget covers the training loop as the user waits for it: steps, evaluations, checkpoints,
a compile, and the final evaluation (not reading the data or building the model before it). After
a few steps, and again after each evaluation, the steps still affordable are

    (budget - spent - one evaluation) / (seconds per step + seconds per evaluation / eval_every)

and the run is set to end there: never past the steps that --epochs or --max-steps ask for, never
before the next step. The seconds per step are those of the latest stretch between fits. The
learning-rate schedule is a function of the run's length, so warm-up and cosine stretch with it; an
early estimate is corrected at each evaluation, when the schedule is still near its top and a change
costs little.
"""
from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .trainer import Trainer

FIRST_FIT_STEPS = 20  # steps timed before the first fit: past the first step's one-off costs
RECENT_STEPS = 100    # a later fit times the steps since the fit before, where there were this many


class TimeBudget:
    def __init__(self, seconds: float) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) \
                or seconds <= 0:
            raise ValueError(f"time_budget must be a positive number of seconds, got {seconds!r}")
        self.seconds = float(seconds)
        self._t0 = 0.0
        self._step0 = 0
        self._elapsed0 = 0.0
        self._eval_s: float | None = None
        self._first_fit: int | None = FIRST_FIT_STEPS
        self._last = (0, 0.0)  # (step, elapsed) at the latest fit
        self.said: int | None = None  # the steps the last notice named (`fit_run`)

    def start(self, step: int, elapsed: float) -> None:
        """The run starts (or resumes) at `step`, with `elapsed` seconds of training already on
        record: the wall clock starts now."""
        self._t0 = time.perf_counter()
        self.steady(step, elapsed)

    def steady(self, step: int, elapsed: float) -> None:
        """Steps from here on are the run's usual ones: the time per step is measured from here, so
        that one-off costs before (a compile, the compile plan's timed steps) count once, in the
        wall clock, not in every step still to come."""
        self._step0, self._elapsed0 = step, elapsed
        self._last = (step, elapsed)
        self._first_fit = step + FIRST_FIT_STEPS

    def left(self) -> float:
        """Wall seconds of the budget not yet spent (since `start`)."""
        return max(0.0, self.seconds - (time.perf_counter() - self._t0))

    def due(self, step: int) -> bool:
        """True once: at the first step at least FIRST_FIT_STEPS into the loop (a compile plan may
        already have taken that many before the loop's first step)."""
        if self._first_fit is not None and step >= self._first_fit:
            self._first_fit = None
            return True
        return False

    def evaluated(self, seconds: float) -> None:
        """One evaluation (with its checkpoint and pictures) took `seconds`: the latest is kept."""
        self._eval_s = seconds

    def fit(self, step: int, elapsed: float, eval_every: int, current: int, asked: int) -> int:
        """The total steps that end the run within the budget; `elapsed`: training seconds so far
        (steps only), `current`: the total in force, `asked`: the most the run may take."""
        done = step - self._step0
        if done < 1:
            return current
        # The time per step of the latest stretch (since the fit before, where that held at least
        # RECENT_STEPS): the steps that remain run as the latest did. A compiled run's epochs grew
        # shorter in turn, and the mean since the start fitted the run to end short of its budget
        # (measured: docs/results.md, 'Measurements behind the code's choices').
        last_step, last_elapsed = self._last
        if step - last_step >= RECENT_STEPS:
            per_step = (elapsed - last_elapsed) / (step - last_step)
        else:
            per_step = (elapsed - self._elapsed0) / done
        self._last = (step, elapsed)
        eval_s = self._eval_s or 0.0
        spent = time.perf_counter() - self._t0
        left = self.seconds - spent - eval_s  # the final evaluation still to come
        affordable = int(left / max(1e-9, per_step + eval_s / max(1, eval_every)))
        return max(step + 1, min(asked, step + affordable))


def fit_run(t: Trainer, bar) -> None:
    """Set the run's steps so that it ends within its budget, from the time per step and per evaluation
    measured so far (rank 0's figure, on every rank). Never more steps than --epochs / --max-steps ask
    for; the schedule (warm-up, cosine) stretches to the new length."""
    if t.step >= t.total_steps:
        return  # the final evaluation is done
    fitted = t.budget.fit(t.step, t.elapsed, t.eval_every, t.total_steps, t.steps_asked())
    if t.dist.enabled:
        mine = torch.tensor([float(fitted) if t.dist.is_main else 0.0], dtype=torch.float64, device=t.device)
        fitted = int(t.dist.sum(mine).item())
    if fitted == t.total_steps:
        return
    before, t.total_steps = t.total_steps, fitted
    if bar is not None:
        bar.total = fitted
    # Said once, at the first fit that moves the end by more than 1%; later fits follow the measured
    # speed by a few steps at a time and are said only where they move the end by more than a tenth
    # of what was said (a refit at every evaluation once filled the log with near-equal lines).
    said = t.budget.said
    if t.dist.is_main and abs(fitted - (said or before)) > (0.1 * said if said else 0.01 * before):
        msg = (f"time budget {t.budget.seconds:.0f} s: {fitted} steps ({fitted / t.task.steps_per_epoch:.2f} "
               f"epochs) instead of {said or before}")
        (bar.write if bar is not None else print)(msg)
        t.budget.said = fitted
