"""Image folders as people have them: any sizes, grey and colour, PNG/JPEG/WebP/BMP, phone photos
turned by EXIF, stray files beside the images, a truncated JPEG; the header scan of such a folder, the
size derived for it, and a single picture decoded exactly as the dataset decoded the same file."""
from __future__ import annotations

import io
import tarfile
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from anyformer.data import DataError, DataWarning, ImagePreprocess, load_image, load_image_dataset
from anyformer.data.images import vision
from anyformer.data.images.picture import fit_image
from anyformer.data.images.scan import derive_image_size, scan_images
from anyformer.data.images.vision import source_splits

ORIENTATION = 0x0112


def _save(path: Path, im: Image.Image, **kw) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    im.save(path, **kw)
    return path


def _noise(w: int, h: int, seed: int, mode: str = "RGB") -> Image.Image:
    """A picture of random pixels (W x H): no two images alike, so each can be found again."""
    rng = np.random.default_rng(seed)
    shape = (h, w, 3) if mode == "RGB" else (h, w)
    return Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode)


def _sideways_jpeg(path: Path, w: int, h: int, seed: int) -> Path:
    """A JPEG stored W x H whose EXIF says turn it a quarter (orientation 6), as phones write them."""
    exif = Image.Exif()
    exif[ORIENTATION] = 6
    return _save(path, _noise(w, h, seed), exif=exif, quality=95)


def _truncated_jpeg(path: Path) -> Path:
    """A JPEG cut after its header: the scan reads it, decoding it fails."""
    buf = io.BytesIO()
    _noise(40, 30, 99).save(buf, "JPEG")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    return path


def _pets(root: Path) -> Path:
    """Three classes of mixed formats, sizes and modes, with the debris a real folder collects."""
    _save(root / "cat" / "a.png", _noise(40, 30, 1))
    _save(root / "cat" / "b.jpg", _noise(120, 90, 2), quality=95)
    _sideways_jpeg(root / "cat" / "c.jpg", 64, 48, 3)
    _save(root / "dog" / "a.webp", _noise(50, 50, 4), lossless=True)
    _save(root / "dog" / "b.bmp", _noise(33, 71, 5, "L"))  # grey in a colour set
    pal = _noise(24, 24, 6).convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    _save(root / "dog" / "c.png", pal, transparency=bytes([0, 128] + [255] * 14))  # Pillow warns on this one
    _save(root / "owl" / "a.png", _noise(30, 40, 7, "L"))
    _save(root / "owl" / "b.jpg", _noise(90, 60, 8), quality=95)
    _truncated_jpeg(root / "owl" / "c.jpg")
    for stray in ("README.txt", "cat/.DS_Store", "dog/Thumbs.db", "owl/desktop.ini"):
        (root / stray).write_bytes(b"not an image")
    (root / "owl" / "._b.jpg").write_bytes(b"\x00\x05\x16\x07 macOS resource fork")
    return root


# --------------------------------------------------------------------------- the scan


def test_scan_reads_headers_of_a_messy_folder(tmp_path: Path) -> None:
    root = _pets(tmp_path / "pets")
    (root / "owl" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not a png at all")
    scan = scan_images(root)
    assert scan.splits == {"all": {"cat": 3, "dog": 3, "owl": 3}}  # the truncated JPEG's header reads
    assert scan.classes == ["cat", "dog", "owl"]
    assert scan.colour is True
    assert scan.formats == Counter({"JPEG": 4, "PNG": 3, "WEBP": 1, "BMP": 1})
    assert scan.skipped == ["README.txt", "cat/.DS_Store", "dog/Thumbs.db", "owl/._b.jpg", "owl/desktop.ini"]
    assert [f for f, _ in scan.unreadable] == ["owl/broken.png"]
    # (H, W) per image in path order, the sideways JPEG upright: stored 64 wide, 48 high, shown 64 high.
    assert scan.sizes == [(30, 40), (90, 120), (64, 48), (50, 50), (71, 33), (24, 24), (40, 30), (60, 90),
                          (30, 40)]
    assert scan.images == 9


def test_scan_of_grey_images_in_split_folders_and_of_a_tar(tmp_path: Path) -> None:
    root = tmp_path / "digits"
    grey_palette = Image.new("P", (8, 8))
    grey_palette.putpalette([v for i in range(256) for v in (i, i, i)])
    for split in ("Train", "Validation"):  # as people spell them
        _save(root / "wrapper" / split / "one" / "a.png", _noise(8, 8, 1, "L"))
        _save(root / "wrapper" / split / "two" / "a.png", grey_palette)
    _save(root / "wrapper" / "Train" / "two" / "b.gif", grey_palette)
    scan = scan_images(root)
    assert scan.splits == {"train": {"one": 1, "two": 2}, "val": {"one": 1, "two": 1}}
    assert scan.colour is False and scan.formats == Counter({"PNG": 4, "GIF": 1})
    with tarfile.open(tmp_path / "digits.tar.gz", "w:gz") as tf:
        tf.add(root, arcname="digits")
    packed = scan_images(tmp_path / "digits.tar.gz")
    assert (packed.splits, packed.classes, sorted(packed.sizes), packed.colour) == \
        (scan.splits, scan.classes, sorted(scan.sizes), scan.colour)
    assert source_splits(root) == ("folder", ("train", "val"))
    assert source_splits(tmp_path / "digits.tar.gz") == ("tar", ("train", "val"))


def test_scan_refuses_an_empty_folder_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty" / "cat").mkdir(parents=True)
    (tmp_path / "empty" / "cat" / "notes.txt").write_text("no pictures yet")
    with pytest.raises(DataError, match=r"^no images found in .*empty: expected <class>/<image>[^\n]*$"):
        scan_images(tmp_path / "empty")


@pytest.mark.parametrize("sizes, expected", [
    ([(28, 28)] * 5, (28, 28)),                 # one small size: kept
    ([(32, 48)] * 3, (32, 48)),                 # one small size, not square: kept
    ([(100, 100)] * 3, (64, 64)),               # one size, too large: clamped
    ([(30, 40), (50, 45), (70, 90)], (40, 40)),  # median shorter side 45 -> 40 (a multiple of 8)
    ([(10, 12), (9, 30), (14, 8)], (16, 16)),    # tiny: raised to 16
    ([(8, 8)] * 4, (16, 16)),                   # one size under 16: scaled up by a whole factor (image round 28)
    ([(6, 10)] * 2, (18, 30)),                  # 3x, the shorter side to 18
    ([(8, 40)] * 2, (16, 16)),                  # scaled up, the longer side would pass 64: the square rule
    ([(480, 640), (3000, 4000), (200, 300)], (64, 64)),
    ([(20, 30), (30, 20), (33, 50), (50, 33)], (24, 24)),  # median of 20, 20, 33, 33 is 26.5 -> 24
])
def test_derive_image_size(sizes, expected) -> None:
    assert derive_image_size(sizes) == expected


# --------------------------------------------------------------------------- decoding


def test_fit_covers_and_centre_crops_keeping_the_aspect() -> None:
    # 20 high, 40 wide: black sides, a white middle 28 wide. Made 10x10 it is the middle 20 columns,
    # all white (a plain resize would squash the black sides in); made 10 x 20 it is plainly halved.
    a = np.zeros((20, 40), dtype=np.uint8)
    a[:, 6:34] = 255
    im = Image.fromarray(a)
    assert np.asarray(fit_image(im, (10, 10))).min() == 255
    assert np.asarray(im.resize((10, 10), Image.Resampling.BILINEAR)).min() < 255
    np.testing.assert_array_equal(np.asarray(fit_image(im, (10, 20))),
                                  np.asarray(im.resize((20, 10), Image.Resampling.BILINEAR)))
    assert fit_image(im, (20, 40)) is im


def test_a_messy_folder_loads_with_one_warning_each_and_a_derived_size(tmp_path: Path) -> None:
    root = _pets(tmp_path / "pets")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = load_image_dataset(str(root), cache_dir=tmp_path / "c")
    lines = [str(w.message) for w in caught]
    assert all(w.category is DataWarning for w in caught), lines  # Pillow's palette warning stays inside
    assert len(lines) == 2 and all("\n" not in line for line in lines)
    assert lines[0].startswith("skipped 5 files that are not images in ") and "README.txt" in lines[0]
    assert lines[1].startswith("skipped 1 unreadable image in ") and "owl/c.jpg (" in lines[1]
    # Sizes differ: median shorter side of the 8 readable images is 35.5 -> 32.
    assert ds.derived_size is not None and ds.derived_size.startswith("32x32: ")
    assert tuple(ds.images.shape) == (8, 3, 32, 32) and ds.classes == ["cat", "dog", "owl"]
    assert ds.labels.tolist() == [0, 1, 2, 0, 1, 2, 0, 1]  # classes interleaved, the broken owl left out
    grey = ds.images[4]  # dog/b.bmp
    assert torch.equal(grey[0], grey[1]) and torch.equal(grey[1], grey[2])


def test_a_picture_is_decoded_as_the_dataset_decoded_the_same_file(tmp_path: Path) -> None:
    """What a trained run's predict, serve and classify read (ImagePreprocess.load) is the tensor
    the training set held for that file: same turn, draft, channels, crop and resize."""
    root = _pets(tmp_path / "pets")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        ds = load_image_dataset(str(root), cache_dir=tmp_path / "c")
    order = ["cat/a.png", "dog/a.webp", "owl/a.png", "cat/b.jpg", "dog/b.bmp", "owl/b.jpg", "cat/c.jpg", "dog/c.png"]
    pre = ImagePreprocess.from_images(ds.images)
    assert pre.framing is None  # photos, not drawings: no framing
    for i, rel in enumerate(order):
        assert torch.equal(pre.load(root / rel), ds.images[i]), rel
        assert torch.equal(load_image(io.BytesIO((root / rel).read_bytes()), 3, ds.image_size), ds.images[i]), rel
    # The sideways phone photo is upright: stored 64 wide and 48 high, it was fitted as 48 wide, 64 high.
    upright = np.asarray(Image.open(root / "cat" / "c.jpg").transpose(Image.Transpose.ROTATE_270))
    assert upright.shape[:2] == (64, 48)


def test_exif_orientation_turns_dataset_images(tmp_path: Path) -> None:
    root = tmp_path / "phone"
    for cls in ("a", "b"):
        _sideways_jpeg(root / cls / "0.jpg", 30, 20, 1 if cls == "a" else 2)
    ds = load_image_dataset(str(root), cache_dir=tmp_path / "c")
    assert ds.image_size == (30, 20) and ds.derived_size is None  # one size: kept as it is, upright


def test_grey_sets_stay_grey_and_channels_can_be_fixed(tmp_path: Path) -> None:
    root = tmp_path / "grey"
    _save(root / "a" / "0.png", _noise(12, 12, 1, "L"))
    _save(root / "b" / "0.png", _noise(12, 12, 2, "L"))
    sixteen = Image.fromarray(np.arange(144, dtype=np.uint16).reshape(12, 12) * 400)
    _save(root / "b" / "1.png", sixteen)
    assert Image.open(root / "b" / "1.png").mode == "I;16"
    ds = load_image_dataset(str(root), cache_dir=tmp_path / "c")
    assert ds.channels == 1
    np.testing.assert_array_equal(ds.images[2, 0].numpy(), (np.asarray(sixteen) >> 8).astype(np.uint8))
    rgb = load_image_dataset(str(root), cache_dir=tmp_path / "c", channels=3)
    assert rgb.channels == 3 and torch.equal(rgb.images[:, 0], ds.images[:, 0]) and torch.equal(rgb.images[:, 2],
                                                                                                 ds.images[:, 0])
    colour = tmp_path / "colour"
    _save(colour / "a" / "0.png", _noise(12, 12, 3))
    _save(colour / "b" / "0.png", _noise(12, 12, 4))
    as_grey = load_image_dataset(str(colour), cache_dir=tmp_path / "c", channels=1)
    assert torch.equal(as_grey.images[0], load_image(colour / "a" / "0.png", 1, 12))


def test_split_folders_val_and_all(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    for split, v in (("train", 10), ("val", 50)):
        for cls, d in (("x", 0), ("y", 1)):
            _save(root / split / cls / "0.png", Image.new("L", (4, 4), v + d))
    val = load_image_dataset(str(root), "val", cache_dir=tmp_path / "c")
    assert val.images[:, 0, 0, 0].tolist() == [50, 51]
    every = load_image_dataset(str(root), "all", cache_dir=tmp_path / "c")
    assert sorted(every.images[:, 0, 0, 0].tolist()) == [10, 11, 50, 51]
    with pytest.raises(DataError, match=r"^no test/ images in .*ds: found only train/, val/; add test/<class>/"):
        load_image_dataset(str(root), "test", cache_dir=tmp_path / "c")
    with pytest.raises(DataError, match=r"MNIST comes as train and test splits, not 'val'"):
        load_image_dataset("mnist", "val", cache_dir=tmp_path / "c")


def test_unsupported_photos_and_an_all_unreadable_folder(tmp_path: Path) -> None:
    root = tmp_path / "odd"
    _save(root / "a" / "0.png", _noise(8, 8, 1))
    (root / "b").mkdir()
    (root / "b" / "IMG_0001.HEIC").write_bytes(b"\x00\x00\x00\x18ftypheic")
    with pytest.warns(DataWarning, match=r"skipped 1 unreadable image in .*: b/IMG_0001.HEIC \(HEIC/HEIF"):
        ds = load_image_dataset(str(root), cache_dir=tmp_path / "c")
    assert len(ds) == 1
    bad = tmp_path / "bad"
    _truncated_jpeg(bad / "a" / "0.jpg")
    _truncated_jpeg(bad / "b" / "0.jpg")
    with pytest.raises(DataError, match=r"^no readable images in .*bad: all 2 failed to decode \(first: a/0.jpg: "):
        load_image_dataset(str(bad), cache_dir=tmp_path / "c")


# --------------------------------------------------------------------------- the decoded cache


def test_cache_keys_on_size_and_rule_and_keeps_what_was_skipped(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    root = _pets(tmp_path / "pets")
    cache = tmp_path / "cache"
    with pytest.warns(DataWarning):
        first = load_image_dataset(str(root), cache_dir=cache)
    decoded = []
    real = vision.read_source
    monkeypatch.setattr(vision, "read_source", lambda *a: decoded.append(a) or real(*a))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hit = load_image_dataset(str(root), cache_dir=cache)
    assert not decoded, "a second load decodes again instead of reading the cache"
    assert [str(w.message) for w in caught] == [
        f"skipped 5 files that are not images in {root}: README.txt, cat/.DS_Store, dog/Thumbs.db, owl/._b.jpg, "
        f"owl/desktop.ini",
        f"skipped 1 unreadable image in {root}: owl/c.jpg ({first.unreadable[0][1]})"]
    assert torch.equal(hit.images, first.images) and hit.derived_size == first.derived_size
    with pytest.warns(DataWarning):
        load_image_dataset(str(root), cache_dir=cache, image_size=16)
    assert len(decoded) == 1, "another image size must be decoded, not served from the cache"
    monkeypatch.setattr(vision, "RESIZE_RULE", "some-other-rule")
    with pytest.warns(DataWarning):
        load_image_dataset(str(root), cache_dir=cache)
    assert len(decoded) == 2, "another resizing rule must be decoded, not served from the cache"
    (root / "owl" / "c.jpg").unlink()  # the unreadable one gone: the cache must not name it still
    monkeypatch.undo()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        after = load_image_dataset(str(root), cache_dir=cache)
    assert after.unreadable == [] and not any("unreadable" in str(w.message) for w in caught)
