"""The task registry: a name in TrainConfig.task -> the class that trains it. A new task is a class
that follows `protocol.Task`, added to `_WHERE` (and its pictures to `PICTURES`); the trainer needs no change."""
from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from importlib import import_module
from typing import TYPE_CHECKING, Any

import torch

from .config import TrainConfig
from .protocol import Task

if TYPE_CHECKING:
    from .classify import ImageClassification
    from .flow import FlowMatching
    from .lm import LanguageModelling
    from .mae import MaskedAutoencoding

__all__ = ["TASKS", "Task", "make_task", "task_pictures", "ImageClassification", "LanguageModelling",
           "FlowMatching", "MaskedAutoencoding"]

# name -> (module, class). A task's module is imported when a run of it is made: a language model's run
# then does not import the image, series and table readers (Pillow and pandas: 0.4 s of every start).
_WHERE = {
    "classify": ("classify", "ImageClassification"),
    "lm": ("lm", "LanguageModelling"),
    "flow": ("flow", "FlowMatching"),
    "mae": ("mae", "MaskedAutoencoding"),
    "series": ("series", "SeriesClassification"),
    "table": ("tables", "TableTask"),
    "text-classify": ("textclass", "TextClassification"),
}
# Every picture any task draws (each class's `pictures`, here so that a run need not import every task to
# know them; tests/train/test_tasks.py checks that the two agree).
PICTURES = ("confusion.png", "attention.png", "samples.png", "reconstruction.png", "predictions.png")


class _Registry(MutableMapping[str, "type[Task]"]):
    """The task classes by name: the built-in ones imported on first use, others set as classes
    (`TASKS["mine"] = MyTask`)."""

    def __init__(self, where: dict[str, tuple[str, str]]) -> None:
        self._where, self._classes = dict(where), {}

    def __getitem__(self, name: str) -> type[Task]:
        if name not in self._classes:
            module, cls = self._where[name]
            self._classes[name] = getattr(import_module(f".{module}", __package__), cls)
        return self._classes[name]

    def __setitem__(self, name: str, cls: type[Task]) -> None:
        self._where.pop(name, None)
        self._classes[name] = cls

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        self._where.pop(name, None)
        self._classes.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*self._where, *self._classes]))

    def __len__(self) -> int:
        return len({*self._where, *self._classes})

    def pictures(self) -> tuple[str, ...]:
        """Every picture a registered task draws, importing none: the built-in tasks' from PICTURES,
        and those of every class already here (one registered from outside among them)."""
        return tuple(dict.fromkeys([*PICTURES, *(p for cls in self._classes.values() for p in cls.pictures)]))


TASKS: _Registry = _Registry(_WHERE)


def __getattr__(name: str) -> Any:
    """The task classes by their own names too (`from anyformer.train.tasks import ImageClassification`)."""
    for module, cls in _WHERE.values():
        if cls == name:
            return getattr(import_module(f".{module}", __package__), cls)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_task(cfg: TrainConfig, device: torch.device, info: dict[str, Any] | None = None) -> Task:
    """The task `cfg.task` names, on its data. `info`: a finished run's data section, to score it as trained."""
    if cfg.task not in TASKS:
        raise ValueError(f"unknown task {cfg.task!r}; expected one of {sorted(TASKS)}")
    return TASKS[cfg.task](cfg, device, info=info)


def task_pictures() -> tuple[str, ...]:
    """Every picture any task draws: a fresh run removes those an earlier run of any task left."""
    return TASKS.pictures()
