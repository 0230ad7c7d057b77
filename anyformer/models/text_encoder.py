"""BERT-style text encoder: token + position + segment embeddings, LayerNorm, post-norm blocks."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..nn import LearnedPosition, TokenEmbedding, Transformer
from ..nn.dropout import Dropout
from .base import Model, check_seq_len, check_sizes, matmul_weights


@dataclass
class TextEncoderConfig:
    vocab_size: int = 30522
    max_positions: int = 512
    type_vocab_size: int = 2
    width: int = 768
    depth: int = 12
    heads: int = 12
    mlp_hidden: int = 3072
    activation: str = "gelu"
    norm_eps: float = 1e-12
    dropout: float = 0.1
    attn_dropout: float = 0.1
    pooler: bool = True              # BERT's tanh layer on the first token
    attn_impl: str = "auto"

    def __post_init__(self) -> None:
        check_sizes(self, ("vocab_size", "max_positions", "type_vocab_size", "width", "depth", "heads", "mlp_hidden"))


class TextEncoder(Model):
    """`enc(input_ids, attention_mask)` -> hidden states (B, N, D)."""

    family = "text-encoder"
    config_class = TextEncoderConfig

    def __init__(self, config: TextEncoderConfig) -> None:
        super().__init__()
        self.config = c = config
        self.tok_embed = TokenEmbedding(c.vocab_size, c.width)
        self.pos = LearnedPosition(c.max_positions, c.width)
        self.type_embed = TokenEmbedding(c.type_vocab_size, c.width)
        self.embed_norm = nn.LayerNorm(c.width, eps=c.norm_eps)
        self.embed_drop = Dropout(c.dropout) if c.dropout > 0 else None
        self.backbone = Transformer(c.width, c.depth, c.heads, mlp_hidden=c.mlp_hidden, norm="post",
                                    final_norm=False, norm_eps=c.norm_eps, activation=c.activation,
                                    dropout=c.dropout, attn_dropout=c.attn_dropout, impl=c.attn_impl)
        self.pooler = nn.Linear(c.width, c.width) if c.pooler else None

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> Tensor:
        """input_ids (B, N); attention_mask (B, N), 1 for real tokens and 0 for padding -> hidden
        states (B, N, D). Attention weights: `nn.attention_weights(model, layers)` around the call."""
        x, mask = self._embed(input_ids, attention_mask, token_type_ids)
        return self.backbone(x, mask=mask)

    def _embed(self, input_ids: Tensor, attention_mask: Tensor | None,
               token_type_ids: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """Tokens (B, N, D) after the embedding norm, and the key-padding mask (True = a real token)."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.embed_norm(self.pos(self.tok_embed(input_ids)) + self.type_embed(token_type_ids))
        if self.embed_drop is not None:
            x = self.embed_drop(x)
        if attention_mask is None:
            return x, None
        if attention_mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask must have the shape of input_ids {tuple(input_ids.shape)}, "
                             f"got {tuple(attention_mask.shape)}")
        return x, attention_mask.bool()

    def pool(self, hidden: Tensor) -> Tensor:
        """BERT's pooled output: tanh(W h_[CLS] + b)."""
        if self.pooler is None:
            raise ValueError("this encoder was built with pooler=False")
        return torch.tanh(self.pooler(hidden[:, 0]))

    @torch.no_grad()
    def sentence_embedding(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """Mean of the real tokens' hidden states, L2-normalised (sentence-transformers' recipe)."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self(input_ids, attention_mask)
        m = attention_mask.to(hidden.dtype)[..., None]
        mean = (hidden * m).sum(1) / m.sum(1).clamp_min(1e-9)
        return F.normalize(mean, dim=-1)

    def forward_flops(self, seq_len: int | None = None) -> float:
        """Matmul FLOPs of a forward pass over one sequence of `seq_len` tokens (default:
        `max_positions`): 2 per block weight per token and 4 N^2 D per layer for attention's two
        products. Embeddings are lookups; the pooler is not part of the forward (see `pool`)."""
        c = self.config
        n = check_seq_len(seq_len, c.max_positions, 1, c.max_positions, "the model's max_positions")
        return float(2 * n * matmul_weights(self.backbone) + 4 * c.depth * n * n * c.width)

    @classmethod
    def from_hf(cls, model, **overrides) -> "TextEncoder":
        """From a Hugging Face BertModel."""
        from ..interop.hf_bert import text_encoder_from_hf
        return text_encoder_from_hf(model, **overrides)
