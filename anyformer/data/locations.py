"""Where anyformer keeps what it downloads and caches, for every kind of data: `default_cache_dir`."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_cache_dir"]


def default_cache_dir() -> Path:
    """`$ANYFORMER_CACHE`, else ~/.cache/anyformer."""
    env = os.environ.get("ANYFORMER_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "anyformer"
