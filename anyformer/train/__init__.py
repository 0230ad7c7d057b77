"""Floor 4: the training loop, optimiser and schedule, checkpoints and resume, distributed set-up,
and the tasks it trains (registered by name in `TASKS`; each follows the `Task` protocol)."""
import os
from typing import TYPE_CHECKING, Any

from .checkpoint import CheckpointError, load_checkpoint
from .config import TrainConfig
from .protocol import Task
from .recipes import RECIPES, recipe_config
from .rundir import TrainingError
from .signals import Interrupted
from .tasks import TASKS
from .text_choice import resolve_lexical
from .trainer import Trainer

if TYPE_CHECKING:
    import torch

__all__ = ["CheckpointError", "load_checkpoint", "TrainConfig", "RECIPES", "recipe_config", "Interrupted",
           "Trainer", "TrainingError", "Task", "TASKS", "fit", "resolve_choices", "train"]


def train(recipe: str | None = None, *, model: "torch.nn.Module | None" = None, **overrides: Any) -> dict[str, Any]:
    """Train a recipe with overrides, e.g. `train("mnist", epochs=1, out="runs/m")`, or with no
    recipe and `data=` your own files (the task and settings derived from them); `model=` trains a
    module of your own instead of the recipe's preset. Returns the summary."""
    return _run(resolve_choices(recipe_config(recipe, **overrides)), model)


def resolve_choices(cfg: TrainConfig) -> TrainConfig:
    """`cfg` with the settings asked as "choose" answered by trial runs on its own training data
    (`--set lexical=choose`: train/text_choice.py): here, because trials are runs of the trainer."""
    import contextlib
    import io

    def run(**settings: Any) -> dict[str, Any]:
        with contextlib.redirect_stdout(io.StringIO()):  # a trial's lines would read as the run's own
            return Trainer(recipe_config(None, **settings)).run()

    return resolve_lexical(cfg, run)


def _run(cfg: TrainConfig, model: "torch.nn.Module | None") -> dict[str, Any]:
    if model is not None and cfg.derived.pop("model", None) is not None:
        cfg.model_overrides = {}  # the derived preset's sizes, not those of the model that trains
    return Trainer(cfg, model=model).run()


def fit(model: "torch.nn.Module", data: "str | os.PathLike[str]", *, task: str | None = None,
        recipe: str | None = None, **settings: Any) -> dict[str, Any]:
    """Train any `nn.Module` on `data` with the trainer: checkpoints, `resume=True`, metrics.jsonl,
    summary.json, the speed plan. `data`: a dataset name or your own files, whose settings are then
    derived from them as `anyformer train --data` does; `task` ("classify", "lm", "series"), where
    given, must be what the data is; `settings`: any `anyformer train` option by its field name
    (out, epochs, max_steps, batch_size, lr, seed, ...). The model is checked on one batch first:
    `model(images)` must give (B, classes) logits, `model(ids)` (B, T, vocab). Returns the summary.

        summary = af.train.fit(MyNet(), "photos/", out="runs/mine", epochs=20)
    """
    cfg = recipe_config(recipe, data=os.fspath(data), **settings)
    if task is not None and task != cfg.task:
        raise ValueError(f"task {task!r} was asked for, but {os.fspath(data)} is data for the {cfg.task!r} task; "
                         f"leave task out, or choose a recipe for {task!r}")
    return _run(cfg, model)
