"""What `plan.prepare` asks and leaves, piece by piece: the example "default" makes for each kind of
model (`default_example`, checked with a recording stand-in), the attention case each call is keyed
by (`_attention_case`), which calls of a layer are asked about and with which sizes (`_observe`,
`_has_choice`, `_sizes`), where each answer lands on the layer and how a kind of call never seen
borrows the answer of one that was (`_choose`, `_choose_attention`), a second prepare starting from
the stock choices (`_reset`), the default attention functions `unprepare` gives back, and a GPT's
compiled decode steps dropped by both. The planner's CPU decisions are stood in for by recorders in the
module prepare asks them through, so nothing is measured and each answer is the test's own."""
from __future__ import annotations

import importlib
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from anyformer import plan
from anyformer.models import REGISTRY
from anyformer.models.generation import CompiledStep, compiled_steps, next_logits
from anyformer.nn import MLP, KVCache, MultiHeadAttention, RotaryEmbedding
from anyformer.nn.attend import ATTENTION_FUNCTIONS, explicit, sdpa
from anyformer.plan import layers
from anyformer.plan.attention_choice import AttentionChoice, SdpaBackend

door = importlib.import_module("anyformer.plan.prepare")  # the module (the package exports the function)
AttentionCase = door.AttentionCase
F32 = torch.float32


class Asked:
    """The planner's CPU decisions as prepare's module calls them, recorded; each answered by the
    test's function of the question (by default the stock choice)."""

    def __init__(self) -> None:
        self.linear: list[tuple] = []
        self.gelu: list[tuple] = []
        self.attention: list[tuple] = []
        self.linear_answer = lambda rows, training: "stock"
        self.gelu_answer = lambda numel, training: "stock"
        self.attention_answer = lambda q_len, training: "fused"

    def linear_kernel(self, rows, k, n, dtype, training):
        self.linear.append((rows, k, n, dtype, training))
        return self.linear_answer(rows, training)

    def gelu_kernel(self, numel, approximate, training):
        self.gelu.append((numel, approximate, training))
        return self.gelu_answer(numel, training)

    def attention_kernel(self, batch, heads, q_len, k_len, head_dim, dtype, causal, training, *, masked, layout):
        self.attention.append((batch, heads, q_len, k_len, head_dim, dtype, causal, training, masked, layout))
        return self.attention_answer(q_len, training)


@pytest.fixture
def asked(monkeypatch) -> Asked:
    a = Asked()
    for name in ("linear_kernel", "gelu_kernel", "attention_kernel"):
        monkeypatch.setattr(door, name, getattr(a, name))
    monkeypatch.setattr(door, "sdpa_backend", lambda *args, **kw: pytest.fail("a CPU model asked for CUDA"))
    # A linear call is asked about only where it could run on oneDNN; these tests are about what
    # prepare asks, whichever torch build runs them (no oneDNN kernel runs here: every answer is
    # left on the layers, and the example runs before any is made).
    monkeypatch.setattr(layers, "_ONEDNN", True)
    return a


def planned_attention(width: int = 16, heads: int = 2, **kw) -> MultiHeadAttention:
    """A MultiHeadAttention swapped to the plan's layer, nothing asked (example None)."""
    return plan.prepare(MultiHeadAttention(width, heads, **kw).eval())


# ---------------------------------------------------------------------------------------------
# default_example: what "default" runs through each kind of model


class Kind(nn.Module):
    """What `default_example` reads of a model: its family, its config and where its parameters are."""

    def __init__(self, family: str | None, *, device: str | None = "cpu", **config) -> None:
        super().__init__()
        if family is not None:
            self.family = family
        self.config = SimpleNamespace(**config)
        if device is not None:
            self.w = nn.Parameter(torch.ones(2, device=device))


class Calls:
    """Stands in for the model an example is run on: records its forward and generate calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []

    def __call__(self, *args, **kwargs):
        self.calls.append(("forward", args, kwargs))

    def generate(self, *args, **kwargs):
        self.calls.append(("generate", args, kwargs))


def run_default(model: nn.Module) -> list[tuple[str, tuple, dict]]:
    example = door.default_example(model)
    assert callable(example)
    calls = Calls()
    example(calls)
    return calls.calls


def zeros_of(t: torch.Tensor, shape: tuple, dtype: torch.dtype, device: str) -> bool:
    return (tuple(t.shape) == shape and t.dtype == dtype and t.device.type == device
            and (device == "meta" or not t.any()))


@pytest.mark.parametrize("image_size, hw", [(8, (8, 8)), ((6, 10), (6, 10))])
def test_a_vits_example_is_one_black_image_of_its_size(image_size, hw):
    (call,) = run_default(Kind("vit", image_size=image_size, in_chans=3))
    kind, (images,), kwargs = call
    assert kind == "forward" and kwargs == {} and zeros_of(images, (1, 3, *hw), F32, "cpu")


@pytest.mark.parametrize("context, length", [(1, 1), (3, 1), (8, 4), (9, 4), (1024, 256)])
def test_a_gpts_example_scores_a_prompt_of_half_its_context_then_continues_it_by_two_tokens(context, length):
    """At least one token, at most 256: `anyformer eval`'s pass over the prompt, then generation's
    prompt pass and one-token step, greedy."""
    (kind1, (scored,), kw1), (kind2, (prompt, new), kw2) = run_default(Kind("gpt", context=context))
    assert (kind1, kw1, kind2, new, kw2) == ("forward", {}, "generate", 2, {"temperature": 0})
    assert prompt is scored and zeros_of(prompt, (1, length), torch.long, "cpu")


@pytest.mark.parametrize("max_positions, length", [(5, 5), (8, 8), (20, 8)])
def test_a_text_encoders_example_is_a_short_sentence(max_positions, length):
    (call,) = run_default(Kind("text-encoder", max_positions=max_positions))
    kind, (ids,), kwargs = call
    assert kind == "forward" and kwargs == {} and zeros_of(ids, (1, length), torch.long, "cpu")


def test_another_model_has_no_default_example():
    assert door.default_example(Kind("mae", image_size=8, in_chans=1, context=8, max_positions=8)) is None
    assert door.default_example(Kind(None, image_size=8, in_chans=1, context=8)) is None  # no family
    assert door.default_example(nn.Linear(2, 2)) is None  # neither family nor config


@pytest.mark.parametrize("family, config", [("vit", dict(image_size=4, in_chans=1)), ("gpt", dict(context=4)),
                                            ("text-encoder", dict(max_positions=4))])
def test_the_example_is_made_where_the_model_is(family, config):
    """On the device of the model's parameters (meta stands in for an accelerator here); a model
    without parameters gets its example on the CPU, whatever torch's default device."""
    for call in run_default(Kind(family, device="meta", **config)):
        assert call[1][0].device.type == "meta"
    with torch.device("meta"):
        calls = run_default(Kind(family, device=None, **config))
    assert calls and all(call[1][0].device.type == "cpu" for call in calls)


def test_prepare_with_default_runs_the_default_example(asked):
    """"default": one image, so the layers are asked about a batch of one."""
    vit = REGISTRY["vit"](REGISTRY["vit"].config_class(image_size=8, in_chans=1, num_classes=3, patch_size=4,
                                                       width=16, depth=1, heads=2)).eval()
    plan.prepare(vit, "default")
    assert asked.attention and {a[0] for a in asked.attention} == {1}
    assert asked.linear and asked.gelu


def test_prepare_with_default_plans_a_gpts_scoring_and_its_one_token_step(asked):
    """Per kind of call the first seen is asked: the prompt scored whole (generation's prompt pass,
    into the cache, is the same kind), and the one-token step after it."""
    gpt = REGISTRY["gpt"](REGISTRY["gpt"].config_class(vocab_size=11, context=8, width=16, depth=1, heads=2)).eval()
    plan.prepare(gpt, "default")
    # (batch, heads, q_len, k_len, head_dim, dtype, causal, training, masked, layout)
    # the step: one query over the whole cache of the 4 + 2 tokens generate holds, masked
    assert asked.attention == [(1, 2, 4, 4, 8, F32, True, False, False, "packed"),
                               (1, 2, 1, 6, 8, F32, False, False, True, "cache")]


# ---------------------------------------------------------------------------------------------
# _attention_case: the planner's key for one attention call


def case(batch=3, q_len=5, k_len=5, *, dtype=F32, causal=False, masked=False, layout="packed", dropout=False):
    return AttentionCase(batch, 2, q_len, k_len, 8, dtype, causal, masked, layout, "cpu", dropout)


def test_a_plain_self_attention_call_is_keyed_whole_packed():
    attn, x = planned_attention(), torch.randn(3, 5, 16)
    assert door._attention_case(attn, x) == case()
    assert door._attention_case(attn, x, causal=True) == case(causal=True)


def test_a_mask_or_fewer_queries_take_the_views_layout():
    attn, x = planned_attention(), torch.randn(3, 5, 16)
    padding = torch.ones(3, 5, dtype=torch.bool)
    assert door._attention_case(attn, x, mask=padding) == case(masked=True, layout="views")
    assert door._attention_case(attn, x, queries=1) == case(q_len=1, layout="views")
    assert door._attention_case(attn, x, queries=9) == case(layout="views")  # at most all of them query


def test_a_rotary_or_cross_attention_layer_takes_the_views_layout():
    rotary = planned_attention(rotary=RotaryEmbedding(8, 32))
    assert door._attention_case(rotary, torch.randn(3, 5, 16), causal=True) == case(causal=True, layout="views")
    cross = planned_attention(cross=True, context_width=6)
    assert door._attention_case(cross, torch.randn(3, 5, 16), torch.randn(3, 7, 6)) == case(k_len=7, layout="views")


def test_a_cached_call_attends_over_the_whole_cache_masked():
    """Whatever the cache's position, a call reads every position of its buffer, with its own mask in
    place of the causal one."""
    attn, cache = planned_attention(), KVCache(1, 3, 2, 8, 16, F32, "cpu")
    assert door._attention_case(attn, torch.randn(3, 5, 16), causal=True, cache=cache) == \
        case(k_len=16, masked=True, layout="cache")
    cache.position.fill_(5)
    assert door._attention_case(attn, torch.randn(3, 1, 16), causal=True, cache=cache) == \
        case(q_len=1, k_len=16, masked=True, layout="cache")


def test_attention_dropout_counts_in_training_only():
    x = torch.randn(3, 5, 16)
    dropping = planned_attention(attn_dropout=0.1)
    assert door._attention_case(dropping, x) == case()  # eval: no dropout
    assert door._attention_case(dropping.train(), x) == case(layout="views", dropout=True)
    assert door._attention_case(planned_attention().train(), x) == case()  # training without any


def test_under_autocast_the_case_has_autocasts_precision():
    attn, x = planned_attention(), torch.randn(3, 5, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert door._attention_case(attn, x) == case(dtype=torch.bfloat16, layout="views")


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


# ---------------------------------------------------------------------------------------------
# _choose_attention and _attention_choice: a layer's attention functions


def test_the_native_answer_hands_the_packed_projection_over_and_keeps_sdpa_for_the_rest(asked):
    asked.attention_answer = lambda q_len, training: "native"
    layer = plan.prepare(MultiHeadAttention(16, 2), torch.randn(3, 5, 16))  # training mode
    assert layer.native is True and layer.native_training is True
    assert isinstance(layer.attend, AttentionChoice) and layer.attend.table == {(False, False): sdpa,
                                                                                 (True, False): sdpa}


def test_a_named_function_is_taken_per_kind_of_call(asked):
    asked.attention_answer = lambda q_len, training: "explicit" if q_len == 1 else "fused"
    layer = plan.prepare(MultiHeadAttention(16, 2).eval(),
                         lambda m: (m(torch.randn(3, 5, 16)), m(torch.randn(3, 1, 16))))
    assert layer.attend.table == {(False, False): sdpa, (False, True): explicit}
    assert layer.native is False and layer.native_training is False


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
