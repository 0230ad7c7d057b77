"""The block and the backbone against their equations, computed here from the parameters with plain
torch ops. Every parameter is drawn at random first (LayerNorm's 1 and 0, LayerScale's constant and
adaLN's zeros are points where a dropped term gives the same number), so a term left out, a norm in
the wrong place or an argument not passed on changes the output."""
import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from anyformer.nn import Transformer, TransformerBlock
from anyformer.nn.dropout import dropout
from anyformer.nn.transformer import LayerScale, drop_path, init_weights


def randomised(module: nn.Module, seed: int = 0) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3 + (1.0 if p.dim() == 1 else 0.0))
    return module.eval()


def ln(x, norm):
    """LayerNorm by its definition, with its own eps and (if any) affine parameters."""
    mu = x.mean(-1, keepdim=True)
    y = (x - mu) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + norm.eps)
    return y if norm.weight is None else y * norm.weight + norm.bias


def mha(layer, x, context=None, causal=False, key_mask=None):
    """softmax(Q K^T / sqrt(d_h) + mask) V, heads merged, then the output projection."""
    B, N, D = x.shape
    H, d = layer.heads, layer.head_dim
    if context is None:
        q, k, v = F.linear(x, layer.qkv.weight, layer.qkv.bias).split(D, dim=-1)
    else:
        q = F.linear(x, layer.q.weight, layer.q.bias)
        k, v = F.linear(context, layer.kv.weight, layer.kv.bias).split(D, dim=-1)
    q, k, v = (t.reshape(B, -1, H, d).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)
    if causal:
        scores = scores.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float("-inf"))
    if key_mask is not None:
        scores = scores.masked_fill(~key_mask[:, None, None, :], float("-inf"))
    y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, N, D)
    return F.linear(y, layer.proj.weight, layer.proj.bias)


def mlp(block, h):
    return block.mlp(h)  # the MLP's own formula is pinned in test_formulas.py


@pytest.mark.parametrize("causal", [False, True])
def test_a_pre_norm_block_is_x_plus_gamma_mha_of_ln_then_x_plus_gamma_mlp_of_ln(causal):
    block = randomised(TransformerBlock(16, 4, norm="pre", norm_eps=1e-3, layer_scale=0.5))
    x = torch.randn(2, 5, 16)
    key_mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    h = x + block.ls1.gamma * mha(block.attn, ln(x, block.norm1), causal=causal, key_mask=key_mask)
    y = h + block.ls2.gamma * mlp(block, ln(h, block.norm2))
    torch.testing.assert_close(block(x, causal=causal, mask=key_mask), y, atol=1e-5, rtol=1e-5)


def test_a_post_norm_block_is_ln_of_x_plus_mha_then_ln_of_x_plus_mlp():
    block = randomised(TransformerBlock(16, 4, norm="post", norm_eps=1e-2, layer_scale=0.5))
    x = torch.randn(2, 5, 16)
    h = ln(x + block.ls1.gamma * mha(block.attn, x, causal=True), block.norm1)
    y = ln(h + block.ls2.gamma * mlp(block, h), block.norm2)
    torch.testing.assert_close(block(x, causal=True), y, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_cross_attention_sits_between_self_attention_and_the_mlp(norm):
    block = randomised(TransformerBlock(16, 4, norm=norm, cross=True))
    x, context = torch.randn(2, 5, 16), torch.randn(2, 3, 16)
    context_mask = torch.tensor([[True, True, True], [True, False, True]])
    if norm == "pre":
        h = x + mha(block.attn, ln(x, block.norm1))
        h = h + mha(block.cross_attn, ln(h, block.norm_cross), context, key_mask=context_mask)
        y = h + mlp(block, ln(h, block.norm2))
    else:
        h = ln(x + mha(block.attn, x), block.norm1)
        h = ln(h + mha(block.cross_attn, h, context, key_mask=context_mask), block.norm_cross)
        y = ln(h + mlp(block, h), block.norm2)
    torch.testing.assert_close(block(x, context=context, context_mask=context_mask), y, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cross", [False, True])
def test_an_adaln_block_modulates_its_norms_and_gates_its_branches_by_the_condition(cross):
    block = randomised(TransformerBlock(16, 4, adaln=True, cross=cross, layer_scale=0.5))
    assert block.norm1.weight is None and block.norm2.weight is None  # the condition gives shift and scale
    x, c = torch.randn(2, 5, 16), torch.randn(2, 16)
    context = torch.randn(2, 3, 16)
    b1, s1, g1, b2, s2, g2 = F.linear(F.silu(c), block.modulation.proj.weight, block.modulation.proj.bias).split(16, -1)
    h = x + block.ls1.gamma * g1[:, None] * mha(block.attn, ln(x, block.norm1) * (1 + s1[:, None]) + b1[:, None],
                                                causal=True)
    if cross:
        h = h + mha(block.cross_attn, ln(h, block.norm_cross), context)
    y = h + block.ls2.gamma * g2[:, None] * mlp(block, ln(h, block.norm2) * (1 + s2[:, None]) + b2[:, None])
    out = block(x, cond=c, causal=True, context=context if cross else None)
    torch.testing.assert_close(out, y, atol=1e-5, rtol=1e-5)
    # The masks reach both attentions: padding on the tokens, padding on the context.
    key_mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    context_mask = torch.tensor([[True, True, True], [True, False, True]])
    h = x + block.ls1.gamma * g1[:, None] * mha(block.attn, ln(x, block.norm1) * (1 + s1[:, None]) + b1[:, None],
                                                key_mask=key_mask)
    if cross:
        h = h + mha(block.cross_attn, ln(h, block.norm_cross), context, key_mask=context_mask)
    y = h + block.ls2.gamma * g2[:, None] * mlp(block, ln(h, block.norm2) * (1 + s2[:, None]) + b2[:, None])
    out = block(x, cond=c, mask=key_mask, context=context if cross else None, context_mask=context_mask)
    torch.testing.assert_close(out, y, atol=1e-5, rtol=1e-5)


def test_adaln_zero_starts_as_the_identity_and_asks_for_its_condition():
    block = TransformerBlock(16, 4, adaln=True).eval()
    x, c = torch.randn(2, 5, 16), torch.randn(2, 16)
    torch.testing.assert_close(block(x, cond=c), x)
    with pytest.raises(ValueError, match=r"adaLN-modulated: give forward a condition cond of shape \(B, D\)"):
        block(x)
    with pytest.raises(ValueError, match="no KV cache, no queries=n"):
        block(x, cond=c, queries=1)
    with pytest.raises(ValueError, match="cond was given to a block built without adaln=True"):
        TransformerBlock(16, 4)(x, cond=c)
    with pytest.raises(ValueError, match="adaln=True modulates pre-norm blocks; it needs norm='pre'"):
        TransformerBlock(16, 4, adaln=True, norm="post")
    with pytest.raises(ValueError, match="unknown norm placement 'middle'; expected 'pre' or 'post'"):
        TransformerBlock(16, 4, norm="middle")


def test_the_block_builds_its_parts_from_its_arguments():
    block = TransformerBlock(16, 4, mlp_hidden=24, mlp_layers=2, norm_eps=1e-3, activation="gelu_tanh", bias=False,
                             dropout=0.25, attn_dropout=0.125, drop_path=0.3, layer_scale=0.7)
    assert [block.norm1.eps, block.norm2.eps] == [1e-3, 1e-3]
    assert block.mlp.fc1.weight.shape == (24, 16) and len(block.mlp.hidden) == 1
    assert block.mlp.act.approximate == "tanh"
    assert all(m.bias is None for m in block.modules() if isinstance(m, nn.Linear))
    assert block.attn.attn_dropout == 0.125 and block.attn.proj_drop.p == 0.25 and block.mlp_drop.p == 0.25
    assert block.drop_path == 0.3
    assert torch.equal(block.ls1.gamma, torch.full((16,), 0.7)) and torch.equal(block.ls2.gamma, block.ls1.gamma)
    plain = TransformerBlock(16, 4)
    assert plain.mlp.fc1.weight.shape == (64, 16)  # 4x the width by default
    assert plain.mlp_drop is None and plain.ls1 is None and plain.ls2 is None and plain.modulation is None
    assert plain.norm1.weight is not None and not hasattr(plain, "cross_attn")
    cross = TransformerBlock(16, 4, cross=True, norm_eps=1e-3, bias=False, dropout=0.25, attn_dropout=0.125)
    assert cross.norm_cross.eps == 1e-3 and cross.cross_attn.cross and cross.cross_attn.q.bias is None
    assert cross.cross_attn.attn_dropout == 0.125 and cross.cross_attn.proj_drop.p == 0.25
    assert TransformerBlock(16, 4, adaln=True).modulation.chunks == 6


def test_dropout_acts_on_the_mlp_branch_output_in_training():
    block = randomised(TransformerBlock(16, 4, dropout=0.5)).train()
    x = torch.randn(3, 6, 16)
    torch.manual_seed(1)
    y = block(x)
    torch.manual_seed(1)
    a = block.attn(ln(x, block.norm1))  # the attention branch's own dropout draws first
    h = x + a
    m = mlp(block, ln(h, block.norm2))
    kept = dropout(m, 0.5, training=True)
    torch.testing.assert_close(y, h + kept, atol=1e-5, rtol=1e-5)
    assert (kept == 0).float().mean() > 0.3  # about half dropped, the rest doubled


def test_drop_path_drops_whole_samples_with_probability_p_and_rescales_the_rest():
    x = torch.randn(4000, 3, 2) + 5
    torch.manual_seed(0)
    y = drop_path(x, 0.25, training=True)
    kept = (y != 0).flatten(1)
    assert (kept.all(1) | ~kept.any(1)).all()  # a sample's branch is kept or dropped whole
    share = kept.all(1).float().mean()
    assert abs(share - 0.75) < 0.03
    torch.testing.assert_close(y[kept.all(1)], x[kept.all(1)] / 0.75)
    assert drop_path(x, 0.25, training=False) is x and drop_path(x, 0.0, training=True) is x


def test_the_backbone_stacks_its_blocks_and_ends_with_its_norm():
    trunk = randomised(Transformer(16, 3, 4, norm_eps=1e-3))
    x = torch.randn(2, 5, 16)
    h = x
    for block in trunk.blocks:
        h = block(h, causal=True)
    torch.testing.assert_close(trunk(x, causal=True), ln(h, trunk.norm), atol=1e-5, rtol=1e-5)
    assert Transformer(16, 2, 4, final_norm=False).norm is None
    assert trunk.norm.eps == 1e-3 and all(b.norm1.eps == 1e-3 for b in trunk.blocks)


def test_the_backbone_passes_its_settings_to_every_block():
    trunk = Transformer(16, 5, 4, mlp_hidden=24, mlp_layers=2, norm="post", activation="gelu_tanh", bias=False,
                        dropout=0.25, attn_dropout=0.125, drop_path=0.4, layer_scale=0.7, cross=True,
                        rotary=True, max_len=64)
    assert [b.drop_path for b in trunk.blocks] == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])  # deeper drop more
    rope = trunk.blocks[0].attn.rotary
    assert rope is not None and all(b.attn.rotary is rope for b in trunk.blocks)  # one table shared
    assert rope.cos.shape == (64, 2)  # max_len positions, head_dim / 2 frequencies
    for b in trunk.blocks:
        assert not b.pre_norm and b.cross and b.mlp.fc1.weight.shape == (24, 16) and len(b.mlp.hidden) == 1
        assert b.mlp.act.approximate == "tanh" and b.attn.qkv.bias is None and b.ls1.gamma[0] == 0.7
        assert b.attn.attn_dropout == 0.125 and b.mlp_drop.p == 0.25
    assert Transformer(16, 1, 4, drop_path=0.4).blocks[0].drop_path == 0.0  # one block: depth - 1 is 0
    assert Transformer(16, 2, 4).blocks[0].attn.rotary is None
    with pytest.raises(ValueError, match="depth must be at least 1, got 0"):
        Transformer(16, 0, 4)


def test_weights_start_truncated_normal_with_zero_biases_and_unit_norms():
    torch.manual_seed(0)
    layer = nn.Linear(400, 500)
    init_weights(layer)
    w = layer.weight
    assert w.abs().max() <= 0.04 and w.abs().max() > 0.039  # cut at two standard deviations
    assert abs(w.std().item() - 0.02 * 0.880) < 5e-4  # a normal's std truncated at +-2 sigma: 0.880 sigma
    assert abs(w.mean().item()) < 2e-4 and torch.equal(layer.bias, torch.zeros(500))
    norm = nn.LayerNorm(8)
    with torch.no_grad():
        norm.weight.fill_(3)
        norm.bias.fill_(2)
    init_weights(norm)
    assert torch.equal(norm.weight, torch.ones(8)) and torch.equal(norm.bias, torch.zeros(8))
    init_weights(nn.LayerNorm(8, elementwise_affine=False))  # nothing to set: no error
    trunk = Transformer(16, 2, 4, adaln=True)
    assert all(b.modulation.proj.weight.abs().sum() == 0 for b in trunk.blocks)  # the gates start closed
    assert trunk.blocks[0].attn.qkv.weight.std() < 0.03 and trunk.blocks[0].attn.qkv.bias.abs().sum() == 0


def test_layer_scale_multiplies_each_channel_by_its_gamma():
    ls = LayerScale(3, 0.5)
    with torch.no_grad():
        ls.gamma.copy_(torch.tensor([1.0, 2.0, -3.0]))
    torch.testing.assert_close(ls(torch.ones(2, 3)), torch.tensor([[1.0, 2.0, -3.0]] * 2))


def test_the_backbone_with_attention_computes_what_its_forward_does_with_every_argument():
    torch.manual_seed(0)
    cross = randomised(Transformer(16, 2, 4, cross=True))
    x, context = torch.randn(2, 5, 16), torch.randn(2, 3, 16)
    context_mask = torch.tensor([[True, True, True], [True, False, True]])
    mask = torch.tensor([[True] * 5, [True, True, True, True, False]])
    kw = dict(mask=mask, context=context, context_mask=context_mask, keep=2)  # keep: key padding only
    y, weights = cross(x, return_attention=[-2, 1], **kw)
    torch.testing.assert_close(y, cross(x, **kw))
    # the hooked last layer computes every query row (its weights whole), and y keeps 2 tokens still
    assert y.shape == (2, 2, 16) and [w.shape for w in weights] == [(2, 4, 5, 5), (2, 4, 5, 5)]
    assert (weights[0][1, :, :, 4] == 0).all() and (weights[0][0, :, :, 4] > 0).all()  # the mask reached them
    causal, w = cross(x, return_attention=[0], causal=True, context=context)
    torch.testing.assert_close(causal, cross(x, causal=True, context=context))
    assert (w[0].triu(1) == 0).all()
    assert cross(x, return_attention=[], **kw)[1] == []
    with pytest.raises(ValueError, match=r"attention layers must be ints in \[-2, 2\); got -3"):
        cross(x, return_attention=[-3], **kw)
    adaln = randomised(Transformer(16, 2, 4, adaln=True))
    c = torch.randn(2, 16)
    torch.testing.assert_close(adaln(x, return_attention=True, cond=c)[0], adaln(x, cond=c))


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_the_backbone_with_attention_continues_a_kv_cache(norm):
    trunk = randomised(Transformer(16, 2, 4, norm=norm, rotary=True, max_len=16))
    x = torch.randn(1, 6, 16)
    full = trunk(x, causal=True)
    from anyformer.nn.attention import KVCache
    cache = KVCache(2, 1, 4, 4, 16, torch.float32, "cpu")
    trunk(x[:, :4], causal=True, cache=cache)
    y, w = trunk(x[:, 4:], return_attention=[0], causal=True, cache=cache)
    torch.testing.assert_close(y, full[:, 4:], atol=1e-5, rtol=1e-5)
    assert w[0].shape == (1, 4, 2, 6)  # eager on the CPU: over the 6 positions written
    assert (w[0][:, :, 0, 5] == 0).all() and (w[0][:, :, 1, :6] > 0).all()
    cache = KVCache(2, 1, 4, 4, 16, torch.float32, "cpu")
    trunk(x[:, :4], causal=True, cache=cache)
    for p in (4, 4, 5):  # the same position twice (moved back): written again, the same outputs
        cache.position.fill_(p)
        y, _ = trunk(x[:, p:p + 1], return_attention=[1], causal=True, cache=cache)
        torch.testing.assert_close(y, full[:, p:p + 1], atol=1e-5, rtol=1e-5)
