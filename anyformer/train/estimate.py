"""Before the first step, how long the run expects to take: a few of its own steps, timed and undone.

The steps timed are the run's next real steps: its model, optimiser, batches and augmentation, its
precision and compile choice, as the loop will take them (`Trainer.train_step`). Everything a step
changes is put back afterwards: the weights and gradients, the optimiser's state and settings, the
EMA, the gradient scaler, the step counter and the pending sums, and (timed inside `fork_rng`) the
random generators. So a run that says its estimate trains exactly the same bits as one that does
not, and the seconds it takes are only the estimate's own (a second or so for a small model).

The first of the steps is a warm-up (allocator, oneDNN primitives); then steps are timed until at least
MIN_TIMED of them and MIN_SECONDS have passed (at most MAX_TIMED), and their median is the time a step
takes: on a 2-core machine shared with other work, single steps of the same run varied 0.06-0.5 s. An evaluation is
counted as forward passes over the scored examples at a third of a training step's time per example (forward and
backward cost about three forwards), once for each test-time view the model scores (a grey picture's five: the
picture and its four one-pixel shifts; without them the estimate was five times short of the evaluations).
"""
from __future__ import annotations

import copy
import statistics
import time
from typing import TYPE_CHECKING, Any

import torch

from ..models.eval_views import view_count

if TYPE_CHECKING:
    from .trainer import Trainer

WARMUP_STEPS = 1
MIN_TIMED, MAX_TIMED, MIN_SECONDS = 3, 20, 1.0


def wanted(t: Trainer) -> bool:
    """An image-folder run whose settings were derived from the data (`anyformer train --data DIR` with
    no recipe), in one process: it says its estimate. Under torchrun the steps are collective, and
    rank 0 alone may not take them."""
    return (t.cfg.recipe == "auto" and t.task.unit == "images" and not t.dist.enabled
            and t.step < t.total_steps)


def step_seconds(t: Trainer) -> tuple[float, int]:
    """(the median seconds of the run's next training steps, how many were timed), after WARMUP_STEPS more;
    each step then undone: the run goes on from exactly the state it was in."""
    saved = _snapshot(t)
    times: list[float] = []
    devices = [t.device] if t.device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices):
            for i in range(WARMUP_STEPS + MAX_TIMED):
                t0, planned = time.perf_counter(), t.step_plan.planning_seconds()
                t.train_step()
                if t.device.type == "cuda":
                    torch.cuda.synchronize(t.device)
                if i >= WARMUP_STEPS:  # without the speed plan's first measurements of a new shape, as the loop counts
                    times.append(time.perf_counter() - t0 - (t.step_plan.planning_seconds() - planned))
                    if len(times) >= MIN_TIMED and sum(times) >= MIN_SECONDS:
                        break
    finally:
        _restore(t, saved)
    return statistics.median(times), len(times)


def expected_line(t: Trainer) -> str:
    """One line: the steps left, the seconds a step took here, evaluations, and the total."""
    per_step, timed = step_seconds(t)
    steps = t.total_steps - t.step
    evals = sum(1 for s in range(t.step + 1, t.total_steps + 1) if s % t.eval_every == 0 or s == t.total_steps)
    scored = len(getattr(t.task, "test", ()) or ())
    batch = max(1, t.cfg.batch_size)
    eval_s = evals * scored * _views(t.model) * per_step / batch / 3
    total = steps * per_step + eval_s
    budget = (f"; the time budget of {_duration(t.cfg.time_budget)} ends it sooner"
              if t.cfg.time_budget and t.cfg.time_budget < total else "")
    evaluations = f" and {evals} evaluations of {scored:,} images (~{_duration(eval_s)})" if scored else ""
    return (f"expected time: about {_duration(total)} for {steps:,} steps of {per_step:.3g} s (timed on "
            f"{timed} of the run's own steps, then undone){evaluations}{budget}")


def _views(model: torch.nn.Module) -> int:
    """How many views of each picture the model scores in eval mode (1 for a model without test-time views)."""
    c = getattr(model, "config", None)
    return view_count(getattr(c, "flip_average", False), getattr(c, "shift_average", 0))


def _duration(seconds: float) -> str:
    s = round(seconds)
    if s < 10:
        return f"{seconds:.2g} s"
    if s < 60:
        return f"{s} s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m} min {s:02d} s"
    h, m = divmod(m, 60)
    return f"{h} h {m:02d} min"


# ---------------------------------------------------------------------------------------------- undoing


def _tensors(module: torch.nn.Module) -> list[torch.Tensor]:
    return [*module.parameters(), *module.buffers()]


def _snapshot(t: Trainer) -> dict[str, Any]:
    opt = t.optimizer
    return {
        "weights": [x.detach().clone() for x in _tensors(t.model)],
        "grads": [None if p.grad is None else p.grad.detach().clone() for p in t.model.parameters()],
        "opt_state": {p: {k: v.clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v) for k, v in s.items()}
                      for p, s in opt.state.items()},
        "opt_groups": [{k: copy.deepcopy(v) for k, v in g.items() if k != "params"} for g in opt.param_groups],
        "ema": None if t.ema is None else [x.detach().clone() for x in _tensors(t.ema.model)],
        "scaler": None if t.scaler is None else t.scaler.state_dict(),
        "trainer": (t.step, copy.deepcopy(t.sums), list(t.pending)),
    }


@torch.no_grad()
def _restore(t: Trainer, saved: dict[str, Any]) -> None:
    for x, v in zip(_tensors(t.model), saved["weights"]):
        x.copy_(v)
    for p, g in zip(t.model.parameters(), saved["grads"]):
        p.grad = g
    t.optimizer.state.clear()
    t.optimizer.state.update(saved["opt_state"])
    for g, values in zip(t.optimizer.param_groups, saved["opt_groups"]):
        g.update(values)
    if saved["ema"] is not None:
        for x, v in zip(_tensors(t.ema.model), saved["ema"]):
            x.copy_(v)
    if saved["scaler"] is not None:
        t.scaler.load_state_dict(saved["scaler"])
    t.step, t.sums, t.pending = saved["trainer"][0], saved["trainer"][1], saved["trainer"][2]
