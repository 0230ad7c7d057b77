"""timm <-> anyformer ViT weights.

timm's standard `VisionTransformer` (class token, position table covering the class token,
fused qkv with bias, LayerNorm eps 1e-6, exact GELU, token pooling) has anyformer's ViT layout
almost name for name, so the conversion is a renaming. Also supported: register tokens (when
their positions are in the table, `no_embed_class=False`), layer scale, mean pooling without
`fc_norm`, headless models (`num_classes=0`: anyformer gets an identity classifier so that
`vit(images)` returns the pooled features), and loading at another image size by resampling the
position table exactly as timm does. Not supported, and refused by name: `no_embed_class`,
`fc_norm`, `norm_pre` (CLIP), attention pooling, qk-norm, SwiGLU MLPs.

A timm state dict carries no head count: pass `heads=`, or pass the model itself; otherwise the
head width is taken as 64, true of every standard ViT from Ti to L.
"""
from __future__ import annotations

from functools import partial
from typing import Any, Mapping

from torch import Tensor, nn

from ..models.base import config_from_dict
from ..models.vit import ViT, ViTConfig
from ..shapes import pair
from ._common import (Rule, build, count_blocks, export_weights, identity_head, import_weights, linear,
                      require_timm, resample_pos_embed, same, square_grid, state_dict_of)

WHAT = "timm ViT weights"


def _activation_of(act: nn.Module) -> str:
    name = type(act).__name__
    approx = getattr(act, "approximate", "none")
    if name == "GELUTanh" or (name == "GELU" and approx == "tanh"):
        return "gelu_tanh"
    if name == "GELU":
        return "gelu"
    raise ValueError(f"timm ViT with MLP activation {name} is not supported (anyformer converts GELU and tanh-GELU)")


def _facts_from_model(model: nn.Module) -> dict[str, Any]:
    """What a timm VisionTransformer instance says that its state dict does not."""
    needed = ("patch_embed", "blocks", "pos_embed")
    if not all(hasattr(model, a) for a in needed):
        raise TypeError(f"expected a timm VisionTransformer (with {', '.join(needed)}), got {type(model).__name__}")
    unsupported = []
    if getattr(model, "no_embed_class", False):
        unsupported.append("no_embed_class=True (positions not covering the class token)")
    for attr in ("fc_norm", "norm_pre"):
        mod = getattr(model, attr, None)
        if mod is not None and not isinstance(mod, nn.Identity):
            unsupported.append(f"{attr}={type(mod).__name__}")
    if getattr(model, "attn_pool", None) is not None:
        unsupported.append("attention pooling (global_pool='map')")
    pool = getattr(model, "global_pool", "token")
    if pool not in ("token", "avg"):
        unsupported.append(f"global_pool={pool!r}")
    if unsupported:
        raise ValueError(f"this timm ViT is not a standard one anyformer can convert: {'; '.join(unsupported)}")
    block = model.blocks[0]
    norm = block.norm1
    return {"heads": int(block.attn.num_heads), "grid": tuple(int(g) for g in model.patch_embed.grid_size),
            "pool": "cls" if pool == "token" else "mean", "norm_eps": float(getattr(norm, "eps", 1e-6)),
            "activation": _activation_of(block.mlp.act)}


def config_from_timm(model_or_state_dict: nn.Module | Mapping[str, Tensor], *, heads: int | None = None,
                     source_grid: tuple[int, int] | None = None) -> tuple[ViTConfig, bool]:
    """The ViTConfig matching a timm ViT (at its own image size), and whether it has a head."""
    sd = state_dict_of(model_or_state_dict, "timm ViT")
    facts = _facts_from_model(model_or_state_dict) if isinstance(model_or_state_dict, nn.Module) else {}
    for key in ("patch_embed.proj.weight", "pos_embed", "blocks.0.mlp.fc1.weight"):
        if key not in sd:
            raise ValueError(f"{WHAT} do not fit: missing keys (1): {key} (is this a timm VisionTransformer?)")
    width, in_chans, ph, pw = sd["patch_embed.proj.weight"].shape
    num_registers = int(sd["reg_token"].shape[1]) if "reg_token" in sd else 0
    class_token = "cls_token" in sd
    num_prefix = int(class_token) + num_registers
    n = sd["pos_embed"].shape[1] - num_prefix
    grid = tuple(source_grid) if source_grid else facts.get("grid") or square_grid(n, WHAT)
    heads = heads or facts.get("heads") or max(1, width // 64)
    has_head = "head.weight" in sd
    cfg = ViTConfig(image_size=(grid[0] * ph, grid[1] * pw), patch_size=(ph, pw), in_chans=in_chans,
                    num_classes=int(sd["head.weight"].shape[0]) if has_head else width, width=width,
                    depth=count_blocks(sd, "blocks"), heads=heads,
                    mlp_hidden=int(sd["blocks.0.mlp.fc1.weight"].shape[0]),
                    activation=facts.get("activation", "gelu"), class_token=class_token,
                    num_registers=num_registers, pool=facts.get("pool", "cls" if class_token else "mean"),
                    norm_eps=facts.get("norm_eps", 1e-6), bias="blocks.0.attn.qkv.bias" in sd,
                    layer_scale=1.0 if "blocks.0.ls1.gamma" in sd else None, final_norm="norm.weight" in sd)
    return cfg, has_head


def timm_rules(config: ViTConfig, head: bool = True) -> list[Rule]:
    """anyformer ViT key <-> timm VisionTransformer key, one rule per tensor."""
    c, b = config, config.bias
    rules = linear("patch_embed.proj", "patch_embed.proj", b) + [same("pos.pos_embed", "pos_embed")]
    if c.class_token:
        rules.append(same("prefix.cls_token", "cls_token"))
    if c.num_registers:
        rules.append(same("prefix.reg_token", "reg_token"))
    for i in range(c.depth):
        o, t = f"backbone.blocks.{i}", f"blocks.{i}"
        rules += linear(f"{o}.norm1", f"{t}.norm1") + linear(f"{o}.attn.qkv", f"{t}.attn.qkv", b)
        rules += linear(f"{o}.attn.proj", f"{t}.attn.proj", b) + linear(f"{o}.norm2", f"{t}.norm2")
        rules += linear(f"{o}.mlp.fc1", f"{t}.mlp.fc1", b) + linear(f"{o}.mlp.fc2", f"{t}.mlp.fc2", b)
        if c.layer_scale:
            rules += [same(f"{o}.ls1.gamma", f"{t}.ls1.gamma"), same(f"{o}.ls2.gamma", f"{t}.ls2.gamma")]
    if c.final_norm:
        rules += linear("backbone.norm", "norm")
    if head:
        rules += linear("head.fc", "head")
    return rules


def from_timm(model_or_state_dict: nn.Module | Mapping[str, Tensor], *, image_size: int | tuple[int, int] | None = None,
              heads: int | None = None, source_grid: tuple[int, int] | None = None, **overrides: Any) -> ViT:
    """A ViT with a timm ViT's weights, in eval mode; outputs equal timm's.

    `image_size`: load for another input size, resampling the position table (bicubic, as
    timm's `resample_abs_pos_embed`; non-square sizes too). `heads`: the head count when only a
    state dict is given (default width // 64). `source_grid`: the checkpoint's patch grid when it
    is not square and only a state dict is given. Other keyword arguments override ViTConfig
    fields (e.g. `attn_impl="explicit"`).
    """
    cfg, has_head = config_from_timm(model_or_state_dict, heads=heads, source_grid=source_grid)
    sd = state_dict_of(model_or_state_dict, "timm ViT")
    old_grid = cfg.grid
    cfg = config_from_dict(ViTConfig, {**cfg.__dict__, **overrides,
                                       **({"image_size": image_size} if image_size is not None else {})})
    if cfg.grid != old_grid:
        num_prefix = int(cfg.class_token) + cfg.num_registers
        sd["pos_embed"] = resample_pos_embed(sd["pos_embed"], cfg.grid, old_grid, num_prefix)
    vit = build(ViT, cfg)
    keep = () if has_head else ("head.fc.weight", "head.fc.bias")  # headless: the identity, set below
    import_weights(vit, timm_rules(cfg, head=has_head), sd, WHAT, keep=keep)
    if not has_head:
        identity_head(vit)
    return vit.eval()


def _check_exportable(vit: ViT) -> None:
    c = vit.config
    problems = []
    if c.position != "learned":
        problems.append(f"position={c.position!r} (timm adds a learned table)")
    if c.mlp_layers != 1:
        problems.append(f"mlp_layers={c.mlp_layers} (timm's MLP has one hidden layer)")
    if c.head_hidden:
        problems.append("head_hidden (timm's ViT has no pre-logits layer)")
    if c.activation not in ("gelu", "gelu_tanh"):
        problems.append(f"activation={c.activation!r}")
    if not c.bias:
        problems.append("bias=False (timm's patch embedding always has a bias)")
    if c.attn_locality:
        problems.append("attn_locality (timm's attention has no learned temperature or masked diagonal)")
    if c.pool == "attention":
        problems.append("pool='attention' (timm's ViT pools the class token or the plain mean)")
    if c.mlp_conv:
        problems.append("mlp_conv (timm's MLP is token-wise: no convolution over the patch grid)")
    if c.shifted_patches:
        problems.append("shifted_patches (timm's patch embedding sees the image alone)")
    if problems:
        raise ValueError(f"this ViT has no timm VisionTransformer equivalent: {'; '.join(problems)}")


def to_timm(vit: ViT, *, head: bool = True) -> dict[str, Tensor]:
    """A state dict that `timm VisionTransformer(**timm_kwargs(vit))` loads with strict=True.

    For a standard config that is simply the matching `timm.create_model(...)` name, e.g.
    vit_tiny_patch16_224 for `ViT.preset("vit-ti/16")`. `head=False` leaves the classifier out
    (for a timm model built with num_classes=0). Needs no timm.
    """
    _check_exportable(vit)
    return export_weights(vit, timm_rules(vit.config, head=head))


def timm_kwargs(vit: ViT, *, head: bool = True) -> dict[str, Any]:
    """Keyword arguments for `timm.models.vision_transformer.VisionTransformer` matching `vit`."""
    _check_exportable(vit)
    c = vit.config
    ratio = c.mlp_hidden / c.width
    if int(c.width * ratio) != c.mlp_hidden:  # timm computes int(width * mlp_ratio)
        ratio = (c.mlp_hidden + 0.5) / c.width
    kw: dict[str, Any] = dict(img_size=pair(c.image_size), patch_size=pair(c.patch_size), in_chans=c.in_chans,
                              num_classes=c.num_classes if head else 0, embed_dim=c.width, depth=c.depth,
                              num_heads=c.heads, mlp_ratio=ratio, qkv_bias=c.bias, class_token=c.class_token,
                              reg_tokens=c.num_registers, no_embed_class=False,
                              global_pool="token" if c.pool == "cls" else "avg", fc_norm=False,
                              init_values=c.layer_scale, final_norm=c.final_norm)
    if c.norm_eps != 1e-6:
        kw["norm_layer"] = partial(nn.LayerNorm, eps=c.norm_eps)
    if c.activation == "gelu_tanh":
        kw["act_layer"] = "gelu_tanh"
    return kw


def to_timm_model(vit: ViT, *, head: bool = True) -> nn.Module:
    """A timm VisionTransformer holding `vit`'s weights (needs timm), in eval mode."""
    require_timm()
    from timm.models.vision_transformer import VisionTransformer
    model = VisionTransformer(**timm_kwargs(vit, head=head), weight_init="skip")  # every weight is loaded next
    model.load_state_dict(to_timm(vit, head=head), strict=True)
    return model.eval()
