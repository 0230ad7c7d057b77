"""A ViT's mirror-image test-time augmentation (`flip_average`): in eval mode its logits are the mean of the
image's and its mirror image's; training and a model without it read the image alone."""
import torch

from anyformer.models.vit import ViT, ViTConfig


def small(**config) -> ViT:
    torch.manual_seed(0)
    vit = ViT(ViTConfig(image_size=16, patch_size=4, in_chans=3, num_classes=5, width=24, depth=2, heads=2,
                         mlp_hidden=48, stem="conv", stem_convs=2, stem_norm="batch", pool="mean", class_token=False,
                         position="sinusoidal", **config))
    with torch.no_grad():  # a head far from its near-zero start, so that the two views' logits differ
        vit.head.fc.weight.normal_(0, 3.0)
    return vit


def test_eval_logits_are_the_mean_over_the_image_and_its_mirror_image():
    plain, flipped = small().eval(), small(flip_average=True).eval()
    flipped.load_state_dict(plain.state_dict())
    images = torch.randn(3, 3, 16, 16)
    with torch.no_grad():
        both = flipped(images)
        torch.testing.assert_close(both, (plain(images) + plain(images.flip(-1))) / 2, rtol=1e-5, atol=1e-6)
        # a mirror image gives the same answer as its original (up to rounding), unlike the plain model's
        torch.testing.assert_close(flipped(images.flip(-1)), both, rtol=1e-5, atol=1e-6)
        assert not torch.allclose(plain(images.flip(-1)), plain(images), atol=1e-2)


def test_training_reads_the_image_alone():
    plain, flipped = small().train(), small(flip_average=True).train()
    flipped.load_state_dict(plain.state_dict())
    images = torch.randn(4, 3, 16, 16)
    torch.testing.assert_close(flipped(images), plain(images))  # BatchNorm's batch statistics: the same batch


def test_attention_maps_read_the_images_as_given_and_the_logits_both_views():
    from anyformer import viz
    model = small(flip_average=True).eval()
    images = torch.randn(2, 3, 16, 16)
    result = viz.image_attention(model, images, layers=[0, 1])
    assert result["cls_maps"].shape[:2] == (2, 2) and result["rollout"].shape[0] == 2  # one map an image
    with torch.no_grad():
        torch.testing.assert_close(torch.as_tensor(result["logits"]), model(images), rtol=1e-5, atol=1e-5)
        plain_logits, weights = model(images, return_attention=True)
        torch.testing.assert_close(plain_logits, model(images, views=False))
    assert all(w.shape[0] == 2 for w in weights)
