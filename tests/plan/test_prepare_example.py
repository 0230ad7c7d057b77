"""The example `plan.prepare(model, "default")` runs through each kind of model (`default_example`,
checked with a recording stand-in): one black image for a ViT, a prompt scored and continued for a GPT,
a short sentence for a text encoder, none for another model, made where the model is; and what prepare
then asks. The planner's CPU decisions are stood in for by recorders (conftest's `asked`) in the module
prepare asks them through, so nothing is measured and each answer is the test's own."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from anyformer import plan
from anyformer.models import REGISTRY

from .prepare_doubles import F32, door

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
