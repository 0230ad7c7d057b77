"""Resumable checkpoints that cannot be half-written and never run code when read.

A checkpoint holds the model (and its EMA, when the run keeps one), optimiser, step, the running
epoch sums, every RNG state, and how many metrics lines had been written, so a resumed run
continues exactly where the other stopped.
It is written to a temporary file and flushed to disk (`stage_checkpoint`), then renamed to its
name (`commit_checkpoint`): under torchrun only once every rank has seen it whole (checkpointing.py),
so the name `step-N.pt` is the mark that a checkpoint is complete, and a temporary file that a kill
left half-written is never read (RunDir.prepare removes it). The last K are kept. It carries a SHA-256
of its contents: the zip format does not check the tensor bytes, and a flipped byte would otherwise
load as a silently different weight.
"""
from __future__ import annotations

import hashlib
import pickle
import re
from pathlib import Path
from typing import Any

import torch

from ..files import commit, write_temp

CKPT_DIR = "checkpoints"
_NAME = re.compile(r"^step-(\d{9})\.pt$")
_DIGEST = "sha256"


class CheckpointError(ValueError):
    """A checkpoint that is damaged, foreign, or unsafe to read."""


def digest(obj: Any) -> str:
    """SHA-256 of a state: every tensor's dtype, shape and bytes, every other value's repr, in order."""
    h = hashlib.sha256()

    def walk(o: Any) -> None:
        if isinstance(o, torch.Tensor):
            t = o.detach().cpu().contiguous().reshape(-1)
            h.update(f"T{t.dtype}{tuple(o.shape)}".encode())
            h.update(t.view(torch.uint8).numpy().data if t.numel() else b"")
        elif isinstance(o, dict):
            h.update(f"D{len(o)}".encode())
            for k, v in o.items():
                walk(k)
                walk(v)
        elif isinstance(o, (list, tuple)):
            h.update(f"L{len(o)}".encode())
            for v in o:
                walk(v)
        else:
            h.update(f"{type(o).__name__}:{o!r};".encode())
    walk(obj)
    return h.hexdigest()


def checkpoint_path(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / CKPT_DIR / f"step-{step:09d}.pt"


def stage_checkpoint(run_dir: Path, step: int, state: dict[str, Any]) -> tuple[str, int]:
    """Write step `step`'s checkpoint to a temporary file beside its name, flushed to disk:
    (its temporary name, its size in bytes). Nothing reads it until `commit_checkpoint` names it."""
    state = {**state, _DIGEST: digest(state)}
    tmp = write_temp(checkpoint_path(run_dir, step), lambda f: torch.save(state, f))
    return tmp, Path(tmp).stat().st_size


def commit_checkpoint(run_dir: Path, step: int, tmp: str, keep: int = 2) -> Path:
    """Give a staged checkpoint its name (an atomic rename), then drop all but the last `keep`."""
    path = checkpoint_path(run_dir, step)
    commit(tmp, path)
    for old in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        old.unlink(missing_ok=True)
    return path


def list_checkpoints(run_dir: Path) -> list[Path]:
    folder = Path(run_dir) / CKPT_DIR
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if _NAME.match(p.name))


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read a checkpoint with `weights_only=True` (tensors and plain containers only, no code) and
    check its SHA-256."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        code = re.search(r"GLOBAL (\S+)", str(e))
        if code:  # the pickle names a function or class to call: that is code, not data
            raise CheckpointError(f"refusing to load {path}: it asks to run {code.group(1)}, and a checkpoint "
                                  f"holds only tensors and plain data; do not use this file") from None
        reason = re.search(r"WeightsUnpickler error:\s*(.+)", str(e))
        raise CheckpointError(f"refusing to load {path}: it is not a checkpoint of tensors and plain data "
                              f"({reason.group(1).strip()[:120] if reason else 'unreadable pickle'})") from None
    except Exception as e:  # noqa: BLE001 - whatever a damaged zip or pickle raises, it is damage
        raise CheckpointError(f"checkpoint {path} is truncated or corrupt "
                              f"({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})") from None
    if not isinstance(state, dict) or "model" not in state or "step" not in state or _DIGEST not in state:
        raise CheckpointError(f"{path} is not an anyformer training checkpoint")
    expected = state.pop(_DIGEST)
    if digest(state) != expected:
        raise CheckpointError(f"checkpoint {path} is corrupt: its contents do not match the SHA-256 written "
                              f"with it (delete it to resume from an earlier one)")
    return state
