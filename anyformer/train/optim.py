"""Optimiser and learning-rate schedule."""
from __future__ import annotations

import math

import torch
from torch import nn

from .config import TrainConfig

# Never decayed: positions and prefix tokens are not weights that should shrink towards zero.
NO_DECAY = ("pos_embed", "cls_token", "reg_token")


def param_groups(model: nn.Module, weight_decay: float, decay_all: bool = False) -> list[dict]:
    """Weight decay on matrices only (never on biases, norms, positions or class tokens). Parameters a
    model names in its `lr_scales` (name prefix -> factor) form groups of their own, each with its
    `lr_scale`, which the trainer multiplies into the scheduled learning rate."""
    scales: dict[str, float] = getattr(model, "lr_scales", {}) or {}
    decay, no_decay = [], []
    scaled: dict[tuple[str, bool], list] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        decays = decay_all or (p.dim() >= 2 and not any(k in name for k in NO_DECAY))
        prefix = next((k for k in scales if name.startswith(k)), None)
        if prefix is not None:
            scaled.setdefault((prefix, decays), []).append(p)
        else:
            (decay if decays else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0},
            *({"params": ps, "weight_decay": weight_decay if decays else 0.0, "lr_scale": scales[prefix]}
              for (prefix, decays), ps in scaled.items())]


def make_optimizer(model: nn.Module, cfg: TrainConfig, impl: str = "foreach") -> torch.optim.Optimizer:
    """AdamW over `param_groups`; `impl` "foreach" (torch's default) or "fused" (one pass over every
    parameter): the plan's measured choice for these tensors on this device (train/planning.py's
    `adamw_kernel`; measured: docs/results.md, 'Measurements behind the code's choices')."""
    groups = param_groups(model, cfg.weight_decay, cfg.decay_all)
    # Decoupled weight decay in both cases: Keras's Adam(weight_decay=...), which Turner's (2023) MNIST ViT
    # uses, decouples it too.
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, **{impl: True})


def lr_at(step: int, total: int, cfg: TrainConfig) -> float:
    """Linear warm-up to cfg.lr, then constant or cosine down to lr * min_lr_ratio."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return cfg.lr
    progress = (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + (cfg.lr - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
