"""What every section of the app shares: the run's model and settings, the limits, the worker."""
from __future__ import annotations

import dataclasses
from typing import Any

from .limits import Limits
from .worker import ModelWorker


@dataclasses.dataclass
class Context:
    run_dir: str
    model: Any                 # an anyformer model, in eval mode
    meta: dict[str, Any]       # the run's config.json
    limits: Limits
    worker: ModelWorker

    @property
    def data(self) -> dict[str, Any]:
        """The run's data section (classes, preprocessing, tokenizer)."""
        return self.meta.get("data", {})
