"""Attention maps and rollout: checked against the maths done by hand on tiny models."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

import anyformer.nn.attention as attention_module
from anyformer.models import GPT, GPTConfig, TextEncoder, TextEncoderConfig, ViT, ViTConfig
from anyformer.nn import Transformer
from anyformer.viz import (attention_rollout, cls_attention_maps, image_attention, plot_digit_attention,
                           plot_image_attention, plot_token_attention, rollout_map, stream_attention)
from tests.conftest import hooked


def tiny_vit(**overrides) -> ViT:
    """A 3-layer, 2-head ViT on 12x8 images (a 3x2 grid), fused attention unless asked, and
    query/key weights large enough that attention is far from uniform."""
    cfg = dict(image_size=(12, 8), patch_size=4, in_chans=1, num_classes=3, width=16, depth=3, heads=2,
               mlp_hidden=32, attn_impl="fused")
    vit = ViT(ViTConfig(**{**cfg, **overrides})).eval()
    with torch.no_grad():
        for block in vit.backbone.blocks:
            block.attn.qkv.weight.normal_(std=0.5)
        if vit.prefix.cls_token is not None:
            vit.prefix.cls_token.normal_()
    return vit


def random_attention(layers=3, b=2, h=4, n=6) -> list[torch.Tensor]:
    return [torch.randn(b, h, n, n).mul(2).softmax(-1) for _ in range(layers)]


def hand_attention(vit: ViT, images: torch.Tensor, layer: int) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d)) of one layer from the weights, in float64, without the attention module."""
    x = vit.tokens(images)
    for block in vit.backbone.blocks[:layer]:
        x = block(x)
    block = vit.backbone.blocks[layer]
    x = x.double()
    h = F.layer_norm(x, (x.shape[-1],), block.norm1.weight.double(), block.norm1.bias.double(), block.norm1.eps)
    qkv = h @ block.attn.qkv.weight.double().T + block.attn.qkv.bias.double()
    b, n, _ = qkv.shape
    heads, d = block.attn.heads, block.attn.head_dim
    q, k, _ = qkv.reshape(b, n, 3, heads, d).permute(2, 0, 3, 1, 4)
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=-1)


# --------------------------------------------------------------------------- rollout maths


@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
@pytest.mark.parametrize("residual", [True, False])
def test_rollout_rows_sum_to_one(fusion, residual):
    r = attention_rollout(random_attention(), residual=residual, head_fusion=fusion)
    assert r.shape == (2, 6, 6)
    torch.testing.assert_close(r.sum(-1), torch.ones(2, 6))
    assert (r >= 0).all()


def test_rollout_matches_a_hand_computation():
    attn = random_attention(layers=2)
    w1, w2 = (a.double().numpy() for a in attn)
    eye = np.eye(6)
    a1 = 0.5 * w1.mean(axis=1) + 0.5 * eye   # (A + I), rows renormalised: rows of A sum to one
    a2 = 0.5 * w2.mean(axis=1) + 0.5 * eye
    np.testing.assert_allclose(attention_rollout(attn).numpy(), a2 @ a1, atol=1e-6)  # later layer on the left
    m1, m2 = w1.max(axis=1) + eye, w2.max(axis=1) + eye
    m1, m2 = m1 / m1.sum(-1, keepdims=True), m2 / m2.sum(-1, keepdims=True)
    np.testing.assert_allclose(attention_rollout(attn, head_fusion="max").numpy(), m2 @ m1, atol=1e-6)
    np.testing.assert_allclose(attention_rollout(attn, residual=False).numpy(),
                               w2.mean(axis=1) @ w1.mean(axis=1), atol=1e-6)


def test_rollout_consumes_a_generator_layer_by_layer():
    attn = random_attention()
    torch.testing.assert_close(attention_rollout(a for a in attn), attention_rollout(attn))


def test_rollout_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one layer"):
        attention_rollout([])
    with pytest.raises(ValueError, match="head_fusion"):
        attention_rollout(random_attention(), head_fusion="median")
    with pytest.raises(ValueError, match=r"\(B, heads, N, N\)"):
        attention_rollout([torch.rand(6, 6)])
    with pytest.raises(ValueError, match="shapes differ"):
        attention_rollout([torch.rand(1, 2, 6, 6), torch.rand(1, 2, 5, 5)])


# --------------------------------------------------------------------------- maps from a model


def test_maps_equal_softmax_qk_computed_by_hand():
    vit = tiny_vit()
    images = torch.randn(2, 1, 12, 8)
    with torch.no_grad():
        logits, all_layers = vit(images, return_attention=True)
        logits_one, one = vit(images, return_attention=[1])
        expected = hand_attention(vit, images, 1)
    assert len(one) == 1 and one[0].shape == (2, 2, 7, 7)
    assert expected.std() > 0.05  # the check is not against near-uniform weights
    torch.testing.assert_close(one[0].double(), expected, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(one[0], all_layers[1])
    torch.testing.assert_close(logits_one, logits)
    with torch.no_grad():
        torch.testing.assert_close(all_layers[0].double(), hand_attention(vit, images, 0), atol=1e-6, rtol=1e-5)


def test_cls_maps_read_the_class_row_over_patches_in_grid_order():
    vit = tiny_vit(num_registers=2)  # tokens: class, 2 registers, 3x2 patches
    assert vit.prefix.num_prefix == 3 and vit.config.grid == (3, 2)
    with torch.no_grad():
        _, attn = vit(torch.randn(2, 1, 12, 8), return_attention=True)
    maps = cls_attention_maps(attn, vit.prefix.num_prefix, vit.config.grid)
    assert maps.shape == (3, 2, 2, 3, 2)
    for layer in range(3):
        for r in range(3):
            for c in range(2):
                torch.testing.assert_close(maps[layer, :, :, r, c], attn[layer][:, :, 0, 3 + 2 * r + c])
    with pytest.raises(ValueError, match="does not fit"):
        cls_attention_maps(attn, 1, vit.config.grid)


def test_stream_attention_hands_over_each_layer_and_leaves_no_hooks():
    vit = tiny_vit()
    images = torch.randn(2, 1, 12, 8)
    seen = []
    with torch.no_grad():
        logits, attn = vit(images, return_attention=True)
        out = stream_attention(vit, images, lambda i, w: seen.append((i, w.clone())))
    assert [i for i, _ in seen] == [0, 1, 2]
    for (_, w), full in zip(seen, attn):
        torch.testing.assert_close(w, full)
    torch.testing.assert_close(out, logits)
    assert all(not b._forward_hooks and not b.attn.hooks_here() for b in vit.backbone.blocks)


def test_stream_attention_works_on_the_backbone_and_text_encoder_and_refuses_other_modules():
    trunk = Transformer(width=16, depth=2, heads=2).eval()
    x = torch.randn(1, 5, 16)
    seen = []
    torch.testing.assert_close(stream_attention(trunk, x, lambda i, w: seen.append(i), layers=[1]), trunk(x))
    assert seen == [1]
    enc = TextEncoder(TextEncoderConfig(vocab_size=11, max_positions=8, width=16, depth=2, heads=2, mlp_hidden=32)).eval()
    ids, mask = torch.randint(0, 11, (2, 6)), torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    layers = []
    out = stream_attention(enc, ids, lambda i, w: layers.append(w), attention_mask=mask)
    torch.testing.assert_close(out, enc(ids, mask))
    assert len(layers) == 2 and (layers[0][1, :, :, 4:] == 0).all()  # padding gets no attention
    with pytest.raises(TypeError, match="Linear has no transformer backbone to take attention from"):
        stream_attention(torch.nn.Linear(2, 2), torch.randn(1, 2), lambda i, w: None)


def test_streamed_rollout_on_a_causal_language_model():
    gpt = GPT(GPTConfig(vocab_size=11, context=16, width=16, depth=2, heads=2)).eval()
    idx = torch.randint(0, 11, (1, 9))
    with torch.no_grad():
        _, attn = hooked(gpt, True, idx)
        layers = []
        stream_attention(gpt, idx, lambda i, w: layers.append(w))
    torch.testing.assert_close(attention_rollout(layers), attention_rollout(attn))
    assert torch.all(attention_rollout(attn).triu(1) == 0)  # causality survives the product


def test_image_attention_streams_the_same_rollout_and_maps():
    vit = tiny_vit().train()
    images = torch.randn(2, 1, 12, 8)
    res = image_attention(vit, images, layers=[-1, 0])
    assert vit.training  # mode restored
    vit.eval()
    with torch.no_grad():
        logits, attn = vit(images, return_attention=True)
    np.testing.assert_allclose(res["logits"], logits.numpy(), atol=1e-6)
    np.testing.assert_allclose(res["probs"].sum(-1), 1, atol=1e-6)
    assert list(res["layers"]) == [2, 0]
    np.testing.assert_allclose(res["cls_maps"], cls_attention_maps([attn[2], attn[0]], 1, (3, 2)).numpy())
    expected = rollout_map(attention_rollout(attn), 1, (3, 2))
    np.testing.assert_allclose(res["rollout"], expected.numpy(), atol=1e-6)
    assert res["overlay"].shape == (2, 12, 8)
    assert res["overlay"].min() == 0 and np.isclose(res["overlay"].max(), 1)
    # the overlay's brightest region is where the rollout map peaks
    for b in range(2):
        r, c = np.unravel_index(res["rollout"][b].argmax(), (3, 2))
        assert res["overlay"][b, 4 * r:4 * r + 4, 4 * c:4 * c + 4].max() == res["overlay"][b].max()


def count_explicit(monkeypatch) -> list[int]:
    calls = []
    real = attention_module.attention_explicit

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(attention_module, "attention_explicit", spy)
    return calls


def test_only_the_layers_asked_leave_the_fused_path(monkeypatch):
    vit = tiny_vit()
    images = torch.randn(1, 1, 12, 8)
    calls = count_explicit(monkeypatch)
    res = image_attention(vit, images, layers=[1], rollout=False)
    assert len(calls) == 1 and res["rollout"] is None and res["cls_maps"].shape == (1, 1, 2, 3, 2)
    with torch.no_grad():
        expected = hand_attention(vit, images, 1)[:, :, 0, 1:].reshape(1, 2, 3, 2)
    np.testing.assert_allclose(res["cls_maps"][0], expected.numpy(), atol=1e-6)
    calls.clear()
    image_attention(vit, images, layers=[1])  # rollout needs every layer
    assert len(calls) == 3


def test_model_without_class_token_uses_the_mean_patch_row():
    vit = tiny_vit(class_token=False, pool="mean")
    images = torch.randn(1, 1, 12, 8)
    res = image_attention(vit, images, layers=[0])
    with torch.no_grad():
        _, attn = vit(images, return_attention=[0])
    assert res["query"] == "mean" and res["num_prefix"] == 0
    np.testing.assert_allclose(res["cls_maps"][0, 0], attn[0][0].mean(dim=1).reshape(2, 3, 2).numpy(), atol=1e-6)


def test_bad_layers_are_refused():
    with pytest.raises(ValueError, match="layers must be ints"):
        image_attention(tiny_vit(), torch.randn(1, 1, 12, 8), layers=[3])


# --------------------------------------------------------------------------- figures


def read_png(path) -> np.ndarray:
    with Image.open(path) as im:
        assert im.format == "PNG"
        return np.asarray(im.convert("RGB"))


@pytest.mark.slow
def test_plot_image_attention_writes_a_png_of_the_asked_size(tmp_path):
    vit = tiny_vit()
    images = torch.randn(2, 1, 12, 8)
    res = image_attention(vit, images, layers=[0, 2])
    out = plot_image_attention(images[1], res, tmp_path / "a" / "img.png", index=1, label=1,
                               class_names=["cat", "dog", "eel"], figsize=(8, 6), dpi=50)
    px = read_png(out)
    assert px.shape == (300, 400, 3)
    assert len(np.unique(px.reshape(-1, 3), axis=0)) > 50  # maps and colour bars, not a blank page
    one = plot_image_attention(images[0], res, tmp_path / "one.png", layers=[2], heads=[1])
    two = plot_image_attention(images[0], res, tmp_path / "two.png")
    h1, h2 = read_png(one).shape[0], read_png(two).shape[0]
    assert h2 > h1  # a row per layer
    with pytest.raises(ValueError, match="not in the result"):
        plot_image_attention(images[0], res, tmp_path / "x.png", layers=[1])


@pytest.mark.slow
def test_plot_image_attention_takes_uint8_rgb(tmp_path):
    vit = tiny_vit(in_chans=3)
    images = torch.rand(1, 3, 12, 8)
    res = image_attention(vit, images)
    rgb = (images[0] * 255).to(torch.uint8)
    px = read_png(plot_image_attention(rgb, res, tmp_path / "rgb.png", figsize=(10, 7), dpi=40))
    assert px.shape == (280, 400, 3)


def test_plot_token_attention(tmp_path):
    gpt = GPT(GPTConfig(vocab_size=11, context=16, width=16, depth=2, heads=2)).eval()
    tokens = ["a", " b", "$x$", "\n", "c", "d"]
    with torch.no_grad():
        _, attn = hooked(gpt, [1], torch.randint(0, 11, (1, 6)))
    px = read_png(plot_token_attention(tokens, {1: attn[0]}, tmp_path / "t.png", figsize=(6, 5), dpi=50))
    assert px.shape == (250, 300, 3)
    heads = read_png(plot_token_attention(tokens, attn, tmp_path / "h.png", heads=[0, 1]))
    mean = read_png(plot_token_attention(tokens, attn, tmp_path / "m.png"))
    assert heads.shape[1] > mean.shape[1]  # one column per head
    with pytest.raises(ValueError, match="5 tokens"):
        plot_token_attention(tokens[:5], attn, tmp_path / "bad.png")


@pytest.mark.slow
def test_plot_digit_attention(tmp_path):
    vit = tiny_vit(image_size=16, num_classes=10)
    images = torch.randn(5, 1, 16, 16)
    out = plot_digit_attention(vit, images, torch.tensor([0, 1, 2, 3, 4]), [str(i) for i in range(10)],
                               tmp_path / "attention.png", max_images=4, figsize=(8, 4), dpi=60)
    assert read_png(out).shape == (240, 480, 3)
    wide = read_png(plot_digit_attention(vit, images[:3], None, None, tmp_path / "d.png"))
    narrow = read_png(plot_digit_attention(vit, images[:1], None, None, tmp_path / "d2.png"))
    assert wide.shape[1] > narrow.shape[1]
