"""The attention-weighted pooling head (`ClassifierHead(pool="attention")`, a ViT's `pool="attention"`; the
sequence pooling of Hassani et al. 2021): its output against softmax-weighted sums written out token by token,
the prefix tokens left out, equal scores giving the plain mean, a ViT that trains and reloads with it, and
the refusals."""
from __future__ import annotations

import pytest
import torch

from anyformer.models.base import load
from anyformer.models.vit import ViT, ViTConfig
from anyformer.nn.heads import ClassifierHead
from tests.nn.fit_briefly import fit_briefly


@pytest.mark.parametrize("prefix", [0, 2])
def test_pooled_is_the_softmax_of_each_patch_score_times_that_patch_summed(prefix):
    torch.manual_seed(0)
    head = ClassifierHead(6, 3, pool="attention", num_prefix=prefix)
    tokens = torch.randn(2, prefix + 5, 6)
    head.requires_grad_(False)
    for b in range(2):
        patches = tokens[b, prefix:]
        scores = [float(head.score.weight[0] @ p + head.score.bias[0]) for p in patches]
        total = sum(torch.tensor(s).exp() for s in scores)
        expected = sum(torch.tensor(s).exp() / total * p for s, p in zip(scores, patches))
        torch.testing.assert_close(head.pooled(tokens)[b], expected, rtol=1e-5, atol=1e-6)


def test_equal_scores_give_the_mean_and_a_dominant_score_gives_its_token():
    head = ClassifierHead(4, 2, pool="attention", num_prefix=1)
    tokens = torch.randn(3, 1 + 6, 4)
    with torch.no_grad():
        head.score.weight.zero_()
        torch.testing.assert_close(head.pooled(tokens), tokens[:, 1:].mean(1))
        head.score.weight.copy_(torch.tensor([[100.0, 0, 0, 0]]))
        tokens[:, 3, 0] = 1.0   # every other patch's first channel is far below: all the weight on patch 2
        tokens[:, [1, 2, 4, 5, 6], 0] = -1.0
        torch.testing.assert_close(head.pooled(tokens), tokens[:, 3])


def test_a_vit_with_attention_pooling_learns_and_reloads(tmp_path):
    torch.manual_seed(0)
    c = ViTConfig(image_size=16, patch_size=4, in_chans=1, width=32, depth=2, heads=4, mlp_hidden=64,
                  num_classes=3, class_token=False, pool="attention", position="sinusoidal")
    vit = ViT(c)
    images, labels = torch.randn(8, 1, 16, 16), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    first, last = fit_briefly(vit, images, labels)
    assert last < first / 2
    assert vit.head.score.weight.grad is not None and vit.head.score.weight.grad.abs().sum() > 0
    again = load(vit.save(tmp_path / "m")).eval()
    assert again.config.pool == "attention"
    torch.testing.assert_close(again(images), vit.eval()(images), rtol=0, atol=0)
    assert again.pre_logits(images).shape == (8, 32)


def test_refusals_name_what_was_expected():
    with pytest.raises(ValueError, match=r"^unknown pooling 'max'; expected one of \('cls', 'mean', 'attention'\)$"):
        ClassifierHead(4, 2, pool="max")
    with pytest.raises(ValueError, match=r"^pool='cls' needs a class token"):
        ClassifierHead(4, 2, pool="cls", num_prefix=0)
