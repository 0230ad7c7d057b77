"""Generation of any length: past the context the cache slides to the most recent tokens, each
token's logits those of the uncached model on the window then; a prompt longer than the context is
cut to its end, as nanoGPT crops."""
import pytest
import torch

import anyformer as af
from anyformer.models.gpt import window_keep
from tests.conftest import skip_unless_runnable


@pytest.fixture(scope="module")
def gpt():
    torch.manual_seed(0)
    return af.GPT.preset("shakespeare-char", vocab_size=32, context=16, width=32, depth=2, heads=2,
                         dropout=0.0).eval()


def reference(gpt, prompt, n):
    """Greedy tokens by the uncached model on the window the cached loop reads: the prompt, grown by
    each token, refilled from the last window_keep(context) tokens once it would pass the context."""
    context, keep = gpt.config.context, window_keep(gpt.config.context)
    seq, width = prompt, prompt.shape[1]
    for _ in range(n):
        if width > context:
            width = keep
        nxt = gpt(seq[:, -width:])[:, -1].argmax(-1, keepdim=True)
        seq, width = torch.cat([seq, nxt], 1), width + 1
    return seq[:, prompt.shape[1]:]


@pytest.mark.slow
@pytest.mark.parametrize("position", ["learned", "rotary"])
def test_a_thousand_tokens_past_a_context_of_16_equal_the_uncached_model_on_each_window(position):
    torch.manual_seed(0)
    gpt = af.GPT.preset("shakespeare-char", vocab_size=32, context=16, width=32, depth=2, heads=2,
                        dropout=0.0, position=position).eval()
    prompt = torch.randint(0, 32, (2, 5), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = gpt.generate(prompt, 1000, temperature=0)
        expected = reference(gpt, prompt, 1000)
    assert out.shape == (2, 1005) and torch.equal(out[:, :5], prompt)
    assert torch.equal(out[:, 5:], expected)


def test_without_the_cache_each_step_reads_the_last_context_tokens(gpt):
    prompt = torch.randint(0, 32, (1, 3), generator=torch.Generator().manual_seed(2))
    out = gpt.generate(prompt, 40, temperature=0, use_cache=False)
    seq = prompt
    with torch.no_grad():
        for _ in range(40):
            seq = torch.cat([seq, gpt(seq[:, -16:])[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(out, seq)


def test_a_prompt_longer_than_the_context_is_cut_to_its_end(gpt):
    long = torch.randint(0, 32, (1, 50), generator=torch.Generator().manual_seed(3))
    out = gpt.generate(long, 4, temperature=0)
    assert out.shape == (1, 54) and torch.equal(out[:, :50], long)
    assert torch.equal(out[:, 50:], gpt.generate(long[:, -16:], 4, temperature=0)[:, 16:])


@pytest.mark.slow
def test_sampling_far_past_the_context_repeats_with_its_seed(gpt):
    prompt = torch.zeros(1, 1, dtype=torch.long)
    draw = lambda: gpt.generate(prompt, 300, temperature=1.0, top_k=8, generator=torch.Generator().manual_seed(5))
    assert torch.equal(draw(), draw())


@pytest.mark.slow
def test_the_compiled_static_step_slides_the_same_way(gpt):
    """The compiled decode step (forced) reads the position from the refilled cache: the same tokens."""
    from anyformer import plan
    prompt = torch.randint(0, 32, (1, 4), generator=torch.Generator().manual_seed(4))
    with plan.forcing(compile="compiled"):
        plan.prepare(gpt)
        try:
            assert plan.prepare_decode(gpt, 1, 64)  # the door compiles the step, before generating
            out = gpt.generate(prompt, 60, temperature=0)
            assert gpt.compiled_decode(1, 64)
        finally:
            plan.unprepare(gpt)
    with torch.no_grad():
        assert torch.equal(out[:, 4:], reference(gpt, prompt, 60))


@pytest.mark.parametrize("forced", ["linear=onednn", "attention=native", "gelu=native"])
def test_generation_with_each_private_kernel_equals_the_uncached_model(gpt, forced):
    """The kernels users get, forced in turn (the suite otherwise runs stock): cached and sliding
    generation past the context still equals the uncached reference."""
    from anyformer import plan
    skip_unless_runnable(forced)
    prompt = torch.randint(0, 32, (1, 6), generator=torch.Generator().manual_seed(6))
    with plan.forcing(f"stock,{forced}"), torch.no_grad():
        plan.prepare(gpt, "default")
        try:
            out = gpt.generate(prompt, 40, temperature=0)
            expected = reference(gpt, prompt, 40)
        finally:
            plan.unprepare(gpt)
    assert torch.equal(out[:, 6:], expected)
