"""`anyformer predict` and `anyformer attention` for series runs: predict.py and attention.py hand
a run over here when its model is a series model."""
from __future__ import annotations

import argparse
import sys
from typing import Any

import torch

from ..data.series.dataset import SeriesPreprocess, fit_to_model
from ..data.series.one_series import read_series_input
from .args import one_line


def load_series_input(path: str, model: Any, info: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, str | None]:
    """(raw (1, C, T), standardised (1, C, T), warning): read, oriented, and fitted to the model's length."""
    raw = torch.from_numpy(read_series_input(path, model.config.channels))[None]
    return fit_to_model(raw, model.config.length, SeriesPreprocess.from_info(info))


def predict_series(args: argparse.Namespace, model: Any, meta: dict[str, Any]) -> int:
    """Each file's top classes, one line per file; an unreadable file is named and the rest go on."""
    info = meta.get("data", {})
    unread = 0
    for path in args.images:
        try:
            _, x, warning = load_series_input(path, model, info)
        except (ValueError, OSError) as e:
            msg = one_line(e)  # the data errors name the file already
            print(f"anyformer: error: {msg if msg.startswith(path) else f'{path}: {msg}'}", file=sys.stderr)
            unread += 1
            continue
        with torch.no_grad():
            probs = model(x, torch.tensor([x.shape[-1]])).softmax(-1)[0]
        top = probs.topk(min(args.top, probs.numel()))
        shown = ", ".join(f"{info['classes'][i]} {p:.3f}" for p, i in zip(top.values.tolist(), top.indices.tolist()))
        print(f"{path}: {shown}")
        if warning:
            print(f"anyformer: warning: {path}: {warning}", file=sys.stderr)
    if unread and len(args.images) > 1:
        print(f"anyformer: {unread} of {len(args.images)} files could not be read", file=sys.stderr)
    return 2 if unread else 0


def attention_series(args: argparse.Namespace, model: Any, meta: dict[str, Any]) -> None:
    """The series drawn with the class token's attention over time (rolled out over the layers)."""
    from ..viz.series_attention import plot_series_attention
    raw, x, warning = load_series_input(args.input, model, meta.get("data", {}))
    if warning:
        print(f"anyformer: warning: {args.input}: {warning}", file=sys.stderr)
    plot_series_attention(model, x, torch.tensor([x.shape[-1]]), args.out, classes=meta.get("data", {}).get("classes"),
                          layers=args.layers, shown=raw)
