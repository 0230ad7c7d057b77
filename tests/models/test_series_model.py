"""The series transformer: token counts and shapes for both patchings, padding masks that make a
padded series read exactly like the same series alone, and clear refusals of wrong inputs."""
import pytest
import torch

import anyformer as af
from anyformer.models import SeriesConfig, SeriesTransformer
from tests.conftest import hooked


def model(patching, channels=3, length=50, patch=8):
    return SeriesTransformer.preset("series-small", channels=channels, length=length, patch_size=patch,
                                    patching=patching, num_classes=5).eval()


@pytest.mark.parametrize("patching, tokens", [("across", 7), ("channel", 21)])
def test_shapes_and_token_counts(patching, tokens):
    m = model(patching)
    assert m.config.num_tokens == tokens  # ceil(50 / 8) = 7 patches along time, times 3 channels per channel
    x = torch.randn(4, 3, 50)
    assert m(x).shape == (4, 5)
    z, mask = m.tokens(x)
    assert z.shape == (4, 1 + tokens, 64) and mask is None
    logits, attn = hooked(m, True, x)
    assert len(attn) == m.config.depth and attn[0].shape == (4, 4, 1 + tokens, 1 + tokens)


@pytest.mark.parametrize("patching, position", [("across", "learned"), ("channel", "sinusoidal"),
                                               ("across", "rotary")])
def test_a_padded_series_reads_like_the_same_series_alone(patching, position):
    m = SeriesTransformer.preset("series-small", channels=3, length=50, patch_size=8, patching=patching,
                                 position=position, num_classes=5).eval()
    x = torch.randn(3, 3, 50)
    lengths = torch.tensor([50, 21, 5])
    batched = m(x, lengths)
    for i, n in enumerate(lengths.tolist()):
        alone = m(x[i:i + 1, :, :n])
        torch.testing.assert_close(batched[i], alone[0], atol=1e-5, rtol=1e-5)
    # What lies past a series' end does not matter.
    garbage = x.clone()
    garbage[1, :, 21:] = 1e3
    torch.testing.assert_close(m(garbage, lengths), batched)


def test_mask_marks_empty_patches_only():
    m = model("channel")
    _, mask = m.tokens(torch.randn(2, 3, 50), torch.tensor([50, 17]))
    per_channel = mask[1, 1:].reshape(3, 7)  # 17 steps fill patches 0, 1 and the first step of 2
    assert mask[:, 0].all() and mask[0].all()
    assert per_channel.tolist() == [[True, True, True, False, False, False, False]] * 3
    _, attn = hooked(m, [0], torch.randn(2, 3, 50), torch.tensor([50, 17]))
    assert (attn[0][1, :, :, 1:].reshape(4, 22, 3, 7)[..., 3:] == 0).all()  # no weight on empty patches


def test_wrong_inputs_are_refused_clearly():
    m = model("across")
    with pytest.raises(ValueError, match=r"expected series of shape \(B, 3, T\) \(channels fixed at 3\), got \(2, 4, 50\)"):
        m(torch.randn(2, 4, 50))
    with pytest.raises(ValueError, match="series of 60 steps is longer than the 50 this model takes"):
        m(torch.randn(2, 3, 60))
    with pytest.raises(ValueError, match="unknown patching 'diagonal'"):
        SeriesConfig(patching="diagonal")
    with pytest.raises(ValueError, match="position='rotary' rotates by token order"):
        SeriesConfig(patching="channel", position="rotary")


def test_train_backward_save_load(tmp_path):
    m = model("channel").train()
    m(torch.randn(2, 3, 50), torch.tensor([50, 30])).square().mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in m.parameters())
    m.eval().save(tmp_path / "m")
    loaded = af.load(tmp_path / "m")
    x = torch.randn(2, 3, 50)
    assert isinstance(loaded, SeriesTransformer) and torch.equal(loaded(x), m(x))


def test_overlapping_patches_count_and_padding():
    m = SeriesTransformer.preset("series-small", channels=2, length=50, patch_size=8, patch_stride=4,
                                 num_classes=3, patching="channel").eval()
    assert m.config.patches == 12  # starts 0, 4, ..., 44: the last reaches past 50 and is zero-padded
    x = torch.randn(2, 2, 50)
    lengths = torch.tensor([50, 13])
    _, mask = m.tokens(x, lengths)
    assert mask[1, 1:].reshape(2, 12)[0].tolist() == [True] * 4 + [False] * 8  # starts 0, 4, 8, 12 < 13
    torch.testing.assert_close(m(x, lengths)[1], m(x[1:, :, :13])[0], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match=r"patch_stride must be in \[1, patch_size=8\]"):
        SeriesConfig(patch_size=8, patch_stride=9)


@pytest.mark.parametrize("patching", ["across", "channel"])
def test_difference_reads_each_channels_slope_beside_it(patching):
    m = SeriesTransformer.preset("series-small", channels=2, length=20, patch_size=8, patch_stride=4,
                                 patching=patching, difference=True, num_classes=3).eval()
    assert m.config.in_channels == 4
    assert m.patch_embed.proj.in_features == (8 if patching == "channel" else 32)
    x = torch.tensor([[[0.0, 1.0, 3.0, 6.0, 0.0], [5.0, 5.0, 4.0, 0.0, 0.0]]])
    d = SeriesTransformer._difference(x, (torch.arange(5) < 4)[None, None])  # the first 4 steps kept
    # x[t] - x[t - 1], 0 at the first step, and 0 from the series' end on (not a jump down to the padding).
    assert d.tolist() == [[[0.0, 1.0, 2.0, 3.0, 0.0], [0.0, 0.0, -1.0, -4.0, 0.0]]]
    # A padded series still reads exactly like the same series alone, and padding garbage does not leak.
    series, lengths = torch.randn(3, 2, 20), torch.tensor([20, 11, 3])
    batched = m(series, lengths)
    for i, n in enumerate(lengths.tolist()):
        torch.testing.assert_close(batched[i], m(series[i:i + 1, :, :n])[0], atol=1e-5, rtol=1e-5)
    garbage = series.clone()
    garbage[1, :, 11:] = 1e3
    torch.testing.assert_close(m(garbage, lengths), batched)
