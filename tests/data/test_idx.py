"""IDX reader against the real MNIST / Fashion-MNIST files and hand-made bad files."""

from __future__ import annotations

import gzip
import hashlib
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anyformer.data import DataError, parse_idx, read_idx
from anyformer.data.images.idx import IDX_DTYPES, read_idx_bytes

SHARED = Path(os.environ.get("ANYFORMER_SHARED_DATA", Path(__file__).resolve().parents[2].parent / "shared" / "data"))
MNIST = SHARED / "mnist"
FASHION = SHARED / "fashion-mnist"

PUBLISHED_MNIST_SHA256 = {
    "train-images-idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels-idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}
# Published per-digit counts of the official MNIST splits.
MNIST_TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
MNIST_TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


@pytest.fixture(scope="module")
def mnist_train() -> tuple[np.ndarray, np.ndarray]:
    return read_idx(MNIST / "train-images-idx3-ubyte.gz"), read_idx(MNIST / "train-labels-idx1-ubyte.gz")


def test_shared_data_present() -> None:
    assert MNIST.is_dir() and FASHION.is_dir(), f"reference data missing under {SHARED}; set ANYFORMER_SHARED_DATA"


def test_mnist_train_shapes_and_counts(mnist_train) -> None:
    images, labels = mnist_train
    assert images.shape == (60000, 28, 28) and images.dtype == np.uint8
    assert labels.shape == (60000,) and labels.dtype == np.uint8
    assert np.bincount(labels, minlength=10).tolist() == MNIST_TRAIN_COUNTS
    assert images.min() == 0 and images.max() == 255
    assert images.flags.writeable and images.flags.c_contiguous


def test_mnist_test_shapes_and_counts() -> None:
    images = read_idx(MNIST / "t10k-images-idx3-ubyte.gz")
    labels = read_idx(MNIST / "t10k-labels-idx1-ubyte.gz")
    assert images.shape == (10000, 28, 28) and labels.shape == (10000,)
    assert np.bincount(labels, minlength=10).tolist() == MNIST_TEST_COUNTS


@pytest.mark.parametrize("name", sorted(PUBLISHED_MNIST_SHA256))
def test_mnist_decompressed_checksums(name: str) -> None:
    raw = read_idx_bytes(MNIST / f"{name}.gz")
    assert hashlib.sha256(raw).hexdigest() == PUBLISHED_MNIST_SHA256[name]


def test_fashion_mnist_balanced() -> None:
    train = read_idx(FASHION / "train-labels-idx1-ubyte.gz")
    test = read_idx(FASHION / "t10k-labels-idx1-ubyte.gz")
    assert np.bincount(train).tolist() == [6000] * 10
    assert np.bincount(test).tolist() == [1000] * 10
    assert read_idx(FASHION / "t10k-images-idx3-ubyte.gz").shape == (10000, 28, 28)


@pytest.mark.slow
def test_uncompressed_equals_gzip(tmp_path: Path, mnist_train) -> None:
    # Compression is detected by content: a raw file named ".gz" and a gzip file
    # without the suffix must both read the same.
    raw = gzip.decompress((MNIST / "train-images-idx3-ubyte.gz").read_bytes())
    plain = tmp_path / "train-images-idx3-ubyte"
    plain.write_bytes(raw)
    misnamed = tmp_path / "raw-but-named.gz"
    misnamed.write_bytes(raw)
    np.testing.assert_array_equal(read_idx(plain), mnist_train[0])
    np.testing.assert_array_equal(read_idx(misnamed), mnist_train[0])
    gz_no_suffix = tmp_path / "labels"
    gz_no_suffix.write_bytes((MNIST / "train-labels-idx1-ubyte.gz").read_bytes())
    np.testing.assert_array_equal(read_idx(gz_no_suffix), mnist_train[1])


def test_truncated_raw_file(tmp_path: Path) -> None:
    raw = gzip.decompress((MNIST / "t10k-labels-idx1-ubyte.gz").read_bytes())
    p = tmp_path / "short"
    p.write_bytes(raw[:-1])
    with pytest.raises(DataError, match="truncated IDX file.*10007 bytes.*needs 10008"):
        read_idx(p)
    p.write_bytes(raw + b"\0")
    with pytest.raises(DataError, match="oversized"):
        read_idx(p)
    p.write_bytes(raw[:6])  # cut inside the dimension header
    with pytest.raises(DataError, match="truncated"):
        read_idx(p)


def test_truncated_gzip(tmp_path: Path) -> None:
    data = (MNIST / "t10k-labels-idx1-ubyte.gz").read_bytes()
    p = tmp_path / "cut.gz"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match="corrupt gzip"):
        read_idx(p)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", r"not an IDX file: .*garbage has 0 bytes, expected at least a 4-byte header"),
        (b"\x00", r"not an IDX file: .*garbage has 1 bytes"),
        (b"hello world, not idx", r"not an IDX file: .*garbage starts with 68656c6c, expected 0000 \+ dtype code"),
        (b"\x00\x00\x07\x01\x00\x00\x00\x01x", r"not an IDX file: .*garbage starts with 00000701"),  # unknown dtype
        (b"\x00\x00\x08\x00", r"not an IDX file: .*garbage starts with 00000800, .* \+ ndim>0"),  # no dimensions
        (b"\x1f\x8bgarbage", r"corrupt gzip file .*garbage"),
    ],
)
def test_garbage(tmp_path: Path, content: bytes, message: str) -> None:
    p = tmp_path / "garbage"
    p.write_bytes(content)
    with pytest.raises(DataError, match=message):
        read_idx(p)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found"):
        read_idx(tmp_path / "nope")


@settings(max_examples=40, deadline=None)
@given(
    code=st.sampled_from(sorted(IDX_DTYPES)),
    shape=st.lists(st.integers(0, 5), min_size=1, max_size=4),
    seed=st.integers(0, 2**32 - 1),
)
def test_roundtrip_all_dtypes(code: int, shape: list[int], seed: int) -> None:
    # Big-endian on disk, native in memory, for every IDX dtype.
    dt = IDX_DTYPES[code]
    rng = np.random.default_rng(seed)
    arr = rng.integers(-100, 100, size=shape).astype(dt.newbyteorder("="))
    data = struct.pack(f">HBB{len(shape)}I", 0, code, len(shape), *shape) + arr.astype(dt).tobytes()
    out = parse_idx(data)
    assert out.shape == tuple(shape) and out.dtype == dt.newbyteorder("=")
    np.testing.assert_array_equal(out, arr)
    out_gz = parse_idx(gzip.decompress(gzip.compress(data)))
    np.testing.assert_array_equal(out_gz, arr)
