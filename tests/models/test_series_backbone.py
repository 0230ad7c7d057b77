"""The series transformer after its input head, against closed forms computed from its own
parameters: the backbone the config describes, class-token and masked-mean pooling (a bf16 mean
divided by the exact count), the attention weights of the layers asked, the initial scale of the
class token and channel vectors, and the forward FLOPs."""
import math

import pytest
import torch
import torch.nn.functional as F

from anyformer.models import SeriesConfig, SeriesTransformer
from anyformer.nn import Transformer
from tests.conftest import hooked

from .series_by_hand import SMALL, build, linear, mask_by_hand

# --- backbone, pooling, attention ----------------------------------------------------------------------

def test_the_backbone_is_the_transformer_the_config_describes():
    settings = dict(position="rotary", norm_eps=0.25, dropout=0.2, attn_dropout=0.1, drop_path=0.3,
                    attn_impl="explicit", mlp_hidden=40)
    model = build(**settings)
    c = model.config
    reference = Transformer(16, 2, 2, mlp_hidden=40, norm_eps=0.25, dropout=0.2, attn_dropout=0.1, drop_path=0.3,
                            rotary=True, max_len=1 + c.num_tokens, impl="explicit")
    reference.load_state_dict(model.backbone.state_dict())  # strict: the same layers and sizes
    assert all(block.attn.impl == "explicit" for block in model.backbone.blocks)
    # The rotary table covers exactly the positions the model ever sees.
    assert model.backbone.blocks[0].attn.rotary.cos.shape[0] == 1 + c.num_tokens
    z, mask = torch.randn(3, 1 + c.num_tokens, 16), mask_by_hand(torch.tensor([23, 9, 2]), 23, c)
    for train in (False, True):  # in training the same draws: every dropout at its configured rate
        model.backbone.train(train), reference.train(train)
        torch.manual_seed(8)
        ours = model.backbone(z, mask=mask)
        torch.manual_seed(8)
        torch.testing.assert_close(ours, reference(z, mask=mask))


@pytest.mark.parametrize("patching", ["across", "channel"])
def test_class_token_pooling_reads_the_first_output_token(patching):
    model = build(patching=patching)
    x, lengths = torch.randn(3, 3, 23), torch.tensor([23, 12, 3])
    z, mask = model.tokens(x, lengths)
    out = model.backbone(z, mask=mask)
    torch.testing.assert_close(model(x, lengths), linear(out[:, 0], model.head.fc))


def test_the_last_block_computes_the_class_token_alone_when_the_head_reads_it():
    """keep=1: the final norm (and the last block's queries) see one token, not all 1 + L."""
    seen = []
    for pool in ("cls", "mean"):
        model = build(pool=pool)
        handle = model.backbone.norm.register_forward_hook(lambda module, args, out: seen.append(args[0].shape[1]))
        model(torch.randn(2, 3, 23))
        handle.remove()
    assert seen == [1, 7]


@pytest.mark.parametrize("patching", ["across", "channel"])
def test_mean_pooling_averages_the_tokens_a_series_has(patching):
    model = build(pool="mean", patching=patching)
    x, lengths = torch.randn(3, 3, 23), torch.tensor([23, 12, 3])
    z, mask = model.tokens(x, lengths)
    out = model.backbone(z, mask=mask)
    pooled = torch.stack([out[b][mask[b]].mean(0) for b in range(3)])
    torch.testing.assert_close(model(x, lengths), linear(pooled, model.head.fc))
    # Unpadded: the mean of every token.
    full = torch.randn(2, 3, 23)
    z, mask = model.tokens(full)
    assert mask is None
    torch.testing.assert_close(model(full), linear(model.backbone(z).mean(1), model.head.fc))


def test_a_bf16_mean_over_more_than_256_tokens_divides_by_the_exact_count():
    # bf16 holds integers exactly only up to 256: a count of 257, or a sum of 257 ones, would be 256.
    from anyformer.models.series import SeriesTransformer
    out = torch.ones(1, 300, 2, dtype=torch.bfloat16)
    out[0, :, 1] = 2
    out[0, 0, 1] = 4  # mean (4 + 256 * 2) / 257 = 516 / 257: the sum rounds in bf16, the count too
    mask = torch.zeros(1, 300, dtype=torch.bool)
    mask[0, :257] = True
    mean = SeriesTransformer._mean(out, mask)
    expected = torch.tensor([[[1.0, 516 / 257]]]).to(torch.bfloat16)
    assert mean.dtype == torch.bfloat16 and torch.equal(mean, expected)


def layer0_weights(model, z, mask):
    """Softmax(q k^T / sqrt(d_h)) of the first layer from its LayerNorm and qkv weights, padded keys out."""
    block, H = model.backbone.blocks[0], model.config.heads
    h = F.layer_norm(z, (z.shape[-1],), block.norm1.weight, block.norm1.bias, model.config.norm_eps)
    q, k, _ = linear(h, block.attn.qkv).unflatten(-1, (3, H, -1)).unbind(2)          # (B, N, H, d_h)
    scores = torch.einsum("bnhd,bmhd->bhnm", q, k) / math.sqrt(q.shape[-1])
    return scores.masked_fill(~mask[:, None, None, :], float("-inf")).softmax(-1)


@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_the_hook_gives_the_forwards_logits_and_the_weights_asked(pool):
    model = build(pool=pool, patching="channel")
    x, lengths = torch.randn(3, 3, 23), torch.tensor([23, 12, 3])
    logits = model(x, lengths)
    z, mask = model.tokens(x, lengths)
    every_logits, every = hooked(model, True, x, lengths)  # every layer
    torch.testing.assert_close(every_logits, logits)
    assert len(every) == 2 and every[0].shape == (3, 2, 19, 19)
    torch.testing.assert_close(every[0], layer0_weights(model, z, mask))
    # The second series (12 steps) has patches 0 to 2 of each channel: no query looks at the others.
    assert (every[1][1, :, :, 1:].unflatten(-1, (3, 6))[..., 3:] == 0).all()
    one_logits, one = hooked(model, [1], x, lengths)
    torch.testing.assert_close(one_logits, logits)
    assert len(one) == 1
    torch.testing.assert_close(one[0], every[1])


def test_on_layer_receives_each_asked_layers_weights_as_they_come():
    model = build()
    x, lengths = torch.randn(2, 3, 23), torch.tensor([23, 5])
    handed = []
    logits, kept = hooked(model, [1, 0], x, lengths, on_layer=lambda i, w: handed.append((i, w)))
    assert kept == [] and [i for i, _ in handed] == [0, 1]  # in the order the layers run
    _, every = hooked(model, True, x, lengths)
    torch.testing.assert_close(handed[0][1], every[0])
    torch.testing.assert_close(handed[1][1], every[1])
    torch.testing.assert_close(logits, model(x, lengths))


# --- initialisation, cost --------------------------------------------------------------------------------

def test_the_class_token_and_channel_vectors_start_small():
    torch.manual_seed(9)
    model = SeriesTransformer(SeriesConfig(**{**SMALL, "patching": "channel", "width": 64}))
    cls = model.prefix.cls_token
    assert 0 < cls.abs().max() < 1e-4  # std 1e-6: drawn, yet far below the positions
    assert 0.01 < model.channel_embed.std() < 0.03  # std 0.02, as the learned positions


@pytest.mark.parametrize("patching, per_token", [("across", 18), ("channel", 6)])
def test_forward_flops_count_two_per_weight_per_token_and_the_attention_products(patching, per_token):
    model = build(patching=patching)
    D, depth, hidden, classes = 16, 2, 24, 5
    block = 3 * D * D + D * D + 2 * D * hidden          # qkv, output projection, the MLP's two layers

    def flops(n):  # n tokens, the class token among them: it alone is not a patch
        return 2 * n * depth * block + 2 * (n - 1) * per_token * D + 4 * depth * n * n * D + 2 * D * classes

    assert model.forward_flops() == flops(1 + model.config.num_tokens)
    assert model.forward_flops(9) == flops(9)
