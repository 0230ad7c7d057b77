"""The backbone and its parts as Turner (2023) defines them."""
import pytest
import torch

from anyformer.nn import (ConcatPosition, LearnedPosition, RotaryEmbedding, SinusoidalPosition, Transformer,
                          TransformerBlock, sinusoidal_2d)


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_backbone_without_positions_is_permutation_equivariant(norm):
    trunk = Transformer(width=32, depth=3, heads=4, norm=norm).eval()
    x = torch.randn(2, 8, 32)
    perm = torch.randperm(8)
    torch.testing.assert_close(trunk(x[:, perm]), trunk(x)[:, perm], atol=1e-5, rtol=1e-5)


def test_positions_break_permutation_equivariance():
    trunk, pos = Transformer(width=32, depth=2, heads=4).eval(), LearnedPosition(8, 32)
    x = torch.randn(1, 8, 32)
    perm = torch.arange(7, -1, -1)
    assert not torch.allclose(trunk(pos(x[:, perm])), trunk(pos(x))[:, perm], atol=1e-4)


def test_causal_backbone_ignores_the_future():
    trunk = Transformer(width=32, depth=3, heads=4, rotary=True).eval()
    x = torch.randn(1, 9, 32)
    y = trunk(x, causal=True)
    x2 = x.clone()
    x2[:, 5:] = torch.randn(1, 4, 32)
    torch.testing.assert_close(trunk(x2, causal=True)[:, :5], y[:, :5])


def test_pre_and_post_norm_blocks_compute_the_seeds_equations():
    x = torch.randn(2, 4, 16)
    post = TransformerBlock(16, 2, norm="post").eval()
    y = post(x)
    # Post-norm ends with a LayerNorm: every token has zero mean and unit variance.
    torch.testing.assert_close(y.mean(-1), torch.zeros(2, 4), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.var(-1, unbiased=False), torch.ones(2, 4), atol=1e-3, rtol=0)
    h = post.norm1(x + post.attn(x))  # x = LN(x + MHA(x));  x = LN(x + MLP(x))
    torch.testing.assert_close(y, post.norm2(h + post.mlp(h)))
    pre = TransformerBlock(16, 2, norm="pre").eval()
    h = x + pre.attn(pre.norm1(x))  # x = x + MHA(LN(x));  x = x + MLP(LN(x))
    torch.testing.assert_close(pre(x), h + pre.mlp(pre.norm2(h)))


def test_drop_path_and_layer_scale():
    block = TransformerBlock(16, 2, drop_path=0.5, layer_scale=1e-5)
    assert block.ls1.gamma.shape == (16,)
    x = torch.randn(64, 3, 16)
    block.eval()
    y = block(x)
    assert (y - x).abs().max() < 1e-3  # tiny layer scale: block is near identity at start
    block.train()
    y = block(x)
    dropped = ((y - x).abs().amax(dim=(1, 2)) == 0).float().mean()
    assert 0.1 < dropped < 0.9  # whole samples' branches dropped


def test_mlp_depth_and_activation():
    from anyformer.nn import MLP
    m = MLP(8, 32, layers=3, activation="gelu_tanh")
    assert len(m.hidden) == 2 and m(torch.randn(2, 5, 8)).shape == (2, 5, 8)
    with pytest.raises(ValueError, match="unknown activation 'swish'.*gelu"):
        MLP(8, 32, activation="swish")


def test_sinusoidal_and_concat_positions():
    s = SinusoidalPosition(10, 16)
    x = torch.zeros(1, 10, 16)
    assert torch.allclose(s(x)[0, 0, 1::2], torch.ones(8))  # cos(0) = 1
    t = sinusoidal_2d(3, 4, 16)
    assert t.shape == (12, 16)
    assert torch.equal(t[0, :8], t[1, :8])  # same row, same row half
    assert not torch.equal(t[0, 8:], t[1, 8:])
    c = ConcatPosition(5, 4)
    assert c(torch.randn(2, 5, 12)).shape == (2, 5, 16)
    with pytest.raises(ValueError, match="longer than the position table"):
        LearnedPosition(4, 8)(torch.randn(1, 5, 8))


def test_rotary_q_dot_k_depends_on_the_position_difference_and_changes_with_it():
    rope = RotaryEmbedding(8)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)

    def dot(m, n):
        return (rope(q, m) * rope(k, n)).sum()
    torch.testing.assert_close(dot(3, 1), dot(10, 8))
    torch.testing.assert_close(dot(0, 0), (q * k).sum())  # position 0 is not rotated
    assert not torch.allclose(dot(3, 1), dot(3, 2), atol=1e-3)  # another difference, another score


def test_rotary_turns_each_channel_pair_by_position_times_its_frequency():
    # By hand: pair i of a vector at position p turns by the angle p * base^(-2i / d_h).
    rope = RotaryEmbedding(4, base=100.0)
    t = torch.tensor([1.0, 0.0, 0.0, 2.0]).expand(1, 1, 3, 4)  # one vector at positions 5, 6, 7
    for n, row in enumerate(rope(t, offset=5)[0, 0]):
        a0, a1 = torch.tensor(5.0 + n), torch.tensor((5.0 + n) * 100.0 ** -0.5)
        expected = torch.stack([a0.cos(), a0.sin(), -2 * a1.sin(), 2 * a1.cos()])
        torch.testing.assert_close(row, expected)


def test_rotary_attention_sees_order():
    # Rotary positions act inside attention: without them the backbone is permutation equivariant.
    trunk = Transformer(width=32, depth=2, heads=4, rotary=True).eval()
    with torch.no_grad():  # scores far from zero, so attention is far from uniform
        for block in trunk.blocks:
            block.attn.qkv.weight.normal_(std=0.5)
    x, perm = torch.randn(1, 8, 32), torch.arange(7, -1, -1)
    assert not torch.allclose(trunk(x[:, perm]), trunk(x)[:, perm], atol=1e-4)


def test_bad_input_is_named():
    trunk = Transformer(width=32, depth=1, heads=4)
    with pytest.raises(ValueError, match=r"expected tokens of shape \(B, N, 32\), got \(2, 5, 16\)"):
        trunk(torch.randn(2, 5, 16))
    with pytest.raises(ValueError, match="width must be divisible by heads: got width=30, heads=4"):
        Transformer(width=30, depth=1, heads=4)
    with pytest.raises(TypeError, match="mask must be a bool"):
        trunk(torch.randn(2, 5, 32), mask=torch.ones(2, 5))


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_keep_first_tokens_matches_the_full_output(norm):
    torch.manual_seed(0)
    trunk = Transformer(width=32, depth=3, heads=4, norm=norm, layer_scale=0.1).eval()
    x = torch.randn(2, 9, 32, requires_grad=True)
    pad = torch.ones(2, 9, dtype=torch.bool)
    pad[1, 7:] = False
    for mask in (None, pad):
        full = trunk(x, mask=mask)
        first = trunk(x, mask=mask, keep=2)
        assert first.shape == (2, 2, 32)
        torch.testing.assert_close(first, full[:, :2], atol=1e-6, rtol=1e-5)
    g_full, = torch.autograd.grad(trunk(x)[:, :2].sum(), x)
    g_keep, = torch.autograd.grad(trunk(x, keep=2).sum(), x)
    torch.testing.assert_close(g_keep, g_full, atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="keep must be a positive int"):
        trunk(x, keep=0)
    with pytest.raises(ValueError, match="queries=n takes no causal mask"):
        trunk(x, keep=1, causal=True)
