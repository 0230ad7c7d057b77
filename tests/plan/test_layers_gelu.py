"""The planned GELU (`plan/layers.py`): the native kernel for the kinds of call chosen for it
(without gradients a few rows or more, or training calls), F.gelu for what the kernel cannot take,
and F.gelu's answer and gradient either way.

Which kernel ran is seen through conftest's `ran` (the module attributes the layers call, wrapped
to record each call and still run it); torch.compile is stood in for by conftest's `compiling`
(`_is_compiling` answering True, as `torch.compiler.is_compiling` does while dynamo traces)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from anyformer.plan.layers import PlannedGELU, native_gelu_may_run
from tests.conftest import skip_unless_runnable

from .layer_calls import TOL


# --- GELU -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("x, expected", [
    (torch.randn(3, 4), True), (torch.randn(1), True), (torch.randn(0, 4), False),
    (torch.randn(3, 4, dtype=torch.bfloat16), False), (torch.randn(3, 4, dtype=torch.float64), False),
    (torch.randn(3, 4, device="meta"), False)])
def test_native_gelu_may_run_on_nonempty_fp32_cpu_tensors(x, expected):
    assert native_gelu_may_run(x) is expected


def _gelu(native=False, few=False, training=False):
    """A planned tanh GELU with these choices, as prepare leaves one."""
    act = PlannedGELU(approximate="tanh")
    act.native, act.native_few, act.native_training = native, few, training
    return act


@pytest.mark.parametrize("chosen, shape, x_grad, grad_mode, expected", [
    ({"native": True}, (5, 8), False, False, ["gelu"]),
    ({"native": True}, (2, 8), False, False, []),
    ({"few": True}, (2, 8), False, False, ["gelu"]),
    ({"few": True}, (4, 8), False, False, ["gelu"]),     # ROWWISE_MAX_ROWS rows: still a few
    ({"few": True}, (1, 2, 8), False, False, ["gelu"]),  # 2 rows of 8 in a 3-D input
    ({"few": True}, (5, 8), False, False, []),
    ({"training": True}, (5, 8), True, True, ["gelu"]),
    ({"native": True, "few": True}, (5, 8), True, True, []),
    ({"native": True, "few": True}, (5, 8), False, True, ["gelu"]),  # grad mode on, no gradient wanted
    ({"training": True}, (5, 8), False, True, []),
    ({}, (5, 8), False, False, []),
    ({}, (2, 8), True, True, []),
])
def test_the_gelu_runs_natively_for_the_kinds_of_call_chosen(ran, chosen, shape, x_grad, grad_mode, expected):
    """`native_training` for calls whose input wants a gradient, else `native_few` for a few rows and
    `native` for more; the kernel's answer is F.gelu's, its approximation (tanh) and gradient included."""
    skip_unless_runnable("gelu=native")
    act = _gelu(**chosen)
    x = (torch.randn(*shape) * 3).requires_grad_(x_grad)
    with torch.set_grad_enabled(grad_mode):
        y = act(x)
        ref = F.gelu(x, approximate="tanh")
    assert ran == expected
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-6)
    if x_grad:
        dy = torch.randn_like(y)
        torch.testing.assert_close(torch.autograd.grad(y, x, dy)[0], torch.autograd.grad(ref, x, dy)[0], **TOL)


@pytest.mark.parametrize("x, expected", [
    (torch.randn(4, 8, dtype=torch.bfloat16), []), (torch.randn(0, 8), []), (torch.randn(1, 1), ["gelu"])])
def test_the_gelu_leaves_what_the_kernel_cannot_take_to_f_gelu(ran, x, expected):
    skip_unless_runnable("gelu=native")
    act = _gelu(native=True, few=True, training=True)
    with torch.no_grad():
        y = act(x)
    assert ran == expected
    torch.testing.assert_close(y, F.gelu(x, approximate="tanh"), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("grad", [False, True])
def test_a_gelu_of_a_scalar_is_nn_gelus(grad):
    """A 0-dim input is one row of one element, as nn.GELU takes it."""
    act = _gelu(native=True, few=True, training=True)
    x = torch.tensor(1.0, requires_grad=grad)
    with torch.set_grad_enabled(grad):
        torch.testing.assert_close(act(x), nn.GELU(approximate="tanh")(x), rtol=1e-5, atol=1e-6)
