"""Floor 4: the training loop, optimiser and schedule, checkpoints and resume, distributed set-up."""
from .checkpoint import CheckpointError, load_checkpoint
from .config import TrainConfig
from .recipes import RECIPES, recipe_config
from .trainer import Interrupted, Trainer, TrainingError

__all__ = ["CheckpointError", "load_checkpoint", "TrainConfig", "RECIPES", "recipe_config", "Interrupted",
           "Trainer", "TrainingError"]


def train(recipe: str | None = None, **overrides) -> dict:
    """Train a recipe with overrides, e.g. `train("mnist", epochs=1, out="runs/m")`; returns the summary."""
    return Trainer(recipe_config(recipe, **overrides)).run()
