"""The task registry: a name in TrainConfig.task -> the class that trains it. A new task is a class
that follows `protocol.Task`, added here; the trainer needs no change."""
from __future__ import annotations

from typing import Any

import torch

from .classify import ImageClassification
from .config import TrainConfig
from .flow import FlowMatching
from .lm import LanguageModelling
from .mae import MaskedAutoencoding
from .protocol import Task
from .series import SeriesClassification
from .tables import TableTask
from .textclass import TextClassification

__all__ = ["TASKS", "Task", "make_task", "task_pictures", "ImageClassification", "LanguageModelling",
           "FlowMatching", "MaskedAutoencoding"]

TASKS: dict[str, type[Task]] = {
    "classify": ImageClassification,
    "lm": LanguageModelling,
    "flow": FlowMatching,
    "mae": MaskedAutoencoding,
    "series": SeriesClassification,
    "table": TableTask,
    "text-classify": TextClassification,
}


def make_task(cfg: TrainConfig, device: torch.device, info: dict[str, Any] | None = None) -> Task:
    """The task `cfg.task` names, on its data. `info`: a finished run's data section, to score it as trained."""
    if cfg.task not in TASKS:
        raise ValueError(f"unknown task {cfg.task!r}; expected one of {sorted(TASKS)}")
    return TASKS[cfg.task](cfg, device, info=info)


def task_pictures() -> tuple[str, ...]:
    """Every picture any task draws: a fresh run removes those an earlier run of any task left."""
    return tuple(dict.fromkeys(name for cls in TASKS.values() for name in cls.pictures))
