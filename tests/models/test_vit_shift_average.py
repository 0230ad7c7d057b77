"""A ViT's shifted-view test-time augmentation (`shift_average`): in eval mode its logits are the mean over the
image and its four copies moved by a few pixels, the edge repeated; training reads the image alone."""
import pytest
import torch

from anyformer.models.eval_views import shifted, stack_views, view_count
from anyformer.models.vit import ViT, ViTConfig


def small(**config) -> ViT:
    torch.manual_seed(0)
    vit = ViT(ViTConfig(image_size=16, patch_size=4, in_chans=1, num_classes=5, width=24, depth=2, heads=2,
                         mlp_hidden=48, pool="mean", class_token=False, position="sinusoidal", **config))
    with torch.no_grad():  # a head far from its near-zero start, so that the views' logits differ
        vit.head.fc.weight.normal_(0, 3.0)
    return vit


def moved(x: torch.Tensor, down: int, right: int) -> torch.Tensor:
    """x moved by (down, right) pixels, the edge row or column repeated into the gap: written out by hand."""
    if down > 0:
        x = torch.cat([x[..., :1, :].expand(*x.shape[:-2], down, x.shape[-1]), x[..., :-down, :]], -2)
    if down < 0:
        x = torch.cat([x[..., -down:, :], x[..., -1:, :].expand(*x.shape[:-2], -down, x.shape[-1])], -2)
    if right > 0:
        x = torch.cat([x[..., :, :1].expand(*x.shape[:-1], right), x[..., :, :-right]], -1)
    if right < 0:
        x = torch.cat([x[..., :, -right:], x[..., :, -1:].expand(*x.shape[:-1], -right)], -1)
    return x


def test_the_four_shifts_move_the_picture_and_repeat_the_edge():
    x = torch.arange(2 * 1 * 5 * 6, dtype=torch.float32).view(2, 1, 5, 6)
    views = shifted(x, 2)
    expected = [moved(x, -2, 0), moved(x, 2, 0), moved(x, 0, -2), moved(x, 0, 2)]  # up, down, left, right
    assert len(views) == 4
    for got, want in zip(views, expected):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert shifted(x, 0) == []
    with pytest.raises(ValueError, match="under the image's shorter side"):
        shifted(x, 5)


def test_views_are_stacked_view_after_view():
    x = torch.randn(3, 1, 8, 8)
    assert view_count(False, 0) == 1 and view_count(True, 0) == 2 and view_count(False, 1) == 5
    assert view_count(True, 1) == 6
    stacked = stack_views(x, True, 1)
    assert stacked.shape == (18, 1, 8, 8)
    torch.testing.assert_close(stacked[:3], x)
    torch.testing.assert_close(stacked[3:6], x.flip(-1))
    torch.testing.assert_close(stacked[6:9], moved(x, -1, 0))
    assert stack_views(x, False, 0) is x


def test_eval_logits_are_the_mean_over_the_image_and_its_four_shifts():
    plain, viewed = small().eval(), small(shift_average=1).eval()
    viewed.load_state_dict(plain.state_dict())
    images = torch.randn(3, 1, 16, 16)
    with torch.no_grad():
        views = [images, moved(images, 1, 0), moved(images, -1, 0), moved(images, 0, 1), moved(images, 0, -1)]
        expected = torch.stack([plain(v) for v in views]).mean(0)
        torch.testing.assert_close(viewed(images), expected, rtol=1e-5, atol=1e-5)
        assert not torch.allclose(viewed(images), plain(images), atol=1e-3)
        torch.testing.assert_close(viewed(images, views=False), plain(images))


def test_training_reads_the_image_alone():
    plain, viewed = small().train(), small(shift_average=2).train()
    viewed.load_state_dict(plain.state_dict())
    images = torch.randn(4, 1, 16, 16)
    torch.testing.assert_close(viewed(images), plain(images))


def test_attention_maps_read_the_images_as_given_and_the_logits_every_view():
    from anyformer import viz
    model = small(shift_average=1).eval()
    images = torch.randn(2, 1, 16, 16)
    result = viz.image_attention(model, images, layers=[0, 1])
    assert result["cls_maps"].shape[:2] == (2, 2) and result["rollout"].shape[0] == 2
    with torch.no_grad():
        torch.testing.assert_close(torch.as_tensor(result["logits"]), model(images), rtol=1e-5, atol=1e-5)
        _, weights = model(images, return_attention=True)
    assert all(w.shape[0] == 2 for w in weights)  # the images' own weights, not the views'


@pytest.mark.parametrize("bad", [-1, 16, 1.5, True])
def test_a_shift_that_is_not_a_pixel_count_under_the_side_is_refused(bad):
    with pytest.raises(ValueError, match="shift_average must be 0"):
        small(shift_average=bad)
