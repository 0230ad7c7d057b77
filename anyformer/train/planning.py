"""The speed plan of one run's training step: what it replays, what it settles before the first
step, and what it records (plan.json and every checkpoint, through `runplan`).

Before the first step the trainer asks `StepPlan.settle` for two step-wide choices, each measured
on stand-ins of the step's shapes (never on the run's steps: a step taken under a candidate would
make the weights depend on what the cache held) or replayed from a recorded plan: the kernel of
all linear layers together (an fp32 CPU step that runs eagerly) and eager or torch.compile. Every
per-shape answer the planner gives inside `scope()` is recorded and pinned."""
from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch import Tensor, nn

from ..plan import adamw_impl, choices, compile_for_training, linears_for_training, planner, prepare, set_training_kernel
from ..plan.host import cpu_info  # re-exported: the CPU a run names in its log
from ..plan.linears import PER_SHAPE
from .config import TrainConfig
from .own_model import config_dict
from .distributed import Distributed
from .optim import param_groups
from .precision import autocast, resolve_amp
from .protocol import Task
from .runplan import PLAN_FILE, empty_plan, read_plan, synthetic_like

__all__ = ["StepPlan", "adamw_kernel", "cpu_info", "prepare_for_training", "stand_ins"]


class StepPlan:
    """The plan in force for a run: `plan` (the planner's answers, and the recorded step-wide
    choices), `compile_choice` and `linears_choice` (what `settle` chose), and `compiled`, the
    training step's module under torch.compile for chunks of `compiled_shape`, where chosen."""

    def __init__(self, cfg: TrainConfig, run_dir: Path, device: torch.device, announce: bool) -> None:
        self.cfg, self.device, self.announce = cfg, device, announce
        # Replayed from --plan PATH, else on --resume from the run's own plan.json, else made now.
        if cfg.plan not in ("auto", "stock"):
            self.plan, self.source = read_plan(cfg.plan), str(cfg.plan)
        elif cfg.resume and (run_dir / PLAN_FILE).is_file():
            self.plan, self.source = read_plan(run_dir), str(run_dir / PLAN_FILE)
        else:
            self.plan, self.source = empty_plan(), None
        self.replaying = bool(self.plan["answers"] or self.plan["compile"])
        self.compile_choice = "eager"
        self.linears_choice: str | None = None
        self.compiled: nn.Module | None = None
        self.compiled_shape: tuple[int, ...] | None = None

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """Decisions inside are recorded in `plan` and pinned (a run never changes its plan midway);
        `--plan stock` forces every one to stock."""
        with contextlib.ExitStack() as stack:
            if self.cfg.plan == "stock":
                stack.enter_context(planner().forcing("stock"))
            self.plan["answers"] = stack.enter_context(planner().recording(self.plan["answers"]))
            yield

    def planning_seconds(self) -> float:
        """Seconds this process has spent measuring (what a step's time leaves out)."""
        return planner().planning_s

    def state(self) -> dict[str, Any]:
        """The plan in force now, as plan.json and the checkpoints keep it."""
        return {**self.plan, "answers": dict(self.plan["answers"]), "compile": self.compile_choice,
                "linears": self.linears_choice}

    def module_for(self, chunk: Tensor) -> nn.Module | None:
        """The compiled step's module for a chunk of the shape it was planned for; None: run eagerly
        (an epoch's short last batch, rather than compiling a second graph)."""
        return self.compiled if len(chunk) and tuple(chunk.shape) == self.compiled_shape else None

    def settle(self, model: nn.Module, forward_model: nn.Module, step_loss: Callable[[nn.Module], Tensor],
               chunk: Tensor, steps_left: int, seconds_left: float | None) -> None:
        """Eager or torch.compile for the training step: forced by --compile / --no-compile, else
        replayed, else measured by the speed plan on this step's model, chunk shape and precision,
        the compile time counted against the steps (and seconds) left (anyformer.plan.compiled).
        Before that, for an fp32 CPU step that runs eagerly, the kernel of all its linear layers
        together (anyformer.plan.linears). `step_loss(m)` is one forward of stand-ins through `m`."""
        cfg, device = self.cfg, self.device
        amp = resolve_amp(cfg.amp, device)
        self.compiled_shape = tuple(chunk.shape)
        config = json.dumps(config_dict(model), sort_keys=True, default=str)
        fields = {"model": f"{type(model).__name__}-{hashlib.sha1(config.encode()).hexdigest()[:10]}",
                  "task": cfg.task, "batch": "x".join(map(str, chunk.shape)), "amp": amp, "device": device.type}
        # --compile / --no-compile, else the recorded choice (eager, compiled, graphs), else the plan's.
        wants = {True: "compiled", False: "eager"}.get(cfg.compile, self.plan["compile"])
        compiles = (wants or choices.forced_choice(planner().forced()[0], "compile") or "eager") != "eager"
        if amp == "none" and device.type == "cpu" and not compiles:  # a compiled graph's products are F.linear's
            if self.plan["linears"] is not None:
                self.linears_choice = choices.decision("linears").canonical(self.plan["linears"])
                why = "replayed from the recorded plan"
                set_training_kernel(model, None if self.linears_choice == PER_SHAPE else self.linears_choice)
            else:
                chosen = linears_for_training(forward_model, lambda kernel: set_training_kernel(model, kernel),
                                              step_loss, fields=fields, steps=steps_left, device=device)
                self.linears_choice, why = chosen.choice, chosen.why
            self._say(f"linears: {self.linears_choice} ({why})")
        if wants != "eager":
            with planner().forcing(compile=wants) if wants else contextlib.nullcontext():
                chosen = compile_for_training(forward_model, step_loss, fields=fields, steps=steps_left,
                                              tolerance=1e-3 if amp == "none" else 5e-2, device=device,
                                              seconds=seconds_left)
            self.compile_choice = chosen.choice
            if chosen.choice != "eager":
                self.compiled = chosen.module
            replayed = " (replayed from the recorded plan)" if cfg.compile is None and self.plan["compile"] else ""
            self._say(f"compile: {chosen.choice} ({chosen.why}){replayed}")

    def say_source(self) -> None:
        """Name the recorded plan the run replays (a plan made now is said as it is made, by `settle`)."""
        if self.replaying:
            self._say(f"plan: replaying {len(self.plan['answers'])} recorded choices from {self.source}")

    def _say(self, line: str) -> None:
        if self.announce:  # under torchrun, rank 0 speaks for the run
            print(line)


def stand_ins(task: Task, step: int, dist: Distributed, cfg: TrainConfig) -> tuple[Tensor, ...]:
    """What a planning pass runs: stand-ins (`synthetic_like`) of the shapes of this rank's first
    gradient-accumulation chunk of step `step`'s batch."""
    batch, _ = task.batch(step, dist.rank, dist.world)
    first = [torch.tensor_split(t, cfg.grad_accum)[0] for t in batch]
    return synthetic_like(first, cfg.seed)


def adamw_kernel(model: nn.Module, cfg: TrainConfig, device: torch.device) -> str:
    """AdamW's kernel for the model's parameter groups on `device` ("foreach" or "fused"): the plan's
    measured choice (answered from the plan pinned by `prepare_for_training` under torchrun)."""
    return adamw_impl(param_groups(model, cfg.weight_decay, cfg.decay_all), device=device)


def prepare_for_training(model: nn.Module, task: Task, dist: Distributed, cfg: TrainConfig) -> None:
    """The one place the trainer's model meets the plan (`plan.prepare`): its layers choose their
    kernels for a training forward of stand-ins shaped like this rank's share of the first batch
    (before the model is wrapped: no collectives; the RNG untouched), and the optimiser's kernel is
    asked for. Under torchrun rank 0 measures while the other ranks wait; they then take its
    answers, broadcast, instead of timing the same cores under each other's load (and perhaps
    choosing differently); not from the plan file, which is each machine's own: on another node it
    holds none of rank 0's measurements."""
    device = dist.device
    chunk = stand_ins(task, 0, dist, cfg)

    def example(m: nn.Module) -> None:
        if len(chunk[0]):
            with autocast(cfg.amp, device):
                task.loss(m, chunk)

    if dist.is_main:
        prepare(model, example)
        adamw_kernel(model, cfg, device)  # asked now, so that the answer is among those broadcast
    if not dist.enabled:
        return
    answers = dist.broadcast(planner().pinned() if dist.is_main else None)
    if not dist.is_main:
        planner().reset()  # read the plan file again: on rank 0's machine its measurements are in it
        planner().adopt(answers)
        prepare(model, example)
