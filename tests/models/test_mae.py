"""The masked autoencoder: its masks, its loss, and its encoder as a ViT's trunk."""
import pytest
import torch

import anyformer as af
from anyformer.models.mae import MAE, MAEConfig, masked_patch_errors, patchify

# 16 patches of 7x7 (4 stay visible at 75%), a 2-block encoder and a 1-block decoder.
TINY = dict(image_size=28, patch_size=7, in_chans=1, width=32, depth=2, heads=4, mlp_hidden=64,
            decoder_width=16, decoder_depth=1, decoder_heads=2, decoder_mlp_hidden=32)


def tiny(**kw) -> MAE:
    return MAE(MAEConfig(**{**TINY, **kw}))


def test_masking_keeps_a_quarter_visible_differs_per_sample_and_repeats_for_a_seed(one_thread):
    model = tiny()
    noise = model.random_noise(8, torch.Generator().manual_seed(3))
    visible, mask = model.split(noise)
    assert visible.shape == (8, 4) and mask.shape == (8, 16)
    assert (mask.sum(1) == 12).all() and (~mask).sum() == 8 * 4  # exactly 25% of 16 visible, per image
    assert all(not mask[i, visible[i]].any() for i in range(8))   # the visible indices are the unmasked ones
    assert len({tuple(m.tolist()) for m in mask}) == 8            # every image its own mask
    again = model.split(model.random_noise(8, torch.Generator().manual_seed(3)))[1]
    other = model.split(model.random_noise(8, torch.Generator().manual_seed(4)))[1]
    assert torch.equal(mask, again) and not torch.equal(mask, other)
    # 49 patches keep int(49 * 0.25) = 12, as the paper rounds.
    assert MAEConfig(**{**TINY, "patch_size": 4}).num_visible == 12


def test_loss_counts_the_masked_patches_only(one_thread):
    images = torch.randn(2, 1, 28, 28)
    mask = torch.zeros(2, 16, dtype=torch.bool)
    mask[:, :12] = True
    prediction = torch.randn(2, 1, 28, 28, requires_grad=True)
    errors = masked_patch_errors(prediction, images, mask, 7)
    errors.sum().backward()
    grad = patchify(prediction.grad, 7)
    assert (grad[~mask] == 0).all() and (grad[mask] != 0).any()  # visible pixels cannot move the loss
    expected = (patchify(prediction.detach(), 7) - patchify(images, 7)).square().mean(-1)[mask]
    torch.testing.assert_close(errors[mask], expected)
    # The model's loss is that error averaged over the hidden patches of the batch.
    model = tiny()
    noise = model.random_noise(2, torch.Generator().manual_seed(0))
    err, hidden = model.patch_errors(images, noise)
    torch.testing.assert_close(model(images, noise), err.sum() / hidden.sum())


def test_norm_pix_targets_are_standardised_per_patch(one_thread):
    images = torch.randn(1, 1, 28, 28) * 5 + 3
    mask = torch.ones(1, 16, dtype=torch.bool)
    target = patchify(images, 7)
    target = (target - target.mean(-1, keepdim=True)) / (target.var(-1, keepdim=True) + 1e-6).sqrt()
    perfect = target.reshape(1, 4, 4, 1, 7, 7).permute(0, 3, 1, 4, 2, 5).reshape(1, 1, 28, 28)
    assert masked_patch_errors(perfect, images, mask, 7, norm_pix=True).abs().max() < 1e-8


def test_encoder_weights_load_into_a_vit_and_give_the_same_tokens(one_thread):
    for position in ("sinusoidal", "learned"):
        mae = tiny(position=position)
        vit = af.ViT.from_config(mae.vit_config(num_classes=10))
        missing, unexpected = vit.load_state_dict(mae.vit_state_dict(), strict=False)
        assert sorted(missing) == ["head.fc.bias", "head.fc.weight"] and unexpected == []
        images = torch.randn(3, 1, 28, 28)
        torch.testing.assert_close(vit.forward_features(images), mae.encode(images), rtol=0, atol=0)
        # The probe's feature: mean of the patch tokens, which is what a mean-pooling ViT classifies.
        torch.testing.assert_close(mae.features(images), vit.forward_features(images)[:, 1:].mean(1))


def test_reconstruction_pastes_the_visible_patches_and_fills_the_hidden(one_thread):
    model = tiny().eval()
    images = torch.randn(2, 1, 28, 28)
    noise = model.random_noise(2, torch.Generator().manual_seed(1))
    masked, recon, original = model.reconstruct(images, noise, fill=-7.0)
    _, mask = model.split(noise)
    assert torch.equal(original, images)
    assert (patchify(masked, 7)[mask] == -7.0).all()
    assert torch.equal(patchify(masked, 7)[~mask], patchify(images, 7)[~mask])
    assert torch.equal(patchify(recon, 7)[~mask], patchify(images, 7)[~mask])
    prediction, _ = model.predict(images, noise)
    assert torch.equal(patchify(recon, 7)[mask], patchify(prediction, 7)[mask])


def test_save_load_and_bad_inputs(tmp_path, one_thread):
    model = tiny().eval()
    images, noise = torch.randn(2, 1, 28, 28), torch.rand(2, 16)
    model.save(tmp_path)
    loaded = af.load(tmp_path)
    assert isinstance(loaded, af.MAE) and loaded.config == model.config
    assert torch.equal(loaded(images, noise), model(images, noise))
    with pytest.raises(ValueError, match=r"expected noise of shape \(2, 16\) \(one value per patch\), got \(2, 15\)"):
        model(images, torch.rand(2, 15))
    with pytest.raises(ValueError, match="mask_ratio must be in"):
        tiny(mask_ratio=1.0)
    with pytest.raises(ValueError, match="unknown MAE position 'rotary'"):
        tiny(position="rotary")
