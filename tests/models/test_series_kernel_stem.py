"""The series transformer's kernel stem against closed forms: the random-kernel features of its
seed and stride, standardised and embedded (the whole series onto the class token), features
computed once standing in for the series; stem calls refused where they do not apply."""

import pytest
import torch

from anyformer.models.series_kernels import RandomKernelFeatures

from .series_by_hand import build, exactly, linear, mask_by_hand

# --- kernel stem -----------------------------------------------------------------------------------

def kernel_model(**overrides):
    model = build(stem="kernels", channels=2, length=30, kernel_features=168, kernel_seed=5, **overrides)
    with torch.no_grad():  # standardisation that is not the identity
        model.feature_mean.copy_(torch.rand_like(model.feature_mean))
        model.feature_std.copy_(torch.rand_like(model.feature_std) + 0.5)
    return model


def test_the_kernel_stem_is_the_configured_one_with_its_seed_and_stride():
    model = kernel_model()
    reference = RandomKernelFeatures(2, 30, 168, 6, 4, seed=5)
    assert torch.equal(model.kernels.weight, reference.weight) and model.kernels.stride == 4
    assert model.kernels.patches == model.config.patches == 7
    torch.manual_seed(6)
    x, lengths = torch.randn(3, 2, 30), torch.tensor([30, 17, 6])
    x[1, :, 17:], x[2, :, 6:] = 50.0, -50.0  # what lies past the end must not count
    torch.testing.assert_close(model.stem_features(x, lengths), reference(x, lengths).transpose(1, 2))


def test_kernel_tokens_are_standardised_features_embedded_the_whole_series_onto_the_class_token():
    model = kernel_model()
    torch.manual_seed(7)
    x, lengths = torch.randn(3, 2, 30), torch.tensor([30, 17, 6])
    x[1, :, 17:] = 50.0
    f = model.kernels(x, lengths).transpose(1, 2)                      # (B, 1 + L, F)
    emb = linear((f - model.feature_mean) / model.feature_std, model.patch_embed.proj)
    pos = model.pos.pos_embed[0]
    z, mask = model.tokens(x, lengths)
    torch.testing.assert_close(z[:, 0], model.prefix.cls_token[0, 0] + pos[0] + emb[:, 0])
    torch.testing.assert_close(z[:, 1:], emb[:, 1:] + pos[1:])
    assert torch.equal(mask, mask_by_hand(lengths, 30, model.config))
    # Features computed once stand in for the series, in tokens() and in forward().
    z_f, mask_f = model.tokens(None, lengths, features=model.stem_features(x, lengths))
    torch.testing.assert_close(z_f, z)
    assert torch.equal(mask_f, mask)
    torch.testing.assert_close(model(None, lengths, features=f), model(x, lengths))


def test_stem_calls_refuse_a_model_without_the_kernel_stem():
    model = build()
    with pytest.raises(ValueError, match=exactly("stem_features needs stem='kernels'")):
        model.stem_features(torch.randn(1, 3, 23))
    with pytest.raises(ValueError, match=exactly("features are the kernel stem's; this model's stem is 'patches'")):
        model.tokens(None, features=torch.zeros(1, 7, 84))


def test_stem_features_check_their_inputs():
    model = kernel_model()
    with pytest.raises(ValueError, match=exactly("lengths must have shape (3,), got (3, 1)")):
        model.stem_features(torch.randn(3, 2, 30), torch.full((3, 1), 30))
