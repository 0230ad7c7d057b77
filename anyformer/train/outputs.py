"""What a run writes besides its checkpoints: the model file and the task's pictures, each from the model as
one ordinary module (under FSDP, one CPU copy of the gathered weights on rank 0)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..models import REGISTRY, Model
from . import own_model

if TYPE_CHECKING:
    from .trainer import Trainer


def plain_model(t: Trainer) -> Model:
    """The model as one ordinary module: itself, or under FSDP a CPU copy of the gathered weights (on rank 0),
    built once. Every rank must call this: the gathering is collective."""
    if not t.dist.fsdp:
        return t.model
    weights = t.dist.state(t.model)
    if t.dist.is_main:
        if t.cpu_copy is None:
            with torch.random.fork_rng(devices=[]):  # building it must not move the training RNG
                t.cpu_copy = REGISTRY[t.model.family].from_config(t.model.config)
        t.cpu_copy.load_state_dict(weights)
    return t.cpu_copy


def save_model(t: Trainer) -> None:
    """model.safetensors: the weights (their average, where the run keeps one) with the run's settings."""
    model = plain_model(t) if t.ema is None else t.ema.model
    extra = {"train": t.cfg.to_dict(), "data": t.task.run_info()}
    t.files.on_main("write the model", t.run_dir / "model.safetensors",
                    lambda: own_model.save_model(model, t.run_dir, extra))


def draw_on_main(t: Trainer, run_dir: Path) -> None:
    """The task's pictures from the last evaluation (rank 0; the run directory's `finish` and `draw` run it
    there)."""
    model = t.cpu_copy if t.dist.fsdp else t.evaluated_model()
    if own_model.is_own(model):  # the task's pictures read a preset's attention; curves.png is drawn still
        return
    t.task.draw(model, t.last_eval, run_dir)


def draw(t: Trainer, run_dir: Path) -> None:
    t.files.on_main("draw the pictures into", run_dir, lambda: draw_on_main(t, run_dir))
