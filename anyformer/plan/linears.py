"""One kernel for all of a model's linear layers in a training step, timed on the step's forward and backward.

`linear_kernel` times each layer's shape alone, in a loop over the same operands; inside a model
the answer can differ, either way (each product reads what the kernels before it left): a GPT's
linears can each measure a little faster on oneDNN alone, most under the margin, while its whole
step runs faster with every layer on oneDNN; and a ViT's q/k/v projection can measure faster
"mixed" alone while its whole step runs slower so (measured: docs/results.md, 'Measurements behind
the code's choices').
So a training run also times its own step's forward and backward with every layer on F.linear
("stock"), each as its shape's record says ("per-shape"), on oneDNN ("onednn"), or on oneDNN with the
weight gradient on BLAS ("mixed"), checked against stock, by the compile decision's 5% margin.
Only fp32 CPU steps that run eagerly ask. `ANYFORMER_PLAN=linears=onednn` forces one; a forced
`linear=` (or a bare `stock`) forces every layer and leaves nothing to choose here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch
from torch import Tensor, nn

from . import choices
from .choices import Decision, register
from .decisions import LINEAR
from .compiled import BUDGET_S, _candidate, _times
from .kernels import onednn_linear_op
from .planner import planner
from .store import entry_key

# A measurement costs about 20 steps' time (a warm-up, three rounds and a check, for each candidate):
# a 10% gain repays that over 200 steps. Shorter runs
# keep the per-shape plan, unless a record says otherwise.
MIN_STEPS = 200

PER_SHAPE = "per-shape"  # each layer on the kernel its own shape's record chose (named "planned" before)
LINEARS = register(Decision("linears", ("stock", PER_SHAPE, "onednn", "mixed"),
                            "a training step's linear layers together: all on F.linear, each as its shape's "
                            "record says, all on oneDNN, or all mixed; timed on the step itself", margin=0.05,
                            renamed=(("planned", PER_SHAPE),)))


@dataclass
class LinearsChoice:
    """What `linears_for_training` settled (and applied), and one line saying why (for the log)."""

    choice: str
    why: str


def linears_for_training(module: nn.Module, set_kernel: Callable[[str | None], None],
                         step_loss: Callable[[nn.Module], Tensor], *, fields: Mapping[str, Any],
                         steps: int | None = None, tolerance: float = 1e-3, device: torch.device | str = "cpu",
) -> LinearsChoice:
    """The choice for `module`'s linear layers in the training step `step_loss(m) -> scalar loss`
    (forward; this adds the backward), applied with `set_kernel` before returning it:
    `set_kernel(None)` for "per-shape" (each layer asks the plan), else `set_kernel(choice)`. `fields`
    name the step in the plan file (model, batch shape, precision). `steps`: how many steps the run
    will take; under `MIN_STEPS` nothing is measured (None: no limit). The timed calls are
    step_loss's forward and backward, never the run's own steps (a step taken under a candidate
    would make the weights depend on what the machine's timings cache held); they leave the global RNG
    and the gradients as they were."""
    device = torch.device(device)
    p = planner()
    forced = p.forced()[0]

    def settled(choice: str, why: str) -> LinearsChoice:
        set_kernel(_kernel(choice))
        return LinearsChoice(choice, why)

    if LINEARS.name in forced and forced[LINEARS.name] is not None:
        return settled(forced[LINEARS.name], f"linears={forced[LINEARS.name]} is forced")
    if choices.forced_choice(forced, LINEAR.name) is not None:  # `linear=...`, or a bare `stock`
        return settled(PER_SHAPE, f"linear={choices.forced_choice(forced, LINEAR.name)} is forced for every layer")
    if device.type != "cpu" or onednn_linear_op() is None:
        return settled(PER_SHAPE, "no oneDNN here: F.linear" if device.type == "cpu" else "not on the CPU: F.linear")
    entry = p.entry(LINEARS.name, fields)
    if steps is not None and steps < MIN_STEPS and entry is None:
        return settled(PER_SHAPE, f"{steps} steps are too few to repay timing them (under {MIN_STEPS}); "
                                "each layer as its shape's plan says")
    params = [q for q in module.parameters() if q.requires_grad]
    step = _candidate(lambda: module, step_loss, params, device)

    def using(choice: str, run: Callable[[], Any]) -> Callable[[], Any]:
        def call():
            set_kernel(_kernel(choice))
            return run()
        return call

    choice, before = PER_SHAPE, len(p.measured)  # PER_SHAPE: what the layers were told before, should this raise
    # The per-shape answers the candidates ask for are the measurement's, not the run's: a run's recorded
    # plan holds them only where "per-shape" wins (its first step asks them again), so that a run that
    # measured and one that read the record write the same plan.
    with p.recording(p._pinned):
        if entry is None:
            # One planned pass first, outside any measurement (inside one, each layer's own decision
            # gets the stock answer): the per-shape choices that "per-shape" stands for are made now.
            set_kernel(_kernel(PER_SHAPE))
            step()
        checked = {k: using(k, step) for k in LINEARS.choices}
        try:
            choice = p.decide(LINEARS.name, fields, lambda: checked, tolerance=tolerance,
                              budget_s=max(p.budget_s, BUDGET_S), extra=lambda: {"timed": "forward+backward"})
        finally:
            set_kernel(_kernel(choice))
    measured = entry_key(LINEARS.name, fields) in p.measured[before:]
    return LinearsChoice(choice, _times(p.entry(LINEARS.name, fields), "measured on the whole step" if measured
                                      else "recorded for the whole step"))


def _kernel(choice: str) -> str | None:
    """What a layer is told for `choice`: None (ask the plan per shape) for "per-shape"."""
    return None if choice == PER_SHAPE else choice
