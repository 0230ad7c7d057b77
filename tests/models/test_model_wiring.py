"""Every setting of a ViT's and a GPT's config reaches the module it is for. Each setting is given a
value other than its default, and the built model is read back: a setting dropped on the way (the
block built with its own default) fails here, though the model would still run."""
import math

import pytest
import torch
from torch import nn

from anyformer.models.gpt import GPT, GPTConfig
from anyformer.models.vit import ViT, ViTConfig
from anyformer.nn import ConcatPosition, LearnedPosition, SinusoidalPosition
from anyformer.nn.positions import sinusoidal_2d
from anyformer.nn.stems import ConvStem


def linears(module: nn.Module) -> list[nn.Linear]:
    return [m for m in module.modules() if isinstance(m, nn.Linear)]


def assert_blocks(backbone, *, hidden, layers, approximate, eps, bias, dropout, attn_dropout):
    for block in backbone.blocks:
        assert block.mlp.fc1.out_features == hidden and len(block.mlp.hidden) == layers - 1
        assert block.mlp.act.approximate == approximate
        assert block.norm1.eps == eps and block.norm2.eps == eps
        assert all((m.bias is not None) == bias for m in linears(block))
        assert block.mlp_drop.p == dropout and block.attn.attn_dropout == attn_dropout


def test_every_vit_setting_reaches_its_module():
    c = ViTConfig(image_size=(16, 24), patch_size=8, in_chans=2, num_classes=5, width=32, depth=3, heads=4,
                  mlp_hidden=40, mlp_layers=2, activation="gelu_tanh", stem="conv", position="sinusoidal",
                  num_registers=2, pool="mean", head_hidden=12, head_activation="gelu", final_norm=False,
                  norm_eps=1e-3, bias=False, dropout=0.25, attn_dropout=0.125, drop_path=0.2, layer_scale=0.3,
                  attn_impl="explicit", attn_locality=True)
    vit = ViT(c)
    assert isinstance(vit.patch_embed, ConvStem) and vit.patch_embed.proj[0].in_channels == 2
    assert vit.prefix.num_prefix == 3 and vit.prefix.reg_token.shape[1] == 2
    assert isinstance(vit.pos, SinusoidalPosition) and vit.pos.length == 3 + 6
    torch.testing.assert_close(vit.pos.table[0, 3:], sinusoidal_2d(2, 3, 32))  # the patch grid, 2 x 3
    assert_blocks(vit.backbone, hidden=40, layers=2, approximate="tanh", eps=1e-3, bias=False, dropout=0.25,
                  attn_dropout=0.125)
    assert vit.backbone.norm is None
    assert [b.drop_path for b in vit.backbone.blocks] == pytest.approx([0.0, 0.1, 0.2])
    assert all(b.ls1.gamma[0] == 0.3 and b.attn.impl == "explicit" and b.attn.locality for b in vit.backbone.blocks)
    assert vit.pos_drop.p == 0.25
    assert vit.head.pool == "mean" and vit.head.num_prefix == 3
    assert vit.head.pre_logits[0].out_features == 12 and isinstance(vit.head.pre_logits[1], nn.GELU)
    assert vit.head.fc.out_features == 5
    assert vit(torch.randn(2, 2, 16, 24)).shape == (2, 5)
    with pytest.raises(ValueError, match=r"expected images of size 16x24 \(the model's image_size\), got 24x16$"):
        vit(torch.randn(2, 2, 24, 16))
    images = torch.randn(2, 2, 16, 24)
    zeros = [(vit.train(mode).tokens(images) == 0).float().mean().item() for mode in (True, False)]
    assert zeros[0] > 0.1 and zeros[1] == 0  # the tokens' dropout (0.25) in training only


def test_vit_prefix_tokens_start_tiny_and_random_and_the_head_truncated_normal():
    torch.manual_seed(0)
    vit = ViT(ViTConfig(image_size=16, patch_size=8, width=64, depth=1, heads=4, mlp_hidden=64, num_registers=4,
                        head_hidden=256))
    for t in (vit.prefix.cls_token, vit.prefix.reg_token):
        assert 0 < t.abs().max() < 1e-5  # N(0, 1e-6): not zero, not symmetric, nearly nothing
    w = vit.head.pre_logits[0].weight
    assert w.abs().max() <= 0.04 and 0.015 < w.std() < 0.02 and torch.equal(vit.head.fc.bias, torch.zeros(1000))


@pytest.mark.parametrize("position,kind", [("learned", LearnedPosition), ("concat", ConcatPosition),
                                           ("none", type(None))])
def test_vit_positions_of_each_kind(position, kind):
    c = ViTConfig(image_size=16, patch_size=8, width=32, depth=1, heads=4, mlp_hidden=32, position=position,
                  pos_width=8 if position == "concat" else 0, stem="patch", bias=False)
    vit = ViT(c)
    assert isinstance(vit.pos, kind) and vit.pos_drop is None
    assert vit.patch_embed.proj.bias is None
    width = 24 if position == "concat" else 32  # concatenated positions take part of the width
    assert vit.patch_embed.proj.out_channels == width and vit.prefix.cls_token.shape[-1] == width
    if position != "none":
        assert vit.pos.length == 5  # the class token and a 2 x 2 grid
        with pytest.raises(ValueError, match=r"expected images of size 16x16 \(the model's image_size\), got 24x16"):
            vit(torch.randn(1, 3, 24, 16))
    else:  # without a position table any size that tiles into patches is read
        assert vit(torch.randn(1, 3, 24, 16)).shape == (1, 1000)


def test_every_gpt_setting_reaches_its_module():
    c = GPTConfig(vocab_size=13, context=24, width=32, depth=2, heads=4, mlp_hidden=48, activation="gelu",
                  position="rotary", norm_eps=1e-3, bias=False, tie_weights=False, dropout=0.25, attn_dropout=0.125,
                  attn_impl="explicit")
    gpt = GPT(c)
    assert gpt.pos is None  # rotary positions live inside attention
    rope = gpt.backbone.blocks[0].attn.rotary
    assert rope is not None and rope.cos.shape == (24, 4)  # context positions, head_dim / 2 frequencies
    assert_blocks(gpt.backbone, hidden=48, layers=1, approximate="none", eps=1e-3, bias=False, dropout=0.25,
                  attn_dropout=0.125)
    assert gpt.backbone.norm.eps == 1e-3 and gpt.drop.p == 0.25
    assert all(b.attn.impl == "explicit" for b in gpt.backbone.blocks)
    assert gpt.lm_head.weight is not gpt.tok_embed.weight and gpt.lm_head.weight.shape == (13, 32)
    tied = GPT(GPTConfig(vocab_size=13, context=24, width=32, depth=1, heads=4))
    assert tied.lm_head.weight is tied.tok_embed.weight and tied.drop is None
    assert tied.backbone.blocks[0].mlp.fc1.out_features == 128 and tied.backbone.blocks[0].attn.rotary is None
    assert isinstance(tied.pos, LearnedPosition) and tied.pos.length == 24
    sinus = GPT(GPTConfig(vocab_size=13, context=24, width=32, depth=1, heads=4, position="sinusoidal"))
    assert isinstance(sinus.pos, SinusoidalPosition) and sinus.pos.length == 24
    assert GPT(GPTConfig(vocab_size=13, context=24, width=32, depth=1, heads=4, position="none")).pos is None


@pytest.mark.parametrize("depth", [1, 4])
def test_gpt2_scales_the_residual_projections_by_one_over_sqrt_twice_the_depth(depth):
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=16, context=8, width=256, depth=depth, heads=4))
    std = 0.02 / math.sqrt(2 * depth)
    # A normal cut at +-0.04: at depth 1 that is 2.8 sigma, so the cut shows, and lowers the std by 2.5%.
    cut = 0.04 / std
    kept = math.erf(cut / math.sqrt(2)) - 2 * cut * math.exp(-cut * cut / 2) / math.sqrt(2 * math.pi)
    expected = std * math.sqrt(kept / math.erf(cut / math.sqrt(2)))
    for block in gpt.backbone.blocks:
        for w in (block.attn.proj.weight, block.mlp.fc2.weight):
            assert w.abs().max() <= 0.04
            assert abs(w.std().item() / expected - 1) < 0.02
            assert abs(w.mean().item()) < 3e-4
        assert abs(block.attn.qkv.weight.std().item() / (0.02 * 0.880) - 1) < 0.02  # the others as init_weights
    if depth == 1:  # near the cut on both sides: it is at +-0.04, not elsewhere
        w = torch.cat([b.attn.proj.weight.flatten() for b in gpt.backbone.blocks])
        assert w.max() > 0.039 and w.min() < -0.039


@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_vit_pool_sets_what_the_last_block_computes(pool):
    # A class-token head reads token 0 alone, so the last block computes that token only (forward and
    # pre_logits alike); a mean-pooled head reads all 1 + 4 tokens. The logits are those of every token.
    torch.manual_seed(0)
    vit = ViT(ViTConfig(image_size=16, patch_size=8, width=32, depth=2, heads=4, mlp_hidden=64, num_classes=3,
                        pool=pool)).eval()
    images = torch.randn(2, 3, 16, 16)
    seen = []
    hook = vit.backbone.blocks[-1].register_forward_hook(lambda m, args, out: seen.append(out.shape[1]))
    with torch.no_grad():
        logits, features = vit(images), vit.pre_logits(images)
    hook.remove()
    assert seen == ([1, 1] if pool == "cls" else [5, 5])
    with torch.no_grad():
        every = vit.backbone(vit.tokens(images))
        torch.testing.assert_close(logits, vit.head(every), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(features, vit.head.pooled(every), rtol=1e-5, atol=1e-5)
