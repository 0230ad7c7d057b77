"""Every preset: its published size and shapes on the meta device; the small ones also built for
real, run forward and backward, saved and loaded."""
import pytest
import torch

import anyformer as af
from anyformer.models import PRESETS, REGISTRY

# Published parameter counts (timm's model cards for ViT, Hugging Face's for GPT-2 and BERT).
PUBLISHED = {
    "vit-ti/16": 5_717_416, "vit-s/16": 22_050_664, "vit-b/16": 86_567_656, "vit-b/32": 88_224_232,
    "vit-l/16": 304_326_632, "vit-h/14": 632_045_800,
    "gpt2": 124_439_808, "gpt2-medium": 354_823_168, "gpt2-large": 774_030_080, "gpt2-xl": 1_557_611_200,
    "bert-base": 109_482_240, "minilm-l6": 22_713_216,
}
# Over 50M parameters: too slow to initialise, run and save on every CI run on 2 cores. They are
# built on the meta device only (no memory, no arithmetic): counts and shapes. Each family keeps
# a small preset of the same code built for real below (vit-ti/16, shakespeare-char, minilm-l6).
LARGE = {name for name, n in PUBLISHED.items() if n > 50_000_000}
SMALL = sorted(set(PRESETS) - LARGE)


def _build(name, **overrides):
    family = PRESETS[name][0]
    return REGISTRY[family].preset(name, **overrides)


def _on_meta(name):
    with torch.device("meta"):
        return _build(name)


def _tiny_input(model):
    c = model.config
    if model.family == "vit":
        h, w = (c.image_size, c.image_size) if isinstance(c.image_size, int) else c.image_size
        return (torch.randn(1, c.in_chans, h, w),)
    if model.family == "gpt":
        return (torch.randint(0, c.vocab_size, (1, 8)),)
    if model.family == "dit":  # noisy images, flow times, labels (the last one the null class)
        h, w = (c.image_size, c.image_size) if isinstance(c.image_size, int) else c.image_size
        return (torch.randn(2, c.in_chans, h, w), torch.rand(2), torch.tensor([1, c.num_classes]))
    if model.family == "mae":  # images and the noise that picks the hidden patches: the same loss twice
        h, w = (c.image_size, c.image_size) if isinstance(c.image_size, int) else c.image_size
        return torch.randn(2, c.in_chans, h, w), torch.rand(2, c.num_patches)
    if model.family == "series":  # two series, the second half as long (padded, masked)
        return torch.randn(2, c.channels, c.length), torch.tensor([c.length, c.length // 2])
    if model.family == "table":  # two rows, the second with its numbers missing and its categories unknown
        numbers = torch.randn(2, c.numbers)
        numbers[1] = float("nan")
        return numbers, torch.tensor([[2 + i % (k - 2) for i, k in enumerate(c.categories)], [1] * len(c.categories)])
    return (torch.randint(0, c.vocab_size, (2, 6)), torch.tensor([[1] * 6, [1] * 4 + [0] * 2]))


def test_every_family_has_a_small_preset_built_for_real():
    assert {PRESETS[name][0] for name in SMALL} == set(REGISTRY)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_parameter_counts(name):
    assert _on_meta(name).num_params() == PUBLISHED[name]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_shapes(name):
    model = _on_meta(name)
    c = model.config
    blocks = model.backbone.blocks
    hidden = c.mlp_hidden or 4 * c.width
    assert len(blocks) == c.depth and {b.attn.heads for b in blocks} == {c.heads}
    for block in blocks:
        assert block.attn.qkv.weight.shape == (3 * c.width, c.width)
        assert block.attn.proj.weight.shape == (c.width, c.width)
        assert block.mlp.fc1.weight.shape == (hidden, c.width) and block.mlp.fc2.weight.shape == (c.width, hidden)
    if model.family == "vit":
        assert model.head.fc.weight.shape[0] == c.num_classes
    elif model.family == "gpt":
        assert model.lm_head.weight.shape == (c.vocab_size, c.width)
        assert (model.lm_head.weight is model.tok_embed.weight) == c.tie_weights


@pytest.mark.parametrize("name", sorted(n for n in PRESETS if PRESETS[n][0] == "gpt"))
def test_gpt_training_flops_per_token_follow_the_closed_form(name):
    # nanoGPT's estimate: 6 x (weights in matmuls) + 12 x depth x T x width per token, with the LM
    # head's vocab x width product counted once (tied or not). Small presets are checked against
    # torch's FlopCounterMode in tests/models/test_models.py; this covers the large shapes on meta.
    model = _on_meta(name)
    c = model.config
    matmul_weights = sum(m.weight.numel() for m in model.backbone.modules() if isinstance(m, torch.nn.Linear))
    for t in (1, 64, c.context):
        expected = 6 * (matmul_weights + c.vocab_size * c.width) + 12 * c.depth * t * c.width
        assert 3 * model.forward_flops(t) / t == expected
    assert model.forward_flops() == model.forward_flops(c.context)


@pytest.mark.slow
@pytest.mark.parametrize("name", SMALL)
def test_preset_forward_backward_save_load(name, tmp_path):
    model = _build(name)
    model.train()
    out = model(*_tiny_input(model))
    loss = out.float().square().mean()
    if model.family == "text-encoder":
        loss = loss + model.pool(out).square().mean()  # the pooler is a head of its own
    loss.backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), f"{pname} gets a finite gradient"
    model.eval()
    inputs = _tiny_input(model)
    expected = model(*inputs)
    model.save(tmp_path / "m")
    assert (tmp_path / "m" / "config.json").is_file() and (tmp_path / "m" / "model.safetensors").is_file()
    loaded = af.load(tmp_path / "m")
    assert type(loaded) is type(model) and loaded.config == model.config
    assert torch.equal(loaded(*inputs), expected)


@pytest.mark.slow
def test_tied_lm_head_is_one_parameter_and_survives_save(tmp_path):
    gpt = af.GPT.preset("shakespeare-char")
    assert gpt.lm_head.weight is gpt.tok_embed.weight
    gpt.save(tmp_path)
    loaded = af.load(tmp_path)
    assert loaded.lm_head.weight is loaded.tok_embed.weight


def test_unknown_preset_and_option_list_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown ViT preset 'vit-x/3'; valid presets: \[.*'vit-b/16'"):
        af.ViT.preset("vit-x/3")
    with pytest.raises(ValueError, match=r"unknown GPT preset 'vit-b/16'"):
        af.GPT.preset("vit-b/16")
    with pytest.raises(ValueError, match=r"unknown ViTConfig option\(s\) \['colour'\]; valid options: \["):
        af.ViT.preset("vit-mnist", colour=True)
