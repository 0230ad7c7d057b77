"""Floor 4: the training loop, optimiser and schedule, checkpoints and resume, distributed set-up,
and the tasks it trains (registered by name in `TASKS`; each follows the `Task` protocol)."""
from .checkpoint import CheckpointError, load_checkpoint
from .config import TrainConfig
from .protocol import Task
from .recipes import RECIPES, recipe_config
from .rundir import TrainingError
from .signals import Interrupted
from .tasks import TASKS
from .trainer import Trainer

__all__ = ["CheckpointError", "load_checkpoint", "TrainConfig", "RECIPES", "recipe_config", "Interrupted",
           "Trainer", "TrainingError", "Task", "TASKS"]


def train(recipe: str | None = None, **overrides) -> dict:
    """Train a recipe with overrides, e.g. `train("mnist", epochs=1, out="runs/m")`; returns the summary."""
    return Trainer(recipe_config(recipe, **overrides)).run()
