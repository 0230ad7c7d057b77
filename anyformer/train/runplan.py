"""The speed plan a run trained with, kept beside it: plan.json in the run directory and a copy in
every checkpoint. It holds each answer the planner gave the run (decision key -> choice) and the
training step's own two choices (compile, linears). `--resume` replays the run's own plan and
`--plan PATH` another run's, so the same seed and the same plan give the same bits, whatever the
machine's timings cache holds and however busy the machine was when it planned."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import Tensor

from ..files import atomic_write_text

PLAN_FILE = "plan.json"
FORMAT = 1


def empty_plan() -> dict[str, Any]:
    return {"format": FORMAT, "answers": {}, "compile": None, "linears": None}


def read_plan(path: str | Path) -> dict[str, Any]:
    """A plan.json (or a run directory holding one), checked: one line saying what is wrong."""
    path = Path(path)
    if path.is_dir():
        path = path / PLAN_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no plan at {path}: expected a run's {PLAN_FILE} (written by anyformer train)")
    try:
        plan = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not a plan: not valid JSON ({e})") from None
    answers = plan.get("answers") if isinstance(plan, dict) else None
    if (not isinstance(answers, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in answers.items())
            or plan.get("format") != FORMAT):
        raise ValueError(f"{path} is not a plan: expected {{\"format\": {FORMAT}, \"answers\": {{key: choice}}, "
                         f"\"compile\": ..., \"linears\": ...}}")
    return {**empty_plan(), **{k: plan.get(k) for k in ("answers", "compile", "linears")}}


def write_plan(where: str | Path, plan: dict[str, Any]) -> Path:
    """Write `plan` to `where`: a run directory (its plan.json) or a file path."""
    path = Path(where)
    path = path / PLAN_FILE if path.is_dir() else path
    atomic_write_text(path, json.dumps({**plan, "format": FORMAT}, indent=2, sort_keys=True) + "\n")
    return path


def synthetic_like(batch: Sequence[Tensor], seed: int = 0) -> tuple[Tensor, ...]:
    """Stand-ins for a batch, to plan on: the same shapes, dtypes and devices, normal noise for
    floating tensors and zeros (a valid class, token or index) for the rest, drawn from a private
    generator. The plan times a run's step on these, never on its examples or its steps."""
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(t.shape, generator=g).to(device=t.device, dtype=t.dtype) if t.is_floating_point()
                 else torch.zeros_like(t) for t in batch)
