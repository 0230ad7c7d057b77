"""A model prepared again starts from the stock choices (`_reset`); `unprepare` gives each layer its own
default attention back; a GPT's compiled decode steps are dropped by both. The planner's CPU
decisions are stood in for by recorders (conftest's `asked`) in the module prepare asks them through, so
nothing is measured and each answer is the test's own."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from anyformer import plan
from anyformer.models import REGISTRY
from anyformer.models.generation import CompiledStep, compiled_steps, next_logits
from anyformer.nn import MultiHeadAttention
from anyformer.nn.attend import ATTENTION_FUNCTIONS, sdpa
from anyformer.plan.attention_choice import AttentionChoice

# ---------------------------------------------------------------------------------------------
# _reset, unprepare and the decoder


def test_a_model_prepared_again_starts_from_the_stock_choices(asked):
    asked.linear_answer = lambda rows, training: "onednn"
    asked.attention_answer = lambda q_len, training: "explicit"
    model = nn.Sequential(nn.Linear(16, 16), MultiHeadAttention(16, 2)).eval()
    plan.prepare(model, torch.randn(3, 5, 16))
    assert model[0].kernel == "onednn" and isinstance(model[1].attend, AttentionChoice)
    plan.prepare(model)  # nothing asked now
    assert "kernel" not in vars(model[0]) and (model[0].kernel, model[0].few_rows_kernel) == ("stock", "stock")
    assert model[1].attend is sdpa


@pytest.mark.parametrize("impl, default", [("explicit", ATTENTION_FUNCTIONS["explicit"]), ("fused", sdpa)])
def test_a_layer_gets_its_own_default_attention_back(asked, impl, default):
    """A layer that names its attention keeps it when prepared (the plan chooses only for "auto")
    and gets it back unprepared."""
    layer = MultiHeadAttention(16, 2, impl=impl).eval()
    layer.attend = None  # what the layer held before does not count
    assert plan.prepare(layer, torch.randn(3, 5, 16)).attend is default
    assert asked.linear and not asked.attention
    layer.attend = None
    assert plan.unprepare(layer).attend is default
    plan.prepare(layer)
    with plan.unprepared(layer):
        assert layer.attend is default


def test_a_gpt_loses_its_compiled_decode_steps_prepared_again_or_unprepared():
    """The steps were traced through the layers' earlier choices: a new prepare (or unprepare) drops
    them, and the model generates eagerly until `prepare_decode` settles again."""
    gpt = REGISTRY["gpt"](REGISTRY["gpt"].config_class(vocab_size=11, context=8, width=16, depth=1, heads=2))
    for door_call in (plan.prepare, plan.unprepare):
        compiled_steps(gpt)[(1, 8)] = CompiledStep(next_logits)
        assert gpt.compiled_decode(1, 5)
        door_call(gpt)
        assert compiled_steps(gpt) == {} and not gpt.compiled_decode(1, 5)
