"""`anyformer predict` and `anyformer attention` for series runs: predict.py and attention.py hand
a run over here when its model is a series model."""
from __future__ import annotations

import argparse
import sys
from typing import Any

import torch

from ..data.series.dataset import SeriesPreprocess, fit_to_model
from ..data.series.one_series import read_series_input
from .answers import answer_each


def load_series_input(path: str, model: Any, info: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, str | None]:
    """(raw (1, C, T), standardised (1, C, T), warning): read, oriented, and fitted to the model's length."""
    raw = torch.from_numpy(read_series_input(path, model.config.channels))[None]
    return fit_to_model(raw, model.config.length, SeriesPreprocess.from_info(info))


def predict_series(args: argparse.Namespace, model: Any, meta: dict[str, Any]) -> int:
    """Each file's top classes, one line per file; an unreadable file is named and the rest go on."""
    info = meta.get("data", {})

    def probabilities(path: str) -> tuple[torch.Tensor, str | None]:
        _, x, warning = load_series_input(path, model, info)
        with torch.no_grad():
            return model(x, torch.tensor([x.shape[-1]])).softmax(-1)[0], warning
    return answer_each(args.images, info["classes"], args.top, probabilities)


def attention_series(args: argparse.Namespace, model: Any, meta: dict[str, Any]) -> None:
    """The series drawn with the class token's attention over time (rolled out over the layers)."""
    from ..viz.series_attention import plot_series_attention
    raw, x, warning = load_series_input(args.input, model, meta.get("data", {}))
    if warning:
        print(f"anyformer: warning: {args.input}: {warning}", file=sys.stderr)
    plot_series_attention(model, x, torch.tensor([x.shape[-1]]), args.out, classes=meta.get("data", {}).get("classes"),
                          layers=args.layers, shown=raw)
