"""Resumable checkpoints that cannot be half-written and never run code when read.

A checkpoint holds the model, optimiser, step, the running epoch sums, every RNG state, and how
many metrics lines had been written, so a resumed run continues exactly where the other stopped.
It is written to a temporary file, flushed to disk, then renamed; the last K are kept.
"""
from __future__ import annotations

import os
import pickle
import re
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import torch

CKPT_DIR = "checkpoints"
_NAME = re.compile(r"^step-(\d{9})\.pt$")


class CheckpointError(ValueError):
    """A checkpoint that is damaged, foreign, or unsafe to read."""


def atomic_write_bytes(path: Path, writer) -> None:
    """Call writer(file) on a temp file beside `path`, fsync, then rename onto `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            writer(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_checkpoint(run_dir: Path, step: int, state: dict[str, Any], keep: int = 2) -> Path:
    path = Path(run_dir) / CKPT_DIR / f"step-{step:09d}.pt"
    atomic_write_bytes(path, lambda f: torch.save(state, f))
    for old in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        old.unlink(missing_ok=True)
    return path


def list_checkpoints(run_dir: Path) -> list[Path]:
    folder = Path(run_dir) / CKPT_DIR
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if _NAME.match(p.name))


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read a checkpoint with `weights_only=True`: tensors and plain containers only, no code."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise CheckpointError(f"refusing to load {path}: it holds objects other than tensors and plain "
                              f"data ({str(e).splitlines()[0][:200]})") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError) as e:
        raise CheckpointError(f"checkpoint {path} is truncated or corrupt ({str(e).splitlines()[0][:200]})") from None
    if not isinstance(state, dict) or "model" not in state or "step" not in state:
        raise CheckpointError(f"{path} is not an anyformer training checkpoint")
    return state
