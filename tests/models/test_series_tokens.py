"""The series transformer's input head against closed forms computed from its own parameters: the
zero padding to whole patches, the patches every `stride` steps, patch embedding plus channel vector
plus time position, the key-padding mask from the lengths, patch and position dropout in training,
and the device every tensor lands on."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from anyformer.models import SeriesConfig, SeriesTransformer

from .series_by_hand import SMALL, build, linear, mask_by_hand, patches_by_hand

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
    model = build(patching="channel", token_drop=0.3).train()  # not 0.5, where a rate and its complement agree
    x = torch.randn(3, 3, 23)
    torch.manual_seed(4)
    _, mask = model.tokens(x)
    assert torch.equal(mask, torch.cat([torch.ones(3, 1, dtype=torch.bool), (draws >= 0.3).repeat(1, 3)], dim=1))


def test_training_drops_out_the_positioned_tokens():
    model = build(dropout=0.4)
    x = torch.randn(2, 3, 23)
    z, _ = model.tokens(x)
    torch.manual_seed(5)
    dropped, _ = model.train().tokens(x)
    torch.manual_seed(5)
    keep = (torch.rand_like(z) >= 0.4) / 0.6
    torch.testing.assert_close(dropped, z * keep)


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
