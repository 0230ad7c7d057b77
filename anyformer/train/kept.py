"""The weights a run keeps where its task scores rows held back from training for choosing (a table's
--select-fraction): those of the evaluation that scored best on them, not the last ones.

A task opts in by returning a "select" key in its evaluation's result (a tuple, higher is better) and
saying how many rows it held back (`select_examples`); the later of equal keys wins (the same score
after more training). The kept evaluation travels in the checkpoint, so a stopped run resumes with it."""
from __future__ import annotations

from typing import Any

from torch import nn


class KeptWeights:
    def __init__(self) -> None:
        self.best: dict[str, Any] | None = None  # {key, step, weights, line}

    @property
    def step(self) -> int | None:
        return None if self.best is None else self.best["step"]

    def offer(self, result: dict[str, Any] | None, model: nn.Module, step: int, line: dict[str, Any]) -> None:
        """Copy `model`'s weights where `result`'s "select" key is the best so far."""
        key = (result or {}).get("select")
        if key is None or (self.best is not None and tuple(key) < tuple(self.best["key"])):
            return
        weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.best = {"key": list(key), "step": step, "weights": weights, "line": dict(line)}

    def put_back(self, model: nn.Module) -> dict[str, Any]:
        """Load the kept weights into `model`; their evaluation's metrics line, with "kept_step"."""
        model.load_state_dict(self.best["weights"])
        return {**self.best["line"], "kept_step": self.best["step"]}

    def state(self) -> dict[str, Any] | None:
        return self.best

    def load(self, state: dict[str, Any] | None) -> None:
        self.best = state
