"""Optimiser and learning-rate schedule."""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

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


@torch.no_grad()
def clip_grad_norm(params: list[nn.Parameter], max_norm: float) -> Tensor:
    """`torch.nn.utils.clip_grad_norm_(params, max_norm)`: the gradients scaled by min(1, max_norm / (norm +
    1e-6)) in place, and their total 2-norm returned. Where every gradient is a plain tensor of one device and
    dtype (any single-process or DDP run), the same four operations torch runs (each tensor's norm, the norm
    of those norms, the clamped coefficient, one multiply), so the same bits, without its per-call checks
    and grouping by device and dtype: a quarter less time on nanoGPT's CPU recipe model, 52 tensors (390
    against 525 us a call; benchmarks/bench_clip.py). Anything else (FSDP's sharded gradients, mixed dtypes)
    goes to torch's own."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    first = grads[0]
    plain = all(type(g) is Tensor and g.device == first.device and g.dtype == first.dtype for g in grads)
    if not plain or first.device.type not in ("cpu", "cuda"):
        return nn.utils.clip_grad_norm_(params, max_norm)
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
    torch._foreach_mul_(grads, torch.clamp(float(max_norm) / (total + 1e-6), max=1.0))
    return total


def lr_at(step: int, total: int, cfg: TrainConfig) -> float:
    """Linear warm-up to cfg.lr, then constant or cosine down to lr * min_lr_ratio."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return cfg.lr
    progress = (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + (cfg.lr - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
