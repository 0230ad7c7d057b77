"""Keep the data tests off the user's own files: their cache (~/.cache/anyformer) and their data.

Every test, and every module fixture, runs with HOME and $ANYFORMER_CACHE in a temporary folder
and without $ANYFORMER_DATA (a test that wants data sets it). A test that still reaches the
default cache, ~/.cache/anyformer (say it unsets $ANYFORMER_CACHE, or the code stops reading it),
lands in the temporary HOME instead of the real one, and fails here.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
import torch


def _home_cache_left(home: Path) -> list[str]:
    cache = home / ".cache" / "anyformer"
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*")) if cache.exists() else []


def _isolate(mp: pytest.MonkeyPatch, root: Path) -> Path:
    home = root / "home"  # not created: tests that list their tmp_path see only their own files
    mp.setenv("HOME", str(home))
    mp.setenv("ANYFORMER_CACHE", str(root / "default-cache"))
    mp.delenv("ANYFORMER_DATA", raising=False)
    return home


def _check(home: Path, who: str) -> None:
    left = _home_cache_left(home)
    assert not (home / ".cache" / "anyformer").exists(), (
        f"{who} wrote into the default cache ~/.cache/anyformer ({left}); give it cache_dir= or $ANYFORMER_CACHE")


@pytest.fixture(scope="package", autouse=True)
def _package_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # Package scope: set up before the module fixtures (which load data too), undone after tests/data.
    with pytest.MonkeyPatch.context() as mp:
        home = _isolate(mp, tmp_path_factory.mktemp("data-package"))
        yield
    _check(home, "a module fixture in tests/data")


@pytest.fixture(autouse=True)
def _test_home(_package_home: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
               request: pytest.FixtureRequest) -> Iterator[None]:
    home = _isolate(monkeypatch, tmp_path)
    yield
    _check(home, request.node.nodeid)


def check_well_formed(ds, n: int, chw: tuple[int, int, int]) -> None:
    """An ImageDataset of n images of shape chw: uint8 pixels, int64 labels."""
    assert len(ds) == n
    assert ds.images.dtype == torch.uint8 and tuple(ds.images.shape) == (n, *chw)
    assert ds.labels.dtype == torch.int64 and tuple(ds.labels.shape) == (n,)
