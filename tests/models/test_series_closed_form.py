"""The series transformer against closed forms computed here from its own parameters: the zero
padding to whole patches, the patches every `stride` steps, patch embedding plus channel vector
plus time position, the key-padding mask from the lengths, patch and position dropout in training,
class-token and masked-mean pooling, the attention weights of the layers asked, the kernel stem's
standardised features, the exact wording of every refusal, and the device every tensor lands on."""
import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from anyformer.models import SeriesConfig, SeriesTransformer
from anyformer.models.series_kernels import RandomKernelFeatures
from anyformer.nn import Transformer

# 3 channels of up to 23 steps, patches of 6 every 4 steps: starts 0, 4, ..., 20, so L = 6 and the
# last patch reaches step 26, three steps of zero padding past the longest series.
SMALL = dict(channels=3, length=23, patch_size=6, patch_stride=4, num_classes=5, width=16, depth=2,
             heads=2, mlp_hidden=24, dropout=0.0, drop_path=0.0)


def build(**overrides) -> SeriesTransformer:
    """A small model in eval mode with every parameter drawn at random: the initial zeros (biases,
    LayerNorm's shift), ones (LayerNorm's scale) and near-zeros (class token) would hide a dropped term."""
    torch.manual_seed(0)
    model = SeriesTransformer(SeriesConfig(**{**SMALL, **overrides}))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    return model.eval()


def exactly(message: str) -> str:
    """A `match` pattern for the whole message, so that text added before or after it fails too."""
    return "^" + re.escape(message) + "$"


def patches_by_hand(series, lengths, config, difference=False):
    """(B, C, T) -> (B, C', L, p): each series zeroed from its length on, its slope read beside it when
    asked, laid on a zero grid long enough for whole patches, patch l the steps [l s, l s + p)."""
    B, C, T = series.shape
    kept = series.clone()
    ends = [T] * B if lengths is None else [min(int(n), T) for n in lengths]
    for b, n in enumerate(ends):
        kept[b, :, n:] = 0
    if difference:
        slope = torch.zeros_like(kept)
        slope[..., 1:] = kept[..., 1:] - kept[..., :-1]
        for b, n in enumerate(ends):
            slope[b, :, n:] = 0  # no step down to the padding
        kept = torch.cat([kept, slope], dim=1)
    s, p, L = config.stride, config.patch_size, config.patches
    grid = torch.zeros(B, kept.shape[1], (L - 1) * s + p)
    grid[..., :T] = kept
    return torch.stack([grid[..., l * s:l * s + p] for l in range(L)], dim=2)


def mask_by_hand(lengths, T, config):
    """(B, 1 + L) key-padding mask: the class token, then patch l where it starts before the series' end."""
    steps = [min(int(n), T) for n in lengths]
    return torch.tensor([[True] + [l * config.stride < n for l in range(config.patches)] for n in steps])


def linear(x, layer):
    return x @ layer.weight.T + layer.bias


# --- configuration -------------------------------------------------------------------------------

@pytest.mark.parametrize("settings, message", [
    (dict(patching="diagonal"), "unknown patching 'diagonal'; expected one of ('across', 'channel')"),
    (dict(position="absolute"), "unknown position 'absolute'; expected one of ('learned', 'sinusoidal', 'rotary')"),
    (dict(patching="channel", position="rotary"),
     "position='rotary' rotates by token order, which per-channel patching does not keep in time; "
     "use learned or sinusoidal positions with patching='channel'"),
    (dict(stem="conv"), "unknown stem 'conv'; expected one of ('patches', 'kernels')"),
    (dict(pool="max"), "unknown pool 'max'; expected one of ('cls', 'mean')"),
    (dict(stem="kernels", patching="channel"),
     "stem='kernels' reads every channel in each kernel and makes its own slopes; "
     "it takes patching='across' and difference=False"),
    (dict(stem="kernels", difference=True),
     "stem='kernels' reads every channel in each kernel and makes its own slopes; "
     "it takes patching='across' and difference=False"),
    (dict(token_drop=1.0), "token_drop must be in [0, 1), got 1.0"),
    (dict(token_drop=-0.25), "token_drop must be in [0, 1), got -0.25"),
    (dict(patch_size=8, patch_stride=9), "patch_stride must be in [1, patch_size=8] (or null), got 9"),
    (dict(patch_size=8, patch_stride=0), "patch_stride must be in [1, patch_size=8] (or null), got 0"),
])
def test_refused_settings_say_exactly_what_is_wrong(settings, message):
    with pytest.raises(ValueError, match=exactly(message)):
        SeriesConfig(**settings)


@pytest.mark.parametrize("name", ["channels", "length", "patch_size", "num_classes", "width", "depth", "heads",
                                  "mlp_hidden", "kernel_features"])
def test_every_size_must_be_a_positive_integer(name):
    with pytest.raises(ValueError, match=exactly(f"{name} must be a positive integer, got 0")):
        SeriesConfig(**{name: 0})


@pytest.mark.parametrize("settings", [
    dict(position="rotary", patching="across"), dict(position="sinusoidal", patching="channel"),
    dict(position="learned", patching="channel"), dict(stem="kernels"),
    dict(token_drop=0.0), dict(token_drop=0.999),
    dict(patch_size=8, patch_stride=1), dict(patch_size=8, patch_stride=8), dict(patch_size=8, patch_stride=None),
])
def test_the_edges_of_each_allowed_range_are_accepted(settings):
    config = SeriesConfig(**settings)
    assert config.stride == (settings.get("patch_stride") or config.patch_size)


# --- input head ------------------------------------------------------------------------------------

def test_across_tokens_are_padded_strided_patches_embedded_plus_time_positions():
    model = build()
    torch.manual_seed(1)
    x, lengths = torch.randn(4, 3, 23), torch.tensor([23, 20, 9, 1])
    garbage = x.clone()
    for b, n in enumerate(lengths.tolist()):
        garbage[b, :, n:] = 100.0  # past a series' end: not part of it
    z, mask = model.tokens(garbage, lengths)
    P = patches_by_hand(x, lengths, model.config)                        # (B, C, L, p)
    vectors = torch.cat([P[:, c] for c in range(3)], dim=-1)             # (B, L, C p), channel-major
    pos = model.pos.pos_embed[0]
    expected = torch.cat([(model.prefix.cls_token[0] + pos[:1]).expand(4, 1, 16),
                          linear(vectors, model.patch_embed.proj) + pos[1:]], dim=1)
    torch.testing.assert_close(z, expected)
    assert torch.equal(mask, mask_by_hand(lengths, 23, model.config))


@pytest.mark.parametrize("difference", [False, True])
def test_channel_tokens_add_each_channels_vector_and_share_the_time_position(difference):
    model = build(patching="channel", difference=difference)
    C = 6 if difference else 3
    assert model.channel_embed.shape == (1, C, 1, 16)
    torch.manual_seed(2)
    x = torch.randn(2, 3, 23)
    pos = model.pos.pos_embed[0]
    e = model.channel_embed[0, :, 0]                                     # (C', D)
    for lengths in (None, torch.tensor([23, 14])):  # whole series, then one cut short
        P = patches_by_hand(x, lengths, model.config, difference)        # (B, C', L, p)
        tokens = linear(P, model.patch_embed.proj) + e[None, :, None] + pos[None, None, 1:]
        expected = torch.cat([(model.prefix.cls_token[0] + pos[:1]).expand(2, 1, 16), tokens.flatten(1, 2)], dim=1)
        z, mask = model.tokens(x, lengths)
        torch.testing.assert_close(z, expected)
    # Token c L + l is channel c's patch l: the mask repeats the time mask for every channel.
    by_time = mask_by_hand(lengths, 23, model.config)
    assert torch.equal(mask, torch.cat([by_time[:, :1], by_time[:, 1:].repeat(1, C)], dim=1))


def test_an_across_model_has_no_channel_vectors():
    assert build().channel_embed is None


def test_sinusoidal_positions_are_the_fixed_table_and_not_saved():
    model = build(position="sinusoidal")
    D, rows = 16, 1 + model.config.patches
    freq = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    angle = torch.arange(rows, dtype=torch.float64)[:, None] * freq
    table = torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1).float()  # sin even, cos odd
    x = torch.randn(2, 3, 23)
    z, _ = model.tokens(x)
    vectors = torch.cat([patches_by_hand(x, None, model.config)[:, c] for c in range(3)], dim=-1)
    torch.testing.assert_close(z[:, 0], (model.prefix.cls_token[0, 0] + table[0]).expand(2, D))
    torch.testing.assert_close(z[:, 1:], linear(vectors, model.patch_embed.proj) + table[1:])
    assert "pos_table" not in model.state_dict()  # rebuilt at construction, never loaded


def test_rotary_adds_no_position_to_the_tokens():
    model = build(position="rotary")
    x = torch.randn(2, 3, 23)
    z, _ = model.tokens(x)
    vectors = torch.cat([patches_by_hand(x, None, model.config)[:, c] for c in range(3)], dim=-1)
    torch.testing.assert_close(z[:, 0], model.prefix.cls_token[0, 0].expand(2, 16))
    torch.testing.assert_close(z[:, 1:], linear(vectors, model.patch_embed.proj))
    assert "pos_table" not in model.state_dict()


def test_a_shorter_series_is_padded_to_the_models_patches_and_its_empty_ones_masked():
    model = build()
    x = torch.randn(2, 3, 13)  # patches 0..3 start before step 13; patches 4 and 5 hold no data
    z, mask = model.tokens(x)
    vectors = torch.cat([patches_by_hand(x, None, model.config)[:, c] for c in range(3)], dim=-1)
    torch.testing.assert_close(z[:, 1:], linear(vectors, model.patch_embed.proj) + model.pos.pos_embed[0, 1:])
    assert mask.tolist() == [[True] * 5 + [False] * 2] * 2
    # A length past the steps given counts only the steps given.
    assert torch.equal(model.tokens(x, torch.tensor([30, 13]))[1], mask)


@pytest.mark.parametrize("lengths, masked", [
    ([23, 21], False),      # every patch starts before its series' end: no mask at all
    ([23, 20], True),       # a series ending where the last patch starts leaves that patch empty
    ([8, 23], True),        # 8 steps: patches 0 and 1; the one starting at step 8 is empty
    ([1, 4], True),
])
def test_the_mask_marks_exactly_the_patches_that_start_before_the_end(lengths, masked):
    model = build()
    lengths = torch.tensor(lengths)
    _, mask = model.tokens(torch.randn(2, 3, 23), lengths)
    if masked:
        assert mask.dtype == torch.bool and torch.equal(mask, mask_by_hand(lengths, 23, model.config))
    else:
        assert mask is None


def test_training_without_token_drop_needs_no_mask():
    model = build(token_drop=0.0).train()
    assert model.tokens(torch.randn(2, 3, 23))[1] is None


def test_token_drop_keeps_a_patch_where_its_draw_reaches_the_drop_rate():
    torch.manual_seed(3)
    draws = torch.rand(4, 6)  # the draws tokens() makes after this seed, one per (series, patch)
    rate = float(draws[0, 2])  # a draw equal to the rate keeps its patch: kept with probability 1 - p
    model = build(token_drop=rate).train()
    x, lengths = torch.randn(4, 3, 23), torch.tensor([23, 23, 10, 3])
    torch.manual_seed(3)
    _, mask = model.tokens(x, lengths)
    expected = mask_by_hand(lengths, 23, model.config)
    expected[:, 1:] &= draws >= rate
    assert torch.equal(mask, expected) and bool(mask[0, 3])
    # At evaluation nothing is dropped.
    assert model.eval().tokens(x)[1] is None


def test_token_drop_drops_a_time_patch_of_every_channel_together():
    torch.manual_seed(4)
    draws = torch.rand(3, 6)
    model = build(patching="channel", token_drop=0.5).train()
    x = torch.randn(3, 3, 23)
    torch.manual_seed(4)
    _, mask = model.tokens(x)
    assert torch.equal(mask, torch.cat([torch.ones(3, 1, dtype=torch.bool), (draws >= 0.5).repeat(1, 3)], dim=1))


def test_training_drops_out_the_positioned_tokens():
    model = build(dropout=0.4)
    x = torch.randn(2, 3, 23)
    z, _ = model.tokens(x)
    torch.manual_seed(5)
    dropped, _ = model.train().tokens(x)
    torch.manual_seed(5)
    keep = (torch.rand_like(z) >= 0.4) / 0.6
    torch.testing.assert_close(dropped, z * keep)


# --- kernel stem -----------------------------------------------------------------------------------

def kernel_model(**overrides):
    model = build(stem="kernels", channels=2, length=30, kernel_features=168, kernel_seed=5, **overrides)
    with torch.no_grad():  # standardisation that is not the identity
        model.feature_mean.copy_(torch.rand_like(model.feature_mean))
        model.feature_std.copy_(torch.rand_like(model.feature_std) + 0.5)
    return model


def test_the_kernel_stem_is_the_configured_one_with_its_seed_and_stride():
    model = kernel_model()
    reference = RandomKernelFeatures(2, 30, 168, 6, 4, seed=5)
    assert torch.equal(model.kernels.weight, reference.weight) and model.kernels.stride == 4
    assert model.kernels.patches == model.config.patches == 7
    torch.manual_seed(6)
    x, lengths = torch.randn(3, 2, 30), torch.tensor([30, 17, 6])
    x[1, :, 17:], x[2, :, 6:] = 50.0, -50.0  # what lies past the end must not count
    torch.testing.assert_close(model.stem_features(x, lengths), reference(x, lengths).transpose(1, 2))


def test_kernel_tokens_are_standardised_features_embedded_the_whole_series_onto_the_class_token():
    model = kernel_model()
    torch.manual_seed(7)
    x, lengths = torch.randn(3, 2, 30), torch.tensor([30, 17, 6])
    x[1, :, 17:] = 50.0
    f = model.kernels(x, lengths).transpose(1, 2)                      # (B, 1 + L, F)
    emb = linear((f - model.feature_mean) / model.feature_std, model.patch_embed.proj)
    pos = model.pos.pos_embed[0]
    z, mask = model.tokens(x, lengths)
    torch.testing.assert_close(z[:, 0], model.prefix.cls_token[0, 0] + pos[0] + emb[:, 0])
    torch.testing.assert_close(z[:, 1:], emb[:, 1:] + pos[1:])
    assert torch.equal(mask, mask_by_hand(lengths, 30, model.config))
    # Features computed once stand in for the series, in tokens() and in forward().
    z_f, mask_f = model.tokens(None, lengths, features=model.stem_features(x, lengths))
    torch.testing.assert_close(z_f, z)
    assert torch.equal(mask_f, mask)
    torch.testing.assert_close(model(None, lengths, features=f), model(x, lengths))


def test_stem_calls_refuse_a_model_without_the_kernel_stem():
    model = build()
    with pytest.raises(ValueError, match=exactly("stem_features needs stem='kernels'")):
        model.stem_features(torch.randn(1, 3, 23))
    with pytest.raises(ValueError, match=exactly("features are the kernel stem's; this model's stem is 'patches'")):
        model.tokens(None, features=torch.zeros(1, 7, 84))


def test_stem_features_check_their_inputs():
    model = kernel_model()
    with pytest.raises(ValueError, match=exactly("lengths must have shape (3,), got (3, 1)")):
        model.stem_features(torch.randn(3, 2, 30), torch.full((3, 1), 30))


# --- refusals of wrong inputs ------------------------------------------------------------------------

@pytest.mark.parametrize("series, lengths, error, message", [
    (torch.zeros(2, 3, 23, 1), None, ValueError,
     "expected series of shape (B, 3, T) (channels fixed at 3), got (2, 3, 23, 1)"),
    (torch.zeros(2, 4, 23), None, ValueError, "expected series of shape (B, 3, T) (channels fixed at 3), got (2, 4, 23)"),
    (torch.zeros(2, 3, 24), None, ValueError, "series of 24 steps is longer than the 23 this model takes"),
    (torch.ones(2, 3, 23, dtype=torch.int64), None, TypeError,
     "series must be a floating-point tensor, got dtype torch.int64"),
    (torch.zeros(2, 3, 23), torch.full((2, 1), 23), ValueError, "lengths must have shape (2,), got (2, 1)"),
    (torch.zeros(2, 3, 23), torch.full((3,), 23), ValueError, "lengths must have shape (2,), got (3,)"),
])
def test_wrong_inputs_are_refused_with_the_exact_reason(series, lengths, error, message):
    model = build()
    with pytest.raises(error, match=exactly(message)):
        model(series, lengths)


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
def test_forward_with_attention_gives_the_forwards_logits_and_the_weights_asked(pool):
    model = build(pool=pool, patching="channel")
    x, lengths = torch.randn(3, 3, 23), torch.tensor([23, 12, 3])
    logits = model(x, lengths)
    z, mask = model.tokens(x, lengths)
    every_logits, every = model.forward_with_attention(x, lengths)  # default: every layer
    torch.testing.assert_close(every_logits, logits)
    assert len(every) == 2 and every[0].shape == (3, 2, 19, 19)
    torch.testing.assert_close(every[0], layer0_weights(model, z, mask))
    # The second series (12 steps) has patches 0 to 2 of each channel: no query looks at the others.
    assert (every[1][1, :, :, 1:].unflatten(-1, (3, 6))[..., 3:] == 0).all()
    one_logits, one = model.forward_with_attention(x, lengths, [1])
    torch.testing.assert_close(one_logits, logits)
    assert len(one) == 1
    torch.testing.assert_close(one[0], every[1])
    # forward(return_attention=...) is the same call, lengths included.
    via_forward_logits, via_forward = model(x, lengths, return_attention=[1])
    torch.testing.assert_close(via_forward_logits, logits)
    assert len(via_forward) == 1
    torch.testing.assert_close(via_forward[0], every[1])


def test_on_layer_receives_each_asked_layers_weights_as_they_come():
    model = build()
    x, lengths = torch.randn(2, 3, 23), torch.tensor([23, 5])
    handed = []
    logits, kept = model.forward_with_attention(x, lengths, [1, 0], on_layer=lambda i, w: handed.append((i, w)))
    assert kept == [] and [i for i, _ in handed] == [0, 1]  # in the order the layers run
    _, every = model.forward_with_attention(x, lengths)
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


# --- devices ----------------------------------------------------------------------------------------------

class MetaScalars(TorchDispatchMode):
    """Answers `bool()` of a meta tensor (no data: torch refuses) with False: tokens() then takes
    the masked path, whose every tensor must be made on the series' device."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default and args[0].device.type == "meta":
            return False
        return func(*args, **(kwargs or {}))


def test_every_tensor_the_input_head_makes_lands_on_the_series_device():
    """The meta device stands in for an accelerator: a tensor made on the CPU instead meets a meta one
    and torch refuses to mix them. Lengths may come on the CPU."""
    with torch.device("meta"):
        model = SeriesTransformer(SeriesConfig(**{**SMALL, "token_drop": 0.3}))
    series = torch.randn(2, 3, 23, device="meta")
    assert model._patch_tokens(series, torch.tensor([23, 7])).device.type == "meta"
    with MetaScalars():
        for train in (False, True):
            model.train(train)
            for lengths in (None, torch.tensor([23, 7])):
                z, mask = model.tokens(series, lengths)
                assert z.device.type == mask.device.type == "meta"
                assert mask.shape == (2, 7) and mask.dtype == torch.bool
