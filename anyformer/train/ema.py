"""An exponential moving average of the weights: ema = d ema + (1 - d) w after each optimiser step.

Averaging the last few thousand steps' weights smooths the noise of the updates; generators are
judged by it (DiT, SiT). Early on the average would mostly remember the random initial weights, so
the decay ramps up as (1 + n) / (10 + n) after n updates until it reaches the one asked for: a
function of the step alone, so a resumed run averages exactly as an unbroken one.
"""
from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn


class EMA:
    """A frozen copy of `model` (same class, config and save/load) that follows its weights."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        if not 0 < decay < 1:
            raise ValueError(f"ema decay must be in (0, 1), got {decay}")
        self.decay = decay
        self.model = copy.deepcopy(model).eval().requires_grad_(False)

    def decay_at(self, updates: int) -> float:
        return min(self.decay, (1 + updates) / (10 + updates))

    @torch.no_grad()
    def update(self, model: nn.Module, updates: int) -> None:
        """Move towards `model`'s weights after its `updates`-th optimiser step (counted from 1)."""
        mine, theirs = list(self.model.parameters()), list(model.parameters())
        torch._foreach_lerp_(mine, theirs, 1.0 - self.decay_at(updates))
        for b, src in zip(self.model.buffers(), model.buffers()):
            b.copy_(src)

    def state_dict(self) -> dict[str, Any]:
        return self.model.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state)
