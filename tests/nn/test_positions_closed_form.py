"""Position tables against their formulas in float64 (sinusoids of Vaswani et al., 2-D halves for a
grid, rotary angles p * base^(-2i/d)), where they are kept and in which dtype they are added; and the
patch output head, token by token."""
import math

import pytest
import torch

from anyformer.nn import RotaryEmbedding, SinusoidalPosition
from anyformer.nn.heads import PatchOutput
from anyformer.nn.positions import sinusoidal_1d, sinusoidal_2d


def vaswani(p: int, i: int, width: int, base: float) -> float:
    angle = p * base ** (-(i - i % 2) / width)
    return math.sin(angle) if i % 2 == 0 else math.cos(angle)


def test_the_1d_table_is_sin_on_even_and_cos_on_odd_channels_to_float32_rounding():
    table = sinusoidal_1d(3000, 6, base=50.0)
    for p in (0, 1, 7, 2999):  # large positions: angles computed in fp32 would be off by ~1e-4
        expected = torch.tensor([vaswani(p, i, 6, 50.0) for i in range(6)])
        torch.testing.assert_close(table[p], expected, atol=1e-7, rtol=0)
    assert table.dtype == torch.float32
    with pytest.raises(ValueError, match="sinusoidal positions need an even width, got 5"):
        sinusoidal_1d(4, 5)


def test_the_2d_table_gives_half_the_channels_to_the_row_and_half_to_the_column():
    table = sinusoidal_2d(3, 5, 8, base=20.0)
    assert table.shape == (15, 8)
    for r, c in ((0, 0), (1, 3), (2, 4)):
        row = [vaswani(r, i, 4, 20.0) for i in range(4)]
        col = [vaswani(c, i, 4, 20.0) for i in range(4)]
        torch.testing.assert_close(table[r * 5 + c], torch.tensor(row + col), atol=1e-7, rtol=0)
    with pytest.raises(ValueError, match="2-D sinusoidal positions need a width divisible by 4, got 6"):
        sinusoidal_2d(2, 2, 6)


def test_sinusoidal_positions_give_prefix_tokens_zeros_and_are_added_in_the_tokens_dtype():
    pos = SinusoidalPosition(5, 4, prefix=2)
    assert pos.length == 5 and "table" not in pos.state_dict()  # fixed: not a weight
    assert torch.equal(pos.table[0, :2], torch.zeros(2, 4))
    torch.testing.assert_close(pos.table[0, 2:], sinusoidal_1d(3, 4))
    x = torch.randn(2, 5, 4, dtype=torch.bfloat16)
    out = pos(x)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, x + pos.table.to(torch.bfloat16))
    grid = SinusoidalPosition(7, 8, grid=(2, 3), prefix=1)
    torch.testing.assert_close(grid.table[0, 1:], sinusoidal_2d(2, 3, 8))


def test_rotary_tables_hold_cos_and_sin_of_position_times_frequency_to_float32_rounding():
    rope = RotaryEmbedding(4, max_len=5000, base=100.0)
    assert rope.cos.shape == (5000, 2) and not rope.state_dict()  # derived from the settings, not saved
    for p in (1, 4999):
        angles = [p * 100.0 ** (-2 * i / 4) for i in range(2)]
        torch.testing.assert_close(rope.cos[p], torch.tensor([math.cos(a) for a in angles]), atol=1e-7, rtol=0)
        torch.testing.assert_close(rope.sin[p], torch.tensor([math.sin(a) for a in angles]), atol=1e-7, rtol=0)
    with pytest.raises(ValueError, match="rotary positions need an even head dimension, got 3"):
        RotaryEmbedding(3)


def test_rotary_rotates_in_the_inputs_dtype_along_the_token_axis():
    rope = RotaryEmbedding(4, max_len=16)
    t = torch.randn(1, 2, 3, 4, dtype=torch.float64)  # three tokens, two heads: the token axis is -2
    out = rope(t, offset=4)
    assert out.dtype == torch.float64
    c, s = rope.cos[4:7].double(), rope.sin[4:7].double()
    x1, x2 = t[..., 0::2], t[..., 1::2]  # channel pairs (2i, 2i + 1)
    rotated = torch.stack([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1).flatten(-2)
    torch.testing.assert_close(out, rotated)


def test_the_patch_output_makes_each_token_its_own_patch_of_a_non_square_size():
    torch.manual_seed(0)
    head = PatchOutput(8, (2, 3), 2)
    assert head.proj.out_features == 2 * 3 * 2
    tokens = torch.randn(1, 4, 8)  # a 2 x 2 grid of patches
    image = head(tokens, (2, 2))
    assert image.shape == (1, 2, 4, 6)
    values = head.proj(tokens)[0]  # token n: channels x ph x pw, row-major
    for n, (gy, gx) in enumerate(((0, 0), (0, 1), (1, 0), (1, 1))):
        patch = image[0, :, 2 * gy:2 * gy + 2, 3 * gx:3 * gx + 3]
        torch.testing.assert_close(patch, values[n].reshape(2, 2, 3))
    with pytest.raises(ValueError, match=r"expected 2\*3=6 patch tokens for grid \(2, 3\), got 4"):
        head(tokens, (2, 3))
