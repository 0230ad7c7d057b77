"""Sharpness-aware minimisation (Foret et al. 2021, "Sharpness-Aware Minimization for Efficiently
Improving Generalization"): each step descends with the gradient taken at the worst point of a small
ball around the weights, not at the weights themselves.

With g the gradient at the weights w, the ascent step e = rho g / ||g|| (the whole model's L2 norm)
moves to w + e, where the loss is about its highest within radius rho; the gradient there replaces g,
the weights return to w exactly (they are copied, not subtracted: (w + e) - e is not w in floating
point), and the optimiser steps from w as usual. A step costs two forward and backward passes.
Chen, Hsieh and Gong (2022, "When Vision Transformers Outperform ResNets without Pretraining or
Strong Data Augmentations") found it lifts ViTs trained from scratch on small data most, where they
otherwise settle in sharp minima. `--sam RHO`; 0 (the default) is the plain step and costs nothing.

BatchNorm layers keep the running statistics of the first pass only: the second pass sees the same
batch at perturbed weights, which should not count twice (as the reference implementation does).
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import torch
from torch import Tensor, nn

__all__ = ["passes_per_step", "sharpness_aware"]


def passes_per_step(rho: float) -> int:
    """The forward and backward passes a training step runs: two under SAM (radius rho > 0), else one."""
    return 2 if rho else 1


def sharpness_aware(model: nn.Module, rho: float, backward: Callable[[], None]) -> None:
    """Turn the gradients in `model`'s parameters (those of the loss at the weights w, already summed
    over every chunk and rank) into those at w + rho g / ||g||: `backward()` runs the step's forward
    and backward passes again, adding into the cleared .grad. The weights are as they were after it.
    A step whose gradient is zero (or not finite) has no direction to climb: it is taken again at w."""
    params = [p for p in model.parameters() if p.grad is not None]
    if not params:
        return
    grads = [p.grad for p in params]
    norm = nn.utils.get_total_norm(grads)
    # Not a Python branch on `norm` (a host sync on a GPU): a zero or non-finite norm scales the
    # ascent to zero, and the second pass then takes the gradient at w itself.
    usable = torch.isfinite(norm) & (norm > 0)
    scale = torch.where(usable, rho / norm.clamp_min(torch.finfo(norm.dtype).tiny), torch.zeros_like(norm))
    weights = [p.detach().clone() for p in params]
    with torch.no_grad():
        torch._foreach_add_([p.detach() for p in params], torch._foreach_mul(grads, scale))
    for p in params:
        p.grad = None
    try:
        with _running_stats_frozen(model):
            backward()
    finally:
        with torch.no_grad():
            torch._foreach_copy_([p.detach() for p in params], weights)


@contextlib.contextmanager
def _running_stats_frozen(model: nn.Module) -> Iterator[None]:
    """Batch-norm layers normalise by the batch as in training but leave their running statistics
    (and their count of batches) as they were."""
    norms = [m for m in model.modules()
             if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats and m.training]
    saved: list[tuple[float | None, Tensor | None]] = []
    for m in norms:
        saved.append((m.momentum, None if m.num_batches_tracked is None else m.num_batches_tracked.clone()))
        m.momentum = 0.0  # running = (1 - 0) running + 0 batch
    try:
        yield
    finally:
        for m, (momentum, count) in zip(norms, saved):
            m.momentum = momentum
            if count is not None:
                m.num_batches_tracked.copy_(count)
