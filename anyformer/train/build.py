"""The device and the model a run trains: the preset checked against the task and the data, the
overrides' types checked, and the size checked against memory before any memory is taken."""
from __future__ import annotations

import contextlib
import json
import os
import types
import typing
from typing import Any

import torch
from torch import nn

from ..models import PRESETS, REGISTRY, Model
from .config import TrainConfig
from .protocol import Task


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda was asked for, but no CUDA device is available; use --device cpu or auto")
    return torch.device(name)


def set_threads(threads: int | None, dist: Any, device: torch.device) -> None:
    """torch's threads: as many as --threads asks; under torchrun on a CPU, the cores shared among the
    machine's ranks (torchrun gives each rank OMP_NUM_THREADS=1); else torch's own choice."""
    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        torch.set_num_threads(threads)
    elif dist.enabled and device.type == "cpu":
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // dist.local_world))


def build_model(cfg: TrainConfig, task: Task, device: torch.device | None = None, shards: int = 1) -> Model:
    """The preset with the user's overrides and the fields the data fixes (classes, vocabulary)."""
    if cfg.model not in PRESETS:
        raise ValueError(f"unknown model preset {cfg.model!r}; valid presets: {sorted(PRESETS)}")
    family = PRESETS[cfg.model][0]
    if family != task.family:
        raise ValueError(f"model {cfg.model!r} is a {family} model, but task {cfg.task!r} trains {task.family} models")
    _check_types(REGISTRY[family].config_class, cfg.model_overrides)
    fixed = task.model_overrides()
    for key, value in cfg.model_overrides.items():
        if key in fixed and _as_list(value, fixed[key]) != _as_list(fixed[key], fixed[key]):
            raise ValueError(f"--set {key}={json.dumps(value)} contradicts the data, which needs "
                             f"{key}={json.dumps(fixed[key])}; leave {key} out")
    kwargs = {**cfg.model_overrides, **fixed}
    # Build once without memory first, so that an absurd size is refused instead of exhausting the machine.
    with torch.device("meta"), _shapes_only():
        probe = REGISTRY[family].preset(cfg.model, **kwargs)
    _check_fits(probe, device or torch.device("cpu"), shards)
    model = REGISTRY[family].preset(cfg.model, **kwargs)
    fit = getattr(task, "fit_model", None)  # optional: see protocol.py
    if fit is not None:
        fit(model)
    if cfg.init_from is not None:
        init_from(model, cfg.init_from, cfg.model)
    return model  # plain: the trainer prepares it (train/planning.py, `prepare_for_training`)


# torch.nn.init's functions, which the models call as `nn.init.<name>` (so patching the module reaches them).
_INIT = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_", "xavier_uniform_",
         "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_", "sparse_")


@contextlib.contextmanager
def _shapes_only():
    """Initialisers that leave their tensor as it is, for a probe that needs only shapes (Hugging
    Face's `no_init_weights` does the same). On meta tensors, torch runs its Python reference of
    each initialiser, whose first call imports the compiler: a second or so of every run's start,
    for a probe whose values nobody reads (measured: docs/results.md, 'Measurements behind the
    code's choices').
    (For the same reason the models scale their random tables in place, `randn(...).mul_(std)`.)"""
    saved = {name: getattr(nn.init, name) for name in _INIT if hasattr(nn.init, name)}
    try:
        for name in saved:
            setattr(nn.init, name, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for name, fn in saved.items():
            setattr(nn.init, name, fn)


TRUNK = ("patch_embed.", "prefix.", "pos.", "backbone.")  # a ViT's trunk, and an MAE's encoder by the same names


def init_from(model: Model, directory: str, name: str = "the model") -> None:
    """Start `model` from a run's weights: a ViT from the trunk of an MAE's encoder or of another ViT
    (its classifier head starts fresh), any other model from a run of its own family, every weight.
    Shapes must match exactly; the first that does not is named with both shapes."""
    from pathlib import Path

    from safetensors import SafetensorError
    from safetensors.torch import load_file
    from ..models import read_config
    source = read_config(directory)["family"]
    if model.family == "vit" and source in ("vit", "mae"):
        wanted = lambda key: key.startswith(TRUNK)
    elif model.family == source:
        wanted = lambda key: True
    else:
        raise ValueError(f"--init-from {directory}: a {source} run cannot start a {model.family} model; "
                         f"expected an MAE or ViT run for a ViT, or a run of the same family")
    try:
        weights = {k: v for k, v in load_file(Path(directory) / "model.safetensors").items() if wanted(k)}
    except SafetensorError as e:
        raise ValueError(f"--init-from {directory}: model.safetensors is not readable ({e})") from None
    own = {k: v for k, v in model.state_dict().items() if wanted(k)}
    for key in sorted(set(own) | set(weights)):
        there = tuple(weights[key].shape) if key in weights else "absent"
        here = tuple(own[key].shape) if key in own else "absent"
        if there != here:
            raise ValueError(f"--init-from {directory}: {key} is {there} in that {source} run but {here} in "
                             f"{name}; expected a run of the same shape (width, depth, patch, positions)")
    with torch.no_grad():
        for key, value in weights.items():
            own[key].copy_(value)


_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "null"}


def _check_types(config_class: type, overrides: dict[str, Any]) -> None:
    """`--set depth=2.5` or `--set width=abc` named plainly, before the model trips over it."""
    hints = typing.get_type_hints(config_class)
    for key, value in overrides.items():
        if key in hints and not _fits(value, hints[key]):
            raise ValueError(f"--set {key}={json.dumps(value)}: expected {_describe(hints[key])}")


def _fits(value: Any, hint: Any) -> bool:
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return any(_fits(value, a) for a in args)
    if typing.get_origin(hint) is tuple:
        return isinstance(value, (list, tuple)) and len(value) == len(args) and all(map(_fits, value, args))
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint in _NAMES:
        return isinstance(value, hint)
    return True  # anything else is the config's own business


def _describe(hint: Any) -> str:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return " or ".join(_describe(a) for a in typing.get_args(hint))
    if typing.get_origin(hint) is tuple:
        return f"a list of {len(typing.get_args(hint))} values"
    return _NAMES.get(hint, str(hint))


def _as_list(v: Any, like: Any) -> Any:
    """28 and [28, 28] are the same image size."""
    if isinstance(like, (list, tuple)):
        return list(v) if isinstance(v, (list, tuple)) else [v] * len(like)
    return v


def _check_fits(model: nn.Module, device: torch.device, shards: int) -> None:
    tensors = [*model.parameters(), *model.buffers()]
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    need = 4 * nbytes / shards  # weights, gradients and Adam's two moments (FSDP splits them)
    if device.type == "cuda":
        have = torch.cuda.mem_get_info(device)[1]
    else:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > have:
        params = sum(p.numel() for p in model.parameters())
        raise ValueError(f"this model has {params:,} parameters and needs about {need / 2**30:,.1f} GiB to train "
                         f"(weights, gradients, optimiser state), more than the {have / 2**30:,.1f} GiB of "
                         f"{device.type} memory; choose a smaller width, depth or image size")
