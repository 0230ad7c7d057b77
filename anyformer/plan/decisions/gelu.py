"""GELU's kernel: F.gelu or anyformer's own (plan/native.py)."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from .. import native
from .. import planner as _planner
from ..choices import Decision, register
from .common import _GELU_MAX_NUMEL, _bucket, _may_build, _positive, _randn, _with_grads

GELU = register(Decision("gelu", ("stock", "native"),
                         "fp32 CPU GELU: F.gelu or anyformer's own kernel, compiled here (plan/native.py)"))

def gelu_kernel(numel: int, approximate: str, training: bool) -> str:
    """"stock" (F.gelu) or "native" (`native.gelu`) for an fp32 CPU GELU over `numel` elements
    (keyed by the next power of two, timed on at most _GELU_MAX_NUMEL); `training`: forward and
    backward. "native" is offered only where the kernel builds here."""
    memo = ("gelu", _bucket(numel, 1 << 40), approximate, training)
    p = _planner._PLANNER
    if (choice := p.lookup(memo)) is not None:
        return choice
    _positive("gelu_kernel", numel=numel)
    if approximate not in native.GELU_APPROXIMATIONS:
        raise ValueError(f"gelu_kernel: approximate must be one of {native.GELU_APPROXIMATIONS}, got {approximate!r}")
    n = _bucket(numel, 1 << 40)
    rep = min(n, _GELU_MAX_NUMEL)
    fields = {"numel": n, "approximate": approximate, "training": bool(training)}
    avail = GELU.choices if _may_build(p, "gelu") and native.library() is not None else ("stock",)
    return p.decide("gelu", fields, lambda: _gelu_runs(rep, approximate, training), memo_key=memo, available=avail,
                    partial=("native",), tolerance=1e-4, measured_with={"numel": rep} if rep != n else None)


def _gelu_runs(n: int, approximate: str, training: bool) -> dict[str, Callable]:
    g = torch.Generator().manual_seed(0)
    x, dy = _randn(g, n) * 3, _randn(g, n)
    runs = {"stock": lambda: F.gelu(x, approximate=approximate), "native": lambda: native.gelu(x, approximate)}
    if not training:
        return runs
    x.requires_grad_()
    return {name: _with_grads(f, (x,), dy) for name, f in runs.items()}
