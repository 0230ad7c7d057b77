"""Input heads and conditioning against their definitions: the time sinusoid and its MLP, the class
embedding and its label dropout, adaLN's modulation and the final modulated norm, the convolutional
stem's layers, and the concatenated position table."""
import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from anyformer.nn import ClassEmbedding, ConcatPosition, FinalAdaLN, TimeEmbedding
from anyformer.nn.conditioning import AdaLNModulation, modulate, timestep_sinusoid
from anyformer.nn.stems import ConvStem


def test_the_time_sinusoid_is_cos_and_sin_of_scale_t_times_each_frequency():
    t = torch.tensor([0.25, 0.7])
    got = timestep_sinusoid(t, 6, scale=50.0, base=100.0)
    for b, tb in enumerate(t.tolist()):
        angles = [50.0 * tb * 100.0 ** (-k / 3) for k in range(3)]  # base^(-k / half), half = 3
        expected = [math.cos(a) for a in angles] + [math.sin(a) for a in angles]
        torch.testing.assert_close(got[b], torch.tensor(expected))
    assert timestep_sinusoid(t.to("meta"), 6).device.type == "meta"
    with pytest.raises(ValueError, match="the time sinusoid needs an even width, got 5"):
        timestep_sinusoid(t, 5)


def test_the_time_embedding_is_a_silu_mlp_of_the_sinusoid_in_the_weights_dtype():
    torch.manual_seed(0)
    emb = TimeEmbedding(8, freq_dim=6, scale=30.0).double()
    t = torch.tensor([0.1, 0.9])
    first, second = emb.mlp[0], emb.mlp[2]
    s = timestep_sinusoid(t, 6, 30.0).double()
    expected = F.linear(F.silu(F.linear(s, first.weight, first.bias)), second.weight, second.bias)
    out = emb(t)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, expected)
    with pytest.raises(ValueError, match=r"expected times of shape \(B,\), got \(2, 1\)"):
        emb(t[:, None])


def test_class_embedding_rows_and_the_labels_it_refuses():
    emb = ClassEmbedding(3, 4)
    assert emb.weight.shape == (4, 4) and emb.null == 3  # one more row: "no class"
    torch.testing.assert_close(emb(torch.tensor([2, 3, 0])), emb.weight[[2, 3, 0]])
    with pytest.raises(TypeError, match=r"expected int64 labels of shape \(B,\), got torch.int64 \(1, 2\)"):
        emb(torch.tensor([[0, 1]]))
    with pytest.raises(TypeError, match=r"got torch.float32 \(2,\)"):
        emb(torch.tensor([0.0, 1.0]))


def test_label_dropout_draws_from_the_generator_given_and_only_when_asked():
    emb = ClassEmbedding(5, 4)
    labels = torch.arange(5).repeat(40)
    g = torch.Generator().manual_seed(3)
    dropped = emb.drop(labels, 0.3, g)
    hit = torch.rand(labels.shape, generator=torch.Generator().manual_seed(3)) < 0.3
    assert torch.equal(dropped, torch.where(hit, torch.full_like(labels, 5), labels))
    assert 0.2 < hit.float().mean() < 0.4
    state = g.get_state()
    assert emb.drop(labels, 0.0, g) is labels and torch.equal(g.get_state(), state)  # p = 0 draws nothing
    on_meta = emb.drop(labels.to("meta"), 0.3, g)
    assert on_meta.device.type == "meta"


def test_modulation_chunks_a_silu_linear_map_and_modulate_shifts_and_scales():
    torch.manual_seed(0)
    mod = AdaLNModulation(4, 3)
    with torch.no_grad():
        mod.proj.weight.normal_()
        mod.proj.bias.normal_()
    c = torch.randn(2, 4)
    full = F.linear(F.silu(c), mod.proj.weight, mod.proj.bias)
    for i, chunk in enumerate(mod(c)):
        torch.testing.assert_close(chunk, full[:, 4 * i:4 * (i + 1)])
    x, shift, scale = torch.randn(2, 5, 4), torch.randn(2, 4), torch.randn(2, 4)
    torch.testing.assert_close(modulate(x, shift, scale), x * (1 + scale[:, None, :]) + shift[:, None, :])


def test_the_final_adaln_is_a_plain_norm_with_its_eps_modulated_by_the_condition():
    torch.manual_seed(0)
    final = FinalAdaLN(4, eps=0.5)
    assert final.norm.weight is None
    with torch.no_grad():
        final.modulation.proj.weight.normal_()
        final.modulation.proj.bias.normal_()
    x, c = torch.randn(2, 3, 4), torch.randn(2, 4)
    shift, scale = F.linear(F.silu(c), final.modulation.proj.weight, final.modulation.proj.bias).chunk(2, -1)
    normed = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 0.5)
    torch.testing.assert_close(final(x, c), normed * (1 + scale[:, None]) + shift[:, None])


def test_the_conv_stem_halves_the_grid_log2_p_times_doubling_channels_up_to_half_the_width():
    stem = ConvStem(8, 3, 64)
    convs = [m for m in stem.proj if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels) for c in convs] == [(3, 8), (8, 16), (16, 32), (32, 64)]
    assert [(c.kernel_size, c.stride, c.padding) for c in convs[:-1]] == [((3, 3), (2, 2), (1, 1))] * 3
    assert convs[-1].kernel_size == (1, 1)
    assert sum(isinstance(m, nn.GELU) for m in stem.proj) == 3
    wide = ConvStem(4, 1, 256)  # two steps: 256 / 4, 256 / 2
    assert [c.out_channels for c in wide.proj if isinstance(c, nn.Conv2d)] == [64, 128, 256]
    narrow = ConvStem(4, 1, 16)  # never fewer than 8 channels
    assert [c.out_channels for c in narrow.proj if isinstance(c, nn.Conv2d)] == [8, 8, 16]
    assert ConvStem(2, 1, 16)(torch.randn(1, 1, 6, 4)).shape == (1, 6, 16)  # the smallest patch, 2
    wider = ConvStem(8, 3, 64, channels=64)  # the last stage's channels asked: halving back from them
    assert [(c.in_channels, c.out_channels) for c in wider.proj if isinstance(c, nn.Conv2d)] == \
        [(3, 16), (16, 32), (32, 64), (64, 64)]
    odd = ConvStem(4, 1, 32, channels=24)
    assert [c.out_channels for c in odd.proj if isinstance(c, nn.Conv2d)] == [12, 24, 32]
    for bad in (1, 6, (4, 2)):
        with pytest.raises(ValueError, match="a conv stem needs a square power-of-two patch size"):
            ConvStem(bad, 1, 16)


def test_the_concatenated_position_table_is_one_learned_row_per_position():
    torch.manual_seed(0)
    pos = ConcatPosition(6, 3, std=0.5)
    assert pos.pos_embed.shape == (1, 6, 3) and pos.length == 6
    assert 0.3 < pos.pos_embed.std() < 0.7
    x = torch.randn(2, 4, 5)
    out = pos(x, offset=2)
    assert torch.equal(out[..., :5], x) and torch.equal(out[1, :, 5:], pos.pos_embed[0, 2:6])
