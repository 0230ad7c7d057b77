"""Swapping the planned layers in and out (`plan/layers.py` `swap`, `plan.unprepare`): the listed
types turned and handed back, token-wise GELUs found, the default attention function restored, an
unknown training kernel refused."""

import torch
from torch import nn

from anyformer import plan
from anyformer.nn import MLP, ClassifierHead, MultiHeadAttention
from anyformer.nn.attend import sdpa
from anyformer.plan.attention_choice import AttentionChoice
from anyformer.plan.layers import PLANNED, STOCK, NativePacked, PlannedGELU, PlannedLinear, swap, token_wise_gelus
from tests.conftest import skip_unless_runnable
from tests.refused import refused


# --- swapping the layers in and out ---------------------------------------------------------------------
def test_swap_turns_the_listed_types_and_returns_the_layers_it_turned():
    model = nn.Sequential(MLP(8, 16), nn.Linear(8, 8), nn.GELU(), MultiHeadAttention(8, 2))
    attn = model[3]
    expected = [model[0].fc1, model[0].act, model[0].fc2, model[1], attn.qkv, attn.proj]
    swapped = swap(model, PLANNED)
    assert len(swapped) == len(expected) and all(a is b for a, b in zip(swapped, expected))
    assert [type(m) for m in swapped] == [PlannedLinear, PlannedGELU, PlannedLinear, PlannedLinear,
                                          PlannedLinear, PlannedLinear]
    assert type(model[2]) is nn.GELU  # not token-wise: PyTorch's
    back = swap(model, STOCK)
    assert all(a is b for a, b in zip(back, expected)) and type(attn) is MultiHeadAttention


def test_unprepare_gives_back_the_default_attention_function():
    layer = MultiHeadAttention(32, 2)
    with plan.forcing("stock,attention=explicit"):
        plan.prepare(layer, torch.randn(2, 5, 32))
    assert isinstance(layer.attend, AttentionChoice)
    plan.unprepare(layer)
    assert type(layer) is MultiHeadAttention and layer.attend is sdpa


def test_the_native_kernel_taking_the_projection_whole_is_set_and_taken_back():
    """Forced native, the layer hands its packed projection to `NativePacked` for both kinds of
    call; `unprepared` takes it away inside and gives it back after; `unprepare` drops it."""
    skip_unless_runnable("attention=native")
    layer = MultiHeadAttention(32, 2)
    with plan.forcing("stock,attention=native"):
        plan.prepare(layer, lambda m: m(torch.randn(2, 5, 32, requires_grad=True)))
    chosen = layer.attend_packed
    assert isinstance(chosen, NativePacked) and (chosen.native, chosen.training) == (True, True)
    with plan.unprepared(layer):
        assert layer.attend_packed is None and layer.attend is sdpa
    assert layer.attend_packed is chosen and isinstance(layer.attend, AttentionChoice)
    plan.unprepare(layer)
    assert layer.attend_packed is None and layer.attend is sdpa


def test_a_classifiers_pre_logits_gelu_is_token_wise():
    head = ClassifierHead(8, 3, hidden=16, activation="gelu")
    assert token_wise_gelus(head) == {id(head.pre_logits[1])}
    swap(head, PLANNED)
    assert type(head.pre_logits[1]) is PlannedGELU and type(head.fc) is PlannedLinear


def test_an_unknown_training_kernel_is_refused_word_for_word():
    refused(ValueError, "training kernel must be one of None, 'stock', 'onednn', 'mixed'; got 'native'",
            lambda: plan.set_training_kernel(nn.Linear(2, 2), "native"))
