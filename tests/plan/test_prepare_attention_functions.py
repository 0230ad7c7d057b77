"""The attention functions `plan.prepare` leaves on a layer (`_choose_attention`, `_attention_choice`):
the native kernel handed the packed projection, a named function per kind of call, training kinds asked
for training calls only, a CUDA answer as SDPA in that backend, SDPA on another device. The planner's
CPU decisions are stood in for by recorders (conftest's `asked`) in the module prepare asks them
through, so nothing is measured and each answer is the test's own."""
from __future__ import annotations

import pytest
import torch

from anyformer import plan
from anyformer.nn import MultiHeadAttention
from anyformer.nn.attend import explicit, sdpa
from anyformer.plan.attention_choice import AttentionChoice, SdpaBackend

from .prepare_doubles import F32, AttentionCase, case, door, planned_attention

# ---------------------------------------------------------------------------------------------
# _choose_attention and _attention_choice: a layer's attention functions


def test_the_native_answer_hands_the_packed_projection_over_and_keeps_sdpa_for_the_rest(asked):
    asked.attention_answer = lambda q_len, training: "native"
    layer = plan.prepare(MultiHeadAttention(16, 2), torch.randn(3, 5, 16))  # training mode
    assert (layer.attend_packed.native, layer.attend_packed.training) == (True, True)
    assert isinstance(layer.attend, AttentionChoice) and layer.attend.table == {(False, False): sdpa,
                                                                                 (True, False): sdpa}


@pytest.mark.parametrize("native_for", ["training", "evaluation"])
def test_the_packed_projection_goes_native_for_the_kinds_of_call_chosen_so(asked, native_for):
    """Native for training calls alone, or for calls without gradients alone: `attend_packed` takes
    that kind only, and the other kind keeps its attention function."""
    asked.attention_answer = lambda q_len, training: "native" if training == (native_for == "training") else "fused"
    layer = plan.prepare(MultiHeadAttention(16, 2), torch.randn(3, 5, 16))  # training mode: both kinds asked
    chosen = (layer.attend_packed.native, layer.attend_packed.training)
    assert chosen == ((False, True) if native_for == "training" else (True, False))


def test_a_named_function_is_taken_per_kind_of_call(asked):
    asked.attention_answer = lambda q_len, training: "explicit" if q_len == 1 else "fused"
    layer = plan.prepare(MultiHeadAttention(16, 2).eval(),
                         lambda m: (m(torch.randn(3, 5, 16)), m(torch.randn(3, 1, 16))))
    assert layer.attend.table == {(False, False): sdpa, (False, True): explicit}
    assert layer.attend_packed is None


def test_an_attention_layers_training_kinds_are_asked_for_its_training_calls_only(asked):
    """A layer whose queries want no gradient (frozen, under a trained head, its input wanting none)
    is not asked about training calls: at run time its calls are not (`AttentionChoice`). One whose
    queries do is asked about both kinds, for its evaluation too, whichever kind of call came first."""
    asked.attention_answer = lambda q_len, training: "explicit" if training else "fused"
    frozen = MultiHeadAttention(16, 2).requires_grad_(False)
    plan.prepare(frozen, torch.randn(3, 5, 16))  # training mode
    assert [a[7] for a in asked.attention] == [False]
    asked.attention.clear()
    # a frozen layer between trained ones: its input wants a gradient, and so its queries
    plan.prepare(MultiHeadAttention(16, 2).requires_grad_(False), torch.randn(3, 5, 16, requires_grad=True))
    assert [a[7] for a in asked.attention] == [False, True]
    asked.attention.clear()
    layer = MultiHeadAttention(16, 2)
    example = torch.randn(3, 5, 16)

    def evaluated_then_trained(m):
        with torch.no_grad():
            m(example)
        m(example)
    trained = plan.prepare(layer, evaluated_then_trained)
    assert [a[7] for a in asked.attention] == [False, True]
    assert trained.attend.table == {(False, False): sdpa, (True, False): explicit}


@pytest.mark.parametrize("answer", ["flash", "default"])
def test_a_cuda_answer_becomes_sdpa_in_that_backend(monkeypatch, answer):
    """SDPA's backend as the plan named it; "default" (torch's pick) is plain SDPA."""
    monkeypatch.setattr(door, "sdpa_backend", lambda *args, **kw: answer)
    layer = planned_attention()
    cuda = AttentionCase(1, 2, 5, 5, 8, torch.bfloat16, True, False, "packed", "cuda", False)
    door._choose_attention(layer, [(cuda, False)])
    (attend,) = layer.attend.table.values()
    if answer == "flash":
        assert isinstance(attend, SdpaBackend) and attend.backend == "flash"
    else:
        assert attend is sdpa


def test_another_device_keeps_sdpa():
    """No decision for it: `_attention_choice` answers None, the layer keeps SDPA."""
    layer = planned_attention()
    mps = AttentionCase(1, 2, 5, 5, 8, F32, False, False, "packed", "mps", False)
    door._choose_attention(layer, [(mps, True)])  # a training call
    assert layer.attend.table == {(False, False): sdpa, (True, False): sdpa}


def test_a_cpu_case_is_asked_as_it_is_keyed(asked):
    assert door._attention_choice(case(4, 5, 7, causal=True, masked=True, layout="views"), True) == "fused"
    assert asked.attention == [(4, 2, 5, 7, 8, F32, True, True, True, "views")]
