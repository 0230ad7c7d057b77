"""The masked autoencoder against its equations, computed here from its parameters:

    visible = the keep = int(N (1 - ratio)) patches of least noise;  hidden: the rest
    z = encoder([cls + 0; (patchify(x) E + b + E_pos)[visible]])
    u = [W z + b'; mask token where hidden] + E_pos';  x_hat = PatchOutput(decoder(u))
    loss = mean over hidden patches of mean_pixels (x_hat - target)^2, target = the patch, or the
           patch standardised by its own mean and (unbiased) variance + 1e-6 with norm_pix_loss

The configuration is chosen so that a swapped or defaulted setting shows: a non-square image of
2 channels in a 2x3 grid, a batch of 3, decoder MLPs that are not 4x wide, an eps and an attention
implementation off their defaults."""
import pytest
import torch
import torch.nn.functional as F

import anyformer as af
from anyformer.models.mae import MAE, MAEConfig, masked_patch_errors, patchify

from .test_dit_closed_form import grid_sinusoids

# An 8x12 image of 2 channels in 4x4 patches: a 2x3 grid of N = 6 patches, keep = 3 visible.
CONFIG = dict(image_size=(8, 12), patch_size=4, in_chans=2, width=16, depth=2, heads=2, mlp_hidden=24,
              decoder_width=8, decoder_depth=1, decoder_heads=2, decoder_mlp_hidden=12, mask_ratio=0.5,
              norm_eps=1e-3, attn_impl="explicit")
GRID, N, KEEP = (2, 3), 6, 3


def make_mae(seed: int = 0, **overrides) -> MAE:
    torch.manual_seed(seed)
    return MAE(MAEConfig(**{**CONFIG, **overrides})).eval()


def images_and_noise(batch: int = 3, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 2, 8, 12, generator=gen), torch.rand(batch, N, generator=gen)


def hidden_by_hand(noise: torch.Tensor) -> torch.Tensor:
    """True where a patch's noise is not among the KEEP least of its row."""
    rank = noise.argsort(dim=1).argsort(dim=1)
    return rank >= KEEP


def standardised(patches: torch.Tensor) -> torch.Tensor:
    return (patches - patches.mean(-1, keepdim=True)) / (patches.var(-1, keepdim=True) + 1e-6).sqrt()


# ---------------------------------------------------------------- the configuration
@pytest.mark.parametrize("name", ["width", "heads", "depth", "mlp_hidden"])
@pytest.mark.parametrize("bad", [0, -4, True, 2.5, "8"])
def test_each_decoder_size_must_be_a_positive_integer(name, bad):
    with pytest.raises(ValueError, match=rf"^decoder_{name} must be a positive integer, got {bad!r}$"):
        MAEConfig(**{**CONFIG, f"decoder_{name}": bad})


def test_decoder_and_position_widths_must_divide_as_their_layers_need():
    with pytest.raises(ValueError, match=r"^decoder_width must be divisible by decoder_heads: got 12, 8$"):
        MAEConfig(**{**CONFIG, "decoder_width": 12, "decoder_heads": 8})
    with pytest.raises(ValueError, match=r"^decoder_width must be divisible by 4, got 6$"):
        MAEConfig(**{**CONFIG, "decoder_width": 6, "decoder_heads": 3})
    with pytest.raises(ValueError, match=r"^position='sinusoidal' needs a width divisible by 4, got 18$"):
        MAEConfig(**{**CONFIG, "width": 18})
    # Learned positions have no such need.
    assert MAE(MAEConfig(**{**CONFIG, "width": 18, "position": "learned"})).pos.pos_embed.shape == (1, N + 1, 18)


def test_the_mask_ratio_must_hide_some_patches_and_keep_some():
    with pytest.raises(ValueError, match=r"^mask_ratio must be in \(0, 1\), got 0$"):
        MAEConfig(**{**CONFIG, "mask_ratio": 0})
    with pytest.raises(ValueError, match=r"^mask_ratio 0.9 hides every one of the 6 patches$"):
        MAEConfig(**{**CONFIG, "mask_ratio": 0.9})  # int(6 * 0.1) = 0 visible


def test_encoder_and_decoder_are_built_from_the_config():
    model = make_mae()
    for block in model.backbone.blocks:
        assert block.attn.impl == "explicit" and block.norm1.eps == block.norm2.eps == 1e-3
    for block in model.decoder.blocks:
        assert block.mlp.fc1.out_features == 12  # decoder_mlp_hidden, not 4 x decoder_width
        assert block.attn.impl == "explicit" and block.norm1.eps == block.norm2.eps == 1e-3
    assert model.decoder.norm.eps == 1e-3


def test_mask_and_class_tokens_start_as_normals_of_std_002():
    model = make_mae(width=256, heads=4, decoder_width=256, decoder_heads=4)
    assert model.decoder_mask_token.shape == (1, 1, 256)  # one learned vector, as the paper's checkpoints hold it
    for token in (model.decoder_mask_token, model.prefix.cls_token):
        assert 0.017 < token.std().item() < 0.023


# ---------------------------------------------------------------- masking, positions, encoder, decoder
def test_noise_is_the_generators_uniforms_on_the_device_asked():
    model = make_mae()
    noise = model.random_noise(3, torch.Generator().manual_seed(5))
    assert torch.equal(noise, torch.rand(3, N, generator=torch.Generator().manual_seed(5)))
    assert model.random_noise(3, torch.Generator().manual_seed(5), device="meta").device.type == "meta"


def test_positions_are_2d_sinusoids_of_the_grid_after_a_zero_class_row():
    model = make_mae()
    for module, width in ((model.pos, 16), (model.decoder_pos, 8)):
        expected = torch.cat([torch.zeros(1, width), grid_sinusoids(GRID, width)])
        torch.testing.assert_close(module.table[0], expected)


def encoder_input_by_hand(model: MAE, images: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """[cls + 0; (patch E + b + E_pos)[visible]]: each kept token carries its own patch's position."""
    conv = model.patch_embed.proj
    tokens = patchify(images, 4) @ conv.weight.flatten(1).T + conv.bias + grid_sinusoids(GRID, 16)
    kept = torch.stack([tokens[b, visible[b]] for b in range(len(images))])
    if model.prefix.cls_token is None:
        return kept
    return torch.cat([model.prefix.cls_token.expand(len(images), -1, -1), kept], dim=1)


@pytest.mark.parametrize("class_token", [True, False])
def test_encoder_sees_the_visible_patches_in_noise_order_with_their_positions(class_token):
    model = make_mae(class_token=class_token)
    images, noise = images_and_noise()
    visible, mask = model.split(noise)
    assert torch.equal(visible, noise.argsort(dim=1)[:, :KEEP]) and torch.equal(mask, hidden_by_hand(noise))
    with torch.no_grad():
        encoded = model.encode(images, visible)
        assert encoded.shape == (3, KEEP + class_token, 16)
        torch.testing.assert_close(encoded, model.backbone(encoder_input_by_hand(model, images, visible)))


def test_decoder_puts_each_token_back_at_its_patch_and_mask_tokens_elsewhere():
    model = make_mae()
    images, noise = images_and_noise()
    visible, _ = model.split(noise)
    tokens = torch.randn(3, 1 + KEEP, 16, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        y = tokens @ model.decoder_embed.weight.T + model.decoder_embed.bias
        full = model.decoder_mask_token.expand(3, N, 8).clone()
        for b in range(3):
            for k in range(KEEP):
                full[b, visible[b, k]] = y[b, 1 + k]
        u = torch.cat([y[:, :1], full], dim=1) + model.decoder_pos.table
        expected = model.decoder_out(model.decoder(u)[:, 1:], GRID)
        torch.testing.assert_close(model.decode(tokens, visible), expected)


def test_the_prediction_sees_the_visible_pixels_only():
    model = make_mae()
    images, noise = images_and_noise()
    hidden = hidden_by_hand(noise)
    patches = patchify(images, 4)
    other = torch.randn(patches.shape, generator=torch.Generator().manual_seed(3))

    def with_patches(changed: torch.Tensor) -> torch.Tensor:
        return changed.reshape(3, 2, 3, 2, 4, 4).permute(0, 3, 1, 4, 2, 5).reshape(3, 2, 8, 12)

    assert torch.equal(with_patches(patches), images)  # the inverse of patchify, checked
    with torch.no_grad():
        prediction, mask = model.predict(images, noise)
        hidden_changed = model.predict(with_patches(torch.where(hidden[..., None], other, patches)), noise)[0]
        visible_changed = model.predict(with_patches(torch.where(hidden[..., None], patches, other)), noise)[0]
    assert torch.equal(mask, hidden)
    torch.testing.assert_close(hidden_changed, prediction, rtol=0, atol=0)
    assert not torch.allclose(visible_changed, prediction)


def test_prediction_runs_where_the_images_are_whatever_the_noise_device():
    model = make_mae().to("meta")
    prediction, mask = model.predict(torch.empty(3, 2, 8, 12, device="meta"), torch.rand(3, N))
    assert prediction.device.type == mask.device.type == "meta" and prediction.shape == (3, 2, 8, 12)


def test_images_of_another_size_are_refused_with_both_sizes():
    model = make_mae()
    with pytest.raises(ValueError, match=r"^expected images of size 8x12 \(the model's image_size\), got 12x8$"):
        model.encode(torch.randn(3, 2, 12, 8))


# ---------------------------------------------------------------- the loss
def test_norm_pix_targets_standardise_each_patch_with_an_eps_of_1e_6():
    images = torch.randn(1, 2, 8, 12, generator=torch.Generator().manual_seed(4))
    images[0, :, :4, :4] = 0.3  # a flat patch: variance 0, so the eps alone keeps it finite
    prediction = torch.randn(1, 2, 8, 12, generator=torch.Generator().manual_seed(5))
    mask = torch.tensor([[True, False, True, True, False, True]])
    errors = masked_patch_errors(prediction, images, mask, 4, norm_pix=True)
    expected = (patchify(prediction, 4) - standardised(patchify(images, 4))).square().mean(-1) * mask
    torch.testing.assert_close(errors, expected)
    torch.testing.assert_close(errors[0, 0], patchify(prediction, 4)[0, 0].square().mean())


@pytest.mark.parametrize("norm_pix_loss", [False, True])
def test_loss_is_the_mean_pixel_error_over_the_hidden_patches(norm_pix_loss):
    model = make_mae(norm_pix_loss=norm_pix_loss)
    images, noise = images_and_noise()
    with torch.no_grad():
        prediction, _ = model.predict(images, noise)
        target = patchify(images, 4)
        target = standardised(target) if norm_pix_loss else target
        per_patch = (patchify(prediction, 4) - target).square().mean(-1)
        hidden = hidden_by_hand(noise)
        torch.testing.assert_close(model.patch_errors(images, noise)[0], per_patch * hidden)
        torch.testing.assert_close(model(images, noise), per_patch[hidden].mean())


def test_without_noise_the_loss_draws_it_from_the_generator():
    model = make_mae()
    images, _ = images_and_noise()
    torch.manual_seed(123)  # the global generator is elsewhere: only the one given may be drawn from
    with torch.no_grad():
        drawn = model(images, generator=torch.Generator().manual_seed(9))
        given = model(images, model.random_noise(3, torch.Generator().manual_seed(9)))
    assert torch.equal(drawn, given)


def test_the_loss_runs_under_bfloat16_autocast_and_the_encoder_stays_the_vits_trunk():
    model = make_mae(class_token=False)
    vit = af.ViT.from_config(model.vit_config(num_classes=4))
    vit.load_state_dict(model.vit_state_dict(), strict=False)
    images, noise = images_and_noise()
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        assert torch.isfinite(model(images, noise))
        # The ViT adds its positions in the tokens' dtype: so must the MAE, to give the same tokens.
        torch.testing.assert_close(model.encode(images), vit.forward_features(images), rtol=0, atol=0)


# ---------------------------------------------------------------- fine-tuning and cost
def test_the_vit_config_carries_the_encoders_settings():
    model = make_mae(class_token=False, position="learned")
    config = model.vit_config(num_classes=4)
    assert (config.class_token, config.norm_eps, config.pool, config.attn_impl) == (False, 1e-3, "mean", "explicit")
    vit = af.ViT.from_config(config).eval()
    vit.load_state_dict(model.vit_state_dict(), strict=False)
    images, _ = images_and_noise()
    with torch.no_grad():
        torch.testing.assert_close(vit.forward_features(images), model.encode(images), rtol=0, atol=0)
        pooled = F.linear(model.features(images), vit.head.fc.weight, vit.head.fc.bias)
        torch.testing.assert_close(vit(images), pooled)  # mean pooling of the patch tokens, then the head


def test_forward_flops_are_the_matmuls_of_encoder_over_visible_and_decoder_over_all():
    model = make_mae(decoder_depth=2)  # depths of 2: a factor of one would hide a division by it
    D, H, Dd, Hd, C, P = 16, 24, 8, 12, 2, 4 * 4
    n_enc, n_dec = KEEP + 1, N + 1  # the class token rides along in both
    # Every patch is embedded (one convolution over the image) before the visible ones are kept.
    encoder = 2 * n_enc * 2 * (4 * D * D + 2 * D * H) + 2 * N * C * P * D
    decoder = 2 * n_enc * D * Dd + 2 * n_dec * 2 * (4 * Dd * Dd + 2 * Dd * Hd) + 2 * N * Dd * P * C
    attention = 4 * 2 * n_enc ** 2 * D + 4 * 2 * n_dec ** 2 * Dd
    assert model.forward_flops() == float(encoder + decoder + attention)
    assert model.forward_flops(seq_len=1000) == model.forward_flops()  # seq_len is not used
    from torch.utils.flop_counter import FlopCounterMode
    images = torch.randn(1, C, *model.config.image_size) if isinstance(model.config.image_size, tuple) \
        else torch.randn(1, C, model.config.image_size, model.config.image_size)
    with FlopCounterMode(display=False) as counter:  # what the forward runs, counted by torch
        model(images, generator=torch.Generator().manual_seed(0))
    assert counter.get_total_flops() == model.forward_flops()
