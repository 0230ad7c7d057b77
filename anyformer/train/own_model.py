"""A model of the user's own (any `nn.Module`) in the trainer: what it needs to know of a model
that is not one of anyformer's presets, each asked through one small function here.

An anyformer `Model` answers from its config; any other module is described by its class and its
parameters' shapes (what a checkpoint must match to resume), its size by its linear layers (what
the precision choice is measured at), its FLOPs by counting one forward pass (`torch.utils.flop_counter`),
and it is saved as plain safetensors weights with a config.json that says whose they are.
"""
from __future__ import annotations

import hashlib
import json
import weakref
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..files import atomic_path, atomic_write_text
from ..models import Model

__all__ = ["OWN", "adopt", "config_dict", "count_params", "flops_per_item", "is_own", "measured_flops", "model_size",
           "save_model"]

OWN = "own"  # config.json's "family" for a run of the user's own module
# Forward FLOPs per item of each adopted module, on one example of its task's first batch (the inputs:
# every tensor of the batch but the targets, which come last).
_FLOPS: "weakref.WeakKeyDictionary[nn.Module, float]" = weakref.WeakKeyDictionary()


def is_own(model: nn.Module) -> bool:
    return not isinstance(model, Model)


def config_dict(model: nn.Module) -> dict[str, Any]:
    """What identifies the model for a checkpoint and the plan: a preset's config, or the class and
    a digest of every parameter's name and shape."""
    if not is_own(model):
        return dict(model.config.__dict__)
    shapes = sorted((k, tuple(v.shape)) for k, v in model.state_dict().items())
    digest = hashlib.sha1(json.dumps(shapes).encode()).hexdigest()[:16]
    return {"class": f"{type(model).__module__}.{type(model).__qualname__}", "params": count_params(model),
            "shapes_sha1": digest}


def count_params(model: nn.Module) -> int:
    """Parameters counted once each (shared ones too, as `Model.num_params`)."""
    return model.num_params() if not is_own(model) else sum(p.numel() for p in model.parameters())


def model_size(model: nn.Module) -> dict[str, int]:
    """(width, MLP hidden) for the precision measurement: a preset's, or else the commonest input
    width of the module's linear layers and their widest output."""
    if not is_own(model):
        c = model.config
        return dict(width=c.width, hidden=getattr(c, "mlp_hidden", None) or 4 * c.width)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if not linears:
        return dict(width=64, hidden=256)
    width = Counter(m.in_features for m in linears).most_common(1)[0][0]
    return dict(width=width, hidden=max(m.out_features for m in linears))


def adopt(model: nn.Module, task: Any, device: torch.device, fsdp: bool) -> nn.Module:
    """The user's module, ready to train on `task` (the trainer prepares it as it does presets),
    checked on one batch of the task's, so that a model that does not fit the data is refused in one
    line before anything is written."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"expected a torch.nn.Module to train, got {type(model).__name__}")
    if fsdp:
        raise ValueError("--fsdp shards anyformer's presets; a module of your own trains under torchrun with DDP "
                         "(leave --fsdp out)")
    model.to(device)
    batch, _ = task.batch(0)
    was = model.training
    model.eval()  # no dropout: the check draws nothing from the training RNG
    try:
        with torch.no_grad():
            task.loss(model, tuple(t[:2] for t in batch))
    except (RuntimeError, ValueError, IndexError, TypeError) as e:
        shapes = ", ".join(f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}" for t in batch)
        first = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
        raise ValueError(f"{type(model).__name__} does not fit the {type(task).__name__} task's batches "
                         f"({shapes}): {first}; expected {_expected(task)}") from None
    finally:
        model.train(was)
    # Counted now, on torch's own kernels: FlopCounterMode does not see the plan's private ones.
    _FLOPS[model] = measured_flops(model, tuple(t[:1] for t in batch[:-1])) / max(1, task.items_per_example)
    return model


def _expected(task: Any) -> str:
    """What the task feeds a model and wants back, in words, for the refusal above."""
    overrides = task.model_overrides()
    if "num_classes" in overrides:
        return f"logits (B, {overrides['num_classes']}) from its inputs"
    if "vocab_size" in overrides:
        return f"logits (B, T, {overrides['vocab_size']}) from token ids (B, T)"
    return f"the outputs the task's model takes ({overrides})"


def flops_per_item(task: Any, model: nn.Module) -> float:
    """Training FLOPs per item of the task's unit: a preset counts its own (the task asks it); the
    user's module is counted on one example of the first batch, times 3 (forward and backward)."""
    if not is_own(model):
        return task.flops_per_item(model)
    return 3.0 * _FLOPS[model]


@torch.no_grad()
def measured_flops(model: nn.Module, inputs: tuple[Tensor, ...]) -> float:
    """FLOPs of one forward pass over `inputs`, counted by torch's FlopCounterMode (matmuls,
    convolutions, attention), with the model in eval mode and its mode restored after."""
    from torch.utils.flop_counter import FlopCounterMode
    was = model.training
    model.eval()
    try:
        with FlopCounterMode(display=False) as counter:
            model(*inputs)
    finally:
        model.train(was)
    return float(counter.get_total_flops())


def save_model(model: nn.Module, directory: Path, extra: dict[str, Any]) -> None:
    """A preset saves itself (`Model.save`); the user's module as model.safetensors and a config.json
    that names its class, so that `model.load_state_dict(safetensors.torch.load_file(...))` restores it."""
    if not is_own(model):
        model.save(directory, extra=extra)
        return
    from safetensors.torch import save_model as save_weights
    directory.mkdir(parents=True, exist_ok=True)
    with atomic_path(directory / "model.safetensors") as tmp:
        save_weights(model, tmp, metadata={"family": OWN})
    meta = {"format_version": 1, "family": OWN, "config": config_dict(model), **extra}
    atomic_write_text(directory / "config.json", json.dumps(meta, indent=2) + "\n")
