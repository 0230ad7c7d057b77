"""Locality self-attention (Lee et al. 2021, `MultiHeadAttention(locality=True)`, a ViT's
`attn_locality`): softmax(Q K^T / tau) V with tau learned from sqrt(D_h) and each query's own key
masked, checked against the formula written out; its weights, gradient, refusals, and a ViT built
with it under the speed plan."""
from __future__ import annotations

import math

import pytest
import torch

from anyformer import plan
from anyformer.models.vit import ViT, ViTConfig
from anyformer.nn import KVCache, MultiHeadAttention


def by_hand(m: MultiHeadAttention, x: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
    """The layer's output from its weights: scores over tau, the diagonal and the keys not kept at -inf."""
    B, N, D = x.shape
    q, k, v = m.qkv(x).view(B, N, 3, m.heads, m.head_dim).permute(2, 0, 3, 1, 4)
    scores = q @ k.transpose(-1, -2) / m.temperature
    scores = scores.masked_fill(torch.eye(N, dtype=torch.bool), float("-inf"))
    if keep is not None:
        scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
    return m.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, N, D))


def test_the_output_is_the_formulas_with_tau_and_no_self_key():
    torch.manual_seed(0)
    m = MultiHeadAttention(16, 2, locality=True).eval()
    assert m.temperature.item() == pytest.approx(math.sqrt(8))  # plain attention's scale at the start
    with torch.no_grad():
        m.temperature.fill_(1.7)  # away from sqrt(D_h): the temperature must be the one read
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(m(x), by_hand(m, x), rtol=1e-5, atol=1e-6)
    keep = torch.tensor([[True] * 5, [True, True, True, False, False]])
    torch.testing.assert_close(m(x, mask=keep), by_hand(m, x, keep), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(m(x, queries=2), by_hand(m, x)[:, :2], rtol=1e-5, atol=1e-6)
    plain = MultiHeadAttention(16, 2).eval()
    plain.load_state_dict({k: v for k, v in m.state_dict().items() if k != "temperature"})
    assert not torch.allclose(plain(x), m(x), atol=1e-3)


def test_a_lone_token_keeps_its_only_key():
    m = MultiHeadAttention(16, 2, locality=True).eval()
    x = torch.randn(3, 1, 16)
    v = m.qkv(x)[..., 32:]
    torch.testing.assert_close(m(x), m.proj(v), rtol=1e-5, atol=1e-6)


def test_the_weights_leave_each_tokens_own_key_at_zero_and_tau_learns():
    torch.manual_seed(0)
    vit = ViT(ViTConfig(image_size=16, patch_size=4, width=32, depth=2, heads=4, mlp_hidden=64, num_classes=3,
                        attn_locality=True))
    images = torch.randn(2, 3, 16, 16)
    logits, weights = vit(images, return_attention=True)
    for w in weights:  # (B, H, 17, 17): every row sums to 1 over the other tokens
        assert w.shape == (2, 4, 17, 17) and torch.all(w.diagonal(dim1=-2, dim2=-1) == 0)
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 17))
    torch.testing.assert_close(logits, vit(images), rtol=1e-5, atol=1e-6)
    vit(images).sum().backward()
    assert all(b.attn.temperature.grad is not None and b.attn.temperature.grad != 0 for b in vit.backbone.blocks)
    from anyformer.train.optim import param_groups
    no_decay = {id(p) for g in param_groups(vit, 0.05) if g["weight_decay"] == 0 for p in g["params"]}
    assert all(id(b.attn.temperature) in no_decay for b in vit.backbone.blocks)


def test_the_speed_plan_gives_a_locality_vit_its_own_logits():
    torch.manual_seed(0)
    c = ViTConfig(image_size=16, patch_size=4, width=32, depth=2, heads=4, mlp_hidden=64, num_classes=3,
                  attn_locality=True)
    vit = ViT(c).eval()
    images = torch.randn(4, 3, 16, 16)
    with torch.no_grad():
        want = vit(images)
        planned = plan.prepare(ViT(c).eval(), images)
        planned.load_state_dict(vit.state_dict())
        torch.testing.assert_close(planned(images), want, rtol=1e-4, atol=1e-5)


def test_locality_is_refused_where_a_token_may_have_no_other_key():
    with pytest.raises(ValueError, match=r"^locality self-attention masks each token's own key; cross-attention "
                                         r"has none$"):
        MultiHeadAttention(16, 2, cross=True, locality=True)
    m = MultiHeadAttention(16, 2, locality=True)
    said = (r"^locality self-attention masks each token's own key; a causal or cached call would leave the first "
            r"token nothing to attend to$")
    with pytest.raises(ValueError, match=said):
        m(torch.randn(1, 4, 16), causal=True)
    with pytest.raises(ValueError, match=said):
        m(torch.randn(1, 1, 16), cache=KVCache(1, 1, 2, 8, 8, torch.float32, "cpu"))


def test_a_locality_vit_is_not_exported_to_timm_or_hugging_face():
    vit = ViT(ViTConfig(image_size=16, patch_size=8, width=32, depth=1, heads=4, mlp_hidden=64, attn_locality=True))
    with pytest.raises(ValueError, match="attn_locality"):
        vit.to_timm()
    pytest.importorskip("transformers")
    with pytest.raises(ValueError, match="attn_locality"):
        vit.to_hf()
