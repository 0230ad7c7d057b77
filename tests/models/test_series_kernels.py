"""The random-kernel stem: MiniRocket's kernels, dilations and proportions (checked against aeon's own
MiniRocket), pooled per patch, and the series model that reads them as tokens."""
import math

import numpy as np
import pytest
import torch

from anyformer.models.series import SeriesConfig, SeriesTransformer
from anyformer.models.series_kernels import (
    KERNELS,
    RandomKernelFeatures,
    dilations_for,
    kernel_weights,
)
from tests.conftest import hooked


def test_the_84_kernels_are_every_choice_of_three_taps_and_sum_to_zero():
    w = kernel_weights()
    assert w.shape == (KERNELS, 9)
    assert torch.all(w.sum(1) == 0) and torch.all((w == 2).sum(1) == 3)
    assert len({tuple(r.tolist()) for r in w}) == KERNELS


@pytest.mark.parametrize("length, features", [(150, 10_000), (24, 10_000), (1460, 4000), (9, 840), (500, 84)])
def test_dilations_and_biases_per_dilation_are_minirockets(length, features):
    aeon_minirocket = pytest.importorskip("aeon.transformations.collection.convolution_based._minirocket")
    dilations, shares = aeon_minirocket._fit_dilations(length, features, 32)
    assert dilations_for(length, features) == ([int(d) for d in dilations], [int(s) for s in shares])
    ours, per = dilations_for(length, features)
    assert 8 * ours[-1] <= max(length - 1, 8) and sum(per) == features // KERNELS


def test_whole_series_proportions_equal_aeons_minirocket_with_its_biases():
    """Given aeon's fitted biases, token 0 (the whole series) is aeon's feature vector: the same
    kernels, dilations, padding alternation and order of features."""
    convolution_based = pytest.importorskip("aeon.transformations.collection.convolution_based")
    from anyformer.data.series.dataset import load_series_splits
    train, _ = load_series_splits("GunPoint")
    x = train.values[:16]
    reference = convolution_based.MiniRocket(n_kernels=10_000, random_state=0).fit(x.double().numpy())
    expected = reference.transform(x.double().numpy())
    stem = RandomKernelFeatures(1, x.shape[-1], 10_000, patch=10, stride=5)
    stem.biases.copy_(torch.from_numpy(reference.parameters[4]))
    ours = stem(x)[:, :, 0].numpy()
    assert ours.shape == expected.shape == (16, 9996)
    # float32 sums in another order may put a value on the other side of a bias: at most one step of 126.
    assert np.abs(ours - expected).mean() < 1e-4 and np.abs(ours - expected).max() <= 1 / 126 + 1e-6


def test_patch_proportions_count_the_steps_of_each_patch():
    """A patch's proportion is the share of its own steps above the bias: checked against a direct count."""
    torch.manual_seed(0)
    x = torch.randn(3, 2, 40)
    stem = RandomKernelFeatures(2, 40, 168, patch=8, stride=4, seed=3)
    stem.fit(x, torch.full((3,), 40))
    out = stem(x)                                                # (B, F, 1 + L)
    assert out.shape == (3, stem.num_features, 1 + stem.patches) and stem.patches == 9
    assert out.min() >= 0 and out.max() <= 1
    j, k = 0, 5                                  # dilation 1, kernel 5: an unpadded one (j + k is odd)
    conv = stem._convolve(x, j)[:, k]                            # (B, T)
    share = stem.shares[j]
    bias = stem.biases[k * share]
    valid = stem._valid(torch.full((3,), 40), 40, j)[:, k]
    for p in range(stem.patches):
        s, e = p * 4, min(p * 4 + 8, 40)
        hits = ((conv[:, s:e] > bias) & valid[:, s:e]).sum(1).float() / valid[:, s:e].sum(1).clamp(min=1)
        torch.testing.assert_close(out[:, k * share, 1 + p], hits)


def test_unequal_lengths_count_only_the_steps_a_series_has():
    torch.manual_seed(1)
    x = torch.randn(2, 1, 60)
    x[1, :, 35:] = 0
    lengths = torch.tensor([60, 35])
    stem = RandomKernelFeatures(1, 60, 840, patch=8, stride=4)
    stem.fit(x, lengths)
    both = stem(x, lengths)
    alone = stem(x[1:, :, :35], lengths[1:])
    torch.testing.assert_close(both[1:, :, :alone.shape[-1]], alone)
    first_empty = math.ceil(35 / 4)                              # patches starting at or after step 35
    assert torch.all(both[1, :, 1 + first_empty:] == 0)


def test_fitting_is_a_function_of_the_seed_and_the_data():
    x = torch.randn(6, 3, 50)
    lengths = torch.full((6,), 50)
    a, b, c = (RandomKernelFeatures(3, 50, 840, 6, 3, seed=s) for s in (0, 0, 1))
    for stem in (a, b, c):
        stem.fit(x, lengths)
    assert torch.equal(a.biases, b.biases) and torch.equal(a.weight, b.weight)
    assert not torch.equal(a.weight, c.weight)  # other channel subsets for a multivariate series
    assert torch.all(a.weight.abs().sum((1, 2)) > 0)  # every kernel reads at least one channel


def _kernel_model(**kw):
    base = dict(channels=2, length=50, patch_size=6, patch_stride=3, stem="kernels", kernel_features=840,
                pool="mean", num_classes=3)
    return SeriesTransformer(SeriesConfig(**{**base, **kw}))


@pytest.mark.parametrize("pool, position", [("mean", "learned"), ("cls", "rotary")])
def test_features_computed_once_give_the_models_own_logits(pool, position):
    torch.manual_seed(0)
    model = _kernel_model(pool=pool, position=position).eval()
    x, lengths = torch.randn(8, 2, 50), torch.tensor([50] * 4 + [30] * 4)
    x[4:, :, 30:] = 0
    feats = model.fit_stem(x, lengths)
    assert feats.shape == (8, 1 + model.config.patches, model.kernels.num_features)
    with torch.no_grad():
        torch.testing.assert_close(model(None, lengths, features=feats), model(x, lengths))
        torch.testing.assert_close(model(x[4:5, :, :30], lengths[4:5]), model(x, lengths)[4:5])
        logits, weights = hooked(model, True, x[:2], lengths[:2])
    torch.testing.assert_close(logits, model(x[:2], lengths[:2]))
    assert len(weights) == model.config.depth


def test_the_stems_statistics_standardise_the_training_tokens():
    model = _kernel_model()
    x = torch.randn(12, 2, 50)
    feats = model.fit_stem(x, torch.full((12,), 50))
    z = (feats - model.feature_mean) / model.feature_std
    varying = feats.flatten(0, 1).std(0) > 1e-2
    torch.testing.assert_close(z.flatten(0, 1).mean(0), torch.zeros(z.shape[-1]), atol=1e-4, rtol=0)
    torch.testing.assert_close(z.flatten(0, 1)[:, varying].std(0), torch.ones(int(varying.sum())), atol=1e-3, rtol=0)
    state = model.state_dict()
    assert "kernels.biases" in state and "feature_mean" in state and "feature_std" in state


def test_mean_pool_and_cls_pool_read_different_tokens():
    torch.manual_seed(0)
    x = torch.randn(4, 2, 50)
    a = _kernel_model(pool="mean").eval()
    b = _kernel_model(pool="cls").eval()
    a.fit_stem(x, torch.full((4,), 50))
    b.load_state_dict(a.state_dict())
    with torch.no_grad():
        out_a, out_b = a(x), b(x)
        tokens = a.backbone(a.tokens(x)[0])
    torch.testing.assert_close(out_a, a.head(tokens.mean(1, keepdim=True)))
    torch.testing.assert_close(out_b, b.head(tokens[:, :1]))
    assert not torch.allclose(out_a, out_b)


def test_token_drop_masks_patches_in_training_only():
    torch.manual_seed(0)
    model = _kernel_model(token_drop=0.5)
    x = torch.randn(64, 2, 50)
    model.fit_stem(x, torch.full((64,), 50))
    _, mask = model.tokens(x)
    assert mask is not None and mask[:, 0].all() and 0.3 < mask[:, 1:].float().mean() < 0.7
    model.eval()
    assert model.tokens(x)[1] is None


@pytest.mark.parametrize("kw, fragment", [
    (dict(stem="kernel"), "unknown stem"), (dict(pool="max"), "unknown pool"),
    (dict(patching="channel", position="learned"), "patching='across'"), (dict(difference=True), "difference=False"),
    (dict(token_drop=1.0), "token_drop"), (dict(kernel_features=0), "kernel_features")])
def test_bad_settings_are_refused_in_one_line(kw, fragment):
    with pytest.raises(ValueError, match=fragment):
        _kernel_model(**kw)


def test_features_on_a_patch_stem_are_refused():
    model = SeriesTransformer(SeriesConfig(channels=1, length=20, patch_size=4))
    with pytest.raises(ValueError, match="stem"):
        model(None, torch.tensor([20]), features=torch.zeros(1, 6, 84))
    with pytest.raises(ValueError, match="stem='kernels'"):
        model.fit_stem(torch.zeros(2, 1, 20), torch.tensor([20, 20]))
