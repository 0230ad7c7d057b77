"""A few AdamW steps on a tiny batch: what the option tests use to show a ViT built with an option learns."""
from __future__ import annotations

import torch
from torch import nn


def fit_briefly(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, steps: int = 30,
                lr: float = 3e-3) -> tuple[float, float]:
    """Train `model` on one batch for `steps` steps; returns the first and the last step's loss."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return losses[0], losses[-1]
