"""The side doors of the ViT and the GPT agree with their main forward: attention weights asked for by
the hook (and handed over layer by layer), a KV cache continued from its position, the last position
only, the penultimate features, and the class token read alone by the last block."""
import pytest
import torch

import anyformer as af
from anyformer.models.gpt import GPTConfig
from tests.conftest import hooked


@pytest.fixture(scope="module")
def gpt():
    torch.manual_seed(0)
    return af.GPT(GPTConfig(vocab_size=11, context=16, width=16, depth=2, heads=2)).eval()


def test_gpt_logits_with_attention_are_the_forward_s_and_the_weights_are_causal(gpt):
    idx = torch.randint(0, 11, (2, 6), generator=torch.Generator().manual_seed(1))
    logits, weights = hooked(gpt, [1, 0], idx)
    torch.testing.assert_close(logits, gpt(idx))
    assert len(weights) == 2 and weights[0].shape == (2, 2, 6, 6)
    assert (weights[0].triu(1) == 0).all() and (weights[1].triu(1) == 0).all()  # no query sees a later token
    torch.testing.assert_close(weights[0].sum(-1), torch.ones(2, 2, 6))
    _, every = hooked(gpt, True, idx)  # all layers, in order
    assert torch.equal(weights[0], every[1]) and torch.equal(weights[1], every[0])  # layer 1 then 0, as asked
    last, _ = hooked(gpt, [0], idx, last_only=True)
    torch.testing.assert_close(last, logits[:, -1:])
    seen: list[int] = []
    handed, kept = hooked(gpt, True, idx, on_layer=lambda i, w: seen.append(i))
    assert seen == [0, 1] and kept == [] and torch.equal(handed, logits)


def test_gpt_with_attention_continues_a_cache_at_its_position(gpt):
    idx = torch.randint(0, 11, (1, 7), generator=torch.Generator().manual_seed(2))
    full = gpt(idx)
    cache = gpt.new_cache(1)
    gpt(idx[:, :5], cache=cache)  # the prompt's keys and values
    logits, weights = hooked(gpt, [0], idx[:, 5:], cache=cache)
    torch.testing.assert_close(logits, full[:, 5:], atol=1e-5, rtol=1e-5)
    assert weights[0].shape == (1, 2, 2, 7)  # two new queries over the 7 positions written (eager on the CPU)
    assert (weights[0][:, :, 0, 6] == 0).all() and (weights[0][:, :, 1] > 0).all() and int(cache.position) == 7
    cache = gpt.new_cache(1)
    gpt(idx[:, :5], cache=cache)
    for p in (5, 6):  # one token at a time, each at the position the one before left
        at, w = hooked(gpt, [0], idx[:, p:p + 1], cache=cache)
        torch.testing.assert_close(at, full[:, p:p + 1], atol=1e-5, rtol=1e-5)
    assert (w[0][..., 7:] == 0).all() and (w[0][..., :7] > 0).all()  # position 6 sees keys 0..6 only
    by_forward, _ = hooked(gpt, [0], idx, last_only=True)
    torch.testing.assert_close(by_forward, full[:, -1:])


@pytest.fixture(scope="module")
def vit():
    torch.manual_seed(0)
    return af.ViT.preset("vit-mnist", depth=2).eval()


def test_vit_features_with_attention_are_the_plain_features_and_one_map_per_layer(vit):
    images = torch.randn(2, 1, 28, 28)
    tokens, weights = hooked(vit.backbone, True, vit.tokens(images))
    torch.testing.assert_close(tokens, vit.forward_features(images))
    n = tokens.shape[1]
    assert len(weights) == 2 and weights[1].shape == (2, vit.config.heads, n, n)


@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_pre_logits_are_what_the_head_s_last_layer_reads_and_a_class_token_alone_leaves_the_last_block(pool):
    torch.manual_seed(0)
    vit = af.ViT.preset("vit-mnist", depth=2, pool=pool).eval()
    images = torch.randn(3, 1, 28, 28)
    seen = []
    hook = vit.backbone.blocks[-1].register_forward_hook(lambda m, args, out: seen.append(out.shape[1]))
    try:
        features = vit.pre_logits(images)
    finally:
        hook.remove()
    torch.testing.assert_close(vit.head.fc(features), vit(images), atol=1e-5, rtol=1e-5)
    tokens = vit.forward_features(images)
    assert seen == [1 if pool == "cls" else tokens.shape[1]]


def test_gpt_says_its_steps_run_compiled_where_the_plan_left_a_compiled_step(gpt):
    """`compiled_decode` reads the steps the plan compiled, by batch and cache size (powers of two from
    64, at most the context: this model's 16 serves every length); none: eager."""
    from anyformer.models import generation
    assert not gpt.compiled_decode(2, 10)  # eager until the plan compiles a step
    generation.compiled_steps(gpt)[(2, 16)] = generation.CompiledStep(generation.next_logits)
    try:
        assert gpt.compiled_decode(2, 10) and gpt.compiled_decode(2, 3) and not gpt.compiled_decode(3, 10)
    finally:
        generation.compiled_steps(gpt).clear()


def test_gpt_flops_name_the_context_a_sequence_must_fit(gpt):
    with pytest.raises(ValueError, match=r"seq_len must be an int in \[1, 16\] \(the model's context\), got 17"):
        gpt.forward_flops(17)


def test_the_hook_on_a_gpt_works_with_the_cache_and_last_only(gpt):
    idx = torch.randint(0, 11, (1, 7), generator=torch.Generator().manual_seed(4))
    full, by_layer = hooked(gpt, [1, 0], idx)
    logits, weights = hooked(gpt, [1], idx)
    torch.testing.assert_close(logits, full)
    torch.testing.assert_close(weights[0], by_layer[0])
    cache = gpt.new_cache(1)
    gpt(idx[:, :5], cache=cache)
    for p in (5, 6):
        step, w = hooked(gpt, [0], idx[:, p:p + 1], cache=cache, last_only=True)
        torch.testing.assert_close(step, full[:, p:p + 1], atol=1e-5, rtol=1e-5)
    assert w[0].shape == (1, 2, 1, 7) and (w[0] > 0).all() and int(cache.position) == 7


def test_vit_forward_hands_return_attention_on_and_names_its_settings_bounds(vit):
    images = torch.randn(2, 1, 28, 28)
    logits, weights = vit(images, return_attention=[1])
    by_layer = hooked(vit, [0, 1], images)[1]
    torch.testing.assert_close(logits, vit(images))
    torch.testing.assert_close(weights[0], by_layer[1])
    assert len(weights) == 1 and not torch.equal(by_layer[0], by_layer[1])
    from anyformer.models.vit import ViTConfig
    small = dict(image_size=8, patch_size=4, width=16, depth=1, heads=2, mlp_hidden=16, position="concat")
    for ok in (1, 15):
        assert ViTConfig(**small, pos_width=ok).pos_width == ok
    for bad in (0, 16):
        with pytest.raises(ValueError, match=f"position='concat' needs 0 < pos_width < width, got pos_width={bad}"):
            ViTConfig(**small, pos_width=bad)
    assert ViTConfig(**{**small, "position": "learned"}, pos_width=0).pos_width == 0  # only concat needs one


def test_vit_flops_name_the_tokens_an_image_needs(vit):
    with pytest.raises(ValueError, match=r"tokens per image: 1 class and register tokens and at least one patch"):
        vit.forward_flops(1)


def test_gpt_tokens_stand_at_the_caches_position_and_name_the_context_or_cache_they_overflow(gpt):
    idx = torch.tensor([[1, 2, 3]])
    cache = gpt.new_cache(1)
    cache.position.fill_(4)
    torch.testing.assert_close(gpt.tokens(idx, cache), gpt.tok_embed(idx) + gpt.pos.pos_embed[:, 4:7])
    cache = gpt.new_cache(1)
    gpt(torch.tensor([[5, 6]]), cache=cache)  # two cached: the next tokens stand at 2..4
    torch.testing.assert_close(gpt.tokens(idx, cache), gpt.tok_embed(idx) + gpt.pos.pos_embed[:, 2:5])
    cache.position.fill_(16)
    with pytest.raises(ValueError, match=r"sequence of 19 tokens is longer than the model's context \(16\)"):
        gpt.tokens(idx, cache)
    small = gpt.new_cache(1, 8)
    small.position.fill_(6)
    with pytest.raises(ValueError, match=r"KV cache holds at most 8 positions; got 6 cached \+ 3 new"):
        gpt(idx, cache=small)
    for ids, at in ((torch.zeros(17, dtype=torch.long), None), (torch.zeros(3, dtype=torch.long), 13)):
        if at is not None:
            cache.position.fill_(at)
        with pytest.raises(ValueError, match=r"token ids must have shape \(B, T\), got"):
            gpt.tokens(ids, None if at is None else cache)  # the shape is named, not a length


def test_gpt_token_dropout_acts_in_training():
    torch.manual_seed(0)
    gpt = af.GPT(GPTConfig(vocab_size=11, context=16, width=16, depth=1, heads=2, dropout=0.5)).train()
    idx = torch.tensor([[1, 2, 3, 4]])
    clean = gpt.tok_embed(idx) + gpt.pos.pos_embed[:, :4]
    dropped = gpt.tokens(idx)
    assert (dropped == 0).any() and torch.allclose(dropped[dropped != 0], 2 * clean[dropped != 0])


def test_gpt_caches_take_the_model_s_dtype_and_device():
    gpt = af.GPT(GPTConfig(vocab_size=11, context=16, width=16, depth=2, heads=2)).double()
    cache = gpt.new_cache(3, max_len=5)
    assert cache.layers == 2 and all(t.shape == (3, 2, 5, 8) and t.dtype == torch.float64 for t in cache.k + cache.v)
    assert gpt.new_cache(1).max_len == 16  # the context by default
    assert gpt.to("meta").new_cache(1).v[1].device.type == "meta"


def test_gpt_stream_hands_every_setting_to_the_loop(gpt, monkeypatch):
    from anyformer.models import generation
    prompt = torch.tensor([[1, 2, 3]])
    seen = []
    monkeypatch.setattr(generation, "stream", lambda model, idx, n, **kw: seen.append(kw) or iter(()))
    list(gpt.stream(prompt, 2, temperature=0.5, top_k=3, top_p=0.9, use_cache=False))
    assert seen == [dict(temperature=0.5, top_k=3, top_p=0.9, generator=None, use_cache=False)]


def test_gpt_stream_samples_at_temperature_one_by_default():
    torch.manual_seed(0)
    gpt = af.GPT(GPTConfig(vocab_size=11, context=16, width=16, depth=1, heads=2)).eval()
    with torch.no_grad():  # logits of several units: another temperature draws other tokens
        gpt.lm_head.weight.mul_(15)
    prompt = torch.tensor([[1, 2, 3]])
    hotter = gpt.generate(prompt, 8, temperature=2.0, generator=torch.Generator().manual_seed(6))
    default = gpt.generate(prompt, 8, generator=torch.Generator().manual_seed(6))
    one = gpt.generate(prompt, 8, temperature=1.0, generator=torch.Generator().manual_seed(6))
    assert torch.equal(default, one)
    streamed = torch.cat(list(gpt.stream(prompt, 8, generator=torch.Generator().manual_seed(6))), 1)
    assert torch.equal(streamed, one[:, 3:]) and not torch.equal(hotter, one)
