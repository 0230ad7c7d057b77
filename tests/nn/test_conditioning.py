"""Conditioning as input heads (time and class embeddings) and adaLN-Zero blocks that start as the identity."""
import pytest
import torch

from anyformer.nn import ClassEmbedding, FinalAdaLN, TimeEmbedding, Transformer, TransformerBlock


def test_adaln_zero_block_is_the_identity_at_init_and_not_after_a_change():
    block = TransformerBlock(32, 4, adaln=True)
    x, c = torch.randn(2, 5, 32), torch.randn(2, 32)
    assert torch.equal(block(x, cond=c), x)
    assert block.norm1.weight is None and block.norm2.weight is None  # the condition supplies scale and shift
    with torch.no_grad():
        block.modulation.proj.bias.normal_()
    y = block(x, cond=c)
    assert not torch.allclose(y, x)
    # The condition acts per example: changing one example's c changes that example only.
    c2 = c.clone()
    c2[1] += 1
    with torch.no_grad():
        block.modulation.proj.weight.normal_(std=0.1)
    y1, y2 = block(x, cond=c), block(x, cond=c2)
    assert torch.equal(y1[0], y2[0]) and not torch.allclose(y1[1], y2[1])


def test_adaln_backbone_keeps_its_gates_closed_through_init_weights():
    trunk = Transformer(32, 3, 4, adaln=True, final_norm=False)
    x = torch.randn(2, 7, 32)
    assert torch.equal(trunk(x, cond=torch.randn(2, 32)), x)
    for block in trunk.blocks:
        assert not block.modulation.proj.weight.any()


def test_adaln_block_asks_for_its_condition_and_plain_blocks_refuse_one():
    with pytest.raises(ValueError, match="give forward a condition cond of shape"):
        TransformerBlock(16, 2, adaln=True)(torch.randn(1, 3, 16))
    with pytest.raises(ValueError, match="built without adaln=True"):
        TransformerBlock(16, 2)(torch.randn(1, 3, 16), cond=torch.randn(1, 16))
    with pytest.raises(ValueError, match="needs norm='pre'"):
        TransformerBlock(16, 2, adaln=True, norm="post")


def test_cross_attention_still_works_beside_adaln():
    block = TransformerBlock(16, 2, adaln=True, cross=True)
    x, ctx = torch.randn(2, 3, 16), torch.randn(2, 4, 16)
    y = block(x, cond=torch.randn(2, 16), context=ctx)
    assert y.shape == x.shape and not torch.allclose(y, x)  # the cross branch is not gated


def test_time_embedding_shape_and_sensitivity():
    emb = TimeEmbedding(24, freq_dim=16)
    t = torch.tensor([0.0, 0.001, 0.5, 1.0])
    c = emb(t)
    assert c.shape == (4, 24)
    assert not torch.allclose(c[0], c[1], atol=1e-4)  # t * 1000 makes a thousandth visible
    with pytest.raises(ValueError, match=r"expected times of shape \(B,\)"):
        emb(torch.zeros(2, 1))


def test_class_embedding_has_a_null_class_and_drops_labels_to_it():
    emb = ClassEmbedding(10, 8)
    assert emb.null == 10 and emb.weight.shape == (11, 8)
    labels = torch.arange(10).repeat(100)
    assert emb(labels).shape == (1000, 8)
    dropped = emb.drop(labels, 0.1, torch.Generator().manual_seed(0))
    share = (dropped == 10).float().mean().item()
    assert 0.07 < share < 0.13
    kept = dropped != 10
    assert torch.equal(dropped[kept], labels[kept])
    assert torch.equal(emb.drop(labels, 0.0, torch.Generator()), labels)


def test_final_adaln_starts_as_a_plain_norm():
    final = FinalAdaLN(16)
    x = torch.randn(2, 5, 16) * 3 + 1
    y = final(x, torch.randn(2, 16))
    assert torch.allclose(y, torch.nn.functional.layer_norm(x, (16,), eps=1e-6))
