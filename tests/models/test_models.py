"""Model behaviour and clear errors for bad input."""
import json

import pytest
import torch

import anyformer as af
from anyformer.models import sample


@pytest.fixture
def vit():
    return af.ViT.preset("vit-mnist", depth=2).eval()


def test_vit_non_square_images_and_channels():
    vit = af.ViT.from_config(dict(image_size=(8, 12), patch_size=4, in_chans=5, num_classes=3,
                                  width=16, depth=1, heads=2, mlp_hidden=32))
    assert vit(torch.randn(2, 5, 8, 12)).shape == (2, 3)
    assert vit.backbone(vit.tokens(torch.randn(1, 5, 8, 12))).shape == (1, 1 + 2 * 3, 16)


@pytest.mark.parametrize("position", ["learned", "concat", "sinusoidal", "none"])
@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_vit_position_kinds_and_pooling(position, pool):
    vit = af.ViT.from_config(dict(image_size=16, patch_size=4, in_chans=1, num_classes=4, width=32, depth=1,
                                  heads=4, mlp_hidden=32, position=position, pos_width=8, pool=pool,
                                  num_registers=2, head_hidden=16))
    images = torch.randn(2, 1, 16, 16)
    logits, attn = vit(images, return_attention=True)
    assert logits.shape == (2, 4) and attn[0].shape == (2, 4, 16 + 3, 16 + 3)
    # the plain forward (for pool="cls" its last block computes the class token only) agrees
    torch.testing.assert_close(vit(images), logits, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(vit(images), vit.head(vit.forward_features(images)), atol=1e-6, rtol=1e-5)


def test_vit_bad_inputs_are_named(vit):
    with pytest.raises(ValueError, match=r"expected images of shape \(B, C, H, W\), got a tensor of rank 3"):
        vit(torch.randn(1, 28, 28))
    with pytest.raises(ValueError, match="expected 1 image channels, got 3"):
        vit(torch.randn(1, 3, 28, 28))
    with pytest.raises(ValueError, match="expected images of size 28x28.*got 32x32"):
        vit(torch.randn(1, 1, 32, 32))
    with pytest.raises(TypeError, match="floating-point"):
        vit(torch.zeros(1, 1, 28, 28, dtype=torch.uint8))
    with pytest.raises(ValueError, match="image size 30x30 is not divisible by the patch size 4x4"):
        af.ViT.preset("vit-mnist", image_size=30)
    with pytest.raises(ValueError, match="width must be divisible by heads: got width=100, heads=8"):
        af.ViT.preset("vit-mnist", width=100)
    with pytest.raises(ValueError, match="unknown ViT position 'rotary'"):
        af.ViT.preset("vit-mnist", position="rotary")


def test_gpt_bad_inputs_are_named():
    gpt = af.GPT.preset("shakespeare-char", depth=1)
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 65\); got values in \[0, 70\]"):
        gpt(torch.tensor([[0, 70]]))
    with pytest.raises(ValueError, match="longer than the model's context"):
        gpt(torch.zeros(1, 257, dtype=torch.long))
    with pytest.raises(TypeError, match="integer tensor"):
        gpt(torch.zeros(1, 4))
    assert gpt.generate(torch.zeros(1, 200, dtype=torch.long), max_new_tokens=100).shape == (1, 300)


@pytest.mark.parametrize("position", ["learned", "rotary", "sinusoidal"])
def test_gpt_cached_generation_equals_uncached(position):
    gpt = af.GPT.from_config(dict(vocab_size=50, context=64, width=32, depth=2, heads=4, position=position)).eval()
    prompt = torch.randint(0, 50, (2, 5))
    a = gpt.generate(prompt, 20, temperature=0, use_cache=True)
    b = gpt.generate(prompt, 20, temperature=0, use_cache=False)
    assert torch.equal(a, b)
    # and the logits of each cached step equal the full forward's
    cache = gpt.new_cache(2)
    step = gpt(a[:, :5], cache=cache)
    logits = [step[:, -1]]
    for t in range(5, a.shape[1] - 1):
        logits.append(gpt(a[:, t:t + 1], cache=cache)[:, -1])
    full = gpt(a[:, :-1])[:, 4:]
    torch.testing.assert_close(torch.stack(logits, 1), full, atol=1e-5, rtol=1e-5)


def test_generate_steps_through_the_one_forward_so_hooks_and_swapped_layers_count():
    gpt = af.GPT.from_config(dict(vocab_size=50, context=64, width=32, depth=2, heads=4)).eval()
    prompt = torch.randint(0, 50, (1, 5))
    calls = []
    handle = gpt.backbone.blocks[1].attn.register_forward_hook(lambda _m, _a, out: calls.append(out.shape[1]))
    expected = gpt.generate(prompt, 6, temperature=0)
    handle.remove()
    assert calls == [5, 1, 1, 1, 1, 1]  # the prompt, then one position for each token after the first

    class Doubled(torch.nn.Linear):  # a layer that computes something else from the same weights
        def forward(self, x):
            return 2 * super().forward(x)
    fc1 = gpt.backbone.blocks[0].mlp.fc1
    gpt.backbone.blocks[0].mlp.fc1 = swapped = Doubled(fc1.in_features, fc1.out_features)
    swapped.load_state_dict(fc1.state_dict())
    with torch.no_grad():
        steps, _ = step_logits(gpt, expected)
        torch.testing.assert_close(steps, gpt(expected[:, :-1])[:, 4:], atol=1e-5, rtol=1e-5)
    assert torch.equal(gpt.generate(prompt, 6, temperature=0), gpt.generate(prompt, 6, temperature=0, use_cache=False))


def step_logits(gpt, ids, prompt_len=5):
    """Logits of each cached one-token step after `prompt_len` tokens, as generate computes them."""
    cache = gpt.new_cache(ids.shape[0])
    logits = [gpt(ids[:, :prompt_len], cache=cache, last_only=True)[:, -1]]
    logits += [gpt(ids[:, t:t + 1], cache=cache, last_only=True)[:, -1] for t in range(prompt_len, ids.shape[1] - 1)]
    return torch.stack(logits, 1), cache


def test_greedy_generation_takes_the_argmax_of_the_forward_logits():
    gpt = af.GPT.from_config(dict(vocab_size=50, context=64, width=32, depth=2, heads=4)).eval()
    ids = torch.randint(0, 50, (3, 5))
    out = gpt.generate(ids, 8, temperature=0)
    with torch.no_grad():
        for t in range(5, 13):
            assert torch.equal(out[:, t], gpt(out[:, :t])[:, -1].argmax(-1))
    # top_k=1 leaves only the argmax to draw, whatever the temperature
    assert torch.equal(gpt.generate(ids, 8, temperature=1.5, top_k=1, generator=torch.Generator().manual_seed(0)), out)


def test_gpt_cache_past_the_fused_attention_threshold():
    # On CPU short key lists take the explicit softmax path, long ones SDPA: cross from one to the other.
    gpt = af.GPT.from_config(dict(vocab_size=40, context=200, width=32, depth=2, heads=4)).eval()
    prompt = torch.randint(0, 40, (1, 120))
    a = gpt.generate(prompt, 30, temperature=0, use_cache=True)
    assert torch.equal(a, gpt.generate(prompt, 30, temperature=0, use_cache=False))
    cache = gpt.new_cache(1)
    logits = [gpt(a[:, :120], cache=cache)[:, -1]]
    logits += [gpt(a[:, t:t + 1], cache=cache)[:, -1] for t in range(120, a.shape[1] - 1)]
    torch.testing.assert_close(torch.stack(logits, 1), gpt(a[:, :-1])[:, 119:], atol=1e-5, rtol=1e-5)


DRAWS = 4000


def draw(logits, **kwargs):
    """DRAWS samples of one (V,) row of logits, all in one call: (DRAWS,) token ids."""
    return sample(logits.expand(DRAWS, -1), generator=torch.Generator().manual_seed(0), **kwargs)[:, 0]


def frequencies(ids, vocab):
    return torch.bincount(ids, minlength=vocab).double() / len(ids)


@pytest.fixture
def flat_logits():
    # A flat distribution: most of the mass lies outside any small top-k set or nucleus.
    return torch.randn(20, generator=torch.Generator().manual_seed(1)) * 0.5


def test_sample_greedy_is_the_argmax():
    logits = torch.randn(16, 30)
    assert torch.equal(sample(logits, temperature=0), logits.argmax(-1, keepdim=True))
    assert torch.equal(sample(logits, temperature=0, top_k=5, top_p=0.5), logits.argmax(-1, keepdim=True))


def test_sample_draws_in_proportion_to_softmax_of_logits_over_temperature(flat_logits):
    for temperature in (1.0, 0.5):
        expected = (flat_logits.double() / temperature).softmax(-1)
        got = frequencies(draw(flat_logits, temperature=temperature), 20)
        assert (got - expected).abs().max() < 0.03  # 4000 draws: the standard error is at most 0.008


def test_sample_top_k_draws_only_the_k_most_likely_in_their_proportions(flat_logits):
    k = 4
    top = flat_logits.topk(k).indices
    got = frequencies(draw(flat_logits, top_k=k), 20)
    outside = torch.ones(20, dtype=torch.bool)
    outside[top] = False
    assert got[outside].sum() == 0
    expected = flat_logits[top].double().softmax(-1)
    assert (got[top] - expected).abs().max() < 0.03


def test_sample_top_p_draws_only_the_nucleus_in_its_proportions(flat_logits):
    p = 0.5
    probs = flat_logits.double().softmax(-1)
    order = probs.argsort(descending=True)
    # The nucleus by hand: the most likely tokens, in order, until their mass first reaches p.
    size = int((probs[order].cumsum(0) < p).sum()) + 1
    nucleus = order[:size]
    assert 2 < size < 15  # a real cut, neither one token nor all of them
    got = frequencies(draw(flat_logits, top_p=p), 20)
    outside = torch.ones(20, dtype=torch.bool)
    outside[nucleus] = False
    assert got[outside].sum() == 0
    assert (got[nucleus] - probs[nucleus] / probs[nucleus].sum()).abs().max() < 0.03


def test_sample_top_k_and_top_p_together_keep_the_smaller_set(flat_logits):
    top3 = set(flat_logits.topk(3).indices.tolist())
    assert set(draw(flat_logits, top_k=3, top_p=0.99).tolist()) == top3


def test_sampling_is_reproducible_with_a_generator():
    gpt = af.GPT.from_config(dict(vocab_size=50, context=64, width=32, depth=1, heads=4)).eval()
    p = torch.zeros(1, 1, dtype=torch.long)
    runs = [gpt.generate(p, 30, temperature=0.8, top_k=10, top_p=0.9,
                         generator=torch.Generator().manual_seed(3)) for _ in range(2)]
    assert torch.equal(*runs)


def test_text_encoder_padding_does_not_change_real_tokens():
    enc = af.TextEncoder.preset("minilm-l6", depth=2).eval()
    ids = torch.randint(1, 1000, (1, 5))
    alone = enc(ids)
    padded = enc(torch.cat([ids, torch.zeros(1, 3, dtype=torch.long)], 1), torch.tensor([[1] * 5 + [0] * 3]))
    torch.testing.assert_close(padded[:, :5], alone, atol=1e-5, rtol=1e-5)
    e = enc.sentence_embedding(ids)
    torch.testing.assert_close(e.norm(dim=-1), torch.ones(1))


def test_heads_and_embeddings():
    from anyformer.nn import LinearEmbedding, PatchEmbedding, PatchOutput
    pe, po = PatchEmbedding(4, 3, 32), PatchOutput(32, 4, 3)
    img = torch.randn(2, 3, 8, 12)
    tokens = pe(img)
    assert tokens.shape == (2, 6, 32) and po(tokens, pe.grid(8, 12)).shape == img.shape
    # With PatchOutput set to the inverse of an identity patch projection, image -> tokens -> image is exact.
    pe, po = PatchEmbedding(2, 1, 4, bias=False), PatchOutput(4, 2, 1)
    with torch.no_grad():
        pe.proj.weight.copy_(torch.eye(4).view(4, 1, 2, 2))
        po.proj.weight.copy_(torch.eye(4))
        po.proj.bias.zero_()
    img = torch.randn(1, 1, 4, 6)
    torch.testing.assert_close(po(pe(img), (2, 3)), img)
    with pytest.raises(ValueError, match=r"expected vectors of shape \(B, N, 7\)"):
        LinearEmbedding(7, 16)(torch.randn(2, 3, 5))


def test_load_errors_name_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match="expected .*config.json"):
        af.load(tmp_path)
    vit = af.ViT.preset("vit-mnist", depth=1)
    vit.save(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        af.load(tmp_path)
    af.ViT.preset("vit-mnist", depth=2).save(tmp_path / "other")
    (tmp_path / "other" / "model.safetensors").replace(tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match="does not fit the model in config.json"):
        af.load(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"family": "rnn", "config": {}}))
    with pytest.raises(ValueError, match="does not describe an anyformer model"):
        af.load(tmp_path)


@pytest.mark.parametrize("family", ["vit", "gpt", "text-encoder"])
def test_forward_flops_equal_a_flop_counter_on_the_forward(family):
    # torch's FlopCounterMode counts each matmul and convolution as it runs; every layer's attention
    # on the explicit path, whose two products it sees (it has no count for CPU's fused kernel).
    from torch.utils.flop_counter import FlopCounterMode
    if family == "vit":
        model = af.ViT.from_config(dict(image_size=(16, 12), patch_size=4, in_chans=3, num_classes=5, width=32,
                                        depth=2, heads=4, mlp_hidden=64, head_hidden=8, num_registers=2))
        inputs, n = (torch.randn(1, 3, 16, 12),), None
    elif family == "gpt":
        model = af.GPT.from_config(dict(vocab_size=50, context=16, width=32, depth=2, heads=4, tie_weights=False))
        inputs, n = (torch.randint(0, 50, (1, 11)),), 11
    else:
        model = af.TextEncoder.from_config(dict(vocab_size=50, max_positions=12, width=32, depth=2, heads=4,
                                                mlp_hidden=64))
        inputs, n = (torch.randint(0, 50, (1, 9)),), 9
    from anyformer.nn import attention_weights
    with FlopCounterMode(display=False) as counter, attention_weights(model.eval()):
        model(*inputs)
    assert counter.get_total_flops() == model.forward_flops(n) > 0
    with pytest.raises(ValueError, match=r"seq_len must be an int (in \[1, \d+\]|>= 4) \(.*\), got 0"):
        model.forward_flops(0)


@pytest.mark.parametrize("pool,hidden", [("cls", None), ("mean", None), ("cls", 24)])
def test_vit_pre_logits_are_what_the_last_linear_layer_reads(pool, hidden):
    vit = af.ViT.from_config(dict(image_size=16, patch_size=4, in_chans=1, num_classes=5, width=32, depth=2,
                                  heads=4, mlp_hidden=32, pool=pool, head_hidden=hidden)).eval()
    images = torch.randn(3, 1, 16, 16)
    feats = vit.pre_logits(images)
    assert feats.shape == (3, hidden or 32)
    torch.testing.assert_close(vit.head.fc(feats), vit(images), atol=1e-6, rtol=1e-5)


def test_vit_pre_logits_needs_a_classifier_head(vit):
    vit.head = torch.nn.Identity()
    with pytest.raises(TypeError, match="pre_logits needs the ViT's ClassifierHead, got a Identity head"):
        vit.pre_logits(torch.randn(1, 1, 28, 28))
