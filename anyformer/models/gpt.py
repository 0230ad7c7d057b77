"""GPT: token lookup + positions -> causal backbone -> LM head (GPT-2's layout: Radford et al. 2019)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import torch
from torch import Tensor, nn

from ..nn import KVCache, LearnedPosition, LMHead, SinusoidalPosition, TokenEmbedding, Transformer
from ..nn.dropout import Dropout
from . import generation
from .base import Model, check_seq_len, check_sizes, matmul_weights

GPT_POSITIONS = ("learned", "sinusoidal", "rotary", "none")


@dataclass
class GPTConfig:
    vocab_size: int = 50257
    context: int = 1024
    width: int = 768
    depth: int = 12
    heads: int = 12
    mlp_hidden: int | None = None    # default 4 * width
    activation: str = "gelu_tanh"
    position: str = "learned"        # learned | sinusoidal | rotary | none
    norm_eps: float = 1e-5
    bias: bool = True
    tie_weights: bool = True
    dropout: float = 0.0
    attn_dropout: float = 0.0
    attn_impl: str = "auto"

    def __post_init__(self) -> None:
        if self.position not in GPT_POSITIONS:
            raise ValueError(f"unknown GPT position {self.position!r}; expected one of {GPT_POSITIONS}")
        check_sizes(self, ("vocab_size", "context", "width", "depth", "heads"))


class GPT(Model):
    """`gpt(idx)` with idx (B, T) token ids -> next-token logits (B, T, vocab)."""

    family = "gpt"
    config_class = GPTConfig

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = c = config
        self.tok_embed = TokenEmbedding(c.vocab_size, c.width)
        # Rotary positions live inside attention; the input head then adds none.
        self.pos = {"learned": lambda: LearnedPosition(c.context, c.width),
                    "sinusoidal": lambda: SinusoidalPosition(c.context, c.width)}.get(c.position, lambda: None)()
        self.drop = Dropout(c.dropout) if c.dropout > 0 else None
        self.backbone = Transformer(c.width, c.depth, c.heads, mlp_hidden=c.mlp_hidden, norm_eps=c.norm_eps,
                                    activation=c.activation, bias=c.bias, dropout=c.dropout,
                                    attn_dropout=c.attn_dropout, rotary=c.position == "rotary",
                                    max_len=c.context, impl=c.attn_impl)
        self.lm_head = LMHead(c.width, c.vocab_size, tie_to=self.tok_embed if c.tie_weights else None)
        # GPT-2: residual projections scaled by 1/sqrt(2 * depth) so the stream's variance does not grow.
        for name, p in self.backbone.named_parameters():
            if name.endswith(("attn.proj.weight", "mlp.fc2.weight")):
                nn.init.trunc_normal_(p, std=0.02 / math.sqrt(2 * c.depth), a=-0.04, b=0.04)

    def forward(self, idx: Tensor, *, cache: KVCache | None = None, last_only: bool = False) -> Tensor:
        """idx (B, T) -> logits (B, T, V); `last_only`: the last position's only, (B, 1, V).

        `cache` (`new_cache`): idx stands at the cache's position, continuing what it holds; its keys
        and values are written there, attention reads the whole cache with the later positions masked,
        and the position moves on by T (gpt-fast's static cache: one graph, compiled, serves every
        step). Attention weights: `nn.attention_weights(gpt, layers)` around the call."""
        h = self.backbone(self.tokens(idx, cache), causal=True, cache=cache)
        return self.lm_head(h[:, -1:] if last_only else h)

    def tokens(self, idx: Tensor, cache: KVCache | None = None) -> Tensor:
        """Input head: ids (B, T) -> (B, T, D) with positions, counted on from the cache's position."""
        offset = 0 if cache is None else cache.position  # a tensor: a compiled graph takes it as an input
        if not torch.compiler.is_compiling():  # eager: read, checked, and the table sliced at it (no gather)
            T, offset = idx.shape[-1] if idx.dim() == 2 else 0, int(offset)
            if offset + T > self.config.context:
                raise ValueError(f"sequence of {offset + T} tokens is longer than the model's context "
                                 f"({self.config.context})")
            if cache is not None and offset + T > cache.max_len:
                raise ValueError(f"KV cache holds at most {cache.max_len} positions; got {offset} cached + {T} new")
        x = self.tok_embed(idx)
        x = x if self.pos is None else self.pos(x, offset)
        return x if self.drop is None else self.drop(x)

    def new_cache(self, batch: int, max_len: int | None = None) -> KVCache:
        """An empty key/value cache of every layer, for `max_len` positions (default: the context)."""
        c, p = self.config, next(self.parameters())
        return KVCache(c.depth, batch, c.heads, c.width // c.heads, max_len or c.context, p.dtype, p.device)

    @torch.no_grad()
    def generate(self, idx: Tensor, max_new_tokens: int, *, temperature: float = 1.0, top_k: int | None = None,
                 top_p: float | None = None, generator: torch.Generator | None = None,
                 use_cache: bool = True) -> Tensor:
        """Continue (B, T) prompts by `max_new_tokens` tokens; returns (B, T + max_new_tokens).

        temperature=0 is greedy. With the cache each new token costs one position, not the prefix.
        Any length: past the context the model reads the most recent tokens (`stream` says how).
        """
        return torch.cat([idx, *self.stream(idx, max_new_tokens, temperature=temperature, top_k=top_k,
                                            top_p=top_p, generator=generator, use_cache=use_cache)], dim=1)

    def stream(self, idx: Tensor, max_new_tokens: int, *, temperature: float = 1.0, top_k: int | None = None,
               top_p: float | None = None, generator: torch.Generator | None = None,
               use_cache: bool = True) -> Iterator[Tensor]:
        """Yield each new (B, 1) token as soon as it is sampled (for streaming to a terminal).

        Any number of tokens. A prompt longer than the context is cut to its last `context` tokens
        (as nanoGPT crops). With the cache, once the window is full the cache is refilled from the
        last `window_keep(context)` tokens (three quarters of it) and generation goes on: each
        token's logits are the uncached model's on the tokens in the window then, 3/4 to all of the
        context, the prompt's or the generation's own. Without the cache each step reads the last
        `context` tokens, as nanoGPT's loop does. The loop: models/generation.py; its one-token steps
        run eager, or compiled where `anyformer.plan.prepare_decode` compiled them beforehand."""
        return generation.stream(self, idx, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                                 generator=generator, use_cache=use_cache)

    def compiled_decode(self, batch: int, total: int) -> bool:
        """Whether `generate` (and `stream`) takes its one-token steps for `batch` prompts and `total`
        tokens in all through a compiled graph: the speed plan compiled one for that size
        (`anyformer.plan.prepare_decode`, before generation; eager otherwise)."""
        step = generation.compiled_steps(self).get((batch, generation.cache_length(self, total)))
        return step is not None and step.kind == "compiled"

    def forward_flops(self, seq_len: int | None = None) -> float:
        """Matmul FLOPs of a forward pass over one sequence of `seq_len` tokens (default: the
        context), counted as nanoGPT does (Kaplan et al.; PaLM's appendix B): per token, 2 per
        weight of the blocks and of the LM head, and 4 T D per layer for attention's two products
        over the T positions (the causally masked half included)."""
        c = self.config
        t = check_seq_len(seq_len, c.context, 1, c.context, "the model's context")
        per_token = 2 * matmul_weights(self.backbone) + 2 * c.vocab_size * c.width + 4 * c.depth * t * c.width
        return float(t * per_token)

    @classmethod
    def from_hf(cls, model, **overrides) -> "GPT":
        """From a Hugging Face GPT2LMHeadModel."""
        from ..interop.hf import gpt_from_hf
        return gpt_from_hf(model, **overrides)

    def to_hf(self):
        """A Hugging Face GPT2LMHeadModel with these weights."""
        from ..interop.hf import gpt_to_hf
        return gpt_to_hf(self)


window_keep = generation.window_keep  # where it has been imported from
