"""The convolutional stem: the hybrid ViT's input head."""
import pytest
import torch

import anyformer as af
from anyformer.nn.stems import ConvStem


def test_conv_stem_makes_the_patch_grid_of_tokens():
    stem = ConvStem(4, 3, 32)
    tokens = stem(torch.randn(2, 3, 16, 24))
    assert tokens.shape == (2, 4 * 6, 32)
    # Tokens are local: changing one corner of the image leaves the far tokens unchanged.
    x = torch.randn(1, 3, 16, 24)
    y = x.clone()
    y[..., :4, :4] += 1
    diff = (stem(x) - stem(y)).abs().sum(-1).view(4, 6)
    assert diff[0, 0] > 0 and (diff[2:, 2:] == 0).all()


def test_conv_stem_vit_trains_and_saves(tmp_path):
    vit = af.ViT.preset("vit-mnist-fast", stem="conv", depth=1)
    vit(torch.randn(2, 1, 28, 28)).sum().backward()
    assert all(p.grad is not None for p in vit.parameters())
    vit.eval().save(tmp_path)
    x = torch.randn(1, 1, 28, 28)
    assert torch.equal(af.load(tmp_path)(x), vit(x))


def test_the_stem_channels_reach_the_vit_and_the_default_is_half_the_width():
    c = dict(stem="conv", depth=1, image_size=32, in_chans=3)
    convs = lambda vit: [m.out_channels for m in vit.patch_embed.proj if isinstance(m, torch.nn.Conv2d)]
    assert convs(af.ViT.preset("vit-mnist-fast", **c, patch_size=4)) == [16, 32, 64]
    assert convs(af.ViT.preset("vit-mnist-fast", **c, patch_size=4, stem_channels=64)) == [32, 64, 64]
    torch.manual_seed(0)
    a = af.ViT.preset("vit-mnist-fast", **c, patch_size=4)
    torch.manual_seed(0)
    b = af.ViT.preset("vit-mnist-fast", **c, patch_size=4, stem_channels=32)  # width / 2 asked: the same model
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="stem_channels must be 0"):
            af.ViT.preset("vit-mnist-fast", **c, patch_size=4, stem_channels=bad)


def test_conv_stem_rejects_what_it_cannot_build():
    with pytest.raises(ValueError, match="square power-of-two patch size, got 7x7"):
        ConvStem(7, 1, 32)
    with pytest.raises(ValueError, match="unknown ViT stem 'resnet'"):
        af.ViT.preset("vit-mnist-fast", stem="resnet")
    with pytest.raises(ValueError, match="expected 1 image channels, got 3"):
        ConvStem(4, 1, 32)(torch.randn(1, 3, 8, 8))


def test_a_deeper_normalised_stem_stacks_stride_1_convolutions_and_batch_norms(tmp_path):
    stem = ConvStem(4, 3, 32, convs=2, norm="batch")
    convs = [m for m in stem.proj if isinstance(m, torch.nn.Conv2d)]
    assert [(m.out_channels, m.stride[0], m.bias is None) for m in convs] == [
        (8, 2, True), (8, 1, True), (16, 2, True), (16, 1, True), (32, 1, False)]  # the last: the 1x1 projection
    assert sum(isinstance(m, torch.nn.BatchNorm2d) for m in stem.proj) == 4
    assert stem(torch.randn(2, 3, 16, 24)).shape == (2, 4 * 6, 32)  # the same token grid as one conv a stage
    vit = af.ViT.preset("vit-mnist-fast", stem="conv", depth=1, stem_convs=2, stem_norm="batch")
    vit(torch.randn(4, 1, 28, 28)).sum().backward()  # training mode: the batch's statistics, the running ones move
    assert all(p.grad is not None for p in vit.parameters())
    assert vit.patch_embed.proj[1].num_batches_tracked == 1
    vit.eval().save(tmp_path)  # the running statistics are saved with the weights and used in eval
    x = torch.randn(1, 1, 28, 28)
    assert torch.equal(af.load(tmp_path)(x), vit(x))
    for key, bad, match in (("stem_convs", 0, "stem_convs must be a positive"), ("stem_convs", True, "stem_convs"),
                            ("stem_norm", "layer", "unknown stem_norm 'layer'")):
        with pytest.raises(ValueError, match=match):
            af.ViT.preset("vit-mnist-fast", stem="conv", **{key: bad})


def test_the_stem_itself_refuses_what_it_cannot_build_and_keeps_its_biases_without_a_norm():
    # The stem checks its own arguments: it is built directly too, not only from a ViTConfig that checked them.
    for convs in (0, True, 2.5):
        with pytest.raises(ValueError, match=f"at least 1 convolution a stage, got {convs!r}"):
            ConvStem(4, 1, 32, convs=convs)
    with pytest.raises(ValueError, match=r"unknown conv stem norm 'layer'; expected one of \('none', 'batch'\)"):
        ConvStem(4, 1, 32, norm="layer")
    plain = ConvStem(4, 1, 32, convs=2)  # no norm: every convolution keeps its bias, and no BatchNorm comes in
    assert all(m.bias is not None for m in plain.proj if isinstance(m, torch.nn.Conv2d))
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in plain.proj)
