"""One kernel for all of a model's linear layers in a training step, timed on the step itself.

`linear_kernel` times each layer's shape alone, in a loop over the same operands. Inside a model
the answer can differ, either way. On a 2-core AMD EPYC (2026-11-24): the char GPT's training
linears each measured 2-10% faster on oneDNN than on F.linear alone, most under the margin, while
its whole step ran 5-9% faster with every layer on oneDNN; and the MNIST ViT's packed q/k/v
projection measured 7% faster "mixed" alone, while its whole step ran 9% slower so. (In a model each
product reads what the kernels before it left, not operands a loop keeps hot.) So a training run
also times its own step four ways: every layer on F.linear ("stock"), every layer as its shape's
plan chose ("planned"), every layer on oneDNN ("onednn"), every layer with oneDNN's forward and
input gradient and the weight gradient on BLAS ("mixed"); the numerics of each are checked
against stock (loss and gradients), and a candidate must beat stock by the compile decision's 5%.

Only fp32 CPU steps ask (the layers take F.linear under autocast, on CUDA and under torch.compile
regardless). `ANYFORMER_PLAN=linears=onednn` forces one; a forced `linear=` forces every layer and
leaves nothing to choose here.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import torch
from torch import Tensor, nn

from . import choices
from .choices import Decision, register
from .choose import LINEAR
from .compiled import BUDGET_S, STEPS_BUDGET_S, _candidate, _quiet_rng, _quietly, _synced, _times
from .kernels import onednn_linear_op
from .planner import planner
from .timing import max_rounds_for

# The most training steps `train_step` is called for: a warm-up and one per round, for each candidate.
MAX_TIMED_STEPS = 4 * (1 + max_rounds_for(STEPS_BUDGET_S))
# A measurement costs about 20 steps' time (a warm-up, three rounds and a check, for each candidate)
# where it cannot time the run's own steps: a 10% gain repays that over 200 steps. Shorter runs
# keep the per-shape plan, unless a record says otherwise.
MIN_STEPS = 200

LINEARS = register(Decision("linears", ("stock", "planned", "onednn", "mixed"),
                            "a training step's linear layers together: all on F.linear, each as its shape's "
                            "plan chose, all on oneDNN, or all mixed; timed on the step itself", margin=0.05))
PLANNED = "planned"


def linears_for_training(module: nn.Module, set_kernel: Callable[[str | None], None],
                         step_loss: Callable[[nn.Module], Tensor], *, fields: Mapping[str, Any],
                         steps: int | None = None, tolerance: float = 1e-3, device: torch.device | str = "cpu",
                         train_step: Callable[[nn.Module], None] | None = None) -> str:
    """The choice for `module`'s linear layers in the training step `step_loss(m) -> scalar loss`
    (forward; this adds the backward), applied with `set_kernel` before returning it:
    `set_kernel(None)` for "planned" (each layer asks the plan), else `set_kernel(choice)`. `fields`
    name the step in the plan file (model, batch shape, precision).
    `steps`: how many steps the run will take; under `MIN_STEPS` nothing is measured (None: no limit).
    `train_step(m)`, if given, is what is timed: a whole real step of the run taken with m, so the
    measurement is training, not time lost. Without it the timed calls are step_loss's forward and
    backward. The numerics check leaves the global RNG and the gradients as they were."""
    device = torch.device(device)
    p = planner()
    forced = p.forced()[0]
    choice = choices.forced_choice(forced, LINEARS.name)
    if choice is None and (choices.forced_choice(forced, LINEAR.name) is not None or onednn_linear_op() is None
                           or device.type != "cpu"):
        choice = PLANNED  # every layer forced, or nothing but F.linear here: nothing to choose
    if choice is None and steps is not None and steps < MIN_STEPS and p.entry(LINEARS.name, fields) is None:
        choice = PLANNED  # too short a run to repay a measurement: each layer as its shape's plan says
    if choice is not None:
        set_kernel(_kernel(choice))
        return choice
    params = [q for q in module.parameters() if q.requires_grad]
    step = _candidate(lambda: module, step_loss, params, device)

    def using(choice: str, run: Callable[[], Any]) -> Callable[[], Any]:
        def call():
            set_kernel(_kernel(choice))
            return run()
        return call

    # One planned pass first, outside any measurement (inside one, each layer's own decision would get
    # the stock answer): the per-shape choices that "planned" stands for are made now.
    set_kernel(_kernel(PLANNED))
    with _quiet_rng(device):
        step()
    checked = {k: using(k, _quietly(step, device, _quiet_rng)) for k in LINEARS.choices}
    timed = None if train_step is None else {
        k: using(k, lambda: _synced(train_step, module, device)) for k in LINEARS.choices}
    choice = LINEARS.stock
    try:
        choice = p.decide(LINEARS.name, fields, lambda: checked if timed is None else timed, check=lambda: checked,
                          tolerance=tolerance, budget_s=max(p.budget_s, BUDGET_S if timed is None else STEPS_BUDGET_S),
                          extra=lambda: {"timed": "training steps" if timed is not None else "forward+backward"})
    finally:
        set_kernel(_kernel(choice))
    return choice


def explain(fields: Mapping[str, Any]) -> str:
    """What the record for `fields` says, for a run's log: the times behind the choice."""
    entry = planner().entry(LINEARS.name, fields)
    return _times(entry, "timed on the whole step") if entry else "not measured: forced, or too short a run"


def _kernel(choice: str) -> str | None:
    """What a layer is told for `choice`: None (ask the plan per shape) for "planned"."""
    return None if choice == PLANNED else choice
