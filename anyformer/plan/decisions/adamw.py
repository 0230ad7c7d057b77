"""AdamW's step: the multi-tensor foreach implementation or the fused kernel."""
from __future__ import annotations

from typing import Any, Callable, Iterable

import torch

from .. import planner as _planner
from ..choices import Decision, register
from .common import _ADAMW_MAX_NUMEL, _ADAMW_MAX_TENSORS, _bucket, _randn

ADAMW = register(Decision("adamw", ("foreach", "fused"), "AdamW step: multi-tensor foreach or the fused kernel"))

def adamw_impl(params: Iterable[Any], *, device: torch.device | str | None = None) -> str:
    """"foreach" or "fused" for torch.optim.AdamW over `params` (tensors, or param groups: dicts
    with "params"), timed on a stand-in of the same device, dtypes, tensor count and size (at most
    64 tensors and 1M elements, so the plan stays cheap for large models). `device`: where the
    optimiser will run, if not where `params` are (e.g. a model built on the meta device)."""
    tensors = []
    for item in params:
        tensors.extend(item["params"] if isinstance(item, dict) else [item])
    if not tensors:
        return ADAMW.stock
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        raise ValueError(f"adamw_impl: expected tensors or param groups, got {type(tensors[0]).__name__}")
    device = torch.device(device) if device is not None else tensors[0].device
    dtypes = tuple(sorted({str(t.dtype).removeprefix("torch.") for t in tensors}))
    count, numel = len(tensors), sum(t.numel() for t in tensors)
    memo = ("adamw", device, dtypes, count, numel)
    p = _planner._PLANNER
    if (choice := p.lookup(memo)) is not None:
        return choice
    fields = {"device": device.type, "dtypes": "+".join(dtypes), "tensors": _bucket(count, 1024),
              "numel": _bucket(max(1, numel), 1 << 30)}
    n = min(count, _ADAMW_MAX_TENSORS)
    size = max(1, min(numel, _ADAMW_MAX_NUMEL) // n)
    dtype = getattr(torch, dtypes[0])
    reduced = {"tensors": n, "numel": n * size} if (n, n * size) != (count, numel) else None
    return p.decide("adamw", fields, lambda: _adamw_runs(n, size, dtype, device), memo_key=memo,
                    tolerance=1e-5, measured_with=reduced)


def _adamw_runs(n: int, size: int, dtype: torch.dtype, device: torch.device) -> dict[str, Callable]:
    g = torch.Generator().manual_seed(0)
    start = _randn(g, n, size, dtype=dtype, device=device).unbind(0)  # one draw: randn is slow per call
    grads = [0.1 * t.flip(0) for t in start]

    def candidate(**impl: bool) -> Callable:
        params = [torch.nn.Parameter(s.clone()) for s in start]
        for p, gr in zip(params, grads):
            p.grad = gr
        try:
            opt = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01, **impl)
        except Exception as e:  # noqa: BLE001 - e.g. no fused kernel for this device or dtype
            error = e

            def unavailable():
                raise error
            return unavailable

        def step():
            opt.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            return [p.detach() for p in params]
        return step

    return {"foreach": candidate(foreach=True), "fused": candidate(fused=True)}
