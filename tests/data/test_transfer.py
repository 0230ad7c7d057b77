"""Host values onto a device: the same values, whatever the route (the CUDA route: tests/gpu)."""
from __future__ import annotations

import torch

from anyformer.data.transfer import float64_on, to_device


def test_a_cpu_tensor_stays_itself_on_the_cpu():
    t = torch.arange(5)
    assert to_device(t, "cpu") is t and to_device(t, torch.device("cpu")) is t


def test_a_statistic_becomes_a_float64_scalar_with_its_value():
    for value, expected in [(7, 7.0), (2.5, 2.5), (torch.tensor(3), 3.0), (torch.tensor(1.5, dtype=torch.bfloat16), 1.5)]:
        out = float64_on(value, "cpu")
        assert out.dtype == torch.float64 and out.dim() == 0 and out.item() == expected
