"""What every model shares: a config dataclass, the preset table, save and load, FLOP counts.

The models' `from_timm`, `to_timm`, `from_hf` and `to_hf` are delegates: they import
`anyformer.interop` (the floor above) inside the method, when called, so that `models` never
imports `interop` at module level and the house's imports still point down.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import torch
from torch import nn

from ..files import atomic_path, atomic_write_text
from ..nn.attention import check_heads
from .presets import PRESETS, presets_of

M = TypeVar("M", bound="Model")
REGISTRY: dict[str, type["Model"]] = {}
FORMAT_VERSION = 1


def config_from_dict(config_class: type, values: dict[str, Any]):
    """Build a config dataclass, rejecting unknown options by name with the valid ones listed."""
    fields = {f.name for f in dataclasses.fields(config_class)}
    unknown = sorted(set(values) - fields)
    if unknown:
        raise ValueError(f"unknown {config_class.__name__} option(s) {unknown}; valid options: {sorted(fields)}")
    return config_class(**values)


def check_sizes(config: Any, names: tuple[str, ...]) -> None:
    """Every named field a positive integer, and the width divisible by the heads."""
    for name in names:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    check_heads(config.width, config.heads)


def matmul_weights(module: nn.Module) -> int:
    """Weights that multiply each token they see (linear and convolution layers): a forward pass
    spends 2 FLOPs (a multiply and an add) per such weight per token."""
    return sum(m.weight.numel() for m in module.modules() if isinstance(m, (nn.Linear, nn.Conv2d)))


def check_seq_len(seq_len: int | None, default: int, shortest: int, longest: int | None, what: str) -> int:
    """`seq_len`, or `default` for None; a clear error for anything but an int in [shortest, longest]."""
    if seq_len is None:
        return default
    if (isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < shortest
            or longest is not None and seq_len > longest):
        bounds = f">= {shortest}" if longest is None else f"in [{shortest}, {longest}]"
        raise ValueError(f"seq_len must be an int {bounds} ({what}), got {seq_len!r}")
    return seq_len


def config_to_dict(config: Any) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(config).items()}


class Model(nn.Module):
    """Base of ViT, GPT and TextEncoder: `preset`, `save`, `num_params`, and a `config`."""

    family: ClassVar[str]
    config_class: ClassVar[type]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        REGISTRY[cls.family] = cls

    @classmethod
    def from_config(cls: type[M], config: Any | dict[str, Any]) -> M:
        if isinstance(config, dict):
            config = config_from_dict(cls.config_class, config)
        return cls(config)

    @classmethod
    def preset(cls: type[M], name: str, **overrides: Any) -> M:
        """Build a preset, e.g. `ViT.preset("vit-b/16", num_classes=10)`."""
        valid = presets_of(cls.family)
        if name not in valid:
            raise ValueError(f"unknown {cls.__name__} preset {name!r}; valid presets: {valid}")
        return cls.from_config({**PRESETS[name][1], **overrides})

    def forward_flops(self, seq_len: int | None = None) -> float:
        """Matmul FLOPs of one forward pass over ONE example: one image, or one sequence of
        `seq_len` tokens (default: the longest the model takes). Training costs about 3x that
        (the backward pass computes two products for each of the forward's)."""
        raise NotImplementedError(f"{type(self).__name__} does not count its FLOPs")

    def num_params(self, trainable_only: bool = False) -> int:
        """Parameters counted once each (a tied LM head is not counted twice)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)

    def export_onnx(self, path: str | os.PathLike, **kwargs: Any) -> Path:
        """Write this model to an ONNX file, dynamic batch (and sequence) axes (see interop.onnx)."""
        from ..interop.onnx import export_onnx
        return export_onnx(self, path, **kwargs)

    def save(self, directory: str | os.PathLike, extra: dict[str, Any] | None = None) -> Path:
        """Write `config.json` and `model.safetensors` into `directory`, each atomically."""
        from safetensors.torch import save_model
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        meta = {"format_version": FORMAT_VERSION, "family": self.family,
                "config": config_to_dict(self.config), **(extra or {})}
        with atomic_path(out / "model.safetensors") as tmp:
            save_model(self, tmp, metadata={"family": self.family})  # drops tied duplicates
        atomic_write_text(out / "config.json", json.dumps(meta, indent=2) + "\n")
        return out


def read_config(directory: str | os.PathLike) -> dict[str, Any]:
    path = Path(directory) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"no model in {directory}: expected {path} (written by model.save or anyformer train)")
    try:
        meta = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not valid JSON ({e}); the run directory is damaged") from None
    if isinstance(meta, dict) and meta.get("family") == "own" and isinstance(meta.get("config"), dict):
        # A module of the user's own (`af.train.fit`): anyformer rebuilds only its own models from a config,
        # and importing a class a file names would run code the file chose.
        raise ValueError(f"{directory} holds a module of your own ({meta['config'].get('class', 'its class')}), "
                         f"which anyformer cannot rebuild from config.json; build it yourself and load its "
                         f"weights: safetensors.torch.load_model(model, '{Path(directory) / 'model.safetensors'}')")
    if not isinstance(meta, dict) or meta.get("family") not in REGISTRY or not isinstance(meta.get("config"), dict):
        raise ValueError(f"{path} does not describe an anyformer model: expected 'family' in "
                         f"{sorted(REGISTRY)} and a 'config' object")
    return meta


def load(directory: str | os.PathLike, device: str | torch.device = "cpu") -> Model:
    """Load a model saved by `model.save(directory)` or by `anyformer train` (no code is run)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_model
    meta = read_config(directory)
    model = REGISTRY[meta["family"]].from_config(meta["config"])
    weights = Path(directory) / "model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"no weights in {directory}: expected {weights}")
    try:
        missing, unexpected = load_model(model, weights, strict=False, device=str(device))
    except SafetensorError as e:
        raise ValueError(f"{weights} is not a readable safetensors file ({e})") from None
    except RuntimeError as e:  # shape mismatch
        raise ValueError(f"{weights} does not fit the model in config.json: {str(e).splitlines()[0]}"
                         f" {' '.join(l.strip() for l in str(e).splitlines()[1:4])}") from None
    if missing or unexpected:
        raise ValueError(f"{weights} does not fit the model in config.json: missing keys {sorted(missing)[:8]}, "
                         f"unexpected keys {sorted(unexpected)[:8]}")
    return model.to(device).eval()
