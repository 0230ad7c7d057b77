"""Pictures as people make them: real MNIST test digits drawn dark on light paper, framed back.

The paper digits come from scripts/paper_digits.py (the same renderer the README's figures use).
"""
from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from anyformer.data import DataError, ImagePreprocess, load_image, load_image_dataset
from anyformer.data.images.drawn import Framing, fit_framing
from tests.conftest import REPO, SHARED_DATA

_spec = importlib.util.spec_from_file_location("paper_digits", REPO / "scripts" / "paper_digits.py")
paper = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(paper)

MNIST_FRAMING = Framing(20, "mass", (14.0, 14.0), 0.1405)


@pytest.fixture(scope="module")
def mnist(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    train = load_image_dataset(str(SHARED_DATA / "mnist"), "train", cache_dir=str(cache))
    test = load_image_dataset(str(SHARED_DATA / "mnist"), "test", cache_dir=str(cache))
    return train, test


@pytest.fixture(scope="module")
def pre(mnist):
    """The preprocessing a run trained on MNIST saves, measured from a spread sample of its images."""
    train, _ = mnist
    return ImagePreprocess.from_images(train.images[::20])


def closeness(original: np.ndarray, framed: np.ndarray) -> float:
    """Correlation with the original, allowing the one-pixel shift that MNIST's own rounding of the
    centre of mass leaves (its digits sit within half a pixel of the centre, not on it)."""
    o = original.astype(np.float64)
    best = -1.0
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            f = np.roll(framed.astype(np.float64), (dy, dx), axis=(0, 1))
            best = max(best, float(np.corrcoef(o.ravel(), f.ravel())[0, 1]))
    return best


def saved(im: Image.Image, path: Path) -> Path:
    paper.save(im, path)
    return path


def test_framing_is_measured_from_the_training_images(mnist, tmp_path_factory):
    train, _ = mnist
    assert fit_framing(train.images[:3000].numpy()) == Framing(20, "mass", (14.0, 14.0), pytest.approx(0.14, abs=0.02))
    fashion = load_image_dataset(str(SHARED_DATA / "fashion-mnist"), "train", limit_per_class=200,
                                 cache_dir=str(tmp_path_factory.mktemp("cache")))
    f = fit_framing(fashion.images.numpy())
    assert (f.box, f.centre, f.at) == (28, "box", (13.5, 13.5))  # Zalando: longest edge to 28, centred box
    colour = torch.randint(0, 256, (50, 3, 32, 32), dtype=torch.uint8)
    assert fit_framing(colour.numpy()) is None  # photos keep plain resizing
    assert fit_framing(colour[:, :1].numpy()) is None  # grey, but no plain dark background


def test_ten_paper_digits_come_back_close_to_their_originals(mnist, pre, tmp_path):
    _, test = mnist
    images, labels = test.images[:, 0].numpy(), test.labels.numpy()
    rng = np.random.default_rng(0)
    for i, (style, ext) in zip(paper.first_of_each_class(images, labels), paper.STYLES):
        path = saved(paper.render(images[i], style, rng), tmp_path / f"{i}.{ext}")
        x, warning = pre.load_checked(path)
        assert x.shape == (1, 28, 28) and x.dtype == torch.uint8
        assert closeness(images[i], x[0].numpy()) > 0.9, (style, i)
        assert warning is None, (style, warning)
        # Plain fitting (scaled to cover, centre-cropped), unframed: dark on light and off-centre, far from
        # the digit (0.504 at most over the styles; squashing to 28x28 instead of cropping gave 0.489).
        assert closeness(images[i], pre.load(path, raw=True)[0].numpy()) < 0.6, (style, i)


def test_both_polarities_frame_alike(mnist, pre):
    _, test = mnist
    digit = test.images[7, 0].numpy()
    on_paper = paper.render(digit, "grey", np.random.default_rng(1))
    chalk = Image.fromarray(255 - np.asarray(on_paper))  # light strokes on a dark board
    a, b = pre.load(on_paper)[0].numpy(), pre.load(chalk)[0].numpy()
    assert closeness(digit, a) > 0.9 and closeness(digit, b) > 0.9
    assert np.abs(a.astype(int) - b.astype(int)).mean() < 8


def test_transparent_background_is_composited_behind_the_strokes(mnist, pre):
    _, test = mnist
    digit = test.images[4, 0].numpy()
    for style in ("alpha", "alpha-colour"):
        im = paper.render(digit, style, np.random.default_rng(2))
        assert np.asarray(im)[0, 0].tolist() == [0, 0, 0, 0]  # stored black where transparent
        assert closeness(digit, pre.load(im)[0].numpy()) > 0.9, style


def test_exif_orientation_is_applied(mnist, pre, tmp_path):
    _, test = mnist
    digit = test.images[61, 0].numpy()  # an 8, not symmetric under a quarter turn
    path = saved(paper.render(digit, "exif", np.random.default_rng(3)), tmp_path / "sideways.jpg")
    assert Image.open(path).getexif()[paper.ORIENTATION] == 6
    assert closeness(digit, pre.load(path)[0].numpy()) > 0.9
    sideways = Image.open(path)
    sideways.load()
    sideways.getexif().clear()  # the same pixels without the tag: framed, but lying on its side
    sideways.info.pop("exif", None)
    assert closeness(digit, pre.load(sideways.copy())[0].numpy()) < 0.6


def test_paths_files_and_pil_images_load_alike(mnist, pre, tmp_path):
    _, test = mnist
    path = saved(paper.render(test.images[3, 0].numpy(), "rgb", np.random.default_rng(4)), tmp_path / "d.png")
    from_path = pre.load(path)
    assert torch.equal(pre.load(io.BytesIO(path.read_bytes())), from_path)
    with open(path, "rb") as f:
        assert torch.equal(pre.load(f), from_path)
    assert torch.equal(pre.load(Image.open(path)), from_path)
    with pytest.raises(TypeError, match="expected an image path, a binary file object or a PIL image, got int"):
        pre.load(3)


def test_decompression_bomb_and_truncated_files_are_one_line_errors(pre, tmp_path):
    bomb = tmp_path / "bomb.png"
    Image.new("1", (12000, 12000)).save(bomb)  # 144 megapixels in a file of a few kilobytes
    assert bomb.stat().st_size < 100_000
    with pytest.raises(DataError, match=r"12000x12000 pixels is more than the 128 megapixels allowed"):
        pre.load(bomb)
    good = tmp_path / "good.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (300, 300), dtype=np.uint8)).save(good)
    cut = tmp_path / "cut.png"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(DataError, match=r"cannot read image .*cut.png: .*truncated"):
        pre.load(cut)


def test_empty_and_strange_pictures_get_a_warning(pre):
    blank = Image.new("RGB", (400, 300), (235, 232, 220))
    x, warning = pre.load_checked(blank)
    assert x.sum() == 0 and "no drawing found" in warning
    page = np.full((300, 400), 230, np.uint8)
    page[60:240, 80:330] = 25  # a thumb over the lens: ink everywhere, nothing like a digit
    x, warning = pre.load_checked(Image.fromarray(page))
    assert warning is not None and "unlike the training images" in warning, warning


def test_a_picture_already_framed_like_training_is_left_as_it_is(mnist, pre, tmp_path):
    _, test = mnist
    for i in range(20):
        path = tmp_path / f"{i}.png"
        Image.fromarray(test.images[i, 0].numpy()).save(path)
        assert torch.equal(pre.load(path), test.images[i]), i


def test_a_run_saved_before_framing_loads_as_it_did(pre, tmp_path):
    old = {k: v for k, v in pre.to_dict().items() if k not in ("framing", "stats")}
    before = ImagePreprocess.from_dict(old)
    assert before.framing is None and before.stats is None
    im = Image.fromarray(np.random.default_rng(0).integers(0, 255, (40, 50, 3), dtype=np.uint8))
    assert torch.equal(before.load(im), load_image(im, 1, 28))
    again = ImagePreprocess.from_dict(pre.to_dict())
    assert again.framing == pre.framing and again.stats == pre.stats


@pytest.mark.slow
def test_a_classifier_reads_paper_digits_about_as_well_as_the_originals(mnist, pre, one_thread):
    """End to end: a tiny ViT trained here on 6,000 real MNIST training digits scores held-out test
    digits; their paper versions, framed back, score about the same. Plain resizing scores near chance."""
    import anyformer as af
    train, test = mnist
    torch.manual_seed(0)
    from anyformer.models.vit import ViTConfig
    model = af.ViT(ViTConfig(image_size=28, patch_size=7, in_chans=1, num_classes=10, width=48, depth=2,
                                heads=4, mlp_hidden=96))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x_all, y_all = pre(train.images[:6000]), train.labels[:6000]
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        for idx in torch.randperm(6000, generator=g).split(50):
            loss = torch.nn.functional.cross_entropy(model(x_all[idx]), y_all[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    # 300 digits: with 100 and a model at about 60%, the gap between two processors' kernels (their
    # rounding trains another model) moved the comparison by 9 points, past the tolerance.
    n, rng = 300, np.random.default_rng(5)
    originals = test.images[1000:1000 + n]
    pictures = [paper.render(d, paper.STYLES[k % 10][0], rng) for k, d in enumerate(originals[:, 0].numpy())]
    framed = torch.stack([pre.load(p) for p in pictures])
    plain = torch.stack([pre.load(p, raw=True) for p in pictures])
    labels = test.labels[1000:1000 + n]
    with torch.no_grad():
        acc = [float((model(pre(x)).argmax(-1) == labels).float().mean()) for x in (originals, framed, plain)]
    # A few seconds of training reach about 60% (chance is 10%); the claim is the comparison.
    assert acc[0] > 0.45, acc
    assert acc[1] >= acc[0] - 0.08, f"originals {acc[0]:.2f}, paper framed {acc[1]:.2f}"
    assert acc[2] < acc[0] - 0.25, f"plain resizing of paper digits scored {acc[2]:.2f} vs {acc[0]:.2f}"
