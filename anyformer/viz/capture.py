"""Attention taken from a model: streamed layer by layer, and the maps of an image model.

Memory. `vit(x, return_attention=True)` holds every layer's (B, H, N, N) weights at once:
for ViT-B/16 at 384 x 384 (N = 577), batch 1, that is 12 layers x 12 heads x 577^2 x 4 bytes
~= 192 MB on top of the forward pass. `stream_attention` and `image_attention` do not keep them:
each layer's weights are handed on (fused into the running product, the class-token row cut out)
as soon as the layer has computed them and then dropped, so the extra peak is one layer's
(B, H, N, N) (16 MB there) plus the (B, N, N) product (1.3 MB). Asking for a subset of layers
without the rollout computes only those layers' weights; the rest stay on the fused path.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from ..nn.transformer import attention_weights, backbone_of
from .rollout import HeadFusion, query_row, rollout_map, rollout_step, upsample_map


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
    """Run `model(inputs, **kwargs)`: each asked layer's (B, H, N, N) weights go to
    `on_layer(layer, weights)` as soon as that layer has computed them, and nothing keeps them after,
    so the extra memory is one layer's weights, not all of them. Returns the model's output (ViT:
    logits; GPT: logits; text encoder and backbone: tokens). Works for anyformer's models and its
    `Transformer` (`nn.attention_weights`). Run it under `torch.no_grad()` for the memory saving:
    with autograd on, the weights stay saved for backward.
    """
    with attention_weights(model, layers, on_layer):
        return model(inputs, **kwargs)


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
    blocks = backbone_of(model).blocks
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
    # A model scored on several views of each image (ViT `flip_average`, `shift_average`): the maps are of the
    # images as given, the logits the model's own over every view (what eval, predict and serve answer).
    config = getattr(model, "config", None)
    viewed = bool(getattr(config, "flip_average", False)) or bool(getattr(config, "shift_average", 0))
    one_view = {"views": False} if viewed else {}
    try:
        cls_rows: dict[int, Tensor] = {}
        if rollout:
            acc: list[Tensor | None] = [None]

            def on_layer(i: int, w: Tensor) -> None:
                acc[0] = rollout_step(acc[0], w, residual, head_fusion)
                if i in asked:
                    cls_rows[i] = query_row(w.float(), num_prefix, grid, query).cpu()

            logits = stream_attention(model, images, on_layer, layers=True, **one_view)
            roll = rollout_map(acc[0], num_prefix, grid, query=query).cpu()
        else:
            with attention_weights(model, asked) as attn:
                logits = model(images, **one_view)
            for i, w in zip(asked, attn):
                cls_rows[i] = query_row(w.float(), num_prefix, grid, query).cpu()
            roll = None
        if viewed:  # a second pass over every view: attention maps are not the hot path
            logits = model(images)
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
