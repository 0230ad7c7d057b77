"""Which calls of a layer `plan.prepare` asks about and with which sizes (`_observe`, `_has_choice`,
`_sizes`), and where each answer lands on the layer, a kind of call never seen borrowing the answer of
one that was (`_choose`). The planner's CPU decisions are stood in for by recorders (conftest's `asked`)
in the module prepare asks them through, so nothing is measured and each answer is the test's own."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from anyformer import plan
from anyformer.nn import MLP, MultiHeadAttention
from anyformer.plan import layers

from .prepare_doubles import F32

# ---------------------------------------------------------------------------------------------
# _observe and _has_choice: which calls are asked about, with which sizes


def test_a_cross_attention_layer_is_asked_with_its_contexts_length(asked):
    """The context comes as the layer's second positional argument, or by its name."""
    x, context = torch.randn(3, 5, 16), torch.randn(3, 7, 6)
    layer = MultiHeadAttention(16, 2, cross=True, context_width=6).eval()
    plan.prepare(layer, (x, context))
    plan.prepare(layer, lambda m: m(x, context=context))
    assert asked.attention == [(3, 2, 5, 7, 8, F32, False, False, False, "views")] * 2


def test_each_linear_call_is_asked_with_its_rows_and_the_layers_sizes(asked):
    """Rows: every dim of the input but the last; a single-element input is asked about too."""
    plan.prepare(nn.Linear(8, 3).eval(), torch.randn(2, 3, 8))
    plan.prepare(nn.Linear(1, 3).eval(), torch.randn(1, 1))
    assert asked.linear == [(6, 8, 3, F32, False), (1, 1, 3, F32, False)]


def test_a_first_layers_training_calls_are_asked_with_gradients(asked):
    """Its input needs no gradient, its weight does: a training call (and its evaluation's)."""
    asked.linear_answer = lambda rows, training: "mixed" if training else "onednn"
    layer = plan.prepare(nn.Linear(8, 3), torch.randn(10, 8))  # training mode
    assert sorted(asked.linear, key=str) == [(10, 8, 3, F32, False), (10, 8, 3, F32, True)]
    assert (layer.training_kernel, layer.planned_training, layer.kernel, layer.few_rows_kernel) == \
        ("mixed", "mixed", "onednn", "onednn")


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors is a no-op")
def test_a_layer_without_outputs_is_not_asked_about(asked):
    """It has no choice: F.linear alone takes an empty weight."""
    plan.prepare(nn.Linear(4, 0).eval(), torch.randn(2, 4))
    assert asked.linear == []


def test_an_empty_call_is_not_asked_about(asked):
    """A batch of no rows has no kernel to choose; the layer's other calls are still asked about."""
    layer = nn.Linear(8, 3).eval()
    plan.prepare(layer, lambda m: (m(torch.randn(0, 8)), m(torch.randn(4, 8))))
    assert asked.linear == [(4, 8, 3, F32, False)]


def test_without_onednn_only_gelus_are_asked(asked, monkeypatch):
    """Where torch has no oneDNN linear a linear layer has no other kernel; the native GELU still is."""
    monkeypatch.setattr(layers, "_ONEDNN", False)
    plan.prepare(MLP(8, 16).eval(), torch.randn(10, 8))
    assert asked.linear == [] and asked.gelu == [(160, "none", False)]


def test_a_model_without_parameters_is_prepared():
    """The example's RNG fork is the CPU's: there is no parameter to say where the model is."""
    assert isinstance(plan.prepare(nn.Identity(), torch.ones(2)), nn.Identity)


# ---------------------------------------------------------------------------------------------
# _choose: where each answer lands on a layer


def test_a_few_rows_and_more_rows_are_asked_and_kept_apart(asked):
    """Up to ROWWISE_MAX_ROWS rows (a generation step's) is the few-rows kind, more the other."""
    assert layers.ROWWISE_MAX_ROWS == 4
    asked.linear_answer = lambda rows, training: "native" if rows <= 4 else "onednn"
    layer = plan.prepare(nn.Linear(8, 3).eval(), lambda m: (m(torch.randn(4, 8)), m(torch.randn(5, 8))))
    assert [a[0] for a in asked.linear] == [4, 5]
    assert (layer.few_rows_kernel, layer.kernel, layer.training_kernel) == ("native", "onednn", "stock")


@pytest.mark.parametrize("rows, answer", [(4, "native"), (20, "onednn")])
def test_a_kind_of_call_never_seen_runs_on_the_answer_for_the_one_seen(asked, rows, answer):
    asked.linear_answer = lambda rows, training: answer
    layer = plan.prepare(nn.Linear(8, 3).eval(), torch.randn(rows, 8))
    assert len(asked.linear) == 1
    assert (layer.few_rows_kernel, layer.kernel, layer.training_kernel) == (answer, answer, "stock")


def test_a_gelus_answers_land_on_its_kinds_of_call(asked):
    """native for the rows seen without gradients; the few-rows kind, never seen, borrows it."""
    asked.gelu_answer = lambda numel, training: "native"
    act = plan.prepare(MLP(8, 16).eval(), torch.randn(10, 8)).act
    assert asked.gelu == [(160, "none", False)]
    assert (act.native, act.native_few, act.native_training) == (True, True, False)


def test_a_gelus_few_rows_and_training_calls_are_answered_apart(asked):
    """Without gradients a few rows and more are asked apart; with them once, at the first call's
    size: the layer has one training kernel."""
    asked.gelu_answer = lambda numel, training: "native" if training or numel <= 4 * 16 else "stock"
    mlp = plan.prepare(MLP(8, 16), lambda m: (m(torch.randn(2, 8)), m(torch.randn(10, 8))))  # training mode
    assert sorted(asked.gelu) == [(32, "none", False), (32, "none", True), (160, "none", False)]
    assert (mlp.act.native, mlp.act.native_few, mlp.act.native_training) == (False, True, True)


def test_a_linears_training_calls_are_asked_once_whatever_their_rows(asked):
    """One training kernel a layer: the first training call's answer, not a second question whose
    answer would replace it."""
    asked.linear_answer = lambda rows, training: {(2, True): "mixed", (10, True): "onednn"}.get((rows, training),
                                                                                                "stock")
    layer = plan.prepare(nn.Linear(8, 3), lambda m: (m(torch.randn(2, 8)), m(torch.randn(10, 8))))  # training mode
    assert [(rows, training) for rows, *_, training in asked.linear if training] == [(2, True)]
    assert layer.training_kernel == layer.planned_training == "mixed"
