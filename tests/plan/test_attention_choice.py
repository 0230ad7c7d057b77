"""A prepared layer's attention function (`plan/attention_choice.py`): each eager call takes the
function chosen for its kind (gradients wanted, one query), SDPA where none was chosen; under
torch.compile one query over a static cache is written as sums, other calls take the function
chosen. conftest's `choice` records which function ran; `compiling` stands in for torch.compile."""

import pytest
import torch

from anyformer.nn.attend import sdpa
from anyformer.plan.attention_choice import AttentionChoice

from .layer_calls import TOL, qkv, recorded


@pytest.mark.parametrize("nq, grad, grad_mode, expected", [
    (5, False, True, "many"), (1, False, True, "one"), (5, True, True, "many, grads"),
    (1, True, True, "one, grads"), (5, True, False, "many"), (1, True, False, "one")])
@pytest.mark.parametrize("mask_dims", [None, 2, 4])
def test_an_eager_call_takes_the_function_chosen_for_its_kind(choice, nq, grad, grad_mode, expected, mask_dims):
    """(gradients wanted, one query) picks the function, and it gets the call's own mask: a 2-D one
    (a static cache's) too, outside torch.compile."""
    attend, log = choice
    q, k, v = qkv(nq, grad=grad)
    mask = {None: None, 2: torch.rand(nq, 6) > 0.3, 4: torch.rand(2, 1, nq, 6) > 0.3}[mask_dims]
    if mask is not None:
        mask[..., 0] = True
    with torch.set_grad_enabled(grad_mode):
        y = attend(q, k, v, mask, False, 0.0)
    assert len(log) == 1 and log[0][0] == expected and log[0][1] is mask
    torch.testing.assert_close(y, sdpa(q, k, v, mask, False, 0.0), rtol=0, atol=0)


def test_a_kind_not_chosen_for_takes_sdpa():
    log = []
    attend = AttentionChoice({(True, False): recorded(log, "many, grads")})
    q, k, v = qkv(5)
    torch.testing.assert_close(attend(q, k, v, None, True, 0.0), sdpa(q, k, v, None, True, 0.0), rtol=0, atol=0)
    assert log == []


@pytest.mark.parametrize("grad", [False, True])
def test_one_query_over_a_static_cache_under_compile_is_written_as_sums(compiling, choice, grad):
    """Under torch.compile one query with a 2-D (1, M) mask on the CPU, without dropout, is
    `attend.by_sums`: SDPA's answer, the positions not yet written masked."""
    attend, log = choice
    q, k, v = qkv(1, grad=grad)
    mask = torch.tensor([[True, True, False, True, False, False]])
    y = attend(q, k, v, mask, False, 0.0)
    assert log == []
    torch.testing.assert_close(y, sdpa(q, k, v, mask, False, 0.0), **TOL)


@pytest.mark.parametrize("nq, mask, dropout, device, expected", [
    (5, "2-D", 0.0, "cpu", "many"),   # more queries
    (1, "4-D", 0.0, "cpu", "one"),    # a padding mask, not a static cache's
    (1, None, 0.0, "cpu", "one"),
    (1, "2-D", 0.1, "cpu", "one"),    # dropout (by_sums has none)
    (1, "2-D", 0.0, "meta", "one"),   # not the CPU
])
def test_other_compiled_calls_take_the_function_chosen(compiling, choice, nq, mask, dropout, device, expected):
    attend, log = choice
    q, k, v = qkv(nq, device=device)
    m = {None: None, "2-D": torch.ones(nq, 6, dtype=torch.bool, device=device),
         "4-D": torch.ones(2, 1, nq, 6, dtype=torch.bool, device=device)}[mask]
    y = attend(q, k, v, m, False, dropout)
    assert [name for name, _ in log] == [expected] and y.shape == q.shape
