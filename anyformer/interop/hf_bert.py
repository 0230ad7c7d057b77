"""Hugging Face `BertModel` <-> anyformer `TextEncoder` weights.

Post-norm blocks, an embedding LayerNorm, token types and a pooler. The same rules read a bare BERT
state dict + config.json without transformers (see minilm.py), and `text_encoder_to_hf` goes back.
Converted models are returned in eval mode. Nothing here imports transformers at import time.
"""
from __future__ import annotations

from typing import Any, Mapping

from torch import Tensor, nn

from ..models.base import config_from_dict
from ..models.text_encoder import TextEncoder, TextEncoderConfig
from ._common import (Rule, build, export_weights, fused, import_weights, linear, require_transformers, same,
                      state_dict_of)
from .hf import _HF_ACTIVATIONS, _activation, _get, _refuse, _unsqueezed

__all__ = ["text_encoder_from_hf", "text_encoder_from_state_dict", "text_encoder_to_hf",
           "text_encoder_to_hf_state_dict", "text_encoder_hf_config", "hf_bert_rules"]




def hf_bert_rules(config: TextEncoderConfig, *, base: str = "") -> list[Rule]:
    """anyformer TextEncoder key <-> Hugging Face BERT key (`base`: "bert." inside task models)."""
    e = f"{base}embeddings"
    rules = [same("tok_embed.weight", f"{e}.word_embeddings.weight"),
             _unsqueezed("pos.pos_embed", f"{e}.position_embeddings.weight"),
             same("type_embed.weight", f"{e}.token_type_embeddings.weight")]
    rules += linear("embed_norm", f"{e}.LayerNorm")
    for i in range(config.depth):
        o, t = f"backbone.blocks.{i}", f"{base}encoder.layer.{i}"
        rules += [fused(f"{o}.attn.qkv.{p}", [f"{t}.attention.self.{x}.{p}" for x in ("query", "key", "value")])
                  for p in ("weight", "bias")]
        rules += linear(f"{o}.attn.proj", f"{t}.attention.output.dense")
        rules += linear(f"{o}.norm1", f"{t}.attention.output.LayerNorm")
        rules += linear(f"{o}.mlp.fc1", f"{t}.intermediate.dense") + linear(f"{o}.mlp.fc2", f"{t}.output.dense")
        rules += linear(f"{o}.norm2", f"{t}.output.LayerNorm")
    if config.pooler:
        rules += linear("pooler", f"{base}pooler.dense")
    return rules


def text_encoder_config_from_hf(config: Any, *, pooler: bool = True, **overrides: Any) -> TextEncoderConfig:
    """TextEncoderConfig for a BERT config (a transformers config or config.json as a dict)."""
    problems = []
    if _get(config, "position_embedding_type", "absolute") != "absolute":
        problems.append(f"position_embedding_type={_get(config, 'position_embedding_type')!r}")
    if _get(config, "is_decoder", False) or _get(config, "add_cross_attention", False):
        problems.append("is_decoder / add_cross_attention")
    _refuse("BERT model", problems)
    values = dict(vocab_size=_get(config, "vocab_size"), max_positions=_get(config, "max_position_embeddings"),
                  type_vocab_size=_get(config, "type_vocab_size", 2), width=_get(config, "hidden_size"),
                  depth=_get(config, "num_hidden_layers"), heads=_get(config, "num_attention_heads"),
                  mlp_hidden=_get(config, "intermediate_size"), activation=_activation(config, "hidden_act", "gelu"),
                  norm_eps=_get(config, "layer_norm_eps", 1e-12), dropout=_get(config, "hidden_dropout_prob", 0.1),
                  attn_dropout=_get(config, "attention_probs_dropout_prob", 0.1), pooler=pooler)
    return config_from_dict(TextEncoderConfig, {**values, **overrides})


def text_encoder_from_state_dict(state_dict: Mapping[str, Tensor], config: Any, **overrides: Any) -> TextEncoder:
    """A TextEncoder from a BERT state dict and its config (dict or object); no transformers needed."""
    sd = dict(state_dict)
    task_model = "embeddings.word_embeddings.weight" not in sd and "bert.embeddings.word_embeddings.weight" in sd
    base = "bert." if task_model else ""
    if base:  # a task model's checkpoint: the encoder only (heads are not an encoder's business)
        sd = {k: v for k, v in sd.items() if k.startswith(base)}
    pooler = f"{base}pooler.dense.weight" in sd
    cfg = text_encoder_config_from_hf(config, pooler=pooler, **overrides)
    enc = build(TextEncoder, cfg)
    import_weights(enc, hf_bert_rules(cfg, base=base), sd, "BERT weights",
                   ignore=[r"embeddings\.position_ids$", r"embeddings\.token_type_ids$"])
    return enc.eval()


def text_encoder_from_hf(model: nn.Module, **overrides: Any) -> TextEncoder:
    """A TextEncoder with the weights of a Hugging Face `BertModel`."""
    return text_encoder_from_state_dict(state_dict_of(model, "BERT"), model.config, **overrides)


def text_encoder_hf_config(enc: TextEncoder) -> Any:
    c = enc.config
    if c.activation not in _HF_ACTIVATIONS:
        raise ValueError(f"this TextEncoder cannot be converted: activation={c.activation!r}")
    return require_transformers().BertConfig(
        vocab_size=c.vocab_size, max_position_embeddings=c.max_positions, type_vocab_size=c.type_vocab_size,
        hidden_size=c.width, num_hidden_layers=c.depth, num_attention_heads=c.heads,
        intermediate_size=c.mlp_hidden, hidden_act=_HF_ACTIVATIONS[c.activation], layer_norm_eps=c.norm_eps,
        hidden_dropout_prob=c.dropout, attention_probs_dropout_prob=c.attn_dropout)


def text_encoder_to_hf_state_dict(enc: TextEncoder) -> dict[str, Tensor]:
    """`enc`'s weights under `BertModel`'s names. Needs no transformers."""
    return export_weights(enc, hf_bert_rules(enc.config))


def text_encoder_to_hf(enc: TextEncoder) -> nn.Module:
    """A transformers `BertModel` with `enc`'s weights, in eval mode."""
    transformers = require_transformers()
    model = build(transformers.BertModel, text_encoder_hf_config(enc), add_pooling_layer=enc.config.pooler)
    sd = text_encoder_to_hf_state_dict(enc)
    for k, v in model.state_dict().items():  # position-id buffers, where a version keeps them
        if k not in sd and k.endswith(("position_ids", "token_type_ids")):
            sd[k] = v
    model.load_state_dict(sd, strict=True)
    return model.eval()
