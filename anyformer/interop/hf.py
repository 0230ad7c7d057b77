"""Hugging Face transformers <-> anyformer weights: ViT and GPT-2 (BERT: hf_bert.py).

- `ViTModel` / `ViTForImageClassification` <-> `ViT`. Hugging Face keeps query, key and value
  apart; anyformer fuses them into one qkv map. `ViTForImageClassification`'s classifier reads
  the class token after the final LayerNorm, as anyformer's head does. `ViTModel` has no
  classifier: its pooler (dense + tanh on the class token) becomes the head's pre-logits layer
  and the head's last layer is the identity, so `vit(images)` equals `pooler_output` and
  `vit.forward_features(images)` equals `last_hidden_state` (without a pooler, `vit(images)` is
  the normalised class token). Both the transformers 5 names (`layers.i.attention.q_proj`) and
  the 4.x names (`encoder.layer.i.attention.attention.query`) are read; `to_hf` writes the
  names of the installed version.
- `GPT2LMHeadModel` (or `GPT2Model`) <-> `GPT`: GPT-2's Conv1D stores linear maps transposed,
  its LM head is tied to the token table, its GELU is the tanh approximation ("gelu_new").
- `BertModel` <-> `TextEncoder`: in hf_bert.py.

Converted models are returned in eval mode. Nothing here imports transformers at import time.
"""
from __future__ import annotations

from typing import Any, Mapping

from torch import Tensor, nn

from ..models.base import config_from_dict
from ..models.gpt import GPT, GPTConfig
from ..models.vit import ViT, ViTConfig
from ..shapes import pair
from ._common import (Rule, build, export_weights, fused, identity_head, import_weights, linear,
                      require_transformers, resample_pos_embed, same, state_dict_of, transposed)

# Hugging Face activation names -> anyformer's.
_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                "gelu_fast": "gelu_tanh", "relu": "relu", "tanh": "tanh"}
_HF_ACTIVATIONS = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "tanh": "tanh"}


def _get(config: Any, name: str, default: Any = None) -> Any:
    return config.get(name, default) if isinstance(config, Mapping) else getattr(config, name, default)


def _activation(config: Any, key: str, default: str) -> str:
    act = _get(config, key, default)
    if act not in _ACTIVATIONS:
        raise ValueError(f"Hugging Face activation {act!r} is not supported; anyformer converts {sorted(_ACTIVATIONS)}")
    return _ACTIVATIONS[act]


def _refuse(what: str, problems: list[str]) -> None:
    if problems:
        raise ValueError(f"this {what} cannot be converted: {'; '.join(problems)}")


def _unsqueezed(ours: str, theirs: str) -> Rule:
    """Hugging Face position tables are (L, D) embeddings; anyformer's are (1, L, D) parameters."""
    return Rule(ours, (theirs,), lambda ts: ts[0][None], lambda t: [t[0]])


# ---------------------------------------------------------------------------------------------
# ViT

_VIT_LAYER_NAMES = {  # anyformer block part -> (transformers 5 name, transformers 4 name)
    "q": ("attention.q_proj", "attention.attention.query"),
    "k": ("attention.k_proj", "attention.attention.key"),
    "v": ("attention.v_proj", "attention.attention.value"),
    "attn.proj": ("attention.o_proj", "attention.output.dense"),
    "norm1": ("layernorm_before", "layernorm_before"),
    "norm2": ("layernorm_after", "layernorm_after"),
    "mlp.fc1": ("mlp.fc1", "intermediate.dense"),
    "mlp.fc2": ("mlp.fc2", "output.dense"),
}


def hf_vit_rules(config: ViTConfig, *, base: str = "", legacy: bool = False, classifier: bool = False,
                 pooler: bool = False) -> list[Rule]:
    """anyformer ViT key <-> Hugging Face ViT key. `base`: "vit." inside ViTForImageClassification;
    `legacy`: transformers 4.x names."""
    n = 1 if legacy else 0
    e = f"{base}embeddings"
    rules = [same("prefix.cls_token", f"{e}.cls_token"), same("pos.pos_embed", f"{e}.position_embeddings")]
    rules += linear("patch_embed.proj", f"{e}.patch_embeddings.projection")
    for i in range(config.depth):
        o, t = f"backbone.blocks.{i}", f"{base}encoder.layer.{i}" if legacy else f"{base}layers.{i}"
        names = {k: f"{t}.{v[n]}" for k, v in _VIT_LAYER_NAMES.items()}
        rules += [fused(f"{o}.attn.qkv.weight", [f"{names[x]}.weight" for x in "qkv"]),
                  fused(f"{o}.attn.qkv.bias", [f"{names[x]}.bias" for x in "qkv"])]
        for part in ("attn.proj", "norm1", "norm2", "mlp.fc1", "mlp.fc2"):
            rules += linear(f"{o}.{part}", names[part])
    rules += linear("backbone.norm", f"{base}layernorm")
    if pooler:
        rules += linear("head.pre_logits.0", f"{base}pooler.dense")
    if classifier:
        rules += linear("head.fc", "classifier")
    return rules


def _is_vit_classifier(model: nn.Module) -> bool:
    return hasattr(model, "vit") and hasattr(model, "classifier")


def vit_config_from_hf(model: nn.Module, **overrides: Any) -> tuple[ViTConfig, dict[str, Any]]:
    """ViTConfig for a Hugging Face ViT model, and how its weights are laid out."""
    cfg = model.config
    classifier = _is_vit_classifier(model)
    core = model.vit if classifier else model
    sd_keys = model.state_dict().keys()
    has_classifier = classifier and any(k.startswith("classifier.") for k in sd_keys)
    has_pooler = getattr(core, "pooler", None) is not None
    problems = []
    if not _get(cfg, "qkv_bias", True):
        problems.append("qkv_bias=False (anyformer's attention has biases on q, k, v and output alike)")
    if has_pooler and _get(cfg, "pooler_act", "tanh") not in _ACTIVATIONS:
        problems.append(f"pooler_act={_get(cfg, 'pooler_act')!r}")
    _refuse(type(model).__name__, problems)
    width = cfg.hidden_size
    pooled = _get(cfg, "pooler_output_size", None) or width
    values = dict(image_size=pair(cfg.image_size), patch_size=pair(cfg.patch_size), in_chans=cfg.num_channels,
                  num_classes=cfg.num_labels if has_classifier else (pooled if has_pooler else width),
                  width=width, depth=cfg.num_hidden_layers, heads=cfg.num_attention_heads,
                  mlp_hidden=cfg.intermediate_size, activation=_activation(cfg, "hidden_act", "gelu"),
                  norm_eps=cfg.layer_norm_eps, dropout=_get(cfg, "hidden_dropout_prob", 0.0),
                  attn_dropout=_get(cfg, "attention_probs_dropout_prob", 0.0))
    if has_pooler:
        values.update(head_hidden=pooled, head_activation=_ACTIVATIONS[_get(cfg, "pooler_act", "tanh")])
    layout = dict(base="vit." if classifier else "", legacy=any(".encoder.layer." in f".{k}" for k in sd_keys),
                  classifier=has_classifier, pooler=has_pooler)
    return config_from_dict(ViTConfig, {**values, **overrides}), layout


def vit_from_hf(model: nn.Module, **overrides: Any) -> ViT:
    """A ViT with the weights of a Hugging Face `ViTModel` or `ViTForImageClassification`.

    Keyword arguments override ViTConfig fields (`attn_impl`, or `image_size` to resample the
    position table bicubically, as timm does).
    """
    image_size = overrides.pop("image_size", None)
    cfg, layout = vit_config_from_hf(model, **overrides)
    sd = model.state_dict()
    if image_size is not None and pair(image_size) != pair(cfg.image_size):
        old = cfg.grid
        cfg = config_from_dict(ViTConfig, {**cfg.__dict__, "image_size": image_size})
        key = f"{layout['base']}embeddings.position_embeddings"
        if key in sd:
            sd[key] = resample_pos_embed(sd[key], cfg.grid, old, 1)
    vit = build(ViT, cfg)
    keep = () if layout["classifier"] else ("head.fc.weight", "head.fc.bias")
    import_weights(vit, hf_vit_rules(cfg, **layout), sd, f"Hugging Face {type(model).__name__} weights",
                   ignore=[r"embeddings\.mask_token$"], keep=keep)
    if not layout["classifier"]:
        identity_head(vit)
    return vit.eval()


VIT_ARCHITECTURES = ("ViTForImageClassification", "ViTModel")


def _check_vit_exportable(vit: ViT, architecture: str) -> None:
    if architecture not in VIT_ARCHITECTURES:
        raise ValueError(f"unknown architecture {architecture!r}; expected one of {VIT_ARCHITECTURES}")
    c = vit.config
    problems = []
    if c.position != "learned":
        problems.append(f"position={c.position!r}")
    if not c.class_token or c.num_registers:
        problems.append("no class token or register tokens (HF ViT has exactly one class token)")
    if c.pool != "cls":
        problems.append(f"pool={c.pool!r} (HF ViT reads the class token)")
    if c.mlp_layers != 1 or c.layer_scale or not c.final_norm or not c.bias:
        problems.append("mlp_layers > 1, layer scale, final_norm=False or bias=False")
    if c.activation not in _HF_ACTIVATIONS:
        problems.append(f"activation={c.activation!r}")
    if c.attn_locality:
        problems.append("attn_locality (HF ViT's attention has no learned temperature or masked diagonal)")
    if c.mlp_conv:
        problems.append("mlp_conv (HF ViT's MLP is token-wise: no convolution over the patch grid)")
    if c.shifted_patches:
        problems.append("shifted_patches (HF ViT's patch embedding sees the image alone)")
    if architecture == "ViTForImageClassification" and c.head_hidden:
        problems.append("head_hidden (ViTForImageClassification has a single linear classifier; "
                        "use architecture='ViTModel' to export the pre-logits layer as its pooler)")
    if architecture == "ViTModel" and c.head_hidden and c.head_activation not in _HF_ACTIVATIONS:
        problems.append(f"head_activation={c.head_activation!r}")
    _refuse(f"ViT (as {architecture})", problems)


def vit_hf_config(vit: ViT, architecture: str = "ViTForImageClassification") -> Any:
    """The transformers `ViTConfig` matching `vit`."""
    _check_vit_exportable(vit, architecture)
    transformers = require_transformers()
    c = vit.config
    image_size, patch_size = pair(c.image_size), pair(c.patch_size)
    return transformers.ViTConfig(
        hidden_size=c.width, num_hidden_layers=c.depth, num_attention_heads=c.heads, intermediate_size=c.mlp_hidden,
        hidden_act=_HF_ACTIVATIONS[c.activation], layer_norm_eps=c.norm_eps, num_channels=c.in_chans,
        image_size=image_size[0] if image_size[0] == image_size[1] else list(image_size),
        patch_size=patch_size[0] if patch_size[0] == patch_size[1] else list(patch_size),
        qkv_bias=True, num_labels=c.num_classes, hidden_dropout_prob=c.dropout,
        attention_probs_dropout_prob=c.attn_dropout, pooler_output_size=c.head_hidden or c.width,
        pooler_act=_HF_ACTIVATIONS.get(c.head_activation, "tanh"))


def vit_to_hf_state_dict(vit: ViT, architecture: str = "ViTForImageClassification", *,
                         legacy: bool = False) -> dict[str, Tensor]:
    """`vit`'s weights under Hugging Face names (`legacy`: transformers 4.x names). Needs no
    transformers. As `ViTModel`, a head with `head_hidden` becomes the pooler and the last
    classifier layer is left out; without `head_hidden` the model has no pooler."""
    _check_vit_exportable(vit, architecture)
    classifier = architecture == "ViTForImageClassification"
    rules = hf_vit_rules(vit.config, base="vit." if classifier else "", legacy=legacy, classifier=classifier,
                         pooler=not classifier and bool(vit.config.head_hidden))
    return export_weights(vit, rules)


def vit_to_hf(vit: ViT, architecture: str = "ViTForImageClassification") -> nn.Module:
    """A transformers `ViTForImageClassification` (or `ViTModel`) with `vit`'s weights, eval mode."""
    transformers = require_transformers()
    config = vit_hf_config(vit, architecture)
    if architecture == "ViTModel":
        model = build(transformers.ViTModel, config, add_pooling_layer=bool(vit.config.head_hidden))
    else:
        model = build(transformers.ViTForImageClassification, config)
    legacy = any(".encoder.layer." in f".{k}" for k in model.state_dict())
    model.load_state_dict(vit_to_hf_state_dict(vit, architecture, legacy=legacy), strict=True)
    return model.eval()


# ---------------------------------------------------------------------------------------------
# GPT-2


def hf_gpt2_rules(config: GPTConfig, *, base: str = "transformer.", export: bool = False,
                  lm_head: bool = True) -> list[Rule]:
    """anyformer GPT key <-> Hugging Face GPT-2 key. A tied LM head is read from the token table
    (checkpoints often store it once) and written under both names."""
    rules = [same("tok_embed.weight", f"{base}wte.weight"), _unsqueezed("pos.pos_embed", f"{base}wpe.weight")]
    for i in range(config.depth):
        o, t = f"backbone.blocks.{i}", f"{base}h.{i}"
        rules += linear(f"{o}.norm1", f"{t}.ln_1") + linear(f"{o}.norm2", f"{t}.ln_2")
        for ours, theirs in (("attn.qkv", "attn.c_attn"), ("attn.proj", "attn.c_proj"),
                             ("mlp.fc1", "mlp.c_fc"), ("mlp.fc2", "mlp.c_proj")):
            rules += [transposed(f"{o}.{ours}.weight", f"{t}.{theirs}.weight"),
                      same(f"{o}.{ours}.bias", f"{t}.{theirs}.bias")]
    rules += linear("backbone.norm", f"{base}ln_f")
    if config.tie_weights and not export:
        rules.append(same("lm_head.weight", f"{base}wte.weight"))
    elif lm_head:
        rules.append(same("lm_head.weight", "lm_head.weight"))
    return rules


def gpt_config_from_hf(config: Any, **overrides: Any) -> GPTConfig:
    problems = []
    if not _get(config, "scale_attn_weights", True):
        problems.append("scale_attn_weights=False")
    if _get(config, "scale_attn_by_inverse_layer_idx", False):
        problems.append("scale_attn_by_inverse_layer_idx=True")
    if _get(config, "add_cross_attention", False):
        problems.append("add_cross_attention=True")
    _refuse("GPT-2 model", problems)
    width = config.n_embd
    values = dict(vocab_size=config.vocab_size, context=config.n_positions, width=width, depth=config.n_layer,
                  heads=config.n_head, mlp_hidden=_get(config, "n_inner", None) or 4 * width,
                  activation=_activation(config, "activation_function", "gelu_new"),
                  norm_eps=config.layer_norm_epsilon, tie_weights=bool(_get(config, "tie_word_embeddings", True)),
                  dropout=_get(config, "resid_pdrop", 0.0), attn_dropout=_get(config, "attn_pdrop", 0.0))
    return config_from_dict(GPTConfig, {**values, **overrides})


def gpt_from_hf(model: nn.Module, **overrides: Any) -> GPT:
    """A GPT with the weights of a Hugging Face `GPT2LMHeadModel` (or `GPT2Model` with a tied head)."""
    cfg = gpt_config_from_hf(model.config, **overrides)
    sd = state_dict_of(model, "GPT-2")
    base = "transformer." if any(k.startswith("transformer.") for k in sd) else ""
    gpt = build(GPT, cfg)
    # Tied: lm_head.weight is the token table again; older transformers also stored attention-mask buffers.
    ignore = [r"\.attn\.(masked_)?bias$"] + ([r"^lm_head\.weight$"] if cfg.tie_weights else [])
    import_weights(gpt, hf_gpt2_rules(cfg, base=base), sd, f"Hugging Face {type(model).__name__} weights",
                   ignore=ignore)
    return gpt.eval()


def _check_gpt_exportable(gpt: GPT) -> None:
    c = gpt.config
    problems = []
    if c.position != "learned":
        problems.append(f"position={c.position!r} (GPT-2 adds a learned table)")
    if not c.bias:
        problems.append("bias=False")
    if c.activation not in _HF_ACTIVATIONS:
        problems.append(f"activation={c.activation!r}")
    _refuse("GPT (as GPT2LMHeadModel)", problems)


def gpt_hf_config(gpt: GPT) -> Any:
    _check_gpt_exportable(gpt)
    transformers = require_transformers()
    c = gpt.config
    special = min(50256, c.vocab_size - 1)  # GPT-2's <|endoftext|>, kept inside small vocabularies
    return transformers.GPT2Config(
        vocab_size=c.vocab_size, n_positions=c.context, n_embd=c.width, n_layer=c.depth, n_head=c.heads,
        n_inner=c.mlp_hidden or 4 * c.width, activation_function=_HF_ACTIVATIONS[c.activation],
        layer_norm_epsilon=c.norm_eps, tie_word_embeddings=c.tie_weights, resid_pdrop=c.dropout,
        embd_pdrop=c.dropout, attn_pdrop=c.attn_dropout, bos_token_id=special, eos_token_id=special)


def gpt_to_hf_state_dict(gpt: GPT) -> dict[str, Tensor]:
    """`gpt`'s weights under `GPT2LMHeadModel`'s names (lm_head.weight included). Needs no transformers."""
    _check_gpt_exportable(gpt)
    return export_weights(gpt, hf_gpt2_rules(gpt.config, export=True))


def gpt_to_hf(gpt: GPT) -> nn.Module:
    """A transformers `GPT2LMHeadModel` with `gpt`'s weights, in eval mode."""
    transformers = require_transformers()
    model = build(transformers.GPT2LMHeadModel, gpt_hf_config(gpt))
    sd = gpt_to_hf_state_dict(gpt)
    for k, v in model.state_dict().items():  # buffers some transformers versions keep in the state dict
        if k not in sd and k.endswith(("attn.bias", "attn.masked_bias")):
            sd[k] = v
    model.load_state_dict(sd, strict=True)
    return model.eval()


__all__ = ["vit_from_hf", "vit_to_hf", "vit_to_hf_state_dict", "vit_hf_config", "gpt_from_hf", "gpt_to_hf",
           "gpt_to_hf_state_dict", "gpt_hf_config", "hf_vit_rules", "hf_gpt2_rules"]
