"""The numerics check every candidate passes before it is timed: its output against stock's."""
from __future__ import annotations

from typing import Any

import torch


def max_error(out: Any, ref: Any) -> float:
    """Largest |out - ref| over all tensors, relative to the largest |ref|; inf when the structure,
    a shape or the pattern of non-finite values differs."""
    outs, refs = _tensors(out), _tensors(ref)
    if len(outs) != len(refs):
        return float("inf")
    worst, scale = 0.0, 0.0
    for o, r in zip(outs, refs):
        if o.shape != r.shape:
            return float("inf")
        if r.numel() == 0:
            continue
        o, r = o.detach().float(), r.detach().float()  # no copy for fp32
        if bool(torch.isfinite(r).all()):  # the usual case: no masks, no boolean indexing
            if not bool(torch.isfinite(o).all()):
                return float("inf")
        else:
            fo, fr = torch.isfinite(o), torch.isfinite(r)
            if not torch.equal(fo, fr):
                return float("inf")
            o, r = o[fr], r[fr]
            if r.numel() == 0:
                continue
        worst = max(worst, (o - r).abs().max().item())
        scale = max(scale, r.abs().max().item())
    return worst / scale if scale > 0 else (0.0 if worst == 0 else float("inf"))


def _tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for item in x for t in _tensors(item)]
    if x is None:
        return []
    raise TypeError(f"a candidate returns tensors, or lists or tuples of them; got {type(x).__name__}")
