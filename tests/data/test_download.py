"""Checksummed download, exercised with file:// URLs (no network needed)."""

from __future__ import annotations

import gzip
import hashlib
import os
import time
from pathlib import Path

import pytest

from anyformer.data import DataError, download, sha256_file

SHARED = Path(os.environ.get("ANYFORMER_SHARED_DATA", Path(__file__).resolve().parents[2].parent / "shared" / "data"))
LABELS_GZ = SHARED / "mnist" / "t10k-labels-idx1-ubyte.gz"
LABELS_RAW_SHA = "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2"  # published


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_sha256_file_matches_hashlib() -> None:
    assert sha256_file(LABELS_GZ) == hashlib.sha256(LABELS_GZ.read_bytes()).hexdigest()


def test_good_checksum(tmp_path: Path) -> None:
    want = hashlib.sha256(LABELS_GZ.read_bytes()).hexdigest()
    dest = tmp_path / "out" / "labels.gz"  # parent is created
    got = download(LABELS_GZ.as_uri(), dest, want)
    assert got == dest and dest.read_bytes() == LABELS_GZ.read_bytes()
    assert _leftovers(dest.parent) == ["labels.gz"]  # no temp files left


def test_bad_checksum_leaves_nothing(tmp_path: Path) -> None:
    dest = tmp_path / "labels.gz"
    with pytest.raises(DataError, match="sha256 mismatch.*expected 0{64}, got [0-9a-f]{64}"):
        download(LABELS_GZ.as_uri(), dest, "0" * 64)
    assert _leftovers(tmp_path) == []


def test_bad_checksum_keeps_existing_file_untouched(tmp_path: Path) -> None:
    dest = tmp_path / "labels.gz"
    dest.write_bytes(b"previous content")
    with pytest.raises(DataError, match="sha256 mismatch for .*: expected f{64}, got [0-9a-f]{64}"):
        download(LABELS_GZ.as_uri(), dest, "f" * 64)
    assert dest.read_bytes() == b"previous content"
    assert _leftovers(tmp_path) == ["labels.gz"]


def test_existing_verified_file_is_not_fetched_again(tmp_path: Path) -> None:
    dest = tmp_path / "labels.gz"
    dest.write_bytes(LABELS_GZ.read_bytes())
    want = sha256_file(LABELS_GZ)
    # The URL does not exist: success proves nothing was fetched.
    assert download((tmp_path / "missing").as_uri(), dest, want) == dest


def test_gunzip_verifies_decompressed_bytes(tmp_path: Path) -> None:
    dest = tmp_path / "t10k-labels-idx1-ubyte"
    download(LABELS_GZ.as_uri(), dest, LABELS_RAW_SHA, gunzip=True)
    assert dest.read_bytes() == gzip.decompress(LABELS_GZ.read_bytes())
    # A stream that is not gzip is stored as-is under gunzip=True.
    raw_src = tmp_path / "raw"
    raw_src.write_bytes(dest.read_bytes())
    dest2 = tmp_path / "copy"
    download(raw_src.as_uri(), dest2, LABELS_RAW_SHA, gunzip=True)
    assert dest2.read_bytes() == dest.read_bytes()


def test_truncated_gzip_stream(tmp_path: Path) -> None:
    src = tmp_path / "cut.gz"
    data = LABELS_GZ.read_bytes()
    src.write_bytes(data[: len(data) // 2])
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(DataError, match="mid gzip stream"):
        download(src.as_uri(), out / "x", LABELS_RAW_SHA, gunzip=True)
    assert _leftovers(out) == []


def test_missing_source(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="download failed"):
        download((tmp_path / "nope.gz").as_uri(), tmp_path / "x", "a" * 64)
    assert _leftovers(tmp_path) == []


def test_unreachable_host_fails_fast(tmp_path: Path) -> None:
    # Port 9 (discard) on localhost refuses connections; no network needed.
    t = time.perf_counter()
    with pytest.raises(DataError, match="download failed: http://127.0.0.1:9/"):
        download("http://127.0.0.1:9/x.gz", tmp_path / "x", "a" * 64, timeout=5)
    assert time.perf_counter() - t < 5
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("bad", ["", "abc", "g" * 64, "a" * 63])
def test_rejects_malformed_checksum(tmp_path: Path, bad: str) -> None:
    with pytest.raises(DataError, match="bad sha256"):
        download(LABELS_GZ.as_uri(), tmp_path / "x", bad)


def test_uppercase_checksum_accepted(tmp_path: Path) -> None:
    want = sha256_file(LABELS_GZ).upper()
    download(LABELS_GZ.as_uri(), tmp_path / "x", want)
    assert (tmp_path / "x").read_bytes() == LABELS_GZ.read_bytes()
