"""Sharpness-aware minimisation's gradient (train/sam.py) against the definition worked by hand:
the gradient at w + rho g / ||g||, the weights back to w bit for bit, BatchNorm's running statistics
counted once."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from anyformer.train.sam import sharpness_aware


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.GELU(), nn.Flatten(),
                         nn.Linear(4 * 6 * 6, 3))


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 1, 6, 6, generator=g), torch.randint(0, 3, (8,), generator=g)


def _grads(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters()]


def test_the_gradient_is_taken_again_at_the_ascent_point_and_the_weights_come_back():
    x, y = _data()
    model, reference = _net(), _net()
    F.cross_entropy(model(x), y).backward()
    first = _grads(model)
    weights = [p.detach().clone() for p in model.parameters()]
    sharpness_aware(model, 0.05, lambda: F.cross_entropy(model(x), y).backward())

    # By hand: e = rho g / ||g|| over the whole model, the gradient at w + e.
    norm = torch.sqrt(sum((g ** 2).sum() for g in first))
    with torch.no_grad():
        for p, g in zip(reference.parameters(), first):
            p.add_(0.05 * g / norm)
    F.cross_entropy(reference(x), y).backward()
    for got, want in zip(_grads(model), _grads(reference)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    assert any(not torch.allclose(a, b) for a, b in zip(_grads(model), first))  # it did move
    assert all(torch.equal(p, w) for p, w in zip(model.parameters(), weights))  # copied back, not subtracted


def test_batch_norm_counts_the_first_pass_only():
    x, y = _data()
    model = _net()
    F.cross_entropy(model(x), y).backward()
    bn = model[1]
    stats = (bn.running_mean.clone(), bn.running_var.clone(), bn.num_batches_tracked.clone())
    sharpness_aware(model, 0.1, lambda: F.cross_entropy(model(x * 3), y).backward())
    assert torch.equal(bn.running_mean, stats[0]) and torch.equal(bn.running_var, stats[1])
    assert int(bn.num_batches_tracked) == int(stats[2]) and bn.momentum == 0.1


def test_a_zero_gradient_has_nowhere_to_climb():
    x, y = _data()
    model = _net()
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    plain = copy.deepcopy(model)
    F.cross_entropy(plain(x), y).backward()
    sharpness_aware(model, 0.05, lambda: F.cross_entropy(model(x), y).backward())
    for got, want in zip(_grads(model), _grads(plain)):
        torch.testing.assert_close(got, want)
    assert all(torch.isfinite(g).all() for g in _grads(model))


@pytest.mark.parametrize("rho", [-0.1, float("inf"), float("nan")])
def test_a_radius_that_is_not_a_number_at_least_zero_is_refused(rho):
    from anyformer.train import TrainConfig
    with pytest.raises(ValueError, match="sam is the radius .* expected a number >= 0"):
        TrainConfig(recipe="x", sam=rho)
