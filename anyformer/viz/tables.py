"""A regression's predictions against the truth, on the rows it was scored on."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .plots import new_figure, save_figure


def plot_predictions(truth: np.ndarray, predicted: np.ndarray, target: str, out_png: str | os.PathLike) -> Path:
    """Predicted against true values, with the diagonal a perfect model would lie on, titled by R^2."""
    truth, predicted = np.asarray(truth, dtype=float), np.asarray(predicted, dtype=float)
    fig = new_figure((5.0, 5.0))
    ax = fig.subplots()
    ax.scatter(truth, predicted, s=8, alpha=0.6)
    lo, hi = float(min(truth.min(), predicted.min())), float(max(truth.max(), predicted.max()))
    ax.plot([lo, hi], [lo, hi], color="grey", linewidth=1)
    total = float(((truth - truth.mean()) ** 2).sum())
    r2 = 1 - float(((truth - predicted) ** 2).sum()) / total if total > 0 else float("nan")
    ax.set_xlabel(f"true {target}")
    ax.set_ylabel(f"predicted {target}")
    ax.set_title(f"{len(truth)} rows scored: R$^2$ {r2:.3f}")
    return save_figure(fig, out_png)
