"""See what a transformer attends to: per-layer attention maps, attention rollout, and figures.

Attention rollout (Abnar & Zuidema, 2020): fuse each layer's heads into one (N, N) matrix A_l,
add the identity for the residual stream and renormalise the rows, then multiply through the
layers, first layer first: R = Â_L ... Â_2 Â_1. Row i of R says how much of output token i is
drawn from each input token; every row sums to one.

Memory. `model(x, return_attention=True)` holds every layer's (B, H, N, N) weights at once:
for ViT-B/16 at 384 x 384 (N = 577), batch 1, that is 12 layers x 12 heads x 577^2 x 4 bytes
~= 192 MB on top of the forward pass. `stream_attention` and `image_attention` do not keep them:
each layer's weights are handed on (fused into the running product, the class-token row cut out)
as soon as the layer has computed them and then dropped, so the extra peak is one layer's
(B, H, N, N) (16 MB there) plus the (B, N, N) product (1.3 MB). Asking for a subset of layers
without the rollout computes only those layers' weights; the rest stay on the fused path.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .plots import new_figure, save_figure

HeadFusion = Literal["mean", "max", "min"]
HEAD_FUSIONS = ("mean", "max", "min")


# --------------------------------------------------------------------------- maths


def fuse_heads(weights: Tensor, head_fusion: HeadFusion = "mean") -> Tensor:
    """(B, H, Nq, Nk) attention weights -> (B, Nq, Nk), fused over heads, in float32."""
    if head_fusion not in HEAD_FUSIONS:
        raise ValueError(f"unknown head_fusion {head_fusion!r}; expected one of {HEAD_FUSIONS}")
    if weights.dim() != 4:
        raise ValueError(f"attention weights must have shape (B, heads, N, N), got {tuple(weights.shape)}")
    w = weights.float()
    return {"mean": lambda: w.mean(dim=1), "max": lambda: w.amax(dim=1), "min": lambda: w.amin(dim=1)}[head_fusion]()


def _rollout_step(acc: Tensor | None, weights: Tensor, residual: bool, head_fusion: HeadFusion) -> Tensor:
    """One layer of rollout: acc <- normalise(fuse(W) + I) @ acc."""
    a = fuse_heads(weights, head_fusion)
    n = a.shape[-1]
    if a.shape[-2] != n:
        raise ValueError(f"rollout needs square self-attention weights, got (..., {a.shape[-2]}, {n})")
    if residual:
        a = a + torch.eye(n, dtype=a.dtype, device=a.device)
    # A row that attends to nothing (fully masked, no residual) stays zero instead of NaN.
    a = a / a.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(a.dtype).tiny)
    if acc is None:
        return a
    if acc.shape != a.shape:
        raise ValueError(f"layers' attention shapes differ: {tuple(acc.shape)} then {tuple(a.shape)}")
    return a @ acc


def attention_rollout(attn: Iterable[Tensor], residual: bool = True, head_fusion: HeadFusion = "mean") -> Tensor:
    """Attention rollout over layers given first to last: (B, H, N, N) each -> (B, N, N) float32.

    `attn` may be a list (as `model(x, return_attention=True)` returns) or any iterable, e.g. a
    generator that yields one layer at a time: each layer is folded into the product as it comes,
    so with a generator only one layer's weights need exist at once. Rows sum to one (unless a
    row attends to nothing and `residual=False`).
    """
    acc = None
    for w in attn:
        acc = _rollout_step(acc, w, residual, head_fusion)
    if acc is None:
        raise ValueError("attention_rollout needs the weights of at least one layer")
    return acc


def _query_row(weights: Tensor, num_prefix: int, grid: tuple[int, int], query: int | None) -> Tensor:
    """(..., N, N) -> (..., gh, gw): row `query`'s weights on the patch tokens; None: the mean patch row."""
    gh, gw = int(grid[0]), int(grid[1])
    n = weights.shape[-1]
    if n != num_prefix + gh * gw:
        raise ValueError(f"attention over {n} tokens does not fit {num_prefix} prefix tokens + a {gh}x{gw} "
                         f"patch grid ({num_prefix + gh * gw} tokens)")
    if query is None:
        row = weights[..., num_prefix:, num_prefix:].mean(dim=-2)
    else:
        if not 0 <= query < n:
            raise ValueError(f"query token {query} is outside the {n} tokens")
        row = weights[..., query, num_prefix:]
    return row.reshape(*row.shape[:-1], gh, gw)


def cls_attention_maps(attn: Sequence[Tensor] | Tensor, num_prefix: int, grid: tuple[int, int], *,
                       query: int | None = 0) -> Tensor:
    """The class token's attention to the patch tokens: (B, H, N, N) per layer -> (L, B, H, gh, gw).

    Tokens are [class, registers..., patches in row-major grid order] as ViT builds them;
    `num_prefix` (`vit.prefix.num_prefix`) counts the class and register tokens. `query` is the
    row read (0, the class token); `None` averages the patch tokens' rows (for models pooled by
    the mean, with no class token). A single (B, H, N, N) tensor counts as one layer.
    """
    layers = [attn] if isinstance(attn, Tensor) else list(attn)
    for i, w in enumerate(layers):
        if w.dim() != 4:
            raise ValueError(f"layer {i}: attention weights must be (B, heads, N, N), got {tuple(w.shape)}")
    return torch.stack([_query_row(w.float(), num_prefix, grid, query) for w in layers])


def rollout_map(rollout: Tensor, num_prefix: int, grid: tuple[int, int], *, query: int | None = 0) -> Tensor:
    """(B, N, N) rollout -> (B, gh, gw): how much the class token's output draws from each patch."""
    if rollout.dim() != 3:
        raise ValueError(f"rollout must have shape (B, N, N), got {tuple(rollout.shape)}")
    return _query_row(rollout, num_prefix, grid, query)


def upsample_map(maps: Tensor | np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """(B, gh, gw) -> (B, H, W) bilinear, each map rescaled to [0, 1] (for overlays)."""
    m = torch.as_tensor(np.asarray(maps) if isinstance(maps, np.ndarray) else maps).float()
    if m.dim() != 3:
        raise ValueError(f"maps must have shape (B, gh, gw), got {tuple(m.shape)}")
    up = F.interpolate(m[:, None].cpu(), size=tuple(int(s) for s in size), mode="bilinear",
                       align_corners=False)[:, 0]
    lo = up.amin(dim=(-2, -1), keepdim=True)
    hi = up.amax(dim=(-2, -1), keepdim=True)
    return ((up - lo) / (hi - lo).clamp_min(1e-12)).numpy()


# --------------------------------------------------------------------------- running models


def _blocks(model: nn.Module) -> nn.ModuleList:
    trunk = getattr(model, "backbone", model)
    blocks = getattr(trunk, "blocks", None)
    if not isinstance(blocks, nn.ModuleList):
        raise TypeError(f"{type(model).__name__} has no transformer backbone (expected .backbone.blocks)")
    return blocks


def _layer_list(layers: Sequence[int] | None, depth: int) -> list[int]:
    if layers is None:
        return list(range(depth))
    out = []
    for i in layers:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not -depth <= i < depth:
            raise ValueError(f"layers must be ints in [-{depth}, {depth}) for a {depth}-layer model; got {i!r}")
        out.append(int(i) % depth)
    return out


def stream_attention(model: nn.Module, inputs: Any, on_layer: Callable[[int, Tensor], None],
                     layers: bool | Sequence[int] = True, **kwargs: Any) -> Any:
    """Run `model(inputs, return_attention=layers, **kwargs)`, handing each layer's (B, H, N, N)
    weights to `on_layer(layer, weights)` as soon as that layer has computed them.

    The weights are dropped right after (the model's own list gets empty placeholders), so the
    extra memory is one layer's weights, not all of them. Returns the model's output without the
    attention list (ViT: logits; GPT: logits; backbone: tokens). Works for any model whose
    backbone is an anyformer `Transformer` (`model.backbone` or the model itself). Run it under
    `torch.no_grad()` for the memory saving: with autograd on, the weights stay saved for backward.
    """
    blocks = _blocks(model)

    def hook(index: int):
        def fn(module, args, output):
            x, w = output
            if w is None or w.numel() == 0:
                return None
            on_layer(index, w)
            return x, w.new_empty(0)
        return fn

    handles = [b.register_forward_hook(hook(i)) for i, b in enumerate(blocks)]
    try:
        out = model(inputs, return_attention=layers, **kwargs)
    finally:
        for h in handles:
            h.remove()
    return out[0] if isinstance(out, tuple) else out


@torch.no_grad()
def image_attention(model: nn.Module, images: Tensor, layers: Sequence[int] | None = None, *,
                    rollout: bool = True, residual: bool = True,
                    head_fusion: HeadFusion = "mean") -> dict[str, Any]:
    """Where a ViT looks, as numpy arrays for notebooks and figures.

    images: (B, C, H, W) or (C, H, W) floats, preprocessed as the model expects.
    layers: the layers whose per-head class-token maps to return (default all; negative counts
    from the end). With `rollout=True` every layer's weights are needed and are streamed one
    layer at a time (see the module docstring); with `rollout=False` only `layers` leave the
    fused attention path.

    Returns a dict:
      logits, probs (B, K); pred (B,); layers (L,) the layer numbers of cls_maps;
      cls_maps (L, B, heads, gh, gw) the class token's attention to each patch;
      rollout (B, gh, gw) the class token's row of the rollout over patches (None if rollout=False);
      overlay (B, H, W) the rollout upsampled bilinearly to the image and rescaled to [0, 1];
      num_prefix, grid, query ("cls", or "mean" for a model without a class token).
    """
    if not isinstance(images, Tensor):
        raise TypeError(f"images must be a torch.Tensor (B, C, H, W), got {type(images).__name__}")
    if images.dim() == 3:
        images = images[None]
    patch_embed = getattr(model, "patch_embed", None)
    if patch_embed is None:
        raise TypeError(f"image_attention needs a ViT (a model with patch_embed); got {type(model).__name__}")
    blocks = _blocks(model)
    asked = _layer_list(layers, len(blocks))
    prefix = getattr(model, "prefix", None)
    num_prefix = prefix.num_prefix if prefix is not None else 0
    query = 0 if prefix is not None and getattr(prefix, "cls_token", None) is not None else None
    grid = patch_embed.grid(images.shape[-2], images.shape[-1])  # the images', not the config's
    param = next(model.parameters(), None)
    if param is not None:
        images = images.to(param.device)

    was_training = model.training
    model.eval()
    try:
        cls_rows: dict[int, Tensor] = {}
        if rollout:
            acc: list[Tensor | None] = [None]

            def on_layer(i: int, w: Tensor) -> None:
                acc[0] = _rollout_step(acc[0], w, residual, head_fusion)
                if i in asked:
                    cls_rows[i] = _query_row(w.float(), num_prefix, grid, query).cpu()

            logits = stream_attention(model, images, on_layer, layers=True)
            roll = rollout_map(acc[0], num_prefix, grid, query=query).cpu()
        else:
            logits, attn = model(images, return_attention=asked)
            for i, w in zip(asked, attn):
                cls_rows[i] = _query_row(w.float(), num_prefix, grid, query).cpu()
            roll = None
    finally:
        model.train(was_training)

    b = images.shape[0]
    heads = blocks[0].attn.heads
    cls_maps = (torch.stack([cls_rows[i] for i in asked]) if asked
                else torch.zeros(0, b, heads, *grid)).numpy()
    logits = logits.float().cpu()
    return {
        "logits": logits.numpy(),
        "probs": logits.softmax(dim=-1).numpy(),
        "pred": logits.argmax(dim=-1).numpy(),
        "layers": np.asarray(asked, dtype=np.int64),
        "cls_maps": cls_maps,
        "rollout": None if roll is None else roll.numpy(),
        "overlay": None if roll is None else upsample_map(roll, images.shape[-2:]),
        "num_prefix": num_prefix,
        "grid": grid,
        "query": "cls" if query == 0 else "mean",
    }


# --------------------------------------------------------------------------- figures


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

    attn: what `gpt(idx, return_attention=...)` returns (a list of (B, H, T, T), one per layer
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
