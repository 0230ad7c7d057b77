"""The trainer's gradient clip: torch's `clip_grad_norm_` to the bit, on what a run holds."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from anyformer.train.optim import clip_grad_norm


def _model(dtype: torch.dtype = torch.float32) -> nn.Module:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(7, 16), nn.LayerNorm(16), nn.Linear(16, 3), nn.Linear(3, 3))
    m[3].requires_grad_(False)  # a frozen layer: no gradient to clip
    return m.to(dtype)


def _with_grads(m: nn.Module, scale: float) -> list[nn.Parameter]:
    torch.manual_seed(1)
    params = list(m.parameters())
    for p in params:
        p.grad = torch.randn_like(p) * scale if p.requires_grad else None
    return params


@pytest.mark.parametrize("scale", [10.0, 1e-3])  # a norm far over the limit (scaled down), and one under it (kept)
@pytest.mark.parametrize("mixed", [False, True])  # one dtype (the lean path), and two (torch's own)
def test_the_clip_gives_torchs_norm_and_gradients_bit_for_bit(scale, mixed) -> None:
    ours, theirs = _model(), _model()
    if mixed:
        ours[1].to(torch.float64), theirs[1].to(torch.float64)
    a, b = _with_grads(ours, scale), _with_grads(theirs, scale)
    before = [None if p.grad is None else p.grad.clone() for p in a]
    norm = clip_grad_norm(a, 1.0)
    expected = nn.utils.clip_grad_norm_(b, 1.0)
    assert torch.equal(norm, expected) and float(norm) > 0
    for p, q in zip(a, b):
        assert (p.grad is None and q.grad is None) or torch.equal(p.grad, q.grad)
    changed = [not torch.equal(p.grad, g) for p, g in zip(a, before) if g is not None]
    if scale > 1:  # over the limit: every gradient scaled down, to a total norm of the limit
        assert all(changed)
        total = torch.linalg.vector_norm(torch.stack([p.grad.double().norm() for p in a if p.grad is not None]))
        assert abs(float(total) - 1.0) < 1e-4
    else:  # under it: multiplied by exactly 1
        assert not any(changed)


def test_no_gradient_at_all_is_a_norm_of_zero() -> None:
    m = _model()
    assert float(clip_grad_norm(list(m.parameters()), 1.0)) == 0.0
