"""The MLP that mixes the patch grid (`ConvMLP`, Mix-FFN; a ViT's `mlp_conv`): its output checked against
the depthwise convolution written out as sums over each token's neighbours, the prefix tokens left
token-wise, a class-token ViT's last block run whole for it, a ViT that trains and reloads with it, and
the refusals."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from anyformer.models.base import load
from anyformer.models.vit import ViT, ViTConfig
from anyformer.nn.mlp import ConvMLP, GridMixing
from tests.nn.fit_briefly import fit_briefly


def mixed_by_hand(m: ConvMLP, x: torch.Tensor) -> torch.Tensor:
    """fc2(GELU(depthwise 3x3 of fc1(x) over the grid, zero beyond the border)); prefix tokens: fc2(GELU(fc1))."""
    rows, cols = m.grid
    h = m.fc1(x)
    out = h.clone()
    w = m.conv.weight[:, 0]  # (hidden, 3, 3)
    for r in range(rows):
        for c in range(cols):
            acc = m.conv.bias.clone().expand(x.shape[0], -1).clone()
            for dr in (-1, 0, 1):
                for dc in (-1, 0, 1):
                    if 0 <= r + dr < rows and 0 <= c + dc < cols:
                        acc += h[:, m.prefix + (r + dr) * cols + (c + dc)] * w[:, dr + 1, dc + 1]
            out[:, m.prefix + r * cols + c] = acc
    return m.fc2(F.gelu(out))


@pytest.mark.parametrize("prefix", [0, 2])
def test_each_patch_token_mixes_its_neighbours_and_the_prefix_stays_token_wise(prefix):
    torch.manual_seed(0)
    m = ConvMLP(8, 12, GridMixing(3, (3, 4), prefix))
    x = torch.randn(2, prefix + 12, 8)
    torch.testing.assert_close(m(x), mixed_by_hand(m, x), rtol=1e-5, atol=1e-5)


def test_a_token_sees_its_neighbours_and_no_further():
    torch.manual_seed(0)
    m = ConvMLP(4, 6, GridMixing(3, (4, 4)))
    x = torch.randn(1, 16, 4)
    near, far = x.clone(), x.clone()
    near[:, 5] += 1.0   # (1, 1): a neighbour of token 0 at (0, 0)
    far[:, 10] += 1.0   # (2, 2): two rows and columns away
    assert not torch.equal(m(near)[:, 0], m(x)[:, 0])
    assert torch.equal(m(far)[:, 0], m(x)[:, 0])


def test_a_class_token_vit_reads_the_same_logits_as_its_whole_last_block():
    torch.manual_seed(0)
    c = ViTConfig(image_size=16, patch_size=4, in_chans=1, width=32, depth=2, heads=4, mlp_hidden=64,
                  num_classes=3, class_token=True, pool="cls", mlp_conv=3)
    vit = ViT(c).eval()
    images = torch.randn(3, 1, 16, 16)
    with torch.no_grad():
        whole = vit.head(vit.backbone(vit.tokens(images)))
        torch.testing.assert_close(vit(images), whole, rtol=0, atol=0)


def test_a_vit_with_mixing_mlps_learns_and_reloads(tmp_path):
    torch.manual_seed(0)
    c = ViTConfig(image_size=16, patch_size=4, in_chans=1, width=32, depth=2, heads=4, mlp_hidden=64,
                  num_classes=3, class_token=False, pool="mean", position="sinusoidal", mlp_conv=3)
    vit = ViT(c)
    assert all(isinstance(b.mlp, ConvMLP) for b in vit.backbone.blocks)
    images, labels = torch.randn(8, 1, 16, 16), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    first, last = fit_briefly(vit, images, labels)
    assert last < first / 2
    again = load(vit.save(tmp_path / "m")).eval()
    assert again.config.mlp_conv == 3
    torch.testing.assert_close(again(images), vit.eval()(images), rtol=0, atol=0)


def test_refusals_name_what_was_expected():
    with pytest.raises(ValueError, match=r"^mlp_conv must be 0 \(none\) or an odd kernel size \(3: a 3x3 window\), "
                                         r"got 2$"):
        ViTConfig(image_size=16, patch_size=4, mlp_conv=2)
    with pytest.raises(ValueError, match=r"^mlp_conv needs MLPs of one hidden layer, got mlp_layers=2$"):
        ViTConfig(image_size=16, patch_size=4, mlp_conv=3, mlp_layers=2)
    with pytest.raises(ValueError, match=r"^the MLP's convolution needs an odd kernel of at least 1"):
        ConvMLP(4, 8, GridMixing(4, (2, 2)))
    m = ConvMLP(4, 8, GridMixing(3, (2, 2), 1))
    with pytest.raises(ValueError, match=r"^expected 1 prefix tokens and a 2x2 grid of patch tokens \(5 in all\), "
                                         r"got 4 tokens$"):
        m(torch.randn(1, 4, 4))
