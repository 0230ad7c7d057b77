"""Training plots: loss / accuracy curves from metrics.jsonl, and the confusion matrix.

Figures are drawn on a bare `matplotlib.figure.Figure` with an Agg canvas, never through
pyplot: nothing is shown, the user's backend (a notebook's inline one, say) is left alone, and
no figure stays registered in pyplot's global list after saving. Sizes are fixed (no
`bbox_inches="tight"`), so a PNG is exactly `figsize * dpi` pixels.
"""
from __future__ import annotations

import json
import math
import os
from numbers import Real
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

# x axes, in order of preference
_X_KEYS = ("step", "epoch")
_THROUGHPUT_KEYS = ("images_per_s", "tokens_per_s", "samples_per_s")


# --------------------------------------------------------------------------- figure helpers


def new_figure(figsize: tuple[float, float], dpi: int = 100, layout: str | None = "constrained"):
    """A Figure on its own Agg canvas (no pyplot, no display)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=figsize, dpi=dpi, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig, out_png: str | os.PathLike) -> Path:
    """Write the figure as PNG at its own size and dpi, then release its artists."""
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=fig.dpi, format="png")
    fig.clear()  # the figure is not in pyplot's registry; clearing frees images and text now
    return out


def _number(v: Any) -> float | None:
    """A finite float, or None for missing, non-numeric or non-finite values."""
    if isinstance(v, bool) or not isinstance(v, Real):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


# --------------------------------------------------------------------------- curves


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Read metrics.jsonl: one JSON object per line; blank lines are skipped."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no metrics file at {p} (expected metrics.jsonl written by a training run)")
    records = []
    for n, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{p}:{n} is not valid JSON ({e.msg}); expected one JSON object per line") from None
        if not isinstance(rec, dict):
            raise ValueError(f"{p}:{n} holds a {type(rec).__name__}; expected one JSON object per line")
        records.append(rec)
    return records


def _series(records: Sequence[dict], key: str, xkey: str | None) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for i, r in enumerate(records):
        y = _number(r.get(key))
        x = float(i) if xkey is None else _number(r.get(xkey))
        if y is not None and x is not None:
            xs.append(x)
            ys.append(y)
    return np.asarray(xs), np.asarray(ys)


def _keys(records: Iterable[dict]) -> list[str]:
    seen: dict[str, None] = {}
    for r in records:
        for k, v in r.items():
            if _number(v) is not None:
                seen.setdefault(k, None)
    return list(seen)


def plot_curves(metrics: Sequence[dict[str, Any]] | str | os.PathLike, out_png: str | os.PathLike, *,
                title: str | None = None, figsize: tuple[float, float] | None = None,
                dpi: int = 100) -> Path:
    """Training curves from a list of metric dicts or a metrics.jsonl path; returns the PNG path.

    Panels, each drawn only when its keys are present: losses (every key ending in "loss":
    train_loss, eval_loss, val_loss, ...), accuracies (keys ending in "accuracy"), the learning
    rate ("lr"), and throughput (images_per_s / tokens_per_s / samples_per_s). The x axis is
    "step" when the records have it, else "epoch", else the record's index. Missing, null or
    non-finite values are skipped point by point.
    """
    records = read_metrics(metrics) if isinstance(metrics, (str, os.PathLike)) else list(metrics)
    if not all(isinstance(r, dict) for r in records):
        raise TypeError("metrics must be a list of dicts (one per evaluation) or a path to metrics.jsonl")
    keys = _keys(records)
    xkey = next((k for k in _X_KEYS if k in keys), None)
    panels = [
        ("loss", [k for k in keys if k.endswith("loss")]),
        ("accuracy", [k for k in keys if k.endswith("accuracy")]),
        ("learning rate", [k for k in keys if k == "lr"]),
        ("throughput", [k for k in keys if k in _THROUGHPUT_KEYS]),
    ]
    panels = [(name, ks) for name, ks in panels if ks]
    if not panels:
        raise ValueError(f"no metrics to plot: expected keys such as train_loss, eval_loss, eval_accuracy, lr; "
                         f"got {sorted(keys) or 'no numeric values'}")
    fig = new_figure(figsize or (4.4 * len(panels), 3.8), dpi)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    finals = []
    for ax, (name, ks) in zip(axes, panels):
        for k in ks:
            x, y = _series(records, k, xkey)
            if not len(x):
                continue
            # Dense series (train loss logged often) as lines; sparse ones (evaluations) with markers.
            style = dict(marker="o", markersize=3.5) if len(x) <= 60 else {}
            label = k
            if name in ("loss", "accuracy"):
                label = f"{k} (last {_fmt(y[-1], name)})"
                finals.append(f"{k} {_fmt(y[-1], name)}")
            if name == "loss" and len(x) > 60:
                # Per-step losses are noisy: the raw series faint, a moving average on top.
                line, = ax.plot(x, y, linewidth=0.8, alpha=0.3)
                ax.plot(x, _smooth(y), label=label + ", smoothed", linewidth=1.6, color=line.get_color())
            else:
                ax.plot(x, y, label=label, linewidth=1.4, **style)
        if name == "loss":
            ys = np.concatenate([_series(records, k, xkey)[1] for k in ks])
            if len(ys) and ys.min() > 0 and ys.max() / ys.min() > 20:
                ax.set_yscale("log")  # losses fall by orders of magnitude; a linear axis hides the end
        if name == "accuracy":
            from matplotlib.ticker import PercentFormatter
            ys = np.concatenate([_series(records, k, xkey)[1] for k in ks])
            if len(ys) and ys.max() <= 1.0:
                ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        if name == "learning rate":
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
        ax.set_title(name)
        ax.set_xlabel(xkey or "evaluation")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    head = title or "training curves"
    fig.suptitle(head + (": " + ", ".join(finals) if finals else ""), fontsize="medium")
    return save_figure(fig, out_png)


def _smooth(y: np.ndarray) -> np.ndarray:
    """Trailing moving average over ~2% of the points (at least 5), shorter at the start."""
    w = max(5, len(y) // 50)
    c = np.cumsum(np.insert(y, 0, 0.0))
    n = np.minimum(np.arange(1, len(y) + 1), w)
    return (c[1:] - c[np.arange(1, len(y) + 1) - n]) / n


def _fmt(v: float, kind: str) -> str:
    if kind == "accuracy" and 0 <= v <= 1:
        return f"{100 * v:.2f}%"
    return f"{v:.4g}"


# --------------------------------------------------------------------------- confusion matrix


def plot_confusion(confusion: np.ndarray, class_names: Sequence[str] | None, out_png: str | os.PathLike, *,
                   title: str | None = None, figsize: tuple[float, float] | None = None,
                   dpi: int = 100) -> Path:
    """Confusion matrix of counts (rows: true class, columns: predicted) with a colour bar.

    Every cell is labelled with its count while K <= 30 (beyond that the numbers would not be
    legible). The title carries the accuracy (trace / total) and the number of samples.
    """
    cm = np.asarray(confusion.detach().cpu() if hasattr(confusion, "detach") else confusion)
    if cm.ndim != 2 or cm.shape[0] != cm.shape[1] or cm.shape[0] == 0:
        raise ValueError(f"confusion must be a square (K, K) array of counts, got shape {cm.shape}")
    if not np.issubdtype(cm.dtype, np.number) or (cm < 0).any():
        raise ValueError("confusion must hold non-negative counts")
    k = cm.shape[0]
    names = [str(i) for i in range(k)] if class_names is None else [str(n) for n in class_names]
    if len(names) != k:
        raise ValueError(f"got {len(names)} class names for a {k}x{k} confusion matrix")
    side = min(max(0.5 * k + 2.0, 4.5), 16.0)
    fig = new_figure(figsize or (side + 1.2, side), dpi)
    ax = fig.subplots()
    im = ax.imshow(cm, cmap="Blues", interpolation="nearest", vmin=0)
    fig.colorbar(im, ax=ax, label="count", shrink=0.85)
    ax.set_xticks(range(k), names, rotation=45 if max(map(len, names)) > 2 else 0, ha="right"
                  if max(map(len, names)) > 2 else "center", fontsize="small")
    ax.set_yticks(range(k), names, fontsize="small")
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    if k <= 30:
        peak = cm.max() if cm.max() > 0 else 1
        size = max(5.0, min(10.0, 120.0 / k))
        for i in range(k):
            for j in range(k):
                v = cm[i, j]
                text = f"{int(v)}" if float(v).is_integer() else f"{v:.3g}"
                ax.text(j, i, text, ha="center", va="center", fontsize=size,
                        color="white" if v > 0.55 * peak else "black")
    total = cm.sum()
    acc = np.trace(cm) / total if total > 0 else float("nan")
    head = title or "confusion matrix"
    ax.set_title(f"{head}: accuracy {100 * acc:.2f}% of {int(total) if float(total).is_integer() else total}")
    return save_figure(fig, out_png)
