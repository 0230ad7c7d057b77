"""Shifted patch tokenisation (Lee et al. 2021; `shifted_copies`, `PatchEmbedding(shifted=True)`,
`ConvStem(shifted=True)`, a ViT's `shifted_patches`): the four diagonal copies checked pixel by pixel
against the shift written out, a token that now sees past its patch's border, the stems' shapes, a
ViT that trains and reloads with it, and the refusals."""
from __future__ import annotations

import pytest
import torch

from anyformer.models.base import load
from anyformer.models.vit import ViT, ViTConfig
from anyformer.nn import PatchEmbedding
from anyformer.nn.embeddings import shifted_copies
from anyformer.nn.stems import ConvStem
from tests.nn.fit_briefly import fit_briefly


def moved(x: torch.Tensor, down: int, right: int) -> torch.Tensor:
    """x with its content moved `down` rows and `right` columns (negative: up, left), zeros in the gap."""
    out = torch.zeros_like(x)
    h, w = x.shape[-2:]
    for i in range(h):
        for j in range(w):
            if 0 <= i - down < h and 0 <= j - right < w:
                out[..., i, j] = x[..., i - down, j - right]
    return out


@pytest.mark.parametrize("shift", [1, 2, 3])
def test_the_copies_are_the_image_moved_diagonally_with_zeros_in_the_gap(shift):
    x = torch.arange(2 * 3 * 6 * 7, dtype=torch.float32).add_(1).view(2, 3, 6, 7)
    want = torch.cat([x] + [moved(x, d, r) for d in (shift, -shift) for r in (shift, -shift)], dim=1)
    torch.testing.assert_close(shifted_copies(x, shift), want, rtol=0, atol=0)


def test_a_token_sees_half_a_patch_past_its_border_only_when_shifted():
    torch.manual_seed(0)
    plain, shifted = PatchEmbedding(4, 1, 8), PatchEmbedding(4, 1, 8, shifted=True)
    assert shifted.proj.in_channels == 5 and shifted.shift == 2
    x = torch.randn(1, 1, 8, 8)
    beyond = x.clone()
    beyond[..., 5, 5] += 1.0  # in patch (1, 1), one pixel past patch (0, 0)'s corner: within half a patch
    far = x.clone()
    far[..., 7, 7] += 1.0  # three pixels past it: beyond any copy's reach
    for m, sees in ((plain, False), (shifted, True)):
        first = m(x)[:, 0]
        assert (not torch.equal(m(beyond)[:, 0], first)) is sees
        assert torch.equal(m(far)[:, 0], first)


def test_the_conv_stem_takes_five_times_the_channels_and_keeps_its_grid():
    stem = ConvStem(4, 3, 32, channels=16, convs=2, norm="batch", shifted=True)
    assert stem.proj[0].in_channels == 15 and stem.shift == 2
    assert stem(torch.randn(2, 3, 16, 16)).shape == (2, 16, 32)
    with pytest.raises(ValueError, match=r"^expected 3 image channels, got 15"):
        stem(torch.randn(2, 15, 16, 16))


def test_a_vit_with_shifted_patches_learns_and_reloads(tmp_path):
    torch.manual_seed(0)
    c = ViTConfig(image_size=16, patch_size=4, in_chans=1, width=32, depth=2, heads=4, mlp_hidden=64,
                  num_classes=3, stem="conv", stem_convs=2, stem_norm="batch", shifted_patches=True)
    vit = ViT(c)
    images, labels = torch.randn(8, 1, 16, 16), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    first, last = fit_briefly(vit, images, labels)
    assert last < first / 2
    again = load(vit.save(tmp_path / "m")).eval()
    assert again.config.shifted_patches
    torch.testing.assert_close(again(images), vit.eval()(images), rtol=0, atol=0)


def test_refusals_name_what_was_expected():
    with pytest.raises(ValueError, match=r"^shifted patches move the image half a patch, so the patch needs a "
                                         r"side of at least 2, got 1x1$"):
        PatchEmbedding(1, 3, 8, shifted=True)
    with pytest.raises(ValueError, match=r"^shifted_patches must be true or false, got 'yes'$"):
        ViTConfig(image_size=16, patch_size=4, shifted_patches="yes")
    with pytest.raises(ValueError, match=r"^a shift of at least 1 pixel is needed, got 0$"):
        shifted_copies(torch.zeros(1, 1, 4, 4), 0)
    vit = ViT(ViTConfig(image_size=16, patch_size=4, width=32, depth=1, heads=2, mlp_hidden=64, num_classes=3,
                        shifted_patches=True))
    with pytest.raises(ValueError, match=r"shifted_patches \(timm's patch embedding sees the image alone\)"):
        vit.to_timm()
    with pytest.raises(ValueError, match=r"shifted_patches \(HF ViT's patch embedding sees the image alone\)"):
        vit.to_hf()
