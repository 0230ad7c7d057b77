"""anyformer: one transformer backbone, input heads that turn any data into tokens, output heads
that turn tokens into answers.

Names are imported on first use, so that `anyformer` on the command line can set process options
(threads, allocator) before torch loads.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any


def _version() -> str:
    """The installed distribution's version; from a source tree that is not installed, pyproject's."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("anyformer")
    except PackageNotFoundError:
        import re
        from pathlib import Path
        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        m = re.search(r'^version\s*=\s*"([^"]+)"', pyproject.read_text(), re.M) if pyproject.is_file() else None
        return m[1] if m else "unknown"


_EXPORTS = {
    "DiT": "models", "MAE": "models", "GPT": "models", "TextEncoder": "models", "ViT": "models", "load": "models", "PRESETS": "models",
    "MLP": "nn", "ClassifierHead": "nn", "ClassToken": "nn", "LinearEmbedding": "nn", "LMHead": "nn",
    "MultiHeadAttention": "nn", "PatchEmbedding": "nn", "PatchOutput": "nn", "TokenEmbedding": "nn",
    "Transformer": "nn", "TransformerBlock": "nn", "open_run": "runs", "Run": "runs",
}
__all__ = [*_EXPORTS, "__version__"]

if TYPE_CHECKING:
    __version__: str
    from .models import DiT, GPT, MAE, PRESETS, TextEncoder, ViT, load
    from .nn import (MLP, ClassifierHead, ClassToken, LinearEmbedding, LMHead, MultiHeadAttention,
                     PatchEmbedding, PatchOutput, TokenEmbedding, Transformer, TransformerBlock)
    from .runs import Run, open_run


# The subpackages, reachable as attributes (`af.nn.plan_kernels`, `af.train.train("mnist")`) without
# importing each one first. `af.train` is the package, whatever was imported before: a name of the
# package that shadowed the subpackage would turn into it once anything imported anyformer.train.
_SUBPACKAGES = ("nn", "models", "data", "train", "viz", "plan", "interop", "serve", "runs")


def __getattr__(name: str) -> Any:
    if name == "__version__":  # read on first use: importlib.metadata costs 30 ms, on every command
        globals()[name] = value = _version()
        return value
    if name in _SUBPACKAGES:
        return importlib.import_module(f".{name}", __name__)
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'anyformer' has no attribute {name!r}")
