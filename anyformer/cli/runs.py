"""Reading a run directory for the commands that use a trained model."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch loads after the parser is built
    from ..data.images.preprocess import ImagePreprocess
    from ..models.base import Model


def run_info(directory: str) -> tuple[Model, dict[str, Any]]:
    """The run's model, prepared by the speed plan for one input of its kind (the commands' passes run
    on its choices), and its config.json."""
    from ..models import read_config
    from ..runs import load_prepared
    meta = read_config(directory)
    return load_prepared(directory), meta


def image_preprocess(directory: str, info: dict[str, Any]) -> ImagePreprocess:
    """The normalisation the run was trained with (the same arithmetic, to the bit)."""
    from ..data.images.preprocess import ImagePreprocess
    if info.get("kind") != "images":
        raise ValueError(f"{directory} is not an image classifier run (its data kind is {info.get('kind')!r})")
    return ImagePreprocess.from_info(info)
