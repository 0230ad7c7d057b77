"""Figures of attention: an image's maps and rollout, a text's token-by-token heatmaps, and a
row of digits with the rollout laid over each (the MNIST run's attention.png)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from torch import Tensor, nn

from .capture import image_attention
from .plots import new_figure, save_figure
from .rollout import upsample_map


def _display_image(image: Tensor | np.ndarray) -> np.ndarray:
    """(C, H, W) or (H, W) [or (H, W, C)] float/uint8 -> (H, W) or (H, W, 3) floats in [0, 1].

    Floats already in [0, 1] are kept; other floats (normalised inputs) are min-max rescaled.
    """
    a = image.detach().cpu().numpy() if isinstance(image, Tensor) else np.asarray(image)
    if a.ndim == 3 and a.shape[0] in (1, 3, 4):
        a = np.moveaxis(a, 0, -1)
    elif not (a.ndim == 2 or (a.ndim == 3 and a.shape[-1] in (1, 3, 4))):
        raise ValueError(f"image must be (C, H, W) with 1, 3 or 4 channels, or (H, W); got shape {a.shape}")
    if a.ndim == 3:
        a = a[..., 0] if a.shape[-1] == 1 else a[..., :3]
    if a.dtype == np.uint8:
        return a.astype(np.float32) / 255.0
    a = a.astype(np.float32)
    lo, hi = float(a.min()), float(a.max())
    if lo < 0 or hi > 1:
        a = (a - lo) / max(hi - lo, 1e-12)
    return a


def _show_image(ax, img: np.ndarray) -> None:
    ax.imshow(img, cmap="gray" if img.ndim == 2 else None, vmin=0, vmax=1, interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([])


def _overlay(ax, heat: np.ndarray):
    """Heat map over an image, more opaque where it is hotter, so the image shows through the cold parts."""
    return ax.imshow(heat, cmap="jet", alpha=0.15 + 0.55 * np.clip(heat, 0, 1), vmin=0, vmax=1,
                     interpolation="bilinear")


def _name(k: int, class_names: Sequence[str] | None) -> str:
    return str(class_names[k]) if class_names is not None and 0 <= k < len(class_names) else str(k)


def _vmax(maps: np.ndarray) -> float:
    """Colour scale top: the 99.5th percentile, so one attention-sink patch does not black out the rest."""
    if maps.size == 0:
        return 1.0
    v = float(np.percentile(maps, 99.5))
    return v if v > 0 else float(maps.max()) or 1.0


def plot_image_attention(image: Tensor | np.ndarray, result: Mapping[str, Any], out_png: str | os.PathLike,
                         layers: Sequence[int] | None = None, heads: Sequence[int] | None = None,
                         title: str | None = None, *, index: int = 0, label: int | str | None = None,
                         class_names: Sequence[str] | None = None,
                         figsize: tuple[float, float] | None = None, dpi: int = 100) -> Path:
    """One image's attention: input, rollout and rollout overlay on top; below, a grid of the
    class token's attention to the patches for each layer (rows) and head (columns), sharing
    one colour bar. The title gives the predicted class and its probability, and the true
    label when given.

    image: (C, H, W) float or uint8 (the input as shown; normalised floats are rescaled).
    result: from `image_attention`; `index` picks the image within its batch.
    layers: layer numbers among `result["layers"]` (default all); heads: head indices (default all).
    """
    cls_maps = np.asarray(result["cls_maps"])
    have = [int(i) for i in result["layers"]]
    show_layers = have if layers is None else [int(i) for i in layers]
    missing = [i for i in show_layers if i not in have]
    if missing:
        raise ValueError(f"layers {missing} are not in the result (it holds layers {have}); "
                         f"ask image_attention(..., layers=...) for them")
    n_heads = cls_maps.shape[2]
    show_heads = list(range(n_heads)) if heads is None else [int(h) for h in heads]
    if any(not 0 <= h < n_heads for h in show_heads):
        raise ValueError(f"heads must lie in [0, {n_heads}); got {list(heads)}")
    b = np.asarray(result["probs"]).shape[0]
    if not 0 <= index < b:
        raise ValueError(f"index {index} is outside the batch of {b}")

    img = _display_image(image)
    probs = np.asarray(result["probs"])[index]
    pred = int(probs.argmax())
    head = f"predicted: {_name(pred, class_names)} ({100 * probs[pred]:.1f}%)"
    if label is not None:
        true = label if isinstance(label, str) else _name(int(label), class_names)
        ok = "" if isinstance(label, str) else ("  ✓" if int(label) == pred else "  ✗")
        head += f"   true: {true}{ok}"
    if title:
        head = f"{title}\n{head}"

    L, H = len(show_layers), len(show_heads)
    panel = 1.25
    top_h = 3.3
    width = max(10.0, H * panel + 1.6)
    height = top_h + (L * panel + 0.6 if L else 0) + (0.3 if title else 0)
    fig = new_figure(figsize or (width, height), dpi)
    fig.suptitle(head, fontsize="large")
    if L:
        top, bottom = fig.subfigures(2, 1, height_ratios=[top_h, L * panel + 0.6])
    else:
        top, bottom = fig, None

    roll = result.get("rollout")
    if roll is not None:
        ax_img, ax_roll, ax_over = top.subplots(1, 3)
        _show_image(ax_img, img)
        ax_img.set_title("input")
        r = np.asarray(roll)[index]
        # Its own min..max: rollout rows are near-uniform over patches, so a 0-based scale hides the pattern.
        im = ax_roll.imshow(r, cmap="inferno", interpolation="nearest")
        ax_roll.set_xticks([])
        ax_roll.set_yticks([])
        who = "class token" if result.get("query", "cls") == "cls" else "mean patch"
        ax_roll.set_title(f"attention rollout ({who} → patches)", fontsize="medium")
        top.colorbar(im, ax=ax_roll, shrink=0.8)
        over = upsample_map(r[None], img.shape[:2])[0]
        _show_image(ax_over, img)
        im2 = _overlay(ax_over, over)
        ax_over.set_title("rollout on the image", fontsize="medium")
        top.colorbar(im2, ax=ax_over, shrink=0.8, label="relative")
    else:
        ax_img = top.subplots(1, 1)
        _show_image(ax_img, img)
        ax_img.set_title("input (no rollout computed)")

    if bottom is not None:
        li = [have.index(i) for i in show_layers]
        maps = cls_maps[li][:, index][:, show_heads]  # (L, H, gh, gw)
        vmax = _vmax(maps)
        axes = bottom.subplots(L, H, squeeze=False)
        im = None
        for r_, layer in enumerate(show_layers):
            for c_, h in enumerate(show_heads):
                ax = axes[r_, c_]
                im = ax.imshow(maps[r_, c_], cmap="viridis", vmin=0, vmax=vmax, interpolation="nearest")
                ax.set_xticks([])
                ax.set_yticks([])
                if r_ == 0:
                    ax.set_title(f"head {h}", fontsize="small")
                if c_ == 0:
                    ax.set_ylabel(f"layer {layer}", fontsize="small")
        bottom.colorbar(im, ax=axes, shrink=0.9, extend="max" if maps.max() > vmax else "neither",
                        label="attention weight")
        who = "class token" if result.get("query", "cls") == "cls" else "mean patch token"
        bottom.suptitle(f"{who}'s attention to each patch, per layer (rows) and head (columns)",
                        fontsize="medium")
    return save_figure(fig, out_png)


def _token_label(t: str) -> str:
    """Make whitespace visible and keep matplotlib from reading '$' as mathtext."""
    t = str(t).replace("\n", "↵").replace("\t", "⇥").replace("\r", "")
    if t.strip() != t or t == "":
        t = t.replace(" ", "␣")
    return t.replace("$", r"\$")


def _as_layer_dict(attn: Any, index: int) -> dict[int, np.ndarray]:
    """Tensor / list / {layer: tensor} -> {layer: (H, T, T) numpy} for batch element `index`."""
    if isinstance(attn, Mapping):
        items = list(attn.items())
    elif isinstance(attn, (Tensor, np.ndarray)):
        items = [(0, attn)]
    else:
        items = list(enumerate(attn))
    out = {}
    for k, w in items:
        a = w.detach().float().cpu().numpy() if isinstance(w, Tensor) else np.asarray(w, dtype=np.float32)
        if a.ndim == 4:
            if not 0 <= index < a.shape[0]:
                raise ValueError(f"index {index} is outside the batch of {a.shape[0]}")
            a = a[index]
        elif a.ndim == 2:
            a = a[None]
        if a.ndim != 3 or a.shape[-1] != a.shape[-2]:
            raise ValueError(f"attention must be (B, heads, T, T), (heads, T, T) or (T, T); got {w.shape}")
        out[int(k)] = a
    if not out:
        raise ValueError("no attention weights given")
    return out


def plot_token_attention(tokens: Sequence[str], attn: Any, out_png: str | os.PathLike,
                         layers: Sequence[int] | None = None, heads: Sequence[int] | None = None, *,
                         index: int = 0, title: str | None = None,
                         figsize: tuple[float, float] | None = None, dpi: int = 100) -> Path:
    """Token-by-token attention heatmaps for a language model, tokens as tick labels.

    attn: what `nn.attention_weights(gpt, ...)` holds after `gpt(idx)` (a list of (B, H, T, T), one per layer
    asked), a {layer number: weights} dict, or one tensor. `layers` picks list positions (or
    dict keys); default all. `heads=None` shows the mean over heads, one panel per layer;
    a list of heads gives one row per layer and one column per head. Rows are queries (the
    token attending), columns keys; a causal model's upper triangle is left blank.
    """
    by_layer = _as_layer_dict(attn, index)
    keys = list(by_layer) if layers is None else [int(i) for i in layers]
    missing = [k for k in keys if k not in by_layer]
    if missing:
        raise ValueError(f"layers {missing} are not among the attention given ({list(by_layer)})")
    t = next(iter(by_layer.values())).shape[-1]
    labels = [_token_label(s) for s in tokens]
    if len(labels) != t:
        raise ValueError(f"got {len(labels)} tokens for attention over {t} positions")
    n_heads = next(iter(by_layer.values())).shape[0]
    if heads is not None and any(not 0 <= int(h) < n_heads for h in heads):
        raise ValueError(f"heads must lie in [0, {n_heads}); got {list(heads)}")

    panels = []  # (title, (T, T))
    for k in keys:
        w = by_layer[k]
        if heads is None:
            panels.append((f"layer {k}, mean of {w.shape[0]} heads", w.mean(axis=0)))
        else:
            panels.extend((f"layer {k}, head {int(h)}", w[int(h)]) for h in heads)
    if heads is None:
        ncols = min(len(panels), 3)
    else:
        ncols = len(heads)
    nrows = -(-len(panels) // ncols)
    side = float(np.clip(0.16 * t + 1.6, 3.2, 9.0))
    fig = new_figure(figsize or (ncols * side + 1.2, nrows * side + 0.5), dpi)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    stack = np.stack([p for _, p in panels])
    causal = bool(np.all(np.triu(stack, k=1) == 0)) and t > 1
    vmax = float(stack.max()) or 1.0
    step = max(1, -(-t // 48))  # at most ~48 labels per axis, or they overlap
    font = float(np.clip(300.0 / t, 5, 10))
    im = None
    for ax, (name, w) in zip(axes.flat, panels):
        shown = np.ma.masked_where(np.triu(np.ones_like(w, dtype=bool), k=1), w) if causal else w
        im = ax.imshow(shown, cmap="viridis", vmin=0, vmax=vmax, interpolation="nearest")
        ax.set_facecolor("#eeeeee")
        ticks = list(range(0, t, step))
        ax.set_xticks(ticks, [labels[i] for i in ticks], rotation=90, fontsize=font)
        ax.set_yticks(ticks, [labels[i] for i in ticks], fontsize=font)
        ax.set_title(name, fontsize="medium")
        ax.set_xlabel("key (attended to)", fontsize="small")
        ax.set_ylabel("query (attending)", fontsize="small")
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    fig.colorbar(im, ax=axes, shrink=0.8, label="attention weight")
    if title:
        fig.suptitle(title)
    return save_figure(fig, out_png)


def plot_digit_attention(model: nn.Module, images: Tensor, labels: Sequence[int] | Tensor | None,
                         class_names: Sequence[str] | None, out_png: str | os.PathLike, *,
                         max_images: int = 8, figsize: tuple[float, float] | None = None,
                         dpi: int = 100) -> Path:
    """A few images, each shown plain (with its true label) and with the attention rollout laid
    over it (with the prediction and its probability, green when right, red when wrong).

    Used by the MNIST training run to write attention.png; works for any ViT classifier.
    images: (B, C, H, W) model inputs; the first `max_images` are drawn.
    """
    if not isinstance(images, Tensor) or images.dim() != 4:
        raise ValueError(f"images must be a (B, C, H, W) tensor, got "
                         f"{tuple(images.shape) if isinstance(images, Tensor) else type(images).__name__}")
    n = min(images.shape[0], max_images)
    if n < 1:
        raise ValueError("no images to plot")
    images = images[:n]
    true = None if labels is None else [int(v) for v in (labels.tolist() if isinstance(labels, Tensor)
                                                         else list(labels))][:n]
    if true is not None and len(true) < n:
        raise ValueError(f"got {len(true)} labels for {n} images")
    res = image_attention(model, images, layers=[])
    fig = new_figure(figsize or (1.7 * n + 0.9, 4.1), dpi)
    axes = fig.subplots(2, n, squeeze=False)
    correct = 0
    im = None
    for j in range(n):
        img = _display_image(images[j])
        _show_image(axes[0, j], img)
        axes[0, j].set_title("true: " + ("?" if true is None else _name(true[j], class_names)), fontsize="medium")
        _show_image(axes[1, j], img)
        im = _overlay(axes[1, j], upsample_map(res["rollout"][j:j + 1], img.shape[:2])[0])
        pred = int(res["pred"][j])
        p = float(res["probs"][j, pred])
        ok = true is None or true[j] == pred
        correct += int(true is not None and ok)
        axes[1, j].set_title(f"pred: {_name(pred, class_names)} ({100 * p:.0f}%)", fontsize="medium",
                             color="black" if true is None else ("tab:green" if ok else "tab:red"))
    axes[0, 0].set_ylabel("image", fontsize="medium")
    axes[1, 0].set_ylabel("rollout", fontsize="medium")
    fig.colorbar(im, ax=axes[1, :], shrink=0.9, label="relative")
    score = "" if true is None else f": {correct}/{n} correct"
    fig.suptitle(f"where the class token looks (attention rollout){score}", fontsize="medium")
    return save_figure(fig, out_png)
