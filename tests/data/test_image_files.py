"""Image folders and tars of image files, the decoded-dataset cache, single images and the
ImageDataset checks."""

from __future__ import annotations

import tarfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from anyformer.data import DataError, DataWarning, ImageDataset, load_image, load_image_dataset
from anyformer.data.images import folders as image_files
from tests.data.conftest import check_well_formed


# --------------------------------------------------------------------------- image folders


def _png(path: Path, mode: str = "L", size: tuple[int, int] = (6, 8), color: int | tuple = 0) -> None:
    """Write a PNG; size is (W, H) as Pillow takes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, color).save(path)


def test_folder_grayscale(tmp_path: Path) -> None:
    root = tmp_path / "shapes"
    for i in range(3):
        _png(root / "zeta" / f"{i}.png", color=200 + i)
        _png(root / "alpha" / f"{i}.png", color=10 + i)
    (root / "alpha" / "notes.txt").write_text("not an image")
    _png(root / "alpha" / ".hidden.png", color=99)
    with pytest.warns(DataWarning, match=r"skipped 2 files that are not images in .*: alpha/.hidden.png, "
                                         r"alpha/notes.txt$"):
        ds = load_image_dataset(str(root), cache_dir=tmp_path / "c")
    check_well_formed(ds, 6, (1, 8, 6))
    assert ds.classes == ["alpha", "zeta"] and ds.name == "shapes"
    assert ds.labels.tolist() == [0, 1, 0, 1, 0, 1]  # classes interleaved
    assert ds.images[:, 0, 0, 0].tolist() == [10, 200, 11, 201, 12, 202]


def test_folder_mixed_modes_become_rgb(tmp_path: Path) -> None:
    root = tmp_path / "mixed"
    _png(root / "a" / "gray.png", "L", color=77)
    _png(root / "b" / "rgb.jpg", "RGB", color=(255, 0, 0))
    _png(root / "b" / "rgba.png", "RGBA", color=(0, 255, 0, 128))
    ds = load_image_dataset(str(root), cache_dir=tmp_path / "c")
    check_well_formed(ds, 3, (3, 8, 6))
    assert ds.images[0, :, 0, 0].tolist() == [77, 77, 77]  # grey replicated
    r, g, b = ds.images[1, :, 4, 3].tolist()
    assert r > 240 and g < 15 and b < 15  # JPEG is lossy
    assert ds.images[2, :, 0, 0].tolist() == [127, 255, 127]  # half-transparent green laid on white


def test_folder_size_mismatch_and_resize(tmp_path: Path) -> None:
    # Images of two sizes were refused (asking for an image_size the command line did not offer); now
    # a size is derived from them: the median shorter side (8) clamped to 16, and the reason kept.
    root = tmp_path / "sizes"
    _png(root / "a" / "0.png", size=(6, 8))
    _png(root / "b" / "odd.png", size=(10, 10), color=255)
    ds = load_image_dataset(str(root), cache_dir=tmp_path / "c")
    check_well_formed(ds, 2, (1, 16, 16))
    assert ds.derived_size is not None and ds.derived_size.startswith("16x16: 2 sizes from 8x6 to 10x10")
    assert ds.images[1].min().item() == 255
    ds = load_image_dataset(str(root), cache_dir=tmp_path / "c", image_size=(5, 4))
    check_well_formed(ds, 2, (1, 5, 4))
    assert ds.images[1].min().item() == 255 and ds.derived_size is None


def test_folder_unreadable_image(tmp_path: Path) -> None:
    root = tmp_path / "bad"
    _png(root / "a" / "ok.png")
    (root / "b").mkdir()
    (root / "b" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nthis is not really a png")
    # Refused whole before; now the broken image is skipped and named, and the rest loads.
    with pytest.warns(DataWarning, match=r"skipped 1 unreadable image in .*bad: b/broken.png \(not an image"):
        ds = load_image_dataset(str(root), cache_dir=tmp_path / "c")
    check_well_formed(ds, 1, (1, 8, 6))
    assert ds.unreadable == [("b/broken.png", "not an image format Pillow reads (PNG, JPEG, ...)")]
    (root / "a" / "ok.png").write_bytes(b"GIF89a cut short")
    with pytest.raises(DataError, match=r"^no readable images in .*bad: all 2 failed to decode \(first: a/ok.png"):
        load_image_dataset(str(root), cache_dir=tmp_path / "c")


def test_folder_split_layout_with_wrapper(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    _png(root / "wrapper" / "train" / "cat" / "0.png", color=1)
    _png(root / "wrapper" / "train" / "dog" / "0.png", color=2)
    _png(root / "wrapper" / "test" / "dog" / "0.png", color=3)  # test lacks "cat"
    train = load_image_dataset(str(root), "train", cache_dir=tmp_path / "c")
    test = load_image_dataset(str(root), "test", cache_dir=tmp_path / "c")
    assert train.classes == test.classes == ["cat", "dog"]  # labels agree across splits
    assert train.labels.tolist() == [0, 1] and test.labels.tolist() == [1]
    assert test.images[0, 0, 0, 0].item() == 3


def test_folder_layout_errors(tmp_path: Path) -> None:
    flat = tmp_path / "flat"
    _png(flat / "cls" / "0.png")
    with pytest.raises(DataError, match="no train/ and test/ subfolders"):
        load_image_dataset(str(flat), "test", cache_dir=tmp_path / "c")
    mixed = tmp_path / "mixed"
    _png(mixed / "a" / "0.png")
    _png(mixed / "b" / "1.png")
    _png(mixed / "stray.png")
    with pytest.raises(DataError, match="'stray.png' does not fit"):
        load_image_dataset(str(mixed), cache_dir=tmp_path / "c")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="no images found"):
        load_image_dataset(str(empty), cache_dir=tmp_path / "c")


def test_folder_tar_equivalent(tmp_path: Path) -> None:
    root = tmp_path / "pics"
    for cls, v in (("x", 5), ("y", 9)):
        for i in range(4):
            _png(root / "train" / cls / f"{i:02d}.png", color=v + i)
    with tarfile.open(tmp_path / "pics.tar.gz", "w:gz") as tf:
        tf.add(root, arcname="pics")
    a = load_image_dataset(str(root), "train", cache_dir=tmp_path / "c", limit_per_class=3)
    b = load_image_dataset(str(tmp_path / "pics.tar.gz"), "train", cache_dir=tmp_path / "c", limit_per_class=3)
    assert torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels) and a.classes == b.classes
    assert a.images[:, 0, 0, 0].tolist() == [5, 9, 6, 10, 7, 11]  # classes interleaved
    assert b.name == "pics"


# --------------------------------------------------------------------------- cache


def test_cache_hit_miss_and_corruption(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "cached"
    for i in range(3):
        _png(root / "a" / f"{i}.png", color=i)
    cache = tmp_path / "cache"
    first = load_image_dataset(str(root), cache_dir=cache)
    files = list((cache / "decoded").glob("*.npz"))
    assert len(files) == 1
    with np.load(files[0], allow_pickle=False) as z:  # plain arrays, no pickle needed
        assert z["images"].dtype == np.uint8 and z["images"].shape == (3, 1, 8, 6)

    real_decode = image_files.decode_images

    def no_decode(*args, **kwargs):
        raise AssertionError("decoded again instead of using the cache")

    monkeypatch.setattr(image_files, "decode_images", no_decode)
    second = load_image_dataset(str(root), cache_dir=cache)
    assert torch.equal(first.images, second.images) and torch.equal(first.labels, second.labels)
    assert second.classes == first.classes and second.name == first.name

    _png(root / "a" / "3.png", color=50)  # new file -> new key -> must decode
    with pytest.raises(AssertionError, match="decoded again"):
        load_image_dataset(str(root), cache_dir=cache)

    monkeypatch.setattr(image_files, "decode_images", real_decode)
    third = load_image_dataset(str(root), cache_dir=cache)
    assert len(third) == 4
    newest = max((cache / "decoded").glob("*.npz"), key=lambda p: p.stat().st_mtime_ns)
    newest.write_bytes(b"garbage")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = load_image_dataset(str(root), cache_dir=cache)
    assert any("unreadable dataset cache" in str(w.message) for w in caught)
    assert torch.equal(again.images, third.images)
    assert not list((cache / "decoded").glob(".*"))  # no temp files left behind


def test_cache_default_dir_and_opt_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "imgs"
    _png(root / "a" / "0.png")
    monkeypatch.setenv("ANYFORMER_CACHE", str(tmp_path / "envcache"))
    load_image_dataset(str(root), cache=False)
    assert not (tmp_path / "envcache").exists()
    load_image_dataset(str(root))
    assert len(list((tmp_path / "envcache" / "decoded").glob("imgs-train-*.npz"))) == 1


# --------------------------------------------------------------------------- single images and the dataclass


def test_load_image_converts_and_resizes(tmp_path: Path) -> None:
    p = tmp_path / "big.png"
    Image.new("RGBA", (50, 40), (255, 255, 255, 255)).save(p)
    x = load_image(p, channels=1, size=(28, 28))
    assert x.dtype == torch.uint8 and tuple(x.shape) == (1, 28, 28) and x.min().item() == 255
    g = tmp_path / "gray.jpg"
    Image.new("L", (10, 12), 128).save(g)
    y = load_image(g, channels=3, size=32)
    assert tuple(y.shape) == (3, 32, 32)
    assert torch.equal(y[0], y[1]) and torch.equal(y[1], y[2])
    assert abs(int(y[0, 5, 5]) - 128) <= 2
    grad = tmp_path / "grad.png"
    Image.fromarray(np.tile(np.arange(16, dtype=np.uint8) * 16, (8, 1))).save(grad)
    z = load_image(grad, channels=1, size=(8, 16))  # same size: pixels untouched
    assert z[0, 3].tolist() == [i * 16 for i in range(16)]


@pytest.mark.parametrize("mode", ["RGBA", "LA", "P"])
def test_a_transparent_ground_reads_as_white_and_what_is_drawn_keeps_its_colour(tmp_path: Path, mode: str) -> None:
    # An icon as icon sets ship them: a dark mark on a transparent ground whose hidden colour is black.
    rgba = np.zeros((8, 8, 4), dtype=np.uint8)
    rgba[2:6, 2:6] = (20, 40, 200, 255)                      # the mark, opaque
    rgba[0, 0] = (0, 0, 0, 128)                              # half transparent black on white: grey
    im = Image.fromarray(rgba, "RGBA")
    if mode == "LA":
        im = im.convert("LA")
    elif mode == "P":  # a palette with one transparent entry, as GIFs and small PNGs hold it
        im = Image.fromarray(rgba[..., :3]).convert("P", palette=Image.Palette.ADAPTIVE, colors=4)
        im.info["transparency"] = int(np.asarray(im)[7, 7])
    path = tmp_path / f"icon_{mode}.png"
    im.save(path)
    x = load_image(path, channels=3, size=(8, 8))
    assert x[:, 7, 7].tolist() == [255, 255, 255]            # the ground: white, not black
    mark = x[:, 3, 3].tolist()
    assert max(mark) < 230 and mark != [255, 255, 255]        # the mark stays dark
    if mode == "RGBA":
        assert mark == [20, 40, 200] and all(abs(v - 127) <= 1 for v in x[:, 0, 0].tolist())


def test_load_image_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"definitely not a jpeg")
    with pytest.raises(DataError, match=r"cannot read image .*bad.jpg"):
        load_image(bad, channels=1, size=(28, 28))
    with pytest.raises(DataError, match="image not found"):
        load_image(tmp_path / "missing.png", channels=1, size=(28, 28))
    ok = tmp_path / "ok.png"
    Image.new("L", (4, 4)).save(ok)
    with pytest.raises(DataError, match=r"bad channels 2: expected 1 \(grey\) or 3 \(RGB\)"):
        load_image(ok, channels=2, size=(4, 4))
    for size in ((0, 4), (4, 4, 1), 2.5, True):
        with pytest.raises(DataError, match=r"bad image size .*: expected a positive int or \(height, width\)"):
            load_image(ok, channels=1, size=size)
    with pytest.raises(DataError, match=r"bad image size \(0, 4\)"):
        load_image_dataset(str(tmp_path), cache_dir=tmp_path / "c", image_size=(0, 4))


def test_image_dataset_validation() -> None:
    imgs = torch.zeros(4, 1, 2, 2, dtype=torch.uint8)
    labels = torch.tensor([0, 1, 1, 0])
    ds = ImageDataset(imgs, labels, ["a", "b"], "toy")
    assert len(ds) == 4 and ds.channels == 1 and ds.image_size == (2, 2)
    with pytest.raises(DataError, match="uint8"):
        ImageDataset(imgs.float(), labels, ["a", "b"], "toy")
    with pytest.raises(DataError, match="int64"):
        ImageDataset(imgs, labels.int(), ["a", "b"], "toy")
    with pytest.raises(DataError, match="4 images but 3 labels"):
        ImageDataset(imgs, labels[:3], ["a", "b"], "toy")
    with pytest.raises(DataError, match=r"labels span \[0, 1\] but there are 1 classes"):
        ImageDataset(imgs, labels, ["a"], "toy")
    with pytest.raises(DataError, match="uint8"):
        ImageDataset(imgs[0], labels, ["a", "b"], "toy")
