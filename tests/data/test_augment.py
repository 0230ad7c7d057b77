"""Batched augmentation: shapes, determinism, semantics and speed."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from anyformer.data import (random_affine, random_crop_flip, random_elastic, random_erasing, random_resized_crop_flip,
                            random_stroke_width, read_idx)

SHARED = Path(os.environ.get("ANYFORMER_SHARED_DATA", Path(__file__).resolve().parents[2].parent / "shared" / "data"))


@pytest.fixture(scope="module")
def digits() -> torch.Tensor:
    """256 real MNIST test digits as float (B, 1, 28, 28) in [0, 1]."""
    x = torch.from_numpy(read_idx(SHARED / "mnist" / "t10k-images-idx3-ubyte.gz")[:256])
    return x[:, None].float() / 255


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _center_of_mass(x: torch.Tensor) -> torch.Tensor:
    """(B, 2) row/col centre of mass in pixels."""
    b, _, h, w = x.shape
    m = x.sum(1)
    total = m.sum((1, 2))
    rows = (m.sum(2) * torch.arange(h)).sum(1) / total
    cols = (m.sum(1) * torch.arange(w)).sum(1) / total
    return torch.stack([rows, cols], 1)


# --------------------------------------------------------------------------- random_affine


def test_affine_shape_dtype_determinism(digits: torch.Tensor) -> None:
    a = random_affine(digits, generator=_gen(1))
    b = random_affine(digits, generator=_gen(1))
    c = random_affine(digits, generator=_gen(2))
    assert a.shape == digits.shape and a.dtype == digits.dtype
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    # Every sample moves, and by a plausible amount (not wiped out).
    diff = (a - digits).abs().flatten(1).mean(1)
    assert (diff > 1e-3).all()
    assert a.sum((1, 2, 3)).div(digits.sum((1, 2, 3))).sub(1).abs().max() < 0.35
    h = random_affine(digits.double(), generator=_gen(1))
    assert h.dtype == torch.float64


def test_affine_identity_when_disabled(digits: torch.Tensor) -> None:
    y = random_affine(digits, max_shift=0, max_rotate_deg=0, scale=(1, 1), generator=_gen(0))
    torch.testing.assert_close(y, digits, atol=1e-5, rtol=0)


def test_affine_shift_is_a_fraction_of_the_size(digits: torch.Tensor) -> None:
    # Pure translation moves the centre of mass by at most max_shift * size pixels
    # per axis (plus a little for content pushed past the border).
    y = random_affine(digits, max_shift=0.1, max_rotate_deg=0, scale=(1, 1), generator=_gen(3))
    delta = _center_of_mass(y) - _center_of_mass(digits)
    assert delta.abs().max() <= 2.8 + 0.3
    assert delta.abs().max() > 2.0  # the full range is actually used
    assert (delta[:, 0] > 0).any() and (delta[:, 0] < 0).any()


def test_affine_rotation_on_non_square_keeps_shape() -> None:
    # A centred disc is rotation invariant; the aspect correction must keep it a disc.
    h, w = 24, 48
    yy, xx = torch.meshgrid(torch.arange(h) - (h - 1) / 2, torch.arange(w) - (w - 1) / 2, indexing="ij")
    disc = ((yy**2 + xx**2) <= 8**2).float()[None, None].repeat(16, 1, 1, 1)
    y = random_affine(disc, max_shift=0, max_rotate_deg=45, scale=(1, 1), generator=_gen(4))
    assert (y - disc).abs().mean() < 0.02


def test_affine_fill_value() -> None:
    x = torch.full((8, 1, 10, 10), -0.5)
    y = random_affine(x, max_shift=0.3, max_rotate_deg=30, scale=(0.7, 0.8), generator=_gen(5), fill=-0.5)
    torch.testing.assert_close(y, x)  # background stays background


def test_affine_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="floating"):
        random_affine(torch.zeros(2, 1, 4, 4, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"\(B, C, H, W\)"):
        random_affine(torch.zeros(1, 4, 4))
    with pytest.raises(ValueError, match="fraction"):
        random_affine(torch.zeros(2, 1, 4, 4), max_shift=2)


# --------------------------------------------------------------------------- random_crop_flip


def _reference_crop_flip(x: torch.Tensor, pad: int, gen_seed: int, mode: str) -> torch.Tensor:
    """Loop version with the same random draws, to check the vectorised gather."""
    g = _gen(gen_seed)
    b, _, h, w = x.shape
    xp = F.pad(x, (pad,) * 4, mode="reflect" if mode == "reflect" else "constant")
    offs = torch.randint(0, 2 * pad + 1, (b, 2), generator=g)
    flips = torch.rand(b, 1, generator=g) < 0.5
    out = []
    for i in range(b):
        oy, ox = offs[i].tolist()
        crop = xp[i, :, oy : oy + h, ox : ox + w]
        out.append(crop.flip(-1) if flips[i] else crop)
    return torch.stack(out)


@pytest.mark.parametrize("mode", ["reflect", "zeros"])
def test_crop_flip_matches_loop_reference(mode: str) -> None:
    x = torch.rand(32, 3, 32, 32, generator=_gen(0))
    y = random_crop_flip(x, pad=4, generator=_gen(7), padding_mode=mode)
    torch.testing.assert_close(y, _reference_crop_flip(x, 4, 7, mode), rtol=0, atol=0)


def _same_seed_same_batch(augment, x: torch.Tensor) -> torch.Tensor:
    """`augment(x)` by seed 1, checked: x's shape and dtype, the same again by seed 1, another by seed 2."""
    a = augment(x, generator=_gen(1))
    assert a.shape == x.shape and a.dtype == x.dtype
    assert torch.equal(a, augment(x, generator=_gen(1)))
    assert not torch.equal(a, augment(x, generator=_gen(2)))
    return a


def test_crop_flip_shape_dtype_determinism() -> None:
    x = torch.rand(64, 3, 32, 32, generator=_gen(0))
    a = _same_seed_same_batch(random_crop_flip, x)
    changed = (a != x).flatten(1).any(1)
    assert changed.float().mean() > 0.9  # 1/81 * 1/2 chance per sample to be the identity


def test_flip_only() -> None:
    x = torch.rand(64, 3, 8, 8, generator=_gen(0))
    y = random_crop_flip(x, pad=0, flip=True, generator=_gen(3))
    same = (y == x).flatten(1).all(1)
    mirrored = (y == x.flip(-1)).flatten(1).all(1)
    assert (same | mirrored).all()
    assert same.sum() > 10 and mirrored.sum() > 10
    assert torch.equal(random_crop_flip(x, pad=0, flip=False), x)


def test_crop_flip_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="reflect padding"):
        random_crop_flip(torch.zeros(1, 1, 4, 4), pad=4)
    with pytest.raises(ValueError, match="padding_mode"):
        random_crop_flip(torch.zeros(1, 1, 8, 8), padding_mode="wrap")


def test_resized_crop_whole_image_is_the_identity_or_its_mirror() -> None:
    x = torch.rand(64, 3, 8, 8, generator=_gen(0))
    y = random_resized_crop_flip(x, scale=(1, 1), ratio=(1, 1), generator=_gen(3))
    same = torch.isclose(y, x, atol=1e-6).flatten(1).all(1)
    mirrored = torch.isclose(y, x.flip(-1), atol=1e-6).flatten(1).all(1)
    assert (same | mirrored).all()
    assert same.sum() > 10 and mirrored.sum() > 10
    plain = random_resized_crop_flip(x, scale=(1, 1), ratio=(1, 1), flip=False, generator=_gen(3))
    torch.testing.assert_close(plain, x, rtol=0, atol=1e-6)


@pytest.mark.parametrize(("area", "aspect"), [(0.25, 1.0), (0.36, 4 / 3), (0.5, 3 / 4)])
def test_resized_crop_stretches_by_the_crop_sides(area: float, aspect: float) -> None:
    # A ramp across the columns (and one down the rows): a crop of width sw (a fraction of the image)
    # scaled back to the full width steps sw times as fast, mirrored or not; the rows by sh.
    h = w = 32
    cols = torch.arange(w, dtype=torch.float32).expand(h, w)
    x = torch.stack([cols, cols.t().contiguous()])[None].repeat(16, 1, 1, 1)
    y = random_resized_crop_flip(x, scale=(area, area), ratio=(aspect, aspect), generator=_gen(5))
    sw, sh = math.sqrt(area * aspect), math.sqrt(area / aspect)
    step_x = (y[:, 0, :, 1:] - y[:, 0, :, :-1]).abs().mean((1, 2))
    step_y = (y[:, 1, 1:, :] - y[:, 1, :-1, :]).abs().mean((1, 2))
    torch.testing.assert_close(step_x, torch.full_like(step_x, sw), rtol=0, atol=1e-4)
    torch.testing.assert_close(step_y, torch.full_like(step_y, sh), rtol=0, atol=1e-4)
    # The crop lies inside the image: no value beyond the ramp's ends.
    assert y.min() >= 0 and y.max() <= w - 1


def test_resized_crop_shape_dtype_determinism() -> None:
    _same_seed_same_batch(random_resized_crop_flip, torch.rand(32, 3, 16, 16, generator=_gen(0)))


def test_resized_crop_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="scale must be"):
        random_resized_crop_flip(torch.zeros(1, 1, 8, 8), scale=(0.5, 1.5))
    with pytest.raises(ValueError, match="ratio must be"):
        random_resized_crop_flip(torch.zeros(1, 1, 8, 8), ratio=(0.0, 1.0))
    with pytest.raises(ValueError, match="floating point"):
        random_resized_crop_flip(torch.zeros(1, 1, 8, 8, dtype=torch.uint8))


def test_erasing_replaces_one_rectangle_within_the_area_and_ratio_bounds() -> None:
    # p=1: every picture has exactly one erased rectangle; its pixels are noise (never the constant 5 there
    # before), its sides give an area within the bounds and fit the picture, and nothing outside it moved.
    x = torch.full((256, 2, 20, 30), 5.0)
    y = random_erasing(x, p=1.0, area=(0.05, 0.2), ratio=(0.5, 2.0), generator=_gen(1))
    changed = (y != x).any(1)  # (B, H, W)
    assert changed.flatten(1).any(1).all()
    for mask in changed:
        rows, cols = mask.any(1).nonzero().flatten(), mask.any(0).nonzero().flatten()
        eh, ew = int(rows[-1] - rows[0] + 1), int(cols[-1] - cols[0] + 1)
        assert mask[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1].all() and int(mask.sum()) == eh * ew  # a rectangle
        # Whole-pixel sides round a drawn area of 0.05-0.2 of 600 pixels by at most half a pixel a side.
        assert (math.sqrt(0.05 * 600) - 0.5) ** 2 <= eh * ew <= (math.sqrt(0.2 * 600) + 0.5) ** 2
        assert 0.5 * 0.6 <= eh / ew <= 2.0 / 0.6  # the ratio, give or take the rounding on small sides
    noise = y[(y != x)]
    assert abs(float(noise.mean())) < 0.1 and abs(float(noise.std()) - 1) < 0.1  # standard normal noise


def test_erasing_erases_about_p_of_the_pictures_and_p0_is_the_identity() -> None:
    x = torch.zeros(2000, 1, 8, 8)
    share = (random_erasing(x, p=0.25, generator=_gen(2)) != 0).flatten(1).any(1).float().mean()
    assert abs(float(share) - 0.25) < 0.04
    assert random_erasing(x, p=0.0, generator=_gen(2)) is x


def test_erasing_shape_dtype_determinism() -> None:
    _same_seed_same_batch(lambda x, generator: random_erasing(x, p=0.5, generator=generator),
                          torch.rand(32, 3, 16, 16, generator=_gen(0)))


def test_erasing_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="p is a probability"):
        random_erasing(torch.zeros(1, 1, 8, 8), p=1.5)
    with pytest.raises(ValueError, match="area must be"):
        random_erasing(torch.zeros(1, 1, 8, 8), area=(0.0, 0.3))
    with pytest.raises(ValueError, match="ratio must be"):
        random_erasing(torch.zeros(1, 1, 8, 8), ratio=(2.0, 1.0))
    with pytest.raises(ValueError, match="floating point"):
        random_erasing(torch.zeros(1, 1, 8, 8, dtype=torch.uint8))


# --------------------------------------------------------------------------- random_stroke_width


def test_stroke_width_thickens_or_thins_each_digit_by_a_share_of_a_pixel(digits: torch.Tensor) -> None:
    # p=1: every digit moves one way, by a share in [0, 1) of the way to its 3x3 maximum (thicker light strokes on
    # MNIST's black) or minimum (thinner), both ways about equally often, the share spread over the range.
    y = random_stroke_width(digits, p=1.0, generator=_gen(3))
    dilated = F.max_pool2d(digits, 3, stride=1, padding=1)
    eroded = -F.max_pool2d(-digits, 3, stride=1, padding=1)
    thicker = (y >= digits).flatten(1).all(1)
    thinner = (y <= digits).flatten(1).all(1)
    assert bool((thicker | thinner).all()) and 0.4 < float(thicker.float().mean()) < 0.6
    target = torch.where(thicker[:, None, None, None], dilated, eroded)
    gap = (target - digits).flatten(1)
    share = ((y - digits).flatten(1) * gap).sum(1) / (gap * gap).sum(1)  # how far along the way to the filter
    assert torch.allclose(y, digits + share[:, None, None, None] * (target - digits), atol=1e-6)
    assert float(share.min()) >= 0 and float(share.max()) < 1 and float(share.std()) > 0.2  # uniform: std 0.29
    ink = y.flatten(1).sum(1) - digits.flatten(1).sum(1)
    assert bool((ink[thicker & (share > 0.1)] > 0).all()) and bool((ink[thinner & (share > 0.1)] < 0).all())


def test_stroke_width_changes_about_p_of_the_pictures_and_p0_is_the_identity(digits: torch.Tensor) -> None:
    x = digits.repeat(8, 1, 1, 1)
    share = (random_stroke_width(x, p=0.25, generator=_gen(4)) != x).flatten(1).any(1).float().mean()
    assert abs(float(share) - 0.25) < 0.04
    assert random_stroke_width(x, p=0.0, generator=_gen(4)) is x


def test_stroke_width_commutes_with_a_positive_normalisation(digits: torch.Tensor) -> None:
    # The trainer applies it to normalised pixels: (x - mean) / std with std > 0 keeps the filters' order.
    mean, std = 0.13, 0.31
    a = random_stroke_width((digits - mean) / std, p=0.5, generator=_gen(5))
    b = (random_stroke_width(digits, p=0.5, generator=_gen(5)) - mean) / std
    assert torch.allclose(a, b, atol=1e-5)


def test_stroke_width_shape_dtype_determinism(digits: torch.Tensor) -> None:
    _same_seed_same_batch(lambda x, generator: random_stroke_width(x, p=0.5, generator=generator), digits[:32])


def test_stroke_width_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="p is a probability"):
        random_stroke_width(torch.zeros(1, 1, 8, 8), p=-0.1)
    with pytest.raises(ValueError, match="floating point"):
        random_stroke_width(torch.zeros(1, 1, 8, 8, dtype=torch.uint8))


# --------------------------------------------------------------------------- random_elastic


def _moves(h: int, w: int, seed: int, **kw) -> tuple[torch.Tensor, torch.Tensor]:
    """The displacement, in pixels along each axis, that random_elastic gives each pixel of 64 pictures: read
    through pictures whose values are their own column (row) index, which bilinear resampling reproduces."""
    cols = torch.arange(w, dtype=torch.float64).expand(64, 1, h, w)
    rows = torch.arange(h, dtype=torch.float64)[:, None].expand(64, 1, h, w)
    # The same seed draws the same field for both, so they read one displacement's two axes.
    return (random_elastic(cols, generator=_gen(seed), **kw) - cols,
            random_elastic(rows, generator=_gen(seed), **kw) - rows)


def test_elastic_moves_pixels_by_a_smooth_field_of_the_asked_size() -> None:
    # p=1: about 1.4 px a pixel on 28 x 28 (magnitude 1.4/28 of the side), neighbours moving nearly alike,
    # pixels far apart independently; on a wide picture each axis scaled by its own side.
    dx, dy = _moves(28, 28, 7, p=1.0)
    inner = (slice(None), 0, slice(4, 24), slice(4, 24))  # away from the border, where moves are clamped
    for d in (dx[inner], dy[inner]):
        assert 0.8 < float(d.std()) < 1.6
        step = (d[:, :, 1:] - d[:, :, :-1]).std()
        assert float(step) < 0.25 * float(d.std())  # smooth: a pixel's neighbour moves nearly alike
        far = torch.corrcoef(torch.stack([d[:, :, 0].flatten(), d[:, :, 19].flatten()]))[0, 1]
        assert abs(float(far)) < 0.3  # 19 px apart: unrelated
    wide_x, wide_y = _moves(28, 56, 7, p=1.0)
    assert 1.6 < float(wide_x[:, 0, 4:24, 8:48].std()) / float(wide_y[:, 0, 4:24, 8:48].std()) < 2.5
    still, _ = _moves(28, 28, 7, p=1.0, magnitude=0.0)
    assert float(still.abs().max()) < 1e-9


def test_elastic_distorts_about_p_of_the_pictures_and_leaves_the_rest_bit_for_bit(digits: torch.Tensor) -> None:
    x = digits.repeat(4, 1, 1, 1)
    y = random_elastic(x, p=0.25, generator=_gen(8))
    changed = (y != x).flatten(1).any(1)
    assert abs(float(changed.float().mean()) - 0.25) < 0.06
    assert torch.equal(y[~changed], x[~changed])
    # A digit is bent, not wiped out or doubled: its ink grows where the field stretches it and shrinks where it
    # squeezes, by about a tenth in the median, never twice over.
    ink = (y[changed].flatten(1).sum(1) / x[changed].flatten(1).sum(1) - 1).abs()
    assert 0.02 < float(ink.median()) < 0.2 and float(ink.max()) < 1
    assert random_elastic(x, p=0.0, generator=_gen(8)) is x


def test_elastic_shape_dtype_determinism(digits: torch.Tensor) -> None:
    _same_seed_same_batch(lambda x, generator: random_elastic(x, p=0.5, generator=generator), digits[:32])


def test_elastic_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="p is a probability"):
        random_elastic(torch.zeros(1, 1, 8, 8), p=1.5)
    with pytest.raises(ValueError, match="spacing in"):
        random_elastic(torch.zeros(1, 1, 8, 8), spacing=0.0)
    with pytest.raises(ValueError, match="floating point"):
        random_elastic(torch.zeros(1, 1, 8, 8, dtype=torch.uint8))


# --------------------------------------------------------------------------- speed
