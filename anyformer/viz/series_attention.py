"""Attention over time: where a series classifier's class token draws from, drawn on the series.

The class token's row of the attention rollout (Abnar & Zuidema, 2020) over all layers gives one
weight per patch token (for a model whose head reads the mean of the tokens, the mean of their rows); a patch's weight is spread over its steps, and with per-channel patching
the channels' tokens of one time are added, so that the map is one weight per time step.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import Tensor, nn

from ..nn.transformer import attention_weights
from .plots import new_figure, save_figure
from .rollout import attention_rollout

__all__ = ["series_attention", "plot_series_attention"]


@torch.no_grad()
def series_attention(model: nn.Module, series: Tensor, lengths: Tensor | None = None,
                     layers: Sequence[int] | None = None) -> tuple[Tensor, np.ndarray]:
    """(probabilities (B, classes), attention over time (B, T) as numpy, each row summing to one
    over the steps the series has). `layers`: the layers rolled out (default all)."""
    was = model.training
    model.eval()
    device = next(model.parameters()).device  # a run's model may sit on a GPU; the pictures are drawn on the CPU
    with attention_weights(model, list(layers) if layers else True) as attn:
        logits = model(series.to(device), None if lengths is None else lengths.to(device))
    logits, attn = logits.cpu(), [a.cpu() for a in attn]
    model.train(was)
    c = model.config
    B, _, T = series.shape
    rollout = attention_rollout(attn)                                    # (B, 1 + N, 1 + N)
    if getattr(c, "pool", "cls") == "mean":
        # The head reads the mean of the tokens a series has: their rows of the rollout, averaged.
        steps_had = torch.full((B,), T) if lengths is None else lengths.cpu().clamp(max=T)
        has = torch.arange(rollout.shape[1] - 1)[None] % c.patches * c.stride < steps_had[:, None]
        rows = torch.cat([torch.ones(B, 1, dtype=torch.bool), has], dim=1).float()
        cls_row = (rows[:, :, None] * rollout).sum(1)[:, 1:] / rows.sum(1, keepdim=True)
    else:
        cls_row = rollout[:, 0, 1:]                                      # (B, N) from the class token
    per_time = cls_row.reshape(B, -1, c.patches).sum(1) if c.patching == "channel" else cls_row
    # Each patch's weight spread evenly over the steps it covers (overlapping patches add up).
    cover = torch.zeros(B, (c.patches - 1) * c.stride + c.patch_size)
    for j in range(c.patches):
        cover[:, j * c.stride:j * c.stride + c.patch_size] += per_time[:, j:j + 1] / c.patch_size
    steps = cover[:, :T]                                                  # (B, T)
    if lengths is not None:
        steps = steps * (torch.arange(T)[None] < lengths.cpu()[:, None])
    steps = steps / steps.sum(1, keepdim=True).clamp_min(1e-12)
    return logits.float().softmax(-1), steps.numpy()


def plot_series_attention(model: nn.Module, series: Tensor, lengths: Tensor | None, out_png: str | os.PathLike, *,
                          classes: Sequence[str] | None = None, truth: Sequence[int] | None = None,
                          layers: Sequence[int] | None = None, max_channels: int = 12,
                          shown: Tensor | None = None) -> Path:
    """One panel per series: its channels as lines over a heatmap of the attention per time step,
    titled with the predicted class (and the true one when given). `shown`: the values to draw
    (e.g. the raw series), where `series` is what the model reads (standardised)."""
    probs, heat = series_attention(model, series, lengths, layers)
    B, C, T = series.shape
    fig = new_figure((9, 2.2 * B))
    axes = np.atleast_1d(fig.subplots(B, 1, squeeze=False)[:, 0])
    for b, ax in enumerate(axes):
        n = int(lengths[b]) if lengths is not None else T
        values = (series if shown is None else shown)[b, :, :n].float().numpy()
        lo, hi = float(values.min()), float(values.max())
        pad = 0.05 * (hi - lo or 1.0)
        ax.imshow(heat[b:b + 1, :n], aspect="auto", cmap="Reds", extent=(-0.5, n - 0.5, lo - pad, hi + pad),
                  # From the least to the most attended step: rollout keeps every step's share above zero.
                  vmin=float(heat[b, :n].min()), vmax=float(heat[b, :n].max()), alpha=0.6, interpolation="nearest")
        for ch in range(min(C, max_channels)):
            ax.plot(np.arange(n), values[ch], lw=1.0)
        k = int(probs[b].argmax())
        name = lambda i: classes[i] if classes is not None else str(i)
        title = f"predicted {name(k)} ({float(probs[b, k]):.2f})"
        if truth is not None:
            title += f", true {name(int(truth[b]))}"
        if C > max_channels:
            title += f"; first {max_channels} of {C} channels shown"
        ax.set_title(title, fontsize=9)
        ax.set_xlim(-0.5, n - 0.5)
        ax.set_ylabel("value")
    axes[-1].set_xlabel("time step (shading: attention of the class token, rolled out over layers)")
    return save_figure(fig, out_png)
